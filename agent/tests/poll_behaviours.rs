//! The poller against real simulated pods on 127.x.y.z: every way a pod can
//! answer or fail, each mapped to a short stable error and a fixed reason.

use kura_agent::model::SampleResult;
use kura_agent::poll::{PollConfig, PollError, Poller};
use kura_sim::{Addressing, Behaviour, SimPodHandle, SimPodSpec, Simulator};
use std::time::{Duration, Instant};

mod support {
    pub mod sim;
}
use support::sim::{PodIdentityOf, PollTargets};

fn config(timeout_ms: u64) -> PollConfig {
    PollConfig {
        timeout: Duration::from_millis(timeout_ms),
        retry_delay: Duration::from_millis(20),
        ..PollConfig::default()
    }
}

async fn one(behaviour: Behaviour) -> (Simulator, SimPodHandle) {
    let spec = SimPodSpec {
        behaviour,
        ..SimPodSpec::new("p")
    };
    let sim = Simulator::start(vec![spec], &Addressing::default())
        .await
        .unwrap();
    let pod = sim.pods()[0].clone();
    (sim, pod)
}

async fn poll(poller: &Poller, pod: &SimPodHandle) -> Result<kura_schemas::NodeReport, PollError> {
    poller.poll_result(&pod.identity(), pod.addr()).await
}

#[tokio::test]
async fn healthy_pod_gives_its_report_over_a_distinct_loopback_address() {
    let sim = Simulator::healthy("ok", 3).await.unwrap();
    let addrs: Vec<_> = sim.pods().iter().map(SimPodHandle::addr).collect();
    assert_ne!(addrs[0].ip(), addrs[1].ip(), "distinct 127.x.y.z addresses");
    assert_eq!(addrs[0].port(), addrs[1].port(), "one shared port");
    let poller = Poller::new(config(1000));
    let samples = poller.poll_pods(&sim.targets()).await;
    assert_eq!(samples.len(), 3);
    for (s, pod) in samples.iter().zip(sim.pods()) {
        assert_eq!(&*s.pod.name, pod.name());
        match &s.result {
            SampleResult::Report(r) => assert_eq!(**r, pod.node().report()),
            SampleResult::Error(e) => panic!("{}: {e}", pod.name()),
        }
    }
}

#[tokio::test]
async fn slow_pod_within_the_timeout_answers_beyond_it_times_out() {
    let (_sim, pod) = one(Behaviour::slow(Duration::from_millis(100))).await;
    let poller = Poller::new(config(1000));
    assert!(poll(&poller, &pod).await.is_ok());

    pod.set(Behaviour::slow(Duration::from_secs(5)))
        .await
        .unwrap();
    let poller = Poller::new(config(300));
    let t = Instant::now();
    let err = poll(&poller, &pod).await.unwrap_err();
    assert_eq!(
        (err.to_string().as_str(), err.reason()),
        ("timeout", "timeout")
    );
    // Not retried: a pod that accepted and did not answer costs one timeout.
    assert!(
        t.elapsed() < Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(pod.stats().requests(), 2);
}

#[tokio::test]
async fn hung_pod_is_bounded_by_the_timeout_and_does_not_delay_a_healthy_one() {
    let specs = vec![
        SimPodSpec {
            behaviour: Behaviour::Hang,
            ..SimPodSpec::new("hung")
        },
        SimPodSpec::new("healthy"),
    ];
    let sim = Simulator::start(specs, &Addressing::default())
        .await
        .unwrap();
    let poller = Poller::new(config(500));
    let start = jiff::Timestamp::now();
    let t = Instant::now();
    let samples = poller.poll_pods(&sim.targets()).await;
    let took = t.elapsed();
    assert_eq!(samples[0].result, SampleResult::Error("timeout".into()));
    assert!(matches!(samples[1].result, SampleResult::Report(_)));
    let healthy_after = samples[1].received_at.duration_since(start);
    assert!(
        healthy_after < jiff::SignedDuration::from_millis(250),
        "healthy sample took {healthy_after:?}"
    );
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_millis(1200),
        "{took:?}"
    );
}

#[tokio::test]
async fn refused_connection_is_retried_then_reported() {
    let (_sim, pod) = one(Behaviour::Normal).await;
    pod.set(Behaviour::Refused).await.unwrap();
    let poller = Poller::new(PollConfig {
        retries: 2,
        ..config(1000)
    });
    let err = poll(&poller, &pod).await.unwrap_err();
    assert_eq!(err, PollError::Refused);
    assert_eq!(
        (err.to_string().as_str(), err.reason()),
        ("connection refused", "refused")
    );

    // A pod that comes back during the retry delay is read on the retry.
    let poller = Poller::new(PollConfig {
        retries: 1,
        retry_delay: Duration::from_millis(300),
        ..config(1000)
    });
    let back = pod.clone();
    let revive = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        back.set(Behaviour::Normal).await.unwrap();
    });
    assert!(poll(&poller, &pod).await.is_ok());
    revive.await.unwrap();
}

#[tokio::test]
async fn http_500_is_an_error_and_not_retried() {
    let (_sim, pod) = one(Behaviour::error_500()).await;
    let poller = Poller::new(PollConfig {
        retries: 3,
        ..config(1000)
    });
    let err = poll(&poller, &pod).await.unwrap_err();
    assert_eq!(
        (err.to_string().as_str(), err.reason()),
        ("http 500", "http_status")
    );
    assert_eq!(pod.stats().requests(), 1);
}

#[tokio::test]
async fn oversized_body_is_refused_and_reading_stops_early() {
    const SIZE: u64 = 100 * 1024 * 1024;
    let (_sim, pod) = one(Behaviour::Oversized { bytes: SIZE }).await;
    let poller = Poller::new(config(2000));
    let err = poll(&poller, &pod).await.unwrap_err();
    assert_eq!(err, PollError::TooLarge { limit: 64 * 1024 });
    assert_eq!(err.reason(), "too_large");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sent = pod.body_bytes_sent();
    println!("simulator handed {sent} of {SIZE} bytes to the connection");
    assert!(sent < SIZE / 8, "the simulator got rid of {sent} bytes");
}

#[tokio::test]
async fn malformed_json_is_an_invalid_report() {
    let (_sim, pod) = one(Behaviour::Malformed).await;
    let err = poll(&Poller::new(config(1000)), &pod).await.unwrap_err();
    assert_eq!(err.reason(), "invalid_report");
    assert!(
        err.to_string().starts_with("body is not valid JSON"),
        "{err}"
    );
}

#[tokio::test]
async fn wrong_type_error_names_the_field() {
    let (_sim, pod) = one(Behaviour::WrongType {
        field: "fd_timeout_count".into(),
    })
    .await;
    let err = poll(&Poller::new(config(1000)), &pod).await.unwrap_err();
    assert_eq!(err.reason(), "invalid_report");
    assert_eq!(
        err.to_string(),
        "field `fd_timeout_count` must be a non-negative integer"
    );
}

#[tokio::test]
async fn redirect_is_not_followed() {
    let sim = Simulator::healthy("r", 2).await.unwrap();
    let (redirecting, target) = (&sim.pods()[0], &sim.pods()[1]);
    redirecting
        .set(Behaviour::Redirect {
            location: target.url(),
        })
        .await
        .unwrap();
    let err = poll(&Poller::new(config(1000)), redirecting)
        .await
        .unwrap_err();
    assert_eq!(
        (err.to_string().as_str(), err.reason()),
        ("http 302", "http_status")
    );
    assert_eq!(
        target.stats().requests(),
        0,
        "the redirect target was never asked"
    );
}

#[tokio::test]
async fn report_naming_another_pod_is_an_identity_mismatch() {
    let (_sim, pod) = one(Behaviour::Normal).await;
    let poller = Poller::new(config(1000));
    assert!(poll(&poller, &pod).await.is_ok());
    // A newest node without fenced serving writes an empty pod_uid: it
    // names nothing, so whatever the simulated UID, it is no mismatch.
    pod.update(|n| n.pod_uid = Some("uid-of-another-pod".into()));
    assert!(poll(&poller, &pod).await.is_ok());
    // With fenced serving the identity is written, and checked.
    pod.update(|n| n.fenced_serving = true);
    let sample = poller
        .poll(&std::sync::Arc::new(pod.identity()), pod.addr())
        .await;
    assert_eq!(
        sample.result,
        SampleResult::Error("pod identity mismatch".into())
    );
    assert_eq!(
        poll(&poller, &pod).await.unwrap_err().reason(),
        "identity_mismatch"
    );
    // A report without serving_authority carries no identity to check.
    pod.update(|n| n.serving_authority = false);
    assert!(poll(&poller, &pod).await.is_ok());
}

#[tokio::test]
async fn an_empty_identity_from_a_newest_build_is_sampled() {
    // Exactly what Kura's newest builds without fenced serving answer.
    let (_sim, pod) = one(Behaviour::Normal).await;
    pod.update(|n| {
        n.fenced_serving = false;
        n.pod_uid = Some(String::new());
    });
    let poller = Poller::new(config(1000));
    let report = poll(&poller, &pod).await.unwrap();
    assert_eq!(report.pod_uid(), None);
    assert!(report.incarnation().is_some());
}

#[tokio::test]
async fn restart_over_a_kept_alive_connection_reads_the_new_incarnation() {
    let (_sim, pod) = one(Behaviour::Normal).await;
    pod.update(|n| n.fd_timeout_count = 9);
    let poller = Poller::new(config(1000));
    let before = poll(&poller, &pod).await.unwrap();
    pod.restart();
    let after = poll(&poller, &pod).await.unwrap();
    assert_eq!((before.fd_timeout_count, after.fd_timeout_count), (9, 0));
    assert_ne!(before.incarnation(), after.incarnation());
    assert_eq!(pod.identity().restart_count, 1);
}

/// The sample of one sweep of one pod.
async fn sweep_one(poller: &Poller, pod: &SimPodHandle) -> kura_agent::model::PodSample {
    poller
        .poll_pods(&[(std::sync::Arc::new(pod.identity()), pod.addr())])
        .await
        .remove(0)
}

#[tokio::test]
async fn a_pull_sync_pod_is_asked_for_its_lag_on_the_same_connection() {
    let (_sim, pod) = one(Behaviour::Normal).await;
    pod.update(|n| {
        n.replication_lag_entries = Some(42);
        // A gateway: a region link beside the replica link.
        n.gateway = true;
    });
    assert!(pod.node().pulls(), "the default node replicates by pull");
    let poller = Poller::new(config(1000));
    let s = sweep_one(&poller, &pod).await;
    assert!(
        matches!(s.result, SampleResult::Report(_)),
        "{:?}",
        s.result
    );
    // The replica link's lag only: the region link's is not summed.
    assert_eq!(s.replication_lag_entries, Some(42));
    assert_eq!(pod.stats().requests(), 2, "report, then cluster status");
    assert_eq!(pod.stats().connections(), 1, "one kept connection for both");
    // Next sweep: the lag moved, still one connection.
    pod.update(|n| n.replication_lag_entries = Some(7));
    assert_eq!(
        sweep_one(&poller, &pod).await.replication_lag_entries,
        Some(7)
    );
    assert_eq!(pod.stats().connections(), 1);
}

#[tokio::test]
async fn a_push_pod_is_never_asked_for_its_cluster_status() {
    let (_sim, pod) = one(Behaviour::Normal).await;
    pod.update(|n| n.report_generation = kura_sim::ReportGeneration::G3);
    let poller = Poller::new(config(1000));
    let s = sweep_one(&poller, &pod).await;
    match &s.result {
        SampleResult::Report(r) => assert_eq!(r.outbox_messages, Some(0)),
        SampleResult::Error(e) => panic!("{e}"),
    }
    assert_eq!(s.replication_lag_entries, None);
    assert_eq!(pod.stats().requests(), 1, "/status/rollout only");
}

#[tokio::test]
async fn a_missing_route_is_absent_lag_and_any_other_failure_fails_the_sample() {
    let (_sim, pod) = one(Behaviour::Normal).await;
    pod.update(|n| n.replication_lag_entries = None);
    let poller = Poller::new(config(1000));
    let s = sweep_one(&poller, &pod).await;
    assert!(
        matches!(s.result, SampleResult::Report(_)),
        "404 keeps the report"
    );
    assert_eq!(s.replication_lag_entries, None, "not measured, never 0");

    pod.update(|n| {
        n.replication_lag_entries = Some(3);
        n.cluster_status = 503;
    });
    let s = sweep_one(&poller, &pod).await;
    match &s.result {
        SampleResult::Error(e) => assert_eq!(e, "/status/cluster: http 503"),
        SampleResult::Report(_) => panic!("a failed cluster read must fail the sample"),
    }
    assert_eq!(s.replication_lag_entries, None);
    assert_eq!(
        poller
            .cluster_lag(pod.addr(), None)
            .await
            .unwrap_err()
            .reason(),
        "http_status"
    );
}
