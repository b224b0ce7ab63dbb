//! The replay document's parts parsed on their own (what the C ABI and the
//! language bindings feed the gate): the same strict rules and locations.

use kura_gate::{
    Baseline, DocumentError, Gate, GateConfig, GateState, parse_baseline_json, parse_config_json,
    parse_tick_json,
};

const HEALTH: &str = r#"{"sampledAt": "2026-07-21T09:59:40Z", "expectedPods": 3,
  "sampledPods": 3, "ready": true, "serving": true, "ringConsistent": true,
  "bootstrapInflightPeers": 0, "backfillDegraded": false,
  "backfillBudgetExhaustedPeers": 0, "outboxMessages": 100, "fdTimeoutCount": 7,
  "peerConnectionFailures": 3, "memoryPressureState": 0}"#;

fn tick(baseline: &str) -> String {
    format!(
        r#"{{"now": "2026-07-21T10:00:00Z", "wave": 0, "waveStartedAt": "2026-07-21T10:00:00Z",
  "attempt": 0, "servers": [{{"id": "s1", "wave": 0, "converged": true,
  "deployment": "succeeded", "status": "active", "baseline": {baseline},
  "health": {HEALTH}}}]}}"#
    )
}

#[test]
fn a_config_document_is_the_replay_config_object() {
    assert_eq!(parse_config_json("{}").unwrap(), GateConfig::default());
    assert_eq!(parse_config_json("null").unwrap(), GateConfig::default());
    let config = parse_config_json(r#"{"soakSeconds": [60], "fdTimeoutBand": 2}"#).unwrap();
    assert_eq!(config.soak_seconds, vec![60]);
    assert_eq!(config.fd_timeout_band, 2);
    let err = parse_config_json(r#"{"soakSecond": [60]}"#).unwrap_err();
    assert_eq!(err.to_string(), "field config.soakSecond: unknown field");
    let err = parse_config_json(r#"{"soakSeconds": []}"#).unwrap_err();
    assert_eq!(
        err.to_string(),
        "field config.soakSeconds: must list at least one value"
    );
}

#[test]
fn json_errors_carry_line_and_column() {
    let err = parse_config_json("{\n  \"soakSeconds\": [60,]\n}").unwrap_err();
    match err {
        DocumentError::Json { line, column, .. } => assert_eq!((line, column), (2, 22)),
        other => panic!("expected a JSON error, got {other:?}"),
    }
}

#[test]
fn a_tick_document_is_located_by_server_and_field() {
    let config = GateConfig::default();
    let text = tick(&format!(
        r#"{{"capturedAt": "2026-07-21T09:59:50Z", "health": {HEALTH}}}"#
    ));
    let parsed = parse_tick_json(&text, &config).unwrap();
    assert_eq!(parsed.servers.len(), 1);
    let bad = text.replace(r#""ready": true"#, r#""ready": "yes""#);
    let err = parse_tick_json(&bad, &config).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"server "s1", field baseline.health.ready: expected a boolean, got "yes""#
    );
}

#[test]
fn a_captured_baseline_judges_like_the_aggregate_it_came_from() {
    let config = GateConfig::default();
    let captured = parse_baseline_json(
        &format!(r#"{{"capturedAt": "2026-07-21T09:59:50Z", "health": {HEALTH}}}"#),
        &config,
    )
    .unwrap();
    assert!(captured.soak_eligible);
    assert_eq!(captured.counters.outbox_messages, Some(100));
    let stored = serde_json::to_string(&captured).unwrap();
    assert_eq!(parse_baseline_json(&stored, &config).unwrap(), captured);

    let from_health = tick(&format!(
        r#"{{"capturedAt": "2026-07-21T09:59:50Z", "health": {HEALTH}}}"#
    ));
    let from_stored = tick(&stored);
    let mut a = Gate::new(config.clone()).unwrap();
    let mut b = Gate::new(config.clone()).unwrap();
    let a = a
        .tick(&parse_tick_json(&from_health, &config).unwrap())
        .unwrap();
    let b = b
        .tick(&parse_tick_json(&from_stored, &config).unwrap())
        .unwrap();
    assert_eq!(a, b);

    let both = stored.replacen('{', &format!(r#"{{"health": {HEALTH}, "#), 1);
    let err = parse_baseline_json(&both, &config).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("field health: a baseline has either"),
        "{err}"
    );
    let no_flag: Baseline = captured.clone();
    let text = serde_json::to_string(&no_flag)
        .unwrap()
        .replace(r#","soakEligible":true"#, "");
    let err = parse_baseline_json(&text, &config).unwrap_err();
    assert_eq!(err.to_string(), "field soakEligible: missing");
}

#[test]
fn a_stored_state_refuses_unknown_fields() {
    let state: Result<GateState, _> = serde_json::from_str(
        r#"{"attempt": 0, "wave": 0, "effectiveBaselines": {}, "latchd": null}"#,
    );
    assert!(
        state
            .unwrap_err()
            .to_string()
            .contains("unknown field `latchd`")
    );
}
