//! The status writer: server-side apply of `status.rolloutHealth`,
//! `status.rolloutGate` and the agent's entries of `status.conditions` on
//! the `status` subresource, under the agent's own field manager, with
//! detection of pruned fields (an API server whose CRD is too old silently
//! drops what its schema does not declare), on the publication target
//! ([`PublicationTarget`]): the `KuraInstance` itself, or its companion
//! `KuraInstanceHealth` (created on first write, owned by the instance).
//!
//! In `instance` mode the writer asks the [`ContestSource`] right before
//! each PATCH and sends nothing to an instance whose `status.rolloutHealth`
//! another manager writes ([`WriteError::Contested`]); it never writes the
//! instance's top-level `status.observedGeneration` (Kura's controller's).
//! In `companion` mode the companion's status also carries its own
//! `observedGeneration`.
//!
//! The request is `PATCH
//! /apis/kura.tuist.dev/v1alpha1/namespaces/{ns}/kurainstances/{name}/status?force=true&fieldManager=kura-health-agent`
//! with content type `application/apply-patch+yaml` and a JSON body holding
//! `apiVersion`, `kind` and `status.{rolloutHealth,rolloutGate,conditions}`
//! only (the name comes from the URL). `conditions` is a list map keyed by
//! `type` in the CRD, so the agent owns its two entries and nothing of the
//! entries other managers write. The response is read as a dynamic object, so
//! a partly pruned status is reported as [`WriteOutcome::Pruned`] instead of
//! failing to deserialize.

use super::queue::JobResult;
use crate::model::units::{bucket_label, bucket_of};
use crate::model::{
    ContestSource, DesiredStatus, InstanceKey, InstanceUids, PublicationTarget, SHARD_LABEL,
    WriteGate, WriteRecord,
};
use crate::telemetry::{self, label};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kura_schemas::{COMPANION_API_VERSION, COMPANION_KIND, KuraInstance, KuraInstanceHealth};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;

pub use crate::model::FIELD_MANAGER;

/// A write the API server accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Everything sent came back.
    Applied,
    /// Accepted, but these fields did not come back (JSON paths such as
    /// `status.rolloutGate` or `status.rolloutHealth.pods[0].incarnation`):
    /// the CRD in the cluster does not declare them.
    Pruned {
        /// The missing paths, at most [`MAX_MISSING_PATHS`].
        missing: Vec<String>,
    },
}

/// At most this many missing paths are reported.
pub const MAX_MISSING_PATHS: usize = 20;

/// A write the API server did not accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// 409: another manager owns a field (should not happen with force).
    #[error("conflict: {0}")]
    Conflict(String),
    /// 404: the instance is gone.
    #[error("not found: {0}")]
    NotFound(String),
    /// 403 (or 401): RBAC does not allow patching `kurainstances/status`.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// The CRD in the cluster does not declare fields the agent writes.
    /// Under server-side apply kube-apiserver does not prune them: it
    /// refuses the whole apply (HTTP 500 "failed to create typed patch
    /// object ...: .status.rolloutGate: field not declared in schema").
    /// Reported like pruning: the CRD is too old. So is a 422 naming a value
    /// outside a field's enum (`status.rolloutGate.signal: Unsupported
    /// value: "replication_lag_regressed"`): an older CRD's enum refuses
    /// the whole status write of a newer agent.
    #[error("fields or values not declared by the CRD in the cluster ({}): {message}", missing.join(", "))]
    NotDeclared {
        /// The undeclared paths, as far as the message names them (e.g.
        /// `status.rolloutGate`), or `path = "value"` for a value outside
        /// the field's enum.
        missing: Vec<String>,
        /// The API server's message.
        message: String,
    },
    /// Anything else: transport, timeouts, 5xx, 422 validation, a response
    /// that is not an object.
    #[error("{0}")]
    Other(String),
    /// Not sent: the [`WriteGate`] refused (this replica's Lease is not
    /// current, or it no longer owns the instance).
    #[error("fenced: {0}")]
    Fenced(String),
    /// Not sent (instance mode): this manager also writes the instance's
    /// `status.rolloutHealth`; the agent does not fight it.
    #[error(
        "contested: {0:?} also writes status.rolloutHealth; not written (run with --publication-target companion)"
    )]
    Contested(String),
}

impl WriteError {
    /// The `result` label of [`telemetry::STATUS_WRITES_TOTAL`].
    pub fn kind(&self) -> &'static str {
        match self {
            WriteError::Conflict(_) => label::CONFLICT,
            WriteError::NotFound(_) => label::NOT_FOUND,
            WriteError::Forbidden(_) => label::FORBIDDEN,
            WriteError::NotDeclared { .. } => label::PRUNED,
            WriteError::Other(_) => label::ERROR,
            WriteError::Fenced(_) => label::FENCED,
            WriteError::Contested(_) => label::CONTESTED,
        }
    }

    /// What the scheduler should do about it.
    pub fn job_result(&self) -> JobResult {
        match self {
            // Not ours (any more): drop the slot; if it is ours again
            // later, the next sweep publishes afresh.
            WriteError::NotFound(_) | WriteError::Fenced(_) | WriteError::Contested(_) => {
                JobResult::Gone
            }
            _ => JobResult::Failed,
        }
    }
}

/// What kube-apiserver says when an apply names a field its schema lacks.
const NOT_DECLARED: &str = "field not declared in schema";

/// The paths an API server message names as not declared: each
/// `.a.b: field not declared in schema` becomes `a.b`.
pub fn undeclared_paths(message: &str) -> Vec<String> {
    let mut out: Vec<String> = message
        .split(NOT_DECLARED)
        .filter_map(|before| {
            let before = before.trim_end().strip_suffix(':')?;
            let path = before
                .rsplit(|c: char| c.is_whitespace() || c == ',' || c == ')')
                .next()?;
            let path = path.trim_start_matches('.');
            (!path.is_empty()).then(|| path.to_owned())
        })
        .collect();
    out.truncate(MAX_MISSING_PATHS);
    out
}

/// What kube-apiserver says when a value is not in a field's enum.
const UNSUPPORTED_VALUE: &str = ": Unsupported value: ";

/// The values an API server message names as outside their field's enum:
/// each `status.a.b: Unsupported value: "x": supported values: ...` becomes
/// `status.a.b = "x"`.
pub fn unsupported_values(message: &str) -> Vec<String> {
    let parts: Vec<&str> = message.split(UNSUPPORTED_VALUE).collect();
    let mut out: Vec<String> = parts
        .windows(2)
        .filter_map(|w| {
            let path = w[0]
                .rsplit(|c: char| c.is_whitespace() || c == ',' || c == '[')
                .next()?
                .trim_start_matches('.');
            let value = w[1].split("\": ").next().unwrap_or(w[1]);
            let value = if value.starts_with('"') {
                format!("{value}\"")
            } else {
                value.to_owned()
            };
            (!path.is_empty()).then(|| format!("{path} = {value}"))
        })
        .collect();
    out.truncate(MAX_MISSING_PATHS);
    out
}

/// Classifies a kube client error.
pub fn classify(error: kube::Error) -> WriteError {
    match error {
        kube::Error::Api(status) => {
            let msg = if status.message.is_empty() {
                status.reason.clone()
            } else {
                status.message.clone()
            };
            match status.code {
                409 => WriteError::Conflict(msg),
                404 => WriteError::NotFound(msg),
                401 | 403 => WriteError::Forbidden(msg),
                _ if msg.contains(NOT_DECLARED) => WriteError::NotDeclared {
                    missing: undeclared_paths(&msg),
                    message: msg,
                },
                422 if msg.contains(UNSUPPORTED_VALUE) => WriteError::NotDeclared {
                    missing: unsupported_values(&msg),
                    message: msg,
                },
                code => WriteError::Other(format!("HTTP {code}: {msg}")),
            }
        }
        other => WriteError::Other(other.to_string()),
    }
}

/// Removes every `null` object member, recursively (array entries stay).
///
/// An absent optional field is sent as absent, never as `null`: the API
/// server validates a `null` against the field's schema, and for a nullable
/// enum (`rolloutGate.signal` while healthy) kube-apiserver rejects it with
/// 422 "Unsupported value: null" although the schema says `nullable: true`.
/// Under server-side apply, leaving out a field this manager owned removes
/// it, which is what `null` meant.
pub fn strip_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(strip_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// The server-side apply body for `target`: `apiVersion`, `kind`, the two
/// status fields the agent owns and its conditions, and on a companion its
/// own `observedGeneration` (`companion_generation`); nothing else (never
/// the instance's top-level `status.observedGeneration`, which is Kura's
/// controller's); absent optional fields are left out ([`strip_nulls`]).
pub fn apply_body(
    status: &DesiredStatus,
    conditions: &[Condition],
    target: PublicationTarget,
    companion_generation: i64,
) -> Result<Value, WriteError> {
    let mut health = serde_json::to_value(&status.health)
        .map_err(|e| WriteError::Other(format!("encode rolloutHealth: {e}")))?;
    let mut gate = serde_json::to_value(&status.gate)
        .map_err(|e| WriteError::Other(format!("encode rolloutGate: {e}")))?;
    let mut conditions = serde_json::to_value(conditions)
        .map_err(|e| WriteError::Other(format!("encode conditions: {e}")))?;
    strip_nulls(&mut health);
    strip_nulls(&mut gate);
    strip_nulls(&mut conditions);
    Ok(match target {
        PublicationTarget::Instance => json!({
            "apiVersion": "kura.tuist.dev/v1alpha1",
            "kind": "KuraInstance",
            "status": {"rolloutHealth": health, "rolloutGate": gate, "conditions": conditions}
        }),
        PublicationTarget::Companion => json!({
            "apiVersion": COMPANION_API_VERSION,
            "kind": COMPANION_KIND,
            "status": {
                "rolloutHealth": health,
                "rolloutGate": gate,
                "conditions": conditions,
                "observedGeneration": companion_generation
            }
        }),
    })
}

/// `body` as the JSON text a status write sends.
fn sent_text(body: &Value) -> Result<Box<RawValue>, WriteError> {
    serde_json::value::to_raw_value(body)
        .map_err(|e| WriteError::Other(format!("encode the status body: {e}")))
}

/// What a status write sent, as a tree again (to compare with what the
/// API server kept).
fn sent_tree(sent: &RawValue) -> Result<Value, WriteError> {
    serde_json::from_str(sent.get())
        .map_err(|e| WriteError::Other(format!("decode the status body sent: {e}")))
}

/// The size of a body as sent, for the bytes-written counter.
fn text_bytes(sent: &RawValue) -> u64 {
    sent.get().len() as u64
}

/// The size of `body` as sent (JSON), for the bytes-written counter:
/// counted as it is serialized, nothing allocated.
fn body_bytes(body: &Value) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, body) {
        Ok(()) => count.0,
        Err(_) => 0,
    }
}

/// The body that creates `key`'s companion (server-side apply of the
/// object itself): its name and namespace, the agent's label and its
/// shard label (its instance's bucket: sharded replicas watch companions
/// by unit), an owner reference to the instance `instance_uid` (so the
/// garbage collector deletes it with the instance), an empty spec.
pub fn companion_body(key: &InstanceKey, instance_uid: &str) -> Value {
    json!({
        "apiVersion": COMPANION_API_VERSION,
        "kind": COMPANION_KIND,
        "metadata": {
            "name": key.name,
            "namespace": key.namespace,
            "labels": {
                "app.kubernetes.io/managed-by": FIELD_MANAGER,
                SHARD_LABEL: bucket_label(bucket_of(key)),
            },
            "ownerReferences": [{
                "apiVersion": "kura.tuist.dev/v1alpha1",
                "kind": "KuraInstance",
                "name": key.name,
                "uid": instance_uid
            }]
        },
        "spec": {}
    })
}

/// Whether a value carries data: a non-null scalar somewhere inside it.
/// Nulls, empty objects and empty arrays carry none; the API server may
/// drop them without that meaning anything was pruned.
fn has_content(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Object(m) => m.values().any(has_content),
        Value::Array(a) => a.iter().any(has_content),
        _ => true,
    }
}

/// The `type` of a list-map entry (`status.conditions`), if `v` is one.
fn list_map_key(v: &Value) -> Option<&str> {
    v.get("type")?.as_str()
}

/// Whether `sent` is a list map keyed by `type` (every entry has one).
fn is_list_map(sent: &[Value]) -> bool {
    sent.iter().all(|v| list_map_key(v).is_some())
}

/// The entry of `returned` that `sent` (an entry of a list) is compared
/// with: in a list map ([`is_list_map`]) the returned entry of the same
/// `type` wherever it is (other writers' entries sit among ours), else the
/// entry at the same index `i`.
fn counterpart<'a>(
    sent: &Value,
    list_map: bool,
    i: usize,
    returned: &'a Value,
) -> Option<&'a Value> {
    if list_map {
        let key = list_map_key(sent)?;
        returned
            .as_array()?
            .iter()
            .find(|r| list_map_key(r) == Some(key))
    } else {
        returned.get(i)
    }
}

/// One step of a path into a body: an object's key or a list's index.
#[derive(Clone, Copy)]
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// `prefix` and `steps` as a path (`status.conditions[0].type`).
fn render(prefix: &str, steps: &[Step<'_>]) -> String {
    use std::fmt::Write as _;
    let mut path = prefix.to_owned();
    for step in steps {
        match step {
            Step::Key(k) if path.is_empty() => path.push_str(k),
            Step::Key(k) => {
                path.push('.');
                path.push_str(k);
            }
            Step::Index(i) => {
                let _ = write!(path, "[{i}]");
            }
        }
    }
    path
}

/// The paths of everything in `sent` that is not in `returned` (object
/// keys recursively, array entries by index, or by `type` in a list map
/// such as `conditions`), each under `path`. Parts of `sent` without data
/// (nulls, empty objects and arrays) are skipped. A path is spelled out
/// only for what is missing: every write's answer is compared, and nearly
/// always nothing is.
pub fn missing_fields(sent: &Value, returned: &Value, path: &str, out: &mut Vec<String>) {
    let mut steps = Vec::new();
    compare(sent, returned, path, &mut steps, out);
}

fn compare<'a>(
    sent: &'a Value,
    returned: &Value,
    prefix: &str,
    steps: &mut Vec<Step<'a>>,
    out: &mut Vec<String>,
) {
    // Without data, an absence means nothing was lost.
    let missing = |steps: &[Step<'_>], v: &Value, out: &mut Vec<String>| {
        if has_content(v) {
            out.push(render(prefix, steps));
        }
    };
    match sent {
        Value::Object(map) => {
            for (k, v) in map {
                steps.push(Step::Key(k));
                match returned.get(k) {
                    Some(r) if !r.is_null() => compare(v, r, prefix, steps, out),
                    _ => missing(steps, v, out),
                }
                steps.pop();
            }
        }
        Value::Array(items) => {
            let list_map = is_list_map(items);
            for (i, v) in items.iter().enumerate() {
                steps.push(Step::Index(i));
                match counterpart(v, list_map, i, returned) {
                    Some(r) => compare(v, r, prefix, steps, out),
                    None => missing(steps, v, out),
                }
                steps.pop();
            }
        }
        _ => {}
    }
}

/// Compares the body sent with the object returned.
pub fn check_returned(body: &Value, returned: &Value) -> WriteOutcome {
    let mut missing = Vec::new();
    if let Some(sent_status) = body.get("status") {
        let returned_status = returned.get("status").unwrap_or(&Value::Null);
        missing_fields(sent_status, returned_status, "status", &mut missing);
    }
    if missing.is_empty() {
        WriteOutcome::Applied
    } else {
        missing.truncate(MAX_MISSING_PATHS);
        WriteOutcome::Pruned { missing }
    }
}

/// What a write result means for the fleet view and readiness: a write
/// the CRD refused for undeclared fields counts as pruned.
pub fn write_record(result: &Result<WriteOutcome, WriteError>) -> WriteRecord {
    match result {
        Ok(WriteOutcome::Applied) => WriteRecord::Applied,
        Ok(WriteOutcome::Pruned { missing }) => WriteRecord::Pruned {
            missing: missing.clone(),
        },
        // Refused for the same reason pruning happens: the CRD is too old.
        Err(WriteError::NotDeclared { missing, .. }) => WriteRecord::Pruned {
            missing: missing.clone(),
        },
        Err(e) => WriteRecord::Failed {
            kind: e.kind().to_owned(),
            message: e.to_string(),
        },
    }
}

/// The `result` label of [`telemetry::STATUS_WRITES_TOTAL`] for a write's
/// result.
pub(crate) fn result_label(result: &Result<WriteOutcome, WriteError>) -> &'static str {
    match result {
        Ok(WriteOutcome::Applied) => label::APPLIED,
        Ok(WriteOutcome::Pruned { .. }) => label::PRUNED,
        Err(e) => e.kind(),
    }
}

/// Writes statuses. Cheap to clone.
#[derive(Clone)]
pub struct StatusWriter {
    client: Client,
    params: PatchParams,
    gate: Option<Arc<dyn WriteGate>>,
    contest: Option<Arc<dyn ContestSource>>,
    uids: Option<Arc<dyn InstanceUids>>,
    target: PublicationTarget,
    /// Companions whose `metadata.generation` is not 1 (their spec is
    /// empty, so it stays 1 unless someone edits it), as their answers
    /// showed: the `observedGeneration` to send next.
    generations: Arc<Mutex<HashMap<InstanceKey, i64>>>,
}

impl StatusWriter {
    /// A writer using `client`, writing whenever asked (one replica), on
    /// the instances themselves.
    pub fn new(client: Client) -> Self {
        Self {
            client,
            params: PatchParams::apply(FIELD_MANAGER).force(),
            gate: None,
            contest: None,
            uids: None,
            target: PublicationTarget::Instance,
            generations: Arc::default(),
        }
    }

    /// A writer publishing on `target`.
    pub fn with_target(mut self, target: PublicationTarget) -> Self {
        self.target = target;
        self
    }

    /// A writer that asks `contest` right before every PATCH (instance
    /// mode) and sends nothing to a contested instance
    /// ([`WriteError::Contested`]).
    pub fn with_contest(mut self, contest: Arc<dyn ContestSource>) -> Self {
        self.contest = Some(contest);
        self
    }

    /// A writer that takes an instance's UID from `uids` when it creates
    /// its companion (one GET of the instance otherwise).
    pub fn with_uids(mut self, uids: Arc<dyn InstanceUids>) -> Self {
        self.uids = Some(uids);
        self
    }

    /// The publication target.
    pub fn target(&self) -> PublicationTarget {
        self.target
    }

    /// A writer that asks `gate` right before every PATCH and sends
    /// nothing when it refuses ([`WriteError::Fenced`]).
    pub fn with_gate(mut self, gate: Arc<dyn WriteGate>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// Applies `status` and `conditions` to the instance `key` and checks
    /// what came back. Logs and counts the result.
    pub async fn write(
        &self,
        key: &InstanceKey,
        status: &DesiredStatus,
        conditions: &[Condition],
    ) -> Result<WriteOutcome, WriteError> {
        self.write_returning_uid(key, status, conditions).await.0
    }

    /// [`StatusWriter::write`], also returning the instance's UID from the
    /// API server's answer (what an Event about it points at).
    pub async fn write_returning_uid(
        &self,
        key: &InstanceKey,
        status: &DesiredStatus,
        conditions: &[Condition],
    ) -> (Result<WriteOutcome, WriteError>, Option<String>) {
        let (result, uid) = match self.write_quiet(key, status, conditions).await {
            Ok((outcome, uid)) => (Ok(outcome), uid),
            Err(e) => (Err(e), None),
        };
        metrics::counter!(telemetry::STATUS_WRITES_TOTAL, "result" => result_label(&result))
            .increment(1);
        match &result {
            Ok(WriteOutcome::Applied) => tracing::debug!(instance = %key, "status written"),
            Err(WriteError::NotDeclared { missing, message }) => {
                metrics::counter!(telemetry::STATUS_WRITES_PRUNED_TOTAL).increment(1);
                tracing::error!(
                    instance = %key,
                    missing = ?missing,
                    error = %message,
                    "status fields or values are not declared by the KuraInstance CRD in this cluster (too old): the whole write was refused; apply the CRD shipped with this agent"
                );
            }
            Ok(WriteOutcome::Pruned { missing }) => {
                metrics::counter!(telemetry::STATUS_WRITES_PRUNED_TOTAL).increment(1);
                tracing::error!(
                    instance = %key,
                    missing = ?missing,
                    "status fields were pruned by the API server: the KuraInstance CRD in this cluster is too old; apply the CRD shipped with this agent"
                );
            }
            Err(e @ WriteError::Fenced(_)) => {
                tracing::info!(instance = %key, error = %e, "status write not sent");
            }
            // Said loudly once per contest by whoever watches them.
            Err(e @ WriteError::Contested(_)) => {
                tracing::debug!(instance = %key, error = %e, "status write not sent");
            }
            Err(e) => tracing::warn!(instance = %key, error = %e, "status write failed"),
        }
        (result, uid)
    }

    async fn write_quiet(
        &self,
        key: &InstanceKey,
        status: &DesiredStatus,
        conditions: &[Condition],
    ) -> Result<(WriteOutcome, Option<String>), WriteError> {
        let generation = self.companion_generation(key);
        // Held as its JSON text until the answer is in: the tree is
        // several times larger, and up to 64 writes are in flight when
        // the API server answers slowly (a replica at 30,000 pods held
        // 1 MiB of trees at rest; benches/PERFORMANCE.md).
        let sent = sent_text(&apply_body(status, conditions, self.target, generation)?)?;
        if let Some(gate) = &self.gate {
            gate.check(key, Timestamp::now())
                .map_err(WriteError::Fenced)?;
        }
        match self.target {
            PublicationTarget::Instance => {
                if let Some(manager) = self.contest.as_ref().and_then(|c| c.contested_by(key)) {
                    return Err(WriteError::Contested(manager.into()));
                }
                metrics::counter!(telemetry::STATUS_WRITE_BYTES_TOTAL).increment(text_bytes(&sent));
                let api: Api<Returned> = Api::namespaced(self.client.clone(), &key.namespace);
                let returned = api
                    .patch_status(&key.name, &self.params, &Patch::Apply(&*sent))
                    .await
                    .map_err(classify)?;
                let status = serde_json::json!({ "status": returned.status });
                Ok((
                    check_returned(&sent_tree(&sent)?, &status),
                    returned.metadata.uid,
                ))
            }
            PublicationTarget::Companion => {
                metrics::counter!(telemetry::STATUS_WRITE_BYTES_TOTAL).increment(text_bytes(&sent));
                let returned = self.write_companion(key, &sent).await?;
                if returned.generation() != generation {
                    self.note_generation(key, returned.generation());
                }
                let owner = returned.owner_uid();
                let status = serde_json::json!({ "status": returned.status });
                Ok((check_returned(&sent_tree(&sent)?, &status), owner))
            }
        }
    }

    /// The `observedGeneration` to send for `key`'s companion.
    fn companion_generation(&self, key: &InstanceKey) -> i64 {
        if self.target != PublicationTarget::Companion {
            return 0;
        }
        self.generations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(key)
            .copied()
            .unwrap_or(1)
    }

    fn note_generation(&self, key: &InstanceKey, generation: i64) {
        let mut g = self
            .generations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if generation == 1 {
            g.remove(key);
        } else {
            g.insert(key.clone(), generation);
        }
    }

    /// Applies `body` to `key`'s companion's status; a companion that does
    /// not exist yet is created first, owned by the instance (whose UID
    /// the instance watch has, or one GET of its metadata reads), and the
    /// status applied then. A companion the companion watch knows to be
    /// absent is created before any status apply (two requests); one it
    /// does not know about is found absent by the status apply's 404
    /// (three).
    async fn write_companion(
        &self,
        key: &InstanceKey,
        body: &RawValue,
    ) -> Result<ReturnedCompanion, WriteError> {
        let api: Api<ReturnedCompanion> = Api::namespaced(self.client.clone(), &key.namespace);
        let absent = self.uids.as_ref().is_some_and(|u| u.companion_absent(key));
        if !absent {
            match api
                .patch_status(&key.name, &self.params, &Patch::Apply(body))
                .await
            {
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                other => return other.map_err(classify),
            }
        }
        let known = self.uids.as_ref().and_then(|u| u.uid_of(key));
        let uid: String = match known {
            Some(uid) => uid.into(),
            None => {
                let instances: Api<KuraInstance> =
                    Api::namespaced(self.client.clone(), &key.namespace);
                instances
                    .get_metadata(&key.name)
                    .await
                    .map_err(classify)?
                    .metadata
                    .uid
                    .ok_or_else(|| WriteError::Other("the instance has no uid".to_owned()))?
            }
        };
        let created: Api<kube::api::DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &key.namespace,
            &kube::api::ApiResource::erase::<KuraInstanceHealth>(&()),
        );
        let creation = companion_body(key, &uid);
        let _ = created
            .patch(&key.name, &self.params, &Patch::Apply(&creation))
            .await
            .map_err(classify)?;
        tracing::info!(instance = %key, "companion KuraInstanceHealth created");
        // The creation, and the status sent again when it was sent first.
        let again = if absent { 0 } else { text_bytes(body) };
        metrics::counter!(telemetry::STATUS_WRITE_BYTES_TOTAL)
            .increment(body_bytes(&creation) + again);
        api.patch_status(&key.name, &self.params, &Patch::Apply(body))
            .await
            .map_err(classify)
    }
}

/// What a status write's answer is read for: the instance's UID and its
/// status. Its managed fields (every manager's, often larger than the
/// status) and its spec are skipped by the parser.
#[derive(kube::Resource, Clone, Debug, serde::Deserialize)]
#[resource(inherit = "KuraInstance")]
struct Returned {
    #[serde(deserialize_with = "uid_only", default)]
    metadata: ObjectMeta,
    #[serde(default)]
    status: Value,
}

/// What a companion's status write answers, as read: its generation, its
/// owner's (the instance's) UID and its status.
#[derive(kube::Resource, Clone, Debug, serde::Deserialize)]
#[resource(inherit = "KuraInstanceHealth")]
struct ReturnedCompanion {
    #[serde(deserialize_with = "companion_meta", default)]
    metadata: ObjectMeta,
    #[serde(default)]
    status: Value,
}

impl ReturnedCompanion {
    /// Its `metadata.generation` (1 when not said).
    fn generation(&self) -> i64 {
        self.metadata.generation.unwrap_or(1)
    }

    /// The UID of the `KuraInstance` that owns it.
    fn owner_uid(&self) -> Option<String> {
        self.metadata
            .owner_references
            .as_ref()?
            .iter()
            .find(|o| o.kind == "KuraInstance")
            .map(|o| o.uid.clone())
    }
}

/// Reads a companion's `metadata`: its generation and its owner
/// references (the rest, managed fields included, skipped).
fn companion_meta<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        generation: Option<i64>,
        owner_references:
            Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>,
    }
    let m = Meta::deserialize(d)?;
    Ok(ObjectMeta {
        generation: m.generation,
        owner_references: m.owner_references,
        ..ObjectMeta::default()
    })
}

/// Reads `metadata`, keeping its UID only.
fn uid_only<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    #[derive(serde::Deserialize)]
    struct Uid {
        uid: Option<String>,
    }
    let Uid { uid } = serde::Deserialize::deserialize(d)?;
    Ok(ObjectMeta {
        uid,
        ..ObjectMeta::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write's `result` label is its outcome's, or its error's kind.
    #[test]
    fn the_result_label_is_the_outcome_or_the_error_kind() {
        assert_eq!(result_label(&Ok(WriteOutcome::Applied)), label::APPLIED);
        assert_eq!(
            result_label(&Ok(WriteOutcome::Pruned { missing: vec![] })),
            label::PRUNED
        );
        let e = WriteError::Fenced(String::new());
        assert_eq!(result_label(&Err(e.clone())), e.kind());
        assert_eq!(e.kind(), label::FENCED);
    }

    #[test]
    fn an_answer_is_read_for_its_uid_and_status_only() {
        let returned: Returned = serde_json::from_value(json!({
            "apiVersion": "kura.tuist.dev/v1alpha1", "kind": "KuraInstance",
            "metadata": {"name": "a", "uid": "u1", "managedFields": [{"manager": "m", "fieldsV1": {}}]},
            "spec": {"image": "i"},
            "status": {"rolloutGate": {"verdict": "healthy"}}
        }))
        .expect("answer");
        assert_eq!(returned.metadata.uid.as_deref(), Some("u1"));
        assert!(returned.metadata.managed_fields.is_none());
        assert_eq!(returned.status["rolloutGate"]["verdict"], "healthy");
    }

    #[test]
    fn missing_fields_names_every_lost_path() {
        let sent =
            json!({"a": {"b": 1, "c": [ {"d": 1}, {"d": 2, "e": "x"} ], "n": null}, "f": true});
        let back = json!({"a": {"b": 1, "c": [ {"d": 1}, {"d": 2} ]}});
        let mut out = Vec::new();
        missing_fields(&sent, &back, "", &mut out);
        assert_eq!(out, ["a.c[1].e", "f"]);
    }

    #[test]
    fn list_map_entries_are_matched_by_type_among_other_writers_entries() {
        let sent = json!({"conditions": [
            {"type": "RolloutHealthy", "status": "True", "observedGeneration": 2},
            {"type": "RolloutHardStopped", "status": "False", "observedGeneration": 2}
        ]});
        let back = json!({"conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "RolloutHardStopped", "status": "False", "observedGeneration": 2},
            {"type": "RolloutHealthy", "status": "True", "observedGeneration": 2}
        ]});
        let mut out = Vec::new();
        missing_fields(&sent, &back, "status", &mut out);
        assert!(out.is_empty(), "{out:?}");
        let pruned = json!({"conditions": [{"type": "Ready", "status": "True"}]});
        missing_fields(&sent, &pruned, "status", &mut out);
        assert_eq!(
            out,
            ["status.conditions[0]", "status.conditions[1]"],
            "entries of ours that did not come back"
        );
    }

    /// Instance mode writes the agent's three fields on the KuraInstance and
    /// never its top-level `observedGeneration` (Kura's controller's, with
    /// kstatus' conditions too); companion mode writes them on the
    /// companion with the companion's own `observedGeneration`.
    #[test]
    fn each_target_gets_its_own_body() {
        use crate::model::fixtures::{gate, health};
        let at = Timestamp::from_second(1_780_000_000).expect("ts");
        let status = DesiredStatus::new(health(at), gate(at));
        let on_instance =
            apply_body(&status, &[], PublicationTarget::Instance, 7).expect("instance body");
        assert_eq!(on_instance["kind"], "KuraInstance");
        assert!(on_instance["status"].get("observedGeneration").is_none());
        let keys: Vec<&String> = on_instance["status"]
            .as_object()
            .expect("status")
            .keys()
            .collect();
        assert_eq!(keys, ["conditions", "rolloutGate", "rolloutHealth"]);
        let on_companion =
            apply_body(&status, &[], PublicationTarget::Companion, 2).expect("companion body");
        assert_eq!(on_companion["apiVersion"], "health.kura.tuist.dev/v1alpha1");
        assert_eq!(on_companion["kind"], "KuraInstanceHealth");
        assert_eq!(on_companion["status"]["observedGeneration"], 2);
        assert_eq!(
            on_companion["status"]["rolloutHealth"], on_instance["status"]["rolloutHealth"],
            "the same aggregate in both"
        );
        let created = companion_body(&InstanceKey::new("kura", "acme"), "u-1");
        assert_eq!(created["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(
            created["metadata"]["ownerReferences"][0]["kind"],
            "KuraInstance"
        );
        assert_eq!(created["metadata"]["namespace"], "kura");
        assert!(
            created.get("status").is_none(),
            "the status goes on its subresource"
        );
    }

    #[test]
    fn the_bytes_counted_are_the_json_sent() {
        let body = json!({"status": {"a": [1, 2, "x"]}});
        assert_eq!(
            body_bytes(&body),
            serde_json::to_vec(&body).expect("json").len() as u64
        );
    }

    #[test]
    fn a_contested_write_is_dropped_not_retried() {
        let e = WriteError::Contested("manager".into());
        assert_eq!(e.kind(), label::CONTESTED);
        assert_eq!(e.job_result(), JobResult::Gone);
        assert!(e.to_string().contains("\"manager\""), "{e}");
    }

    #[test]
    fn nulls_are_left_out_of_the_apply_body() {
        let mut v = json!({"a": null, "b": {"c": null, "d": 1}, "e": [null, {"f": null, "g": 2}]});
        strip_nulls(&mut v);
        assert_eq!(v, json!({"b": {"d": 1}, "e": [null, {"g": 2}]}));
    }

    #[test]
    fn a_response_without_rollout_gate_is_pruned() {
        let body = json!({"status": {"rolloutHealth": {"ready": true}, "rolloutGate": {"verdict": "healthy"}}});
        assert_eq!(
            check_returned(
                &body,
                &json!({"status": {"rolloutHealth": {"ready": true}, "phase": "Running"}})
            ),
            WriteOutcome::Pruned {
                missing: vec!["status.rolloutGate".into()]
            }
        );
        assert_eq!(
            check_returned(
                &body,
                &json!({"status": {"rolloutHealth": {"ready": true}, "rolloutGate": {"verdict": "healthy"}}})
            ),
            WriteOutcome::Applied
        );
        assert_eq!(
            check_returned(&body, &json!({"spec": {}})),
            WriteOutcome::Pruned {
                missing: vec!["status.rolloutGate".into(), "status.rolloutHealth".into()]
            }
        );
    }

    #[test]
    fn api_errors_are_classified() {
        let api = |code: u16| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                message: "m".into(),
                ..Default::default()
            }))
        };
        assert_eq!(classify(api(409)), WriteError::Conflict("m".into()));
        assert_eq!(classify(api(404)).job_result(), JobResult::Gone);
        assert_eq!(classify(api(403)).kind(), "forbidden");
        assert_eq!(classify(api(500)), WriteError::Other("HTTP 500: m".into()));
        let undeclared = kube::Error::Api(Box::new(kube::core::Status {
            code: 500,
            message: "failed to create typed patch object (/; kura.tuist.dev/v1alpha1, Kind=KuraInstance): .status.rolloutGate: field not declared in schema".into(),
            ..Default::default()
        }));
        let e = classify(undeclared);
        assert_eq!(e.kind(), "pruned");
        assert_eq!(
            write_record(&Err(e.clone())),
            WriteRecord::Pruned {
                missing: vec!["status.rolloutGate".into()]
            },
            "the debug view and /readyz treat it as pruning"
        );
        assert_eq!(e.job_result(), JobResult::Failed);
        assert!(
            matches!(&e, WriteError::NotDeclared { missing, .. } if missing == &["status.rolloutGate"]),
            "{e:?}"
        );
        assert_eq!(classify(api(500)).job_result(), JobResult::Failed);
    }

    /// An older CRD whose enum lacks a value this agent writes refuses the
    /// whole write with a 422: reported as pruning (the StatusPruned
    /// Warning Event, /readyz, the pruned counter), naming field and value.
    #[test]
    fn a_value_outside_an_old_enum_is_reported_like_pruning() {
        let rejected = kube::Error::Api(Box::new(kube::core::Status {
            code: 422,
            message: r#"KuraInstance.kura.tuist.dev "acme" is invalid: [status.rolloutGate.signal: Unsupported value: "replication_lag_regressed": supported values: "soaking", "not_converged", status.rolloutGate.verdict: Unsupported value: "paused": supported values: "healthy", "unhealthy", "hard_stop"]"#.into(),
            ..Default::default()
        }));
        let e = classify(rejected);
        assert_eq!(e.kind(), "pruned");
        assert_eq!(
            write_record(&Err(e)),
            WriteRecord::Pruned {
                missing: vec![
                    r#"status.rolloutGate.signal = "replication_lag_regressed""#.into(),
                    r#"status.rolloutGate.verdict = "paused""#.into(),
                ]
            }
        );
        // Another 422 (not an enum) stays an error.
        let other = kube::Error::Api(Box::new(kube::core::Status {
            code: 422,
            message: "status.rolloutHealth.expectedPods: Invalid value: -1".into(),
            ..Default::default()
        }));
        assert_eq!(classify(other).kind(), "error");
    }
}
