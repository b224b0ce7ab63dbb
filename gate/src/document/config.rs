//! The configuration document: the one parser and validator of a gate
//! configuration (replay's `config`, the agent's `--gate-config` file and
//! per-instance annotation).

use serde_json::{Map, Value};

use super::DocumentError;
use super::ctx::{Ctx, show};
use crate::config::GateConfig;
use crate::error::GateError;

/// Parses a gate configuration object given as a JSON value over `base`:
/// every key is optional and a key left out (or null) keeps `base`'s value,
/// unknown keys are refused, and the result must pass
/// [`GateConfig::validate`]. The one parser and validator of the
/// configuration document, shared by the replay document's `config`, the
/// agent's `--gate-config` file (read from JSON or YAML into a value) and
/// the per-instance `kura.tuist.dev/gate-config` annotation (merged over
/// the cluster's configuration). Errors are [`DocumentError::Field`] whose
/// `field` is the key as written (`soakSeconds[1]` inside the list).
pub fn parse_config_over(base: &GateConfig, value: &Value) -> Result<GateConfig, DocumentError> {
    let at = Ctx::default();
    let obj = at.object(value, "(config)")?;
    parse_config_fields(base.clone(), obj, "")
}

/// A configuration document's error in one line, as the agent writes it to
/// `status.rolloutGate.configError` and its `--gate-config` refusals:
/// `key K: reason` (an unknown key lists the known ones), or the
/// document-level reason.
pub fn config_error_line(error: &DocumentError) -> String {
    let text = match error {
        DocumentError::Field { field, reason, .. } if field == "(config)" => reason.clone(),
        DocumentError::Field { field, reason, .. } if reason == "unknown field" => format!(
            "key {field}: unknown key (the keys are {})",
            crate::config::CONFIG_KEYS.join(", ")
        ),
        DocumentError::Field { field, reason, .. } => format!("key {field}: {reason}"),
        other => other.to_string(),
    };
    text.replace(['\n', '\r'], " ")
}

pub(super) fn parse_config(obj: &Map<String, Value>) -> Result<GateConfig, DocumentError> {
    parse_config_fields(GateConfig::default(), obj, "config.")
}

/// A [`GateError`] of [`GateConfig::validate`] as a located field error.
pub(crate) fn config_error(prefix: &str, error: GateError) -> DocumentError {
    let (key, reason) = match error {
        GateError::EmptySoakList => ("soakSeconds", "must list at least one value".to_owned()),
        GateError::ConfigValue { key, reason } => (key, reason),
        other => ("", other.to_string()),
    };
    Ctx::default().fail(&format!("{prefix}{key}"), reason)
}

/// The keys of `obj` over `config`; `prefix` is put before every field
/// name in errors (`config.` inside a replay document).
fn parse_config_fields(
    mut config: GateConfig,
    obj: &Map<String, Value>,
    prefix: &str,
) -> Result<GateConfig, DocumentError> {
    let at = Ctx::default();
    at.only(obj, &crate::config::CONFIG_KEYS, prefix)?;
    match obj.get("soakSeconds") {
        None | Some(Value::Null) => {}
        Some(Value::Array(values)) => {
            if values.is_empty() {
                return Err(at.fail(
                    &format!("{prefix}soakSeconds"),
                    "must list at least one value".into(),
                ));
            }
            config.soak_seconds = values
                .iter()
                .enumerate()
                .map(|(i, v)| at.uint(v, &format!("{prefix}soakSeconds[{i}]")))
                .collect::<Result<_, _>>()?;
        }
        Some(other) => {
            return Err(at.fail(
                &format!("{prefix}soakSeconds"),
                format!("expected an array of seconds, got {}", show(other)),
            ));
        }
    }
    let fields: [(&str, &mut u64); 11] = [
        ("waveDeadlineSeconds", &mut config.wave_deadline_seconds),
        ("maxSampleAgeSeconds", &mut config.max_sample_age_seconds),
        ("futureSkewSeconds", &mut config.future_skew_seconds),
        ("outboxBandPercent", &mut config.outbox_band_percent),
        ("outboxBandMinimum", &mut config.outbox_band_minimum),
        (
            "replicationLagBandPercent",
            &mut config.replication_lag_band_percent,
        ),
        (
            "replicationLagBandMinimum",
            &mut config.replication_lag_band_minimum,
        ),
        ("fdTimeoutBand", &mut config.fd_timeout_band),
        (
            "peerFailureBandPercent",
            &mut config.peer_failure_band_percent,
        ),
        (
            "peerFailureBandMinimum",
            &mut config.peer_failure_band_minimum,
        ),
        (
            "backlogDrainWindowSeconds",
            &mut config.backlog_drain_window_seconds,
        ),
    ];
    for (key, slot) in fields {
        if let Some(value) = at.opt_uint(obj, key, prefix)? {
            *slot = value;
        }
    }
    config
        .validate()
        .map_err(|error| config_error(prefix, error))?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field_error(result: Result<GateConfig, DocumentError>) -> (String, String) {
        match result {
            Err(DocumentError::Field { field, reason, .. }) => (field, reason),
            other => panic!("expected a field error, got {other:?}"),
        }
    }

    #[test]
    fn a_configuration_merges_over_its_base_key_by_key() {
        let cluster = parse_config_over(
            &GateConfig::default(),
            &json!({"fdTimeoutBand": 5, "soakSeconds": [60, 30]}),
        )
        .unwrap();
        assert_eq!(cluster.fd_timeout_band, 5);
        assert_eq!(cluster.soak_seconds, [60, 30]);
        assert_eq!(
            cluster.outbox_band_minimum, 50,
            "a key left out keeps the base"
        );
        let instance = parse_config_over(
            &cluster,
            &json!({"outboxBandMinimum": 80, "fdTimeoutBand": null}),
        )
        .unwrap();
        assert_eq!(instance.outbox_band_minimum, 80);
        assert_eq!(instance.fd_timeout_band, 5, "null keeps the base");
        assert_eq!(instance.soak_seconds, [60, 30]);
        assert_eq!(
            parse_config_over(&cluster, &json!({})).unwrap(),
            cluster,
            "an empty object is the base"
        );
    }

    #[test]
    fn every_key_is_read() {
        let value = json!({
            "soakSeconds": [1, 2, 3], "waveDeadlineSeconds": 4, "maxSampleAgeSeconds": 5,
            "futureSkewSeconds": 6, "outboxBandPercent": 7, "outboxBandMinimum": 8,
            "fdTimeoutBand": 9, "peerFailureBandPercent": 10, "peerFailureBandMinimum": 11,
            "replicationLagBandPercent": 12, "replicationLagBandMinimum": 13,
            "backlogDrainWindowSeconds": 14
        });
        let config = parse_config_over(&GateConfig::default(), &value).unwrap();
        assert_eq!(
            config,
            GateConfig {
                soak_seconds: vec![1, 2, 3],
                wave_deadline_seconds: 4,
                max_sample_age_seconds: 5,
                future_skew_seconds: 6,
                outbox_band_percent: 7,
                outbox_band_minimum: 8,
                replication_lag_band_percent: 12,
                replication_lag_band_minimum: 13,
                fd_timeout_band: 9,
                peer_failure_band_percent: 10,
                peer_failure_band_minimum: 11,
                backlog_drain_window_seconds: 14,
            }
        );
        // The same document through serde reads the same configuration.
        assert_eq!(serde_json::from_value::<GateConfig>(value).unwrap(), config);
    }

    #[test]
    fn invalid_documents_name_the_key_and_the_reason() {
        let base = GateConfig::default();
        for (value, key, reason) in [
            (json!({"bogus": 1}), "bogus", "unknown field"),
            (
                json!({"fdTimeoutBand": "3"}),
                "fdTimeoutBand",
                "expected a non-negative integer, got \"3\"",
            ),
            (
                json!({"fdTimeoutBand": -1}),
                "fdTimeoutBand",
                "expected a non-negative integer, got -1",
            ),
            (
                json!({"fdTimeoutBand": 1.5}),
                "fdTimeoutBand",
                "expected a non-negative integer, got 1.5",
            ),
            (
                json!({"soakSeconds": []}),
                "soakSeconds",
                "must list at least one value",
            ),
            (
                json!({"soakSeconds": 900}),
                "soakSeconds",
                "expected an array of seconds, got 900",
            ),
            (
                json!({"soakSeconds": [900, "x"]}),
                "soakSeconds[1]",
                "expected a non-negative integer, got \"x\"",
            ),
            (
                json!({"outboxBandPercent": 1001}),
                "outboxBandPercent",
                "1001 is above the limit of 1000 (percent of the baseline)",
            ),
            (
                json!({"peerFailureBandPercent": 5000}),
                "peerFailureBandPercent",
                "5000 is above the limit of 1000 (percent of the baseline)",
            ),
            (
                json!({"maxSampleAgeSeconds": 0}),
                "maxSampleAgeSeconds",
                "must be at least 1 (0 would make every sample stale)",
            ),
        ] {
            let (field, why) = field_error(parse_config_over(&base, &value));
            assert_eq!((field.as_str(), why.as_str()), (key, reason), "{value}");
        }
        let (field, why) = field_error(parse_config_over(&base, &json!([1])));
        assert_eq!(field, "(config)");
        assert!(why.starts_with("expected an object"), "{why}");
    }

    #[test]
    fn a_merge_is_validated_as_a_whole() {
        // The cluster allows a wide band; an instance cannot push it over
        // the limit, nor empty the soak list.
        let cluster =
            parse_config_over(&GateConfig::default(), &json!({"outboxBandPercent": 900})).unwrap();
        assert!(parse_config_over(&cluster, &json!({"outboxBandPercent": 1000})).is_ok());
        let (field, _) = field_error(parse_config_over(
            &cluster,
            &json!({"outboxBandPercent": 1200}),
        ));
        assert_eq!(field, "outboxBandPercent");
    }
}
