//! The real garbage collector against the real API server: objects owned
//! by a `KuraInstance` go when the instance goes.
//!
//! Run with `scripts/e2e.sh`: it starts kube-apiserver + etcd and
//! kube-controller-manager running only its garbage collector
//! (`scripts/k8s-up.sh DIR --with-gc`), exports `KUBECONFIG` and `KURA_GC=1`,
//! and runs `cargo test -p kura-agent --test e2e_garbage_collection --
//! --ignored`. The tests are `#[ignore]`d so that `cargo test --workspace`
//! skips them; without a running garbage collector they fail.

use std::time::Instant;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use serde_json::{Value, json};

mod support {
    pub mod cluster;
    pub mod gc;
}
use support::cluster::{apply_crd, kube_config, shipped_crd, wait_gone};
use support::gc;

async fn admin() -> Client {
    Client::try_from(kube_config(None).await).expect("admin client")
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{:06x}", rand::random::<u32>() & 0xff_ffff)
}

async fn create_namespace(client: &Client) -> String {
    let name = unique("e2e-gc");
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}})).expect("namespace"),
        )
        .await
        .expect("create namespace");
    name
}

/// A `KuraInstance` object named `name` (valid for the shipped CRD).
fn instance(name: &str) -> Value {
    json!({
        "apiVersion": "kura.tuist.dev/v1alpha1",
        "kind": "KuraInstance",
        "metadata": {"name": name},
        "spec": {"image": "ghcr.io/tuist/kura:1.0.0", "replicas": 1, "accountHandle": "e2e", "region": "local"}
    })
}

/// A ConfigMap `name` owned by `owners` (owner reference JSON values).
fn config_map(name: &str, owners: &[Value]) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "ownerReferences": owners},
        "data": {"purpose": "garbage collection e2e"}
    }))
    .expect("ConfigMap object")
}

/// A ConfigMap owned by a `KuraInstance` (apiVersion kura.tuist.dev/v1alpha1,
/// kind KuraInstance, its name and uid) is deleted by the garbage collector
/// once the instance is deleted (background propagation, what `kubectl
/// delete` does); it stays while the instance exists, a ConfigMap without
/// owner stays throughout, and one naming the instance with another uid (a
/// deleted and recreated instance's leftover) is deleted although an
/// instance of that name exists. Fails when no garbage collector runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real API server and garbage collector: scripts/e2e.sh"]
async fn objects_owned_by_a_deleted_instance_are_collected() {
    gc::require();
    let client = admin().await;
    let resource = kura_agent::cluster::kura_instance_resource();
    apply_crd(&client, &shipped_crd()).await;
    let ns = create_namespace(&client).await;

    let took = gc::wait_watches(&client, &ns, &resource, instance("gc-probe")).await;
    println!("the garbage collector watches KuraInstances (the probe took {took:.1?})");

    let instances: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
    let owner: DynamicObject = instances
        .create(
            &PostParams::default(),
            &serde_json::from_value(instance("owner")).expect("instance"),
        )
        .await
        .expect("create the owner KuraInstance");
    let reference = gc::owner_reference(&owner, &resource);
    assert_eq!(reference["apiVersion"], "kura.tuist.dev/v1alpha1");
    assert_eq!(reference["kind"], "KuraInstance");
    assert_eq!(reference["name"], "owner");
    assert_eq!(
        reference["uid"].as_str(),
        owner.metadata.uid.as_deref(),
        "the reference names the instance's uid"
    );
    let mut stale = reference.clone();
    stale["uid"] = json!("00000000-0000-0000-0000-00000000dead");

    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    for cm in [
        config_map("owned", std::slice::from_ref(&reference)),
        config_map("unowned", &[]),
        config_map("stale-owner", &[stale]),
    ] {
        config_maps
            .create(&PostParams::default(), &cm)
            .await
            .expect("create ConfigMap");
    }

    // A leftover of another instance of the same name goes, the owner
    // still existing (the collector compares uids, not names).
    wait_gone(
        &config_maps,
        "stale-owner",
        "the ConfigMap owned by a uid no instance has",
        gc::T,
    )
    .await;
    assert!(
        config_maps.get_opt("owned").await.expect("get").is_some(),
        "the owned ConfigMap went while its owner exists"
    );

    let t0 = Instant::now();
    instances
        .delete("owner", &DeleteParams::background())
        .await
        .expect("delete the owner KuraInstance");
    wait_gone(
        &config_maps,
        "owned",
        "the ConfigMap owned by the deleted KuraInstance",
        gc::T,
    )
    .await;
    println!(
        "the owned ConfigMap was collected {:.1?} after its KuraInstance was deleted",
        t0.elapsed()
    );
    assert!(
        config_maps.get_opt("unowned").await.expect("get").is_some(),
        "the ConfigMap without owner went too"
    );
}
