//! The API objects of the run: `KuraInstance`s as a fleet controller
//! writes them, and Pods as a StatefulSet controller and a kubelet write
//! them, from the templates in `testdata/cluster-load/` (`pod.json`: the
//! spec of a Kura StatefulSet pod; `pod-status.json`: its status), whose
//! `${NAME}` placeholders are filled in here.

use crate::cluster_load::error::ClusterLoadError;
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use std::net::Ipv4Addr;
use std::path::Path;

/// The image every instance runs at the start.
pub const OLD_IMAGE: &str = "ghcr.io/tuist/kura:0.6.0";
/// The image the instances of the rollout phase move to.
pub const NEW_IMAGE: &str = "ghcr.io/tuist/kura:0.7.0";
/// Field manager of the instances' spec and controller status (the fleet
/// controller's).
pub const FLEET_MANAGER: &str = "kura-fleet-controller";
/// Field manager of the Pods' metadata and spec (the StatefulSet
/// controller runs in kube-controller-manager).
pub const CONTROLLER_MANAGER: &str = "kube-controller-manager";
/// Field manager of the Pods' status.
pub const KUBELET_MANAGER: &str = "kubelet";
/// The label marking the instances moved to [`NEW_IMAGE`] by the run.
pub const ROLLED_LABEL: &str = "kura-load.tuist.dev/rolled";

/// The two Pod templates, read once.
#[derive(Debug, Clone)]
pub struct PodTemplates {
    spec: String,
    status: String,
}

impl PodTemplates {
    /// Read `pod.json` and `pod-status.json` from `dir`.
    pub fn load(dir: &Path) -> Result<PodTemplates, ClusterLoadError> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path)
                .map_err(|source| ClusterLoadError::Fixture { path, source })
        };
        Ok(PodTemplates {
            spec: read("pod.json")?,
            status: read("pod-status.json")?,
        })
    }

    /// The Pod as its controller applies it: metadata (labels, annotations,
    /// owner reference to the instance's StatefulSet) and spec.
    pub fn pod(&self, pod: &PodName, image: &str) -> Result<Value, ClusterLoadError> {
        let vars = pod.vars(image);
        render("pod.json", &self.spec, &vars)
    }

    /// The Pod's status as its kubelet applies it: running and ready at
    /// `ip`, the container restarted `restarts` times.
    pub fn status(
        &self,
        pod: &PodName,
        image: &str,
        ip: Ipv4Addr,
        restarts: u32,
        started: Timestamp,
    ) -> Result<Value, ClusterLoadError> {
        let mut vars = pod.vars(image);
        let ready = started
            .checked_add(SignedDuration::from_secs(20))
            .unwrap_or(started);
        vars.extend([
            ("POD_IP", ip.to_string()),
            ("STARTED", seconds(started)),
            ("READY", seconds(ready)),
            ("IMAGE_ID", image_id(image)),
            ("CONTAINER_ID", hex64(&format!("{}/{restarts}", pod.pod))),
        ]);
        let mut status = render("pod-status.json", &self.status, &vars)?;
        if let Some(c) = status
            .pointer_mut("/status/containerStatuses/0")
            .and_then(Value::as_object_mut)
        {
            c.insert("restartCount".to_owned(), json!(restarts));
            if restarts > 0 {
                c.insert(
                    "lastState".to_owned(),
                    json!({"terminated": {"exitCode": 0, "reason": "Completed",
                        "startedAt": seconds(started), "finishedAt": seconds(started),
                        "containerID": format!("containerd://{}",
                            hex64(&format!("{}/{}", pod.pod, restarts - 1)))}}),
                );
            }
        }
        Ok(status)
    }
}

/// One pod of one instance: where the names of everything about it come
/// from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodName {
    /// Namespace.
    pub namespace: String,
    /// Instance number (0-based).
    pub instance: usize,
    /// Ordinal in the StatefulSet.
    pub ordinal: usize,
    /// The instance's (and its StatefulSet's) name.
    pub instance_name: String,
    /// The pod's name, `<instance>-<ordinal>`.
    pub pod: String,
}

impl PodName {
    /// Pod `ordinal` of instance number `instance`.
    pub fn new(namespace: &str, instance: usize, ordinal: usize) -> PodName {
        let instance_name = instance_name(instance);
        PodName {
            namespace: namespace.to_owned(),
            instance,
            ordinal,
            pod: format!("{instance_name}-{ordinal}"),
            instance_name,
        }
    }

    fn vars(&self, image: &str) -> Vec<(&'static str, String)> {
        let node = (self.instance * 3 + self.ordinal) % 240;
        vec![
            ("POD", self.pod.clone()),
            ("NAMESPACE", self.namespace.clone()),
            ("INSTANCE", self.instance_name.clone()),
            ("ACCOUNT", account(self.instance)),
            ("ORDINAL", self.ordinal.to_string()),
            ("STS_UID", sts_uid(self.instance)),
            ("REVISION", hex64(image)[..10].to_owned()),
            ("IMAGE", image.to_owned()),
            ("NODE", format!("pool-kura-{node:03}")),
            ("NODE_OCTET", node.to_string()),
        ]
    }
}

/// The name of instance number `i`.
pub fn instance_name(i: usize) -> String {
    format!("kura-{i:05}")
}

fn account(i: usize) -> String {
    format!("account-{i:05}")
}

fn sts_uid(i: usize) -> String {
    format!("5ee1f2a0-0000-4000-8000-{i:012x}")
}

/// The `KuraInstance` as the fleet controller applies it; with
/// `shard_labelled`, carrying its bucket's `kura.tuist.dev/shard` label as
/// the Tuist provisioner may apply it (else a sharding agent stamps it).
pub fn instance(
    namespace: &str,
    i: usize,
    replicas: usize,
    image: &str,
    rolled: bool,
    shard_labelled: bool,
) -> Value {
    let mut labels = json!({
        "app.kubernetes.io/name": "kura",
        "app.kubernetes.io/managed-by": "kura-fleet-controller",
        "kura.tuist.dev/account": account(i),
        "kura.tuist.dev/region": "eu-central",
    });
    if rolled {
        labels[ROLLED_LABEL] = json!("true");
    }
    if shard_labelled {
        use kura_agent::model::units::{bucket_label, bucket_of};
        let key = kura_agent::model::InstanceKey::new(namespace, instance_name(i));
        labels[kura_agent::model::SHARD_LABEL] = json!(bucket_label(bucket_of(&key)));
    }
    json!({
        "apiVersion": "kura.tuist.dev/v1alpha1",
        "kind": "KuraInstance",
        "metadata": {"name": instance_name(i), "namespace": namespace, "labels": labels},
        "spec": {
            "image": image,
            "replicas": replicas,
            "accountHandle": account(i),
            "tenantID": format!("tenant-{:08x}", i.wrapping_mul(2_654_435_761) & 0xffff_ffff),
            "region": "eu-central",
        }
    })
}

/// The fleet controller's part of an instance's status.
pub fn instance_status(namespace: &str, i: usize, replicas: usize, image: &str) -> Value {
    json!({
        "apiVersion": "kura.tuist.dev/v1alpha1",
        "kind": "KuraInstance",
        "metadata": {"name": instance_name(i), "namespace": namespace},
        "status": {"phase": "Running", "observedImage": image, "readyReplicas": replicas}
    })
}

/// Fill `${NAME}` placeholders, then parse.
fn render(
    name: &'static str,
    template: &str,
    vars: &[(&'static str, String)],
) -> Result<Value, ClusterLoadError> {
    let mut text = template.to_owned();
    for (k, v) in vars {
        text = text.replace(&format!("${{{k}}}"), v);
    }
    serde_json::from_str(&text).map_err(|source| ClusterLoadError::FixtureJson { name, source })
}

/// A timestamp as Kubernetes writes it (whole seconds).
fn seconds(t: Timestamp) -> String {
    let whole = Timestamp::from_second(t.as_second()).unwrap_or(t);
    whole.to_string()
}

/// A digest-like image ID for `image`.
fn image_id(image: &str) -> String {
    let name = image.split(':').next().unwrap_or(image);
    format!("{name}@sha256:{}", hex64(image))
}

/// 64 hex digits derived from `seed` (FNV-1a, four lanes): IDs that look
/// like container IDs and digests and are stable between runs.
fn hex64(seed: &str) -> String {
    (0u64..4)
        .map(|lane| {
            let mut h = 0xcbf2_9ce4_8422_2325u64 ^ lane;
            for b in seed.bytes() {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
            format!("{h:016x}")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn templates() -> PodTemplates {
        PodTemplates::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/cluster-load"))
            .expect("templates")
    }

    #[test]
    fn the_templates_fill_every_placeholder_and_stay_json() {
        let t = templates();
        let name = PodName::new("ns", 7, 2);
        let pod = t.pod(&name, OLD_IMAGE).expect("pod");
        let status = t
            .status(
                &name,
                OLD_IMAGE,
                Ipv4Addr::new(127, 150, 0, 9),
                1,
                Timestamp::UNIX_EPOCH,
            )
            .expect("status");
        for v in [&pod, &status] {
            let text = v.to_string();
            assert!(!text.contains("${"), "unfilled placeholder in {text}");
        }
        assert_eq!(pod["metadata"]["name"], "kura-00007-2");
        assert_eq!(pod["metadata"]["ownerReferences"][0]["kind"], "StatefulSet");
        assert_eq!(pod["metadata"]["ownerReferences"][0]["name"], "kura-00007");
        assert_eq!(pod["spec"]["containers"][0]["name"], "kura");
        assert_eq!(
            pod["spec"]["containers"][0]["env"].as_array().map(Vec::len),
            Some(19)
        );
        assert_eq!(status["status"]["podIP"], "127.150.0.9");
        assert_eq!(status["status"]["containerStatuses"][0]["restartCount"], 1);
        assert_eq!(status["status"]["containerStatuses"][0]["image"], OLD_IMAGE);
    }

    #[test]
    fn an_instance_is_valid_for_its_crd_shape() {
        let v = instance("ns", 3, 3, NEW_IMAGE, true, false);
        assert_eq!(v["metadata"]["name"], "kura-00003");
        assert_eq!(v["metadata"]["labels"].get("kura.tuist.dev/shard"), None);
        // Labelled as a provisioner would: the bucket of `ns/kura-00003`.
        let key = kura_agent::model::InstanceKey::new("ns", "kura-00003");
        let bucket = kura_agent::model::units::bucket_of(&key);
        assert_eq!(
            instance("ns", 3, 3, NEW_IMAGE, true, true)["metadata"]["labels"]["kura.tuist.dev/shard"],
            format!("{bucket:02x}")
        );
        assert_eq!(v["spec"]["image"], NEW_IMAGE);
        assert_eq!(v["metadata"]["labels"][ROLLED_LABEL], "true");
        assert_eq!(
            instance("ns", 3, 3, OLD_IMAGE, false, false)["metadata"]["labels"].get(ROLLED_LABEL),
            None
        );
    }
}
