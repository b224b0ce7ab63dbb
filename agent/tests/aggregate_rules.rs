//! Field rules of the aggregation that the scenario files do not pin down:
//! the pod bound, restore of odd aggregates, duplicate samples, absent
//! `initial_discovery_completed`, an instance expecting no pods, and the
//! retention of a pod that was already gone when the agent restarted.

use jiff::{SignedDuration, Timestamp};
use kura_agent::aggregate::{AggregateConfig, GONE_ERROR, InstanceAggregator, MAX_TRACKED_PODS};
use kura_agent::model::{InstanceInfo, PodIdentity, PodSample, SampleResult};
use kura_schemas::health::MAX_POD_ENTRIES;
use kura_schemas::{NodeReport, parse_report};

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn instance(expected: u32) -> InstanceInfo {
    InstanceInfo {
        namespace: "kura".into(),
        name: "acme".into(),
        expected_pods: expected,
        generation: 2,
    }
}

fn report(fd: u64, discovery: Option<bool>) -> NodeReport {
    let mut r = parse_report(
        br#"{"generation":1,"ready":true,"state":"serving","ring_members":3,
            "writer_lock_owned":true,"memory_pressure_state":0,"fd_timeout_count":0,
            "peer_connection_failure_count":0}"#,
    )
    .unwrap();
    r.fd_timeout_count = fd;
    r.initial_discovery_completed = discovery;
    r
}

fn sample(name: &str, at: Timestamp, result: SampleResult) -> PodSample {
    PodSample {
        replication_lag_entries: None,
        pod: std::sync::Arc::new(PodIdentity {
            name: name.into(),
            uid: format!("uid-{name}").into(),
            restart_count: 0,
            image: None,
            ip: None,
        }),
        received_at: at,
        result,
    }
}

fn ok(name: &str, at: Timestamp, fd: u64) -> PodSample {
    sample(
        name,
        at,
        SampleResult::Report(Box::new(report(fd, Some(true)))),
    )
}

#[test]
fn more_live_pods_than_the_bound_are_all_counted_and_failing_ones_published_first() {
    let now = t("2026-07-21T10:00:00Z");
    let mut samples: Vec<PodSample> = (0..39).map(|i| ok(&format!("p-{i:02}"), now, 1)).collect();
    samples.push(sample("p-39", now, SampleResult::Error("timeout".into())));
    let mut agg = InstanceAggregator::new(AggregateConfig::default());
    let h = agg.fold(&instance(40), &samples, now, "a");
    assert_eq!(h.pods.len(), MAX_POD_ENTRIES);
    assert_eq!(h.sampled_pods, 39);
    assert_eq!(h.retired_counters.fd_timeout_count, 0, "nobody is gone");
    assert_eq!(h.fd_timeout_count, 39);
    // The failing pod first, then by name; listed in name order.
    let names: Vec<&str> = h.pods.iter().map(|p| &*p.name).collect();
    assert_eq!(names[0], "p-00");
    assert_eq!(names[30], "p-30");
    assert_eq!(names[31], "p-39");
    assert_eq!(h.pods[31].error.as_deref(), Some("timeout"));
}

#[test]
fn pods_past_the_tracking_bound_are_retired_gone_ones_first() {
    let t0 = t("2026-07-21T10:00:00Z");
    let t1 = t("2026-07-21T10:01:00Z");
    let n = MAX_TRACKED_PODS;
    let mut agg = InstanceAggregator::new(AggregateConfig::default());
    let first: Vec<PodSample> = (0..n).map(|i| ok(&format!("p-{i:04}"), t0, 2)).collect();
    agg.fold(&instance(3), &first, t0, "a");
    // The last pod is gone, and two new pods appear: 2 over the bound.
    let mut second: Vec<PodSample> = (0..n - 1)
        .map(|i| ok(&format!("p-{i:04}"), t1, 2))
        .collect();
    second.push(ok("q-0", t1, 5));
    second.push(ok("q-1", t1, 5));
    let h = agg.fold(&instance(3), &second, t1, "a");
    assert_eq!(h.pods.len(), MAX_POD_ENTRIES);
    assert_eq!(
        h.retired_counters.fd_timeout_count, 4,
        "the gone pod, then p-0000"
    );
    assert_eq!(h.fd_timeout_count, n as u64 * 2 + 2 * 5);
    assert_eq!(&*h.pods[0].name, "p-0001");
    // The price of the bound: p-0000 was live when it was retired, so its
    // next answer is counted afresh (never less, as always).
    let h2 = agg.fold(&instance(3), &second, t1, "a");
    assert_eq!(h2.fd_timeout_count, h.fd_timeout_count + 2);
}

#[test]
fn restore_folds_duplicate_and_excess_entries_without_losing_counts() {
    let now = t("2026-07-21T10:00:00Z");
    let samples: Vec<PodSample> = (0..3).map(|i| ok(&format!("p-{i}"), now, 4)).collect();
    let mut agg = InstanceAggregator::new(AggregateConfig::default());
    let mut h = agg.fold(&instance(3), &samples, now, "a");
    let dup = h.pods[1].clone();
    h.pods.push(dup);
    let restored = InstanceAggregator::restore(&h, AggregateConfig::default()).fold(
        &instance(3),
        &samples,
        now,
        "a",
    );
    assert_eq!(restored.pods.len(), 3);
    assert_eq!(
        restored.fd_timeout_count, 16,
        "12 tracked + 4 retired duplicate"
    );
}

#[test]
fn a_second_sample_of_the_same_pod_is_ignored() {
    let now = t("2026-07-21T10:00:00Z");
    let mut agg = InstanceAggregator::new(AggregateConfig::default());
    let h = agg.fold(
        &instance(2),
        &[ok("p-0", now, 1), ok("p-0", now, 0)],
        now,
        "a",
    );
    assert_eq!(h.sampled_pods, 1);
    assert!(!h.ready, "one pod answered twice is still one pod of two");
    assert_eq!(h.counter_resets, 0);
    assert_eq!(h.fd_timeout_count, 1);
}

#[test]
fn absent_initial_discovery_is_not_true() {
    let now = t("2026-07-21T10:00:00Z");
    let mut agg = InstanceAggregator::new(AggregateConfig::default());
    let s = [
        ok("p-0", now, 0),
        sample("p-1", now, SampleResult::Report(Box::new(report(0, None)))),
    ];
    let h = agg.fold(&instance(2), &s, now, "a");
    assert!(h.ready);
    assert!(!h.initial_discovery_completed);
}

#[test]
fn no_pod_sampled_is_never_healthy_even_when_none_is_expected() {
    let now = t("2026-07-21T10:00:00Z");
    let mut agg = InstanceAggregator::new(AggregateConfig::default());
    let h = agg.fold(&instance(0), &[], now, "a");
    assert_eq!(h.sampled_pods, 0);
    assert!(!h.ready && !h.serving && !h.generation_consistent && !h.ring_consistent);
    assert_eq!(h.sampled_at, None);
    assert_eq!(h.ring_members, 0);
    assert_eq!(h.peer_connection_failures, None);
}

#[test]
fn a_pod_gone_before_an_agent_restart_is_retired_by_its_last_sample() {
    let t0 = t("2026-07-21T10:00:00Z");
    let config = AggregateConfig::default();
    let mut agg = InstanceAggregator::new(config);
    agg.fold(&instance(1), &[ok("p-0", t0, 1), ok("p-1", t0, 6)], t0, "a");
    let t1 = t0 + SignedDuration::from_mins(30);
    let h = agg.fold(&instance(1), &[ok("p-0", t1, 1)], t1, "a");
    let gone = h.pods.iter().find(|p| &*p.name == "p-1").unwrap();
    assert_eq!(gone.error.as_deref(), Some(GONE_ERROR));
    // Restarted agent: p-1 was last seen no later than its last sample (t0).
    let mut restored = InstanceAggregator::restore(&h, config);
    let t2 = t0 + SignedDuration::from_mins(59);
    let h2 = restored.fold(&instance(1), &[ok("p-0", t2, 1)], t2, "a");
    assert!(h2.pods.iter().any(|p| &*p.name == "p-1"));
    let t3 = t0 + SignedDuration::from_mins(61);
    let h3 = restored.fold(&instance(1), &[ok("p-0", t3, 1)], t3, "a");
    assert!(!h3.pods.iter().any(|p| &*p.name == "p-1"));
    assert_eq!(h3.retired_counters.fd_timeout_count, 6);
    assert_eq!(h3.retired_counters.peer_connection_failures, Some(0));
    assert_eq!(h3.fd_timeout_count, 7);
}

#[test]
fn a_failed_sample_keeps_the_last_valid_detail_and_a_short_error() {
    let t0 = t("2026-07-21T10:00:00Z");
    let t1 = t("2026-07-21T10:00:10Z");
    let mut agg = InstanceAggregator::new(AggregateConfig::default());
    agg.fold(&instance(1), &[ok("p-0", t0, 3)], t0, "a");
    let long = "é".repeat(200);
    let h = agg.fold(
        &instance(1),
        &[sample("p-0", t1, SampleResult::Error(long))],
        t1,
        "a",
    );
    let p = &h.pods[0];
    assert_eq!(p.sampled_at, Some(t0));
    assert_eq!(p.ready, Some(true));
    assert_eq!(p.fd_timeout_count, Some(3));
    let e = p.error.as_deref().unwrap();
    assert!(e.len() <= 160 && e.len() >= 158, "{}", e.len());
    assert_eq!(h.fd_timeout_count, 3);
    assert!(!h.ready);
}

#[test]
fn steady_counters_of_more_pods_than_the_bound_stay_steady_across_a_restore() {
    let start = t("2026-07-21T10:00:00Z");
    let at = |minute: i64| start + SignedDuration::from_mins(minute);
    // p-35 restarted once before the agent did: its clamped value (7 + 1)
    // is more than its raw value (1) and lives only in the agent's memory.
    let sweep_of = |now: Timestamp, p35: u64| -> Vec<PodSample> {
        (0..40)
            .map(|i| ok(&format!("p-{i:02}"), now, if i == 35 { p35 } else { 1 }))
            .collect()
    };
    let mut agg = InstanceAggregator::new(AggregateConfig::default());
    agg.fold(&instance(40), &sweep_of(at(0), 7), at(0), "a");
    let mut last = agg.fold(&instance(40), &sweep_of(at(1), 1), at(1), "a");
    assert_eq!(last.counter_resets, 1);
    for minute in 2..5 {
        let h = agg.fold(&instance(40), &sweep_of(at(minute), 1), at(minute), "a");
        assert_eq!(h.pods.len(), MAX_POD_ENTRIES);
        assert_eq!(h.fd_timeout_count, 39 + 8, "minute {minute}: nothing moved");
        last = h;
    }
    // An agent restarted from the published aggregate: the eight pods not
    // in `pods` are carried, then drawn as they answer again.
    let restored = serde_json::from_value(serde_json::to_value(&last).unwrap()).unwrap();
    let mut agg = InstanceAggregator::restore(&restored, AggregateConfig::default());
    for minute in 10..13 {
        let h = agg.fold(&instance(40), &sweep_of(at(minute), 1), at(minute), "a");
        assert_eq!(
            h.fd_timeout_count,
            39 + 8,
            "minute {minute} after the restore"
        );
        assert_eq!(
            h.retired_counters.fd_timeout_count, 7,
            "what p-35 had before its restart stays carried"
        );
    }
    // The limit of the carry: p-35's growth in the first sweep after a
    // restore is drawn from the carry (what its earlier reset had added), so
    // it shows up low, never twice and never as a drop.
    let mut early = InstanceAggregator::restore(&restored, AggregateConfig::default());
    let h = early.fold(&instance(40), &sweep_of(at(10), 2), at(10), "a");
    assert_eq!(h.fd_timeout_count, 39 + 8, "the growth of 1 is absorbed");
    // A second restore sees that carry as retired and still counts the same.
    let h = agg.fold(&instance(40), &sweep_of(at(13), 1), at(13), "a");
    let mut agg = InstanceAggregator::restore(&h, AggregateConfig::default());
    let h = agg.fold(&instance(40), &sweep_of(at(14), 2), at(14), "a");
    assert_eq!(h.fd_timeout_count, 39 + 8 + 1, "p-35 moved by one");
}
