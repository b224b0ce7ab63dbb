//! Properties of the fence and replication-lag folds over random sweeps:
//! what is missing is never counted as healthy (a pod without `valid` is
//! no writer, a pod without a lag adds nothing and an instance where no pod
//! measured one has none), `Fencing` always wins the phase fold, and the
//! gate never calls a fenced instance without a valid writer healthy.

use jiff::Timestamp;
use kura_agent::aggregate::{AggregateConfig, InstanceAggregator};
use kura_agent::model::{InstanceInfo, PodIdentity, PodSample, SampleResult};
use kura_gate::GateConfig;
use kura_schemas::{AgentVerdict, RolloutHealth, parse_report};
use proptest::prelude::*;
use serde_json::json;

/// One pod's answer in a sweep.
#[derive(Debug, Clone)]
struct Pod {
    failed: bool,
    enabled: Option<bool>,
    valid: Option<bool>,
    epoch: u64,
    phase: Option<&'static str>,
    lag: Option<u64>,
}

fn pod() -> impl Strategy<Value = Pod> {
    (
        prop::bool::weighted(0.15),
        prop::option::of(any::<bool>()),
        prop::option::of(any::<bool>()),
        0u64..9,
        prop::option::of(prop::sample::select(vec![
            "Serving",
            "Preparing",
            "Quiescing",
            "Revoking",
            "Fencing",
            "Zeta",
        ])),
        prop::option::of(0u64..1000),
    )
        .prop_map(|(failed, enabled, valid, epoch, phase, lag)| Pod {
            failed,
            enabled,
            valid,
            epoch,
            phase,
            lag,
        })
}

fn report(p: &Pod) -> kura_schemas::NodeReport {
    let mut authority = serde_json::Map::new();
    authority.insert("capability".into(), json!("positive-fence-v1"));
    if let Some(e) = p.enabled {
        authority.insert("enabled".into(), json!(e));
    }
    if let Some(v) = p.valid {
        authority.insert("valid".into(), json!(v));
    }
    authority.insert("epoch".into(), json!(p.epoch));
    authority.insert(
        "observed".into(),
        p.phase
            .map_or(json!(null), |ph| json!({"phase": ph, "epoch": 1})),
    );
    let body = json!({
        "generation": 2, "ready": true, "state": "serving", "ring_members": 3,
        "ring_fingerprint": "9f2c01ab77e4d310", "initial_discovery_completed": true,
        "writer_lock_owned": true, "memory_pressure_state": 0, "fd_timeout_count": 0,
        "peer_connection_failure_count": 0, "backfill_initial_cycle": "complete",
        "backfill_backfilling_peers": 0, "backfill_budget_exhausted_real_peers": 0,
        "backfill_budget_exhausted_capability_peers": 0,
        "serving_authority": authority,
    });
    parse_report(body.to_string().as_bytes()).expect("a valid report")
}

fn sweep(pods: &[Pod], at: Timestamp) -> RolloutHealth {
    let instance = InstanceInfo {
        namespace: "kura".into(),
        name: "acme".into(),
        expected_pods: u32::try_from(pods.len()).unwrap(),
        generation: 1,
    };
    let samples: Vec<PodSample> = pods
        .iter()
        .enumerate()
        .map(|(i, p)| PodSample {
            pod: std::sync::Arc::new(PodIdentity {
                name: format!("acme-{i}").into(),
                uid: format!("u-{i}").into(),
                ..PodIdentity::default()
            }),
            received_at: at,
            result: if p.failed {
                SampleResult::Error("/status/cluster: timeout".into())
            } else {
                SampleResult::Report(Box::new(report(p)))
            },
            replication_lag_entries: if p.failed { None } else { p.lag },
        })
        .collect();
    InstanceAggregator::new(AggregateConfig::default()).fold(&instance, &samples, at, "test")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn missing_fence_or_lag_data_never_counts_as_healthy(pods in prop::collection::vec(pod(), 1..6)) {
        let at = Timestamp::from_second(1_784_628_000).unwrap();
        let h = sweep(&pods, at);
        let sampled: Vec<&Pod> = pods.iter().filter(|p| !p.failed).collect();
        let enabled: Vec<&&Pod> = sampled.iter().filter(|p| p.enabled == Some(true)).collect();
        match &h.serving_authority {
            None => prop_assert!(enabled.is_empty()),
            Some(a) => {
                prop_assert_eq!(a.enabled_pods as usize, enabled.len());
                let writers = enabled.iter().filter(|p| p.valid == Some(true)).count();
                prop_assert_eq!(a.valid_writers as usize, writers);
                let top = enabled.iter().filter(|p| p.valid == Some(true)).map(|p| p.epoch).max().unwrap_or(0);
                prop_assert_eq!(a.epoch, top);
                if enabled.iter().any(|p| p.phase == Some("Fencing")) {
                    prop_assert_eq!(a.phase.as_str(), "Fencing");
                }
            }
        }
        let lags: Vec<u64> = sampled.iter().filter_map(|p| p.lag).collect();
        prop_assert_eq!(h.replication_lag_entries, (!lags.is_empty()).then(|| lags.iter().sum()));

        // The gate: a fenced instance without a valid writer is never
        // healthy, and one in Fencing is a hard stop.
        let gate = kura_gate::judge_instance("kura/acme", None, "img:1", None, Some(&h), at, &GateConfig::default());
        if let Some(a) = &h.serving_authority {
            if a.is_fencing() {
                prop_assert_eq!(gate.verdict, AgentVerdict::HardStop);
            } else if a.valid_writers == 0 {
                prop_assert_ne!(gate.verdict, AgentVerdict::Healthy);
            }
        }
    }
}
