//! The real garbage collector of the end-to-end suites: kube-controller-
//! manager running only its `garbagecollector` controller against the test
//! API server, started by `scripts/k8s-up.sh DIR --with-gc` (scripts/e2e.sh
//! does), which makes `DIR/env` export `KURA_GC=1`.
//!
//! A test of something the garbage collector does (an object owned by a
//! `KuraInstance` goes when the instance goes):
//!
//! ```ignore
//! support::gc::require();
//! support::gc::wait_watches(&client, &ns, &resource, probe).await; // each CRD involved
//! // ... create the owner, and the dependent with `owner_reference(&owner, &resource)` ...
//! // ... delete the owner ...
//! support::cluster::wait_gone(&dependents, name, "the dependent", support::gc::T).await;
//! ```

// Not every suite that includes this module uses every helper.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::ApiResource;
use kube::{Client, Resource as _};
use serde_json::Value;

use super::cluster::wait_gone;

/// How long the garbage collector may take to delete a dependent once its
/// owner is gone, when it already watches both kinds: a generous bound for
/// a loaded 2-core machine (it takes about a second).
pub const T: Duration = Duration::from_secs(60);

/// How long it may take to start watching a kind: it rereads discovery
/// every 30 s (a constant of kube-controller-manager, no flag), then lists
/// the new kind; the bound leaves room for a loaded machine.
pub const DISCOVERY: Duration = Duration::from_secs(75);

/// Whether the harness started the garbage collector (`KURA_GC=1`).
pub fn running() -> bool {
    std::env::var("KURA_GC").is_ok_and(|v| v == "1")
}

/// Panics unless the garbage collector runs: a test that needs it must
/// fail, not pass vacuously, without it.
pub fn require() {
    assert!(
        running(),
        "KURA_GC is not 1: no garbage collector runs. scripts/e2e.sh starts one \
         (scripts/k8s-up.sh DIR --with-gc exports KURA_GC=1 in DIR/env)"
    );
}

/// The owner reference of a dependent of `owner` (an object of `resource`):
/// apiVersion, kind, name and uid, `blockOwnerDeletion` and `controller`
/// unset, as a controller creating a companion object would write it.
pub fn owner_reference(owner: &DynamicObject, resource: &ApiResource) -> Value {
    let reference = owner
        .owner_ref(resource)
        .expect("the owner has a name and a uid (read it back from the API server)");
    serde_json::to_value(reference).expect("owner reference JSON")
}

/// Waits until the garbage collector watches the kind of `resource`, and
/// returns how long that took: creates `probe` (an object of that kind, in
/// `ns`) and deletes it in the foreground. The API server then keeps it,
/// with the `foregroundDeletion` finalizer, until the garbage collector
/// sees it through its watch of that kind and removes the finalizer; so
/// once it is gone, the collector watches the kind. Call it for every
/// custom resource a test's owners or dependents are: the collector
/// rereads discovery every 30 s, so a CRD created just before is not
/// watched yet (objects of it would still be collected, but after the next
/// reread, and an owner's deletion it did not watch can wait on its
/// exponential retry for longer still).
pub async fn wait_watches(
    client: &Client,
    ns: &str,
    resource: &ApiResource,
    probe: Value,
) -> Duration {
    require();
    let t0 = Instant::now();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, resource);
    let probe: DynamicObject = serde_json::from_value(probe).expect("probe object");
    let created = api
        .create(&PostParams::default(), &probe)
        .await
        .unwrap_or_else(|e| panic!("create the {} probe: {e}", resource.kind));
    let name = created.metadata.name.expect("probe name");
    api.delete(&name, &DeleteParams::foreground())
        .await
        .unwrap_or_else(|e| panic!("delete the {} probe {name}: {e}", resource.kind));
    wait_gone(
        &api,
        &name,
        &format!(
            "the foreground-deleted {} probe {ns}/{name} (the garbage collector removes its \
             finalizer; see {}/kube-controller-manager.log)",
            resource.kind,
            std::env::var("KURA_K8S_DIR").unwrap_or_else(|_| "DIR".to_owned())
        ),
        DISCOVERY,
    )
    .await;
    t0.elapsed()
}
