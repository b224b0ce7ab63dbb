//! The real API server of the end-to-end suites (started by
//! scripts/k8s-up.sh, found through `KUBECONFIG`): client configuration,
//! the shipped CRD, waiting for a condition or for an object to be gone,
//! and real owners for the suites' pods (the garbage collector may run:
//! see `support::gc`).

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::{Api, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::ApiResource;
use kube::{Client, Config};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The kubeconfig the harness script exported.
fn kubeconfig_path() -> PathBuf {
    PathBuf::from(std::env::var("KUBECONFIG").unwrap_or_else(|_| {
        panic!("KUBECONFIG is not set: run by scripts/e2e.sh or scripts/scale-e2e.sh, which start the API server and export it")
    }))
}

/// A client configuration from `KUBECONFIG`, for `context` (default: the
/// current one, the admin).
pub async fn kube_config(context: Option<&str>) -> Config {
    let kubeconfig = Kubeconfig::read_from(kubeconfig_path()).expect("read KUBECONFIG");
    let options = KubeConfigOptions {
        context: context.map(str::to_owned),
        ..KubeConfigOptions::default()
    };
    Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .expect("kubeconfig to config")
}

/// Polls `f` every 100 ms until it returns `Some`, at most `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The `KuraInstance` CRD this agent ships (generated from kura-schemas).
pub fn shipped_crd() -> Value {
    let yaml = kura_schemas::generated::crd_yaml().expect("generate the CRD");
    serde_yaml::from_str(&yaml).expect("CRD YAML")
}

/// Applies a CRD (server-side, forced) and waits until it is established
/// and served with its current schema.
pub async fn apply_crd(client: &Client, crd: &Value) {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        "customresourcedefinitions",
    );
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let name = crd["metadata"]["name"]
        .as_str()
        .expect("CRD name")
        .to_owned();
    api.patch(
        &name,
        &PatchParams::apply("kura-tests").force(),
        &Patch::Apply(crd),
    )
    .await
    .expect("apply the CRD");
    wait_for("the CRD to be established", Duration::from_secs(30), || {
        let api = api.clone();
        let name = name.clone();
        async move {
            let obj = api.get(&name).await.ok()?;
            let conditions = obj.data["status"]["conditions"].as_array()?.clone();
            conditions
                .iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
                .then_some(())
        }
    })
    .await;
}

/// The stored status of the `KuraInstance` `ns/name` (null when it has
/// none or cannot be read).
#[allow(dead_code)] // not every suite reads a status
pub async fn status_of(client: &Client, ns: &str, name: &str) -> Value {
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &kura_agent::cluster::kura_instance_resource(),
    );
    api.get(name)
        .await
        .map(|o| o.data.get("status").cloned().unwrap_or(Value::Null))
        .unwrap_or(Value::Null)
}

/// Waits until `pred` holds on the instance's stored status; returns it.
#[allow(dead_code)] // not every suite reads a status
pub async fn wait_status(
    client: &Client,
    ns: &str,
    name: &str,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    wait_for(&format!("{ns}/{name}: {what}"), timeout, || {
        let client = client.clone();
        let pred = &pred;
        async move {
            let s = status_of(&client, ns, name).await;
            pred(&s).then_some(s)
        }
    })
    .await
}

/// Waits (at most `timeout`) until `name` is gone from `api` (a get
/// answers 404); panics on timeout, naming `what`.
#[allow(dead_code)] // not every suite deletes objects
pub async fn wait_gone<K>(api: &Api<K>, name: &str, what: &str, timeout: Duration)
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    wait_for(&format!("{what} to be gone"), timeout, || async move {
        match api.get_opt(name).await {
            Ok(None) => Some(()),
            Ok(Some(_)) => None,
            Err(e) => panic!("get {name} while waiting for {what} to be gone: {e}"),
        }
    })
    .await;
}

/// The owner reference the pods of instance `instance` carry: its
/// StatefulSet `ns/instance`, created if it does not exist yet (inert: no
/// StatefulSet controller runs, and the agent reads only the pods). The
/// owner must really exist: the garbage collector (scripts/k8s-up.sh
/// --with-gc, which scripts/e2e.sh starts) deletes a pod whose owner does
/// not.
#[allow(dead_code)] // not every suite creates pods
pub async fn statefulset_owner(client: &Client, ns: &str, instance: &str) -> Value {
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    let labels = json!({"app.kubernetes.io/name": "kura", "app.kubernetes.io/instance": instance});
    let sts: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": instance},
        "spec": {
            "serviceName": instance,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "kura", "image": "kura:e2e"}]}
            }
        }
    }))
    .expect("StatefulSet object");
    let sts = match api.create(&PostParams::default(), &sts).await {
        Ok(created) => created,
        Err(kube::Error::Api(s)) if s.code == 409 => api
            .get(instance)
            .await
            .unwrap_or_else(|e| panic!("get StatefulSet {ns}/{instance}: {e}")),
        Err(e) => panic!("create StatefulSet {ns}/{instance}: {e}"),
    };
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "name": instance,
        "uid": sts.metadata.uid.expect("StatefulSet uid"), "controller": true
    })
}
