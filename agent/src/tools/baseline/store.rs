//! `kura-agent baseline --configmap NAME`: the baseline document stored in
//! a ConfigMap (key [`BASELINE_KEY`]) instead of a file, so that a step
//! before an upgrade (an Argo CD PreSync or Helm pre-upgrade hook Job) can
//! hand it to the `check` Job after it, which mounts the ConfigMap and
//! reads `--baseline /…/baseline.json` (docs/integrations.md, the job
//! recipe).
//!
//! Written by server-side apply under the field manager [`FIELD_MANAGER`]
//! (the whole data key, replacing an older baseline), through the in-cluster
//! or `KUBECONFIG` credentials, bounded by [`STORE_TIMEOUT`]. The Job's
//! ServiceAccount needs `get`, `create` and `patch` on that ConfigMap.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

/// The key of the document in the ConfigMap's data.
pub const BASELINE_KEY: &str = "baseline.json";
/// The field manager of the write.
pub const FIELD_MANAGER: &str = "kura-agent-baseline";
/// The longest the whole store (credentials, the write) may take.
pub const STORE_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the baseline could not be stored.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No credentials: neither in-cluster nor a kubeconfig.
    #[error("no Kubernetes credentials (in-cluster or KUBECONFIG): {0}")]
    Credentials(String),
    /// The API server refused or failed the write.
    #[error("cannot write ConfigMap {namespace}/{name}: {reason}")]
    Write {
        /// The ConfigMap's namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The API server's or the client's error.
        reason: String,
    },
    /// Not done within [`STORE_TIMEOUT`].
    #[error("storing the baseline took longer than {0:?}")]
    Timeout(Duration),
}

/// Stores `document` under [`BASELINE_KEY`] in ConfigMap `name` of
/// `namespace` (default: the credentials' namespace); returns the namespace
/// written to.
pub async fn store(
    name: &str,
    namespace: Option<&str>,
    document: &str,
) -> Result<String, StoreError> {
    tokio::time::timeout(STORE_TIMEOUT, store_unbounded(name, namespace, document))
        .await
        .map_err(|_| StoreError::Timeout(STORE_TIMEOUT))?
}

async fn store_unbounded(
    name: &str,
    namespace: Option<&str>,
    document: &str,
) -> Result<String, StoreError> {
    let config = kube::Config::infer()
        .await
        .map_err(|e| StoreError::Credentials(e.to_string()))?;
    let namespace = namespace.map_or_else(|| config.default_namespace.clone(), str::to_owned);
    let client = Client::try_from(config).map_err(|e| StoreError::Credentials(e.to_string()))?;
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let body = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/managed-by": FIELD_MANAGER}
        },
        "data": {BASELINE_KEY: format!("{document}\n")}
    });
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
    .map_err(|e| StoreError::Write {
        namespace: namespace.clone(),
        name: name.to_owned(),
        reason: e.to_string(),
    })?;
    Ok(namespace)
}
