//! The chart's `values.schema.json` against its `values.yaml` and the
//! agent: every value of the chart is described (and nothing the chart
//! does not have), the schema's `gate` keys are exactly the gate's
//! configuration keys with the gate's own limits, and the default `gate`
//! renders into a document the agent accepts. (`helm lint` validates the
//! values against the schema; scripts/chart-check.sh runs it with refused
//! values too.)

use std::path::{Path, PathBuf};

use serde_json::Value;

fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/kura-health-agent")
}

fn values() -> Value {
    let text = std::fs::read_to_string(chart().join("values.yaml")).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

fn schema() -> Value {
    let text = std::fs::read_to_string(chart().join("values.schema.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Every key of `value` under a closed object of `schema` is declared, and
/// every declared key of a closed object is in `value` (so the schema
/// describes the values the chart has, no more, no less); returns the
/// paths found wrong.
fn compare(value: &Value, schema: &Value, path: &str, wrong: &mut Vec<String>) {
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
    let (Value::Object(value), true) = (value, closed) else {
        return;
    };
    let declared = schema["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for (key, v) in value {
        match declared.get(key) {
            Some(s) => compare(v, s, &format!("{path}{key}."), wrong),
            None => wrong.push(format!("{path}{key}: in values.yaml, not in the schema")),
        }
    }
    // `gate` is empty by default: its keys are optional settings.
    if path != "gate." {
        for key in declared.keys() {
            // `global` is Helm's (the parent chart's globals) and `enabled`
            // the usual subchart switch (a parent's `condition:`): allowed
            // so the chart works as a subchart, never set in values.yaml.
            if path.is_empty() && (key == "global" || key == "enabled") {
                continue;
            }
            if !value.contains_key(key) {
                wrong.push(format!("{path}{key}: in the schema, not in values.yaml"));
            }
        }
    }
}

#[test]
fn the_schema_describes_every_value_of_the_chart() {
    let schema = schema();
    assert_eq!(
        schema["additionalProperties"], false,
        "unknown values are refused"
    );
    let mut wrong = Vec::new();
    compare(&values(), &schema, "", &mut wrong);
    assert!(wrong.is_empty(), "{wrong:#?}");
    // Every property says what it is.
    fn typed(schema: &Value, path: &str, untyped: &mut Vec<String>) {
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (key, s) in props {
                if s.get("type").is_none() {
                    untyped.push(format!("{path}{key}"));
                }
                typed(s, &format!("{path}{key}."), untyped);
            }
        }
    }
    let mut untyped = Vec::new();
    typed(&schema, "", &mut untyped);
    assert!(untyped.is_empty(), "{untyped:?}");
}

#[test]
fn the_schemas_gate_is_the_gates_configuration() {
    let schema = schema();
    let gate = &schema["properties"]["gate"];
    assert_eq!(gate["additionalProperties"], false);
    let mut keys: Vec<&str> = gate["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .filter(|k| *k != "shadow")
        .collect();
    keys.sort_unstable();
    let mut want = kura_gate::config::CONFIG_KEYS.to_vec();
    want.sort_unstable();
    assert_eq!(keys, want, "values.schema.json's gate keys");
    // `gate.shadow` (--shadow-gate-config) takes exactly the same keys
    // with the same limits, or null.
    let shadow = &gate["properties"]["shadow"];
    assert_eq!(shadow["additionalProperties"], false);
    assert_eq!(shadow["type"], serde_json::json!(["object", "null"]));
    let mut live = gate["properties"].as_object().unwrap().clone();
    live.remove("shadow");
    assert_eq!(
        shadow["properties"].as_object().unwrap(),
        &live,
        "gate.shadow's keys are gate's"
    );
    let p = &gate["properties"];
    assert_eq!(p["maxSampleAgeSeconds"]["minimum"], 1);
    for key in [
        "outboxBandPercent",
        "replicationLagBandPercent",
        "peerFailureBandPercent",
    ] {
        assert_eq!(
            p[key]["maximum"],
            kura_gate::config::MAX_BAND_PERCENT,
            "{key}"
        );
    }
    assert_eq!(p["soakSeconds"]["minItems"], 1);
    // What the chart renders by default (`gate: {}`) is the agent's
    // defaults; every value the schema allows at its limits is accepted by
    // the agent too.
    let default = values()["gate"].clone();
    let parsed = kura_gate::parse_config_over(&kura_gate::GateConfig::default(), &default);
    assert_eq!(parsed, Ok(kura_gate::GateConfig::default()));
    let at_limits = serde_json::json!({
        "soakSeconds": [0], "waveDeadlineSeconds": 0, "maxSampleAgeSeconds": 1,
        "futureSkewSeconds": 0, "outboxBandPercent": 1000, "outboxBandMinimum": 0,
        "replicationLagBandPercent": 1000, "replicationLagBandMinimum": 0,
        "fdTimeoutBand": 0, "peerFailureBandPercent": 1000, "peerFailureBandMinimum": 0,
        "backlogDrainWindowSeconds": 0
    });
    assert!(kura_gate::parse_config_over(&kura_gate::GateConfig::default(), &at_limits).is_ok());
}

/// `publication.target` (the agent's `KURA_AGENT_PUBLICATION_TARGET`):
/// auto, instance or companion, auto by default; the project's KuraInstance
/// CRD is not installed by default and is not in `crds/` (Helm would create
/// it beside Kura's own), only the companion's CRD is.
#[test]
fn the_publication_target_and_the_crds_the_chart_ships() {
    let schema = schema();
    let values = values();
    assert_eq!(values["publication"]["target"], "auto");
    assert_eq!(
        schema["properties"]["publication"]["properties"]["target"]["enum"],
        serde_json::json!(["auto", "instance", "companion"])
    );
    assert_eq!(values["kuraInstanceCRD"]["install"], false);
    assert_eq!(
        schema["properties"]["kuraInstanceCRD"]["properties"]["install"]["type"],
        "boolean"
    );
    let mut crds: Vec<String> = std::fs::read_dir(chart().join("crds"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    crds.sort();
    assert_eq!(crds, ["kurainstancehealths.health.kura.tuist.dev.yaml"]);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    assert_eq!(
        root.join(kura_schemas::generated::CRD_PATH),
        chart().join("files/kurainstances.kura.tuist.dev.yaml"),
        "the KuraInstance CRD the chart renders with kuraInstanceCRD.install is the generated one"
    );
    assert_eq!(
        root.join(kura_schemas::generated::COMPANION_CRD_PATH),
        chart().join("crds/kurainstancehealths.health.kura.tuist.dev.yaml")
    );
    // Both workloads share the pod template that passes the target.
    let helpers = std::fs::read_to_string(chart().join("templates/_helpers.tpl")).unwrap();
    assert!(helpers.contains(
        "- name: KURA_AGENT_PUBLICATION_TARGET\n          value: {{ .Values.publication.target | quote }}"
    ));
}
