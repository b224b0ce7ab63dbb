//! The document `kura-agent aggregate FILE` reads (contract/rollout-health.md,
//! "Offline aggregation"), parsed strictly: every problem names the sweep,
//! the pod and the field. A pod's `report` goes through the same parser as a
//! live report, and an invalid one becomes that pod's `error`.
//!
//! Besides the contract's keys, a pod may carry `receivedAt` (RFC 3339; the
//! sweep's `at` when absent) and the document a `description` string.
//! Unknown keys are refused, so a misspelt key cannot silently become a
//! default, and so is a key given twice in one object, at any depth
//! (`kura_schemas::strict_json`); a UTF-8 byte-order mark at the start of
//! the file is skipped.

use super::{AggregateConfig, InstanceAggregator};
use crate::model::{
    InstanceInfo, InstanceTraits, PodIdentity, PodSample, SERVING_ROLLBACK_FLOOR_ANNOTATION,
    SampleResult, update_paused_of,
};
use jiff::Timestamp;
use kura_schemas::RolloutHealth;
use kura_schemas::api_int::API_INT_MAX;
use kura_schemas::report::report_from_value;
use kura_schemas::strict_json;
use serde_json::{Map, Value};
use std::collections::HashSet;
use std::fmt;

/// A parsed aggregate document.
#[derive(Debug, Clone, PartialEq)]
pub struct AggregateInput {
    /// The instance every sweep runs against.
    pub instance: InstanceInfo,
    /// What sets the instance apart at the first sweep (its optional
    /// keys: `suspended`, `phase`, `servingMode`, `annotations`,
    /// `updatePaused`).
    pub traits: InstanceTraits,
    /// The aggregate to continue from, as after an agent restart.
    pub previous: Option<RolloutHealth>,
    /// The sweeps, in order.
    pub sweeps: Vec<Sweep>,
}

/// One sweep of the document.
#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    /// When the sweep finished (`observedAt` of its aggregate).
    pub at: Timestamp,
    /// One sample per pod listed.
    pub samples: Vec<PodSample>,
    /// The sweep's own `instance` keys, which replace the document's (or
    /// an earlier sweep's) from this sweep on.
    pub traits: Option<InstanceTraits>,
}

/// Where in the document a problem is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// The top-level object.
    Document,
    /// `instance`.
    Instance,
    /// Sweep `n` (0-based index into `sweeps`).
    Sweep(usize),
    /// A pod of a sweep: by name when it has one, else by index.
    Pod {
        /// The sweep index.
        sweep: usize,
        /// The pod's name, or `#index` when it has none.
        pod: String,
    },
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Document => f.write_str("document"),
            Place::Instance => f.write_str("instance"),
            Place::Sweep(i) => write!(f, "sweep {i}"),
            Place::Pod { sweep, pod } => write!(f, "sweep {sweep}, pod {pod}"),
        }
    }
}

/// Why a document is not a valid aggregate input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// Not JSON at all.
    #[error("input is not valid JSON: {0}")]
    Json(String),
    /// A key is missing, of the wrong type, impossible or unknown.
    #[error("{place}, field `{field}`: {reason}")]
    Field {
        /// Where.
        place: Place,
        /// The key.
        field: String,
        /// What is wrong.
        reason: String,
    },
}

fn err(place: &Place, field: &str, reason: impl Into<String>) -> InputError {
    InputError::Field {
        place: place.clone(),
        field: field.to_owned(),
        reason: reason.into(),
    }
}

/// Parse a document.
pub fn parse_input(bytes: &[u8]) -> Result<AggregateInput, InputError> {
    let value: Value =
        strict_json::from_document(bytes).map_err(|e| InputError::Json(e.to_string()))?;
    let doc = Place::Document;
    let top = object(&value, &doc, "(document)")?;
    known_keys(
        top,
        &doc,
        &["description", "instance", "previous", "sweeps"],
    )?;
    if let Some(d) = top.get("description")
        && !d.is_string()
    {
        return Err(err(&doc, "description", "must be a string"));
    }
    let instance_value = required(top, &doc, "instance")?;
    let instance = parse_instance(instance_value)?;
    let traits = parse_traits(instance_value, &Place::Instance, INSTANCE_KEYS)?;
    let previous = match top.get("previous") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            serde_json::from_value::<RolloutHealth>(v.clone())
                .map_err(|e| err(&doc, "previous", format!("not a rolloutHealth object: {e}")))?,
        ),
    };
    let sweeps = required(top, &doc, "sweeps")?
        .as_array()
        .ok_or_else(|| err(&doc, "sweeps", "must be an array"))?
        .iter()
        .enumerate()
        .map(|(i, s)| parse_sweep(i, s))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(AggregateInput {
        instance,
        traits,
        previous,
        sweeps,
    })
}

/// Run every sweep of a document through one [`InstanceAggregator`]
/// (restored from `previous` when present): one aggregate per sweep, with
/// `observedAt` equal to the sweep's `at`.
pub fn run(input: &AggregateInput, config: AggregateConfig, agent: &str) -> Vec<RolloutHealth> {
    let mut agg = match &input.previous {
        Some(p) => InstanceAggregator::restore(p, config),
        None => InstanceAggregator::new(config),
    };
    let mut traits = &input.traits;
    input
        .sweeps
        .iter()
        .map(|s| {
            if let Some(own) = &s.traits {
                traits = own;
            }
            // As live: a suspended instance's pods are not polled, so its
            // sweep folds no sample.
            agg.fold_with(&input.instance, traits, &s.samples, s.at, agent)
        })
        .collect()
}

/// The optional keys of `instance` (and of a sweep's own `instance`).
const TRAIT_KEYS: [&str; 5] = [
    "suspended",
    "phase",
    "servingMode",
    "annotations",
    "updatePaused",
];

/// Every key of the document's `instance`.
const INSTANCE_KEYS: &[&str] = &[
    "namespace",
    "name",
    "expectedPods",
    "generation",
    "suspended",
    "phase",
    "servingMode",
    "annotations",
    "updatePaused",
];

/// What the agent reads of a `KuraInstance` besides its pods, from an
/// `instance` object (rollout-health.md, "Offline aggregation"): each
/// key optional, each of its own type (a wrong type is an error naming
/// the key); `updatePaused`'s content is read as leniently as live.
fn parse_traits(v: &Value, p: &Place, known: &[&str]) -> Result<InstanceTraits, InputError> {
    let o = object(v, p, "instance")?;
    known_keys(o, p, known)?;
    let suspended = match o.get("suspended") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(err(p, "suspended", "must be a boolean")),
    };
    let phase = optional_string(o, p, "phase")?;
    let serving_mode = optional_string(o, p, "servingMode")?;
    let rollback_floor = match o.get("annotations") {
        None | Some(Value::Null) => false,
        Some(Value::Object(a)) => {
            if let Some((key, _)) = a.iter().find(|(_, v)| !v.is_string()) {
                return Err(err(p, "annotations", format!("{key:?} must be a string")));
            }
            a.contains_key(SERVING_ROLLBACK_FLOOR_ANNOTATION)
        }
        Some(_) => return Err(err(p, "annotations", "must be an object of strings")),
    };
    let update_paused = match o.get("updatePaused") {
        None | Some(Value::Null) => None,
        Some(v @ Value::Object(_)) => update_paused_of(v),
        Some(_) => return Err(err(p, "updatePaused", "must be an object or null")),
    };
    Ok(InstanceTraits {
        suspended: InstanceTraits::is_suspended(suspended, phase.as_deref()),
        update_paused,
        fence_configured: InstanceTraits::is_fence_configured(
            serving_mode.as_deref(),
            rollback_floor,
        ),
    })
}

fn parse_instance(v: &Value) -> Result<InstanceInfo, InputError> {
    let p = Place::Instance;
    let o = object(v, &p, "instance")?;
    let expected = u64_field(o, &p, "expectedPods")?;
    Ok(InstanceInfo {
        namespace: string(o, &p, "namespace")?.to_owned(),
        name: string(o, &p, "name")?.to_owned(),
        expected_pods: u32::try_from(expected)
            .map_err(|_| err(&p, "expectedPods", format!("{expected} is too large")))?,
        generation: generation(required(o, &p, "generation")?, &p)?,
    })
}

/// `instance.generation`: an integer the API server stores (int64).
fn generation(v: &Value, p: &Place) -> Result<i64, InputError> {
    match v {
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(g), _) => Ok(g),
            (None, Some(g)) => Err(err(
                p,
                "generation",
                format!("{g} is out of range (at most {API_INT_MAX})"),
            )),
            (None, None) if n.as_f64().is_some_and(|f| f.fract() == 0.0) => Err(err(
                p,
                "generation",
                format!("{n} is out of range (at most {API_INT_MAX})"),
            )),
            (None, None) => Err(err(p, "generation", format!("{n} is not an integer"))),
        },
        _ => Err(err(p, "generation", "must be an integer")),
    }
}

fn parse_sweep(index: usize, v: &Value) -> Result<Sweep, InputError> {
    let p = Place::Sweep(index);
    let o = object(v, &p, "(sweep)")?;
    known_keys(o, &p, &["at", "pods", "instance"])?;
    let at = timestamp(o, &p, "at")?;
    let traits = o
        .get("instance")
        .map(|v| parse_traits(v, &p, &TRAIT_KEYS))
        .transpose()?;
    let pods = required(o, &p, "pods")?
        .as_array()
        .ok_or_else(|| err(&p, "pods", "must be an array"))?;
    let mut samples: Vec<PodSample> = Vec::with_capacity(pods.len());
    // Names seen in this sweep: a set, not a scan of `samples` per pod (a
    // 40,000-pod sweep took seconds).
    let mut names: HashSet<String> = HashSet::with_capacity(pods.len());
    for (i, pod) in pods.iter().enumerate() {
        let sample = parse_pod(index, i, at, pod)?;
        if !names.insert(sample.pod.name.to_string()) {
            return Err(err(
                &Place::Pod {
                    sweep: index,
                    pod: format!("{:?}", sample.pod.name),
                },
                "name",
                "listed twice in one sweep",
            ));
        }
        samples.push(sample);
    }
    Ok(Sweep {
        at,
        samples,
        traits,
    })
}

fn parse_pod(
    sweep: usize,
    index: usize,
    at: Timestamp,
    v: &Value,
) -> Result<PodSample, InputError> {
    let unnamed = Place::Pod {
        sweep,
        pod: format!("#{index}"),
    };
    let o = object(v, &unnamed, "(pod)")?;
    let name = string(o, &unnamed, "name")?;
    if name.is_empty() {
        return Err(err(&unnamed, "name", "must not be empty"));
    }
    let p = Place::Pod {
        sweep,
        pod: format!("{name:?}"),
    };
    known_keys(
        o,
        &p,
        &[
            "name",
            "uid",
            "restartCount",
            "image",
            "ip",
            "receivedAt",
            "report",
            "error",
            "cluster",
            "clusterError",
        ],
    )?;
    let restarts = u64_field(o, &p, "restartCount")?;
    let pod = PodIdentity {
        name: name.into(),
        uid: string(o, &p, "uid")?.into(),
        restart_count: u32::try_from(restarts)
            .map_err(|_| err(&p, "restartCount", format!("{restarts} is too large")))?,
        image: optional_string(o, &p, "image")?.map(Into::into),
        ip: optional_string(o, &p, "ip")?.map(Into::into),
    };
    let received_at = match o.get("receivedAt") {
        None => at,
        Some(_) => timestamp(o, &p, "receivedAt")?,
    };
    let result = match (o.get("report"), o.get("error")) {
        (Some(report), None) => match report_from_value(report) {
            Ok(r) => SampleResult::Report(Box::new(r)),
            Err(e) => SampleResult::Error(format!("invalid report: {e}")),
        },
        (None, Some(Value::String(e))) => SampleResult::Error(e.clone()),
        (None, Some(_)) => return Err(err(&p, "error", "must be a string")),
        (Some(_), Some(_)) => {
            return Err(err(
                &p,
                "report",
                "a pod has either `report` or `error`, not both",
            ));
        }
        (None, None) => {
            return Err(err(&p, "report", "a pod needs `report` or `error`"));
        }
    };
    let (result, replication_lag_entries) = cluster_read(&p, o, result)?;
    Ok(PodSample {
        pod: std::sync::Arc::new(pod),
        received_at,
        result,
        replication_lag_entries,
    })
}

/// What the recorded `/status/cluster` read (`cluster` or `clusterError`)
/// does to a pod's sample, as it would live: a body gives the lag, an
/// invalid one or any `clusterError` but `not_found` (HTTP 404: the lag is
/// absent) fails the sample with a reason naming `/status/cluster`. A pod
/// that has neither key has no lag. Live, only a pod whose report is valid
/// and has no `outbox_messages` is asked (`poll::Poller`): for any other
/// pod (its report failed, or it replicates by push) both keys are ignored,
/// an invalid body and a failed read included, so the sample is its
/// report's.
fn cluster_read(
    p: &Place,
    o: &Map<String, Value>,
    result: SampleResult,
) -> Result<(SampleResult, Option<u64>), InputError> {
    use kura_schemas::CLUSTER_PATH;
    let read = match (o.get("cluster"), o.get("clusterError")) {
        (None, None) => return Ok((result, None)),
        (Some(_), Some(_)) => {
            return Err(err(
                p,
                "cluster",
                "a pod has either `cluster` or `clusterError`, not both",
            ));
        }
        (None, Some(Value::String(e))) if e == CLUSTER_NOT_FOUND => Ok(None),
        (None, Some(Value::String(e))) => Err(format!("{CLUSTER_PATH}: {e}")),
        (None, Some(_)) => return Err(err(p, "clusterError", "must be a string")),
        (Some(body), None) => kura_schemas::cluster::cluster_from_value(body)
            .map(|c| c.replication_lag_entries())
            .map_err(|e| format!("{CLUSTER_PATH}: invalid body: {e}")),
    };
    if !matches!(&result, SampleResult::Report(r) if r.outbox_messages.is_none()) {
        return Ok((result, None));
    }
    Ok(match read {
        Ok(lag) => (result, lag),
        Err(reason) => (SampleResult::Error(reason), None),
    })
}

/// The `clusterError` that records an HTTP 404 from `/status/cluster`: a
/// build without the route, so the lag is absent (never 0).
pub const CLUSTER_NOT_FOUND: &str = "not_found";

fn object<'a>(v: &'a Value, p: &Place, what: &str) -> Result<&'a Map<String, Value>, InputError> {
    v.as_object()
        .ok_or_else(|| err(p, what, "must be an object"))
}

fn known_keys(o: &Map<String, Value>, p: &Place, known: &[&str]) -> Result<(), InputError> {
    match o.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(err(p, k, "unknown key")),
        None => Ok(()),
    }
}

fn required<'a>(
    o: &'a Map<String, Value>,
    p: &Place,
    field: &str,
) -> Result<&'a Value, InputError> {
    o.get(field).ok_or_else(|| err(p, field, "is missing"))
}

fn string<'a>(o: &'a Map<String, Value>, p: &Place, field: &str) -> Result<&'a str, InputError> {
    required(o, p, field)?
        .as_str()
        .ok_or_else(|| err(p, field, "must be a string"))
}

fn optional_string(
    o: &Map<String, Value>,
    p: &Place,
    field: &str,
) -> Result<Option<String>, InputError> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(err(p, field, "must be a string")),
    }
}

fn u64_field(o: &Map<String, Value>, p: &Place, field: &str) -> Result<u64, InputError> {
    required(o, p, field)?
        .as_u64()
        .ok_or_else(|| err(p, field, "must be a non-negative integer"))
}

fn timestamp(o: &Map<String, Value>, p: &Place, field: &str) -> Result<Timestamp, InputError> {
    let s = string(o, p, field)?;
    s.parse::<Timestamp>()
        .map_err(|e| err(p, field, format!("{s:?} is not an RFC 3339 time: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<AggregateInput, InputError> {
        parse_input(s.as_bytes())
    }

    const INSTANCE: &str =
        r#""instance": {"namespace": "kura", "name": "a", "expectedPods": 1, "generation": 1}"#;

    #[test]
    fn errors_name_sweep_pod_and_field() {
        let e = parse(&format!(
            r#"{{{INSTANCE}, "sweeps": [{{"at": "2026-07-21T10:00:00Z", "pods": [
                {{"name": "a-0", "uid": "u", "restartCount": -1, "error": "timeout"}}]}}]}}"#
        ))
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "sweep 0, pod \"a-0\", field `restartCount`: must be a non-negative integer"
        );
        let e = parse(&format!(
            r#"{{{INSTANCE}, "sweeps": [{{"at": "yesterday", "pods": []}}]}}"#
        ))
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("sweep 0, field `at`: \"yesterday\" is not an RFC 3339 time"),
            "{e}"
        );
        let e = parse(&format!(
            r#"{{{INSTANCE}, "sweeps": [{{"at": "2026-07-21T10:00:00Z", "pods": [{{"uid": "u"}}]}}]}}"#
        ))
        .unwrap_err();
        assert_eq!(e.to_string(), "sweep 0, pod #0, field `name`: is missing");
    }

    #[test]
    fn invalid_report_becomes_the_pods_error() {
        let input = parse(&format!(
            r#"{{{INSTANCE}, "sweeps": [{{"at": "2026-07-21T10:00:00Z", "pods": [
                {{"name": "a-0", "uid": "u", "restartCount": 0, "report": {{"ready": true}}}}]}}]}}"#
        ))
        .unwrap();
        match &input.sweeps[0].samples[0].result {
            SampleResult::Error(e) => assert_eq!(e, "invalid report: field `state` is missing"),
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn both_or_neither_report_and_error_are_refused() {
        for pod in [
            r#"{"name": "a-0", "uid": "u", "restartCount": 0}"#,
            r#"{"name": "a-0", "uid": "u", "restartCount": 0, "error": "x", "report": {}}"#,
        ] {
            let e = parse(&format!(
                r#"{{{INSTANCE}, "sweeps": [{{"at": "2026-07-21T10:00:00Z", "pods": [{pod}]}}]}}"#
            ))
            .unwrap_err();
            assert!(
                e.to_string()
                    .starts_with("sweep 0, pod \"a-0\", field `report`"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_key_given_twice_is_refused_with_its_place() {
        let e = parse(&format!(
            r#"{{{INSTANCE}, "sweeps": [{{"at": "2026-07-21T10:00:00Z", "at": "2026-07-21T10:00:10Z", "pods": []}}]}}"#
        ))
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("key \"at\" appears more than once in one object at line 1"),
            "{e}"
        );
        // Inside a pod's report too: the whole document means one thing.
        let e = parse(&format!(
            r#"{{{INSTANCE}, "sweeps": [{{"at": "2026-07-21T10:00:00Z", "pods": [
                {{"name": "a-0", "uid": "u", "restartCount": 0,
                  "report": {{"ready": true, "ready": false}}}}]}}]}}"#
        ))
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("key \"ready\" appears more than once"),
            "{e}"
        );
    }

    #[test]
    fn a_byte_order_mark_at_the_start_of_the_file_is_skipped() {
        let doc = format!("\u{FEFF}{{{INSTANCE}, \"sweeps\": []}}");
        let input = parse(&doc).unwrap();
        assert_eq!(input.instance.generation, 1);
    }

    #[test]
    fn a_generation_beyond_int64_says_out_of_range() {
        for (g, shown) in [
            ("9223372036854775808", "9223372036854775808"),
            ("18446744073709551615", "18446744073709551615"),
            ("1e30", "1e+30"),
        ] {
            let e = parse(&format!(
                r#"{{"instance": {{"namespace": "kura", "name": "a", "expectedPods": 1, "generation": {g}}}, "sweeps": []}}"#
            ))
            .unwrap_err();
            assert!(
                e.to_string().starts_with(&format!(
                    "instance, field `generation`: {shown} is out of range"
                )),
                "{g}: {e}"
            );
        }
        let e = parse(
            r#"{"instance": {"namespace": "kura", "name": "a", "expectedPods": 1, "generation": 1.5}, "sweeps": []}"#,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "instance, field `generation`: 1.5 is not an integer"
        );
        let input = parse(
            r#"{"instance": {"namespace": "kura", "name": "a", "expectedPods": 1, "generation": 9223372036854775807}, "sweeps": []}"#,
        )
        .unwrap();
        assert_eq!(input.instance.generation, i64::MAX);
    }

    #[test]
    fn a_pod_listed_twice_in_a_sweep_is_refused() {
        let pod = r#"{"name": "a-0", "uid": "u", "restartCount": 0, "error": "x"}"#;
        let e = parse(&format!(
            r#"{{{INSTANCE}, "sweeps": [{{"at": "2026-07-21T10:00:00Z", "pods": [{pod}, {pod}]}}]}}"#
        ))
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "sweep 0, pod \"a-0\", field `name`: listed twice in one sweep"
        );
    }
}
