//! The real API server of the end-to-end suites (started by
//! scripts/k8s-up.sh, found through `KUBECONFIG`): client configuration,
//! the shipped CRD, and waiting for a condition.

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::ApiResource;
use kube::{Client, Config};
use serde_json::Value;

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
