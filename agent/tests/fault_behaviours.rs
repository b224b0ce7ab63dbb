//! Fault suite: every broken behaviour a simulated pod can show ends as the
//! right sample error — in the sample and in the published aggregate —
//! while the agent keeps polling: the healthy pods of the same sweep are
//! sampled, and once the pods recover the next sweep samples all of them.
//! Loopback only (127.0.0.0/8), bounded in time.

use jiff::Timestamp;
use kura_agent::aggregate::{AggregateConfig, InstanceAggregator};
use kura_agent::model::{InstanceInfo, SampleResult};
use kura_agent::poll::{PollConfig, Poller};
use kura_sim::{Addressing, Behaviour, SimNode, SimPodSpec, Simulator};
use std::time::{Duration, Instant};

mod support {
    pub mod sim;
}
use support::sim::PollTargets;

const TIMEOUT: Duration = Duration::from_millis(400);

/// What a pod with this behaviour must end as.
#[derive(Debug)]
enum Expect {
    Report,
    Error(String),
    /// An invalid report: the parser's message, which starts like this.
    ErrorStartingWith(String),
}

/// The expected outcome of every behaviour. The match is exhaustive: a new
/// behaviour does not compile until it is given an outcome here.
fn expected(b: &Behaviour, config: &PollConfig) -> Expect {
    match b {
        Behaviour::Normal => Expect::Report,
        Behaviour::Slow { delay_ms } if Duration::from_millis(*delay_ms) < config.timeout / 2 => {
            Expect::Report
        }
        Behaviour::Slow { .. } | Behaviour::Hang => Expect::Error("timeout".into()),
        Behaviour::Status { code } => Expect::Error(format!("http {code}")),
        Behaviour::Refused => Expect::Error("connection refused".into()),
        Behaviour::Malformed => Expect::ErrorStartingWith("body is not valid JSON".into()),
        Behaviour::Oversized { bytes } if *bytes > config.body_limit as u64 => {
            Expect::Error(format!("body exceeds {} bytes", config.body_limit))
        }
        Behaviour::Oversized { .. } => Expect::ErrorStartingWith("body is not valid JSON".into()),
        Behaviour::WrongType { field } => Expect::ErrorStartingWith(format!("field `{field}`")),
        Behaviour::Redirect { .. } => Expect::Error("http 302".into()),
    }
}

fn broken() -> Vec<(&'static str, Behaviour)> {
    vec![
        ("normal-a", Behaviour::Normal),
        ("slow-within", Behaviour::slow(Duration::from_millis(50))),
        ("slow-beyond", Behaviour::slow(Duration::from_secs(30))),
        ("hang", Behaviour::Hang),
        ("http-500", Behaviour::error_500()),
        ("http-503", Behaviour::Status { code: 503 }),
        ("http-404", Behaviour::Status { code: 404 }),
        ("refused", Behaviour::Refused),
        ("malformed", Behaviour::Malformed),
        ("oversized", Behaviour::Oversized { bytes: 1 << 20 }),
        (
            "wrong-type-counter",
            Behaviour::WrongType {
                field: "fd_timeout_count".into(),
            },
        ),
        (
            "wrong-type-ready",
            Behaviour::WrongType {
                field: "ready".into(),
            },
        ),
        (
            "redirect",
            Behaviour::Redirect {
                location: "http://127.0.0.1:9/status/rollout".into(),
            },
        ),
        ("normal-b", Behaviour::Normal),
    ]
}

fn check(name: &str, got: &SampleResult, want: &Expect) {
    match (want, got) {
        (Expect::Report, SampleResult::Report(_)) => {}
        (Expect::Error(e), SampleResult::Error(g)) => assert_eq!(g, e, "{name}"),
        (Expect::ErrorStartingWith(p), SampleResult::Error(g)) => {
            assert!(
                g.starts_with(p.as_str()),
                "{name}: {g:?} does not start with {p:?}"
            )
        }
        _ => panic!("{name}: expected {want:?}, got {got:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_broken_behaviour_ends_as_its_sample_error_and_polling_goes_on() {
    tokio::time::timeout(Duration::from_secs(30), run())
        .await
        .unwrap();
}

async fn run() {
    let config = PollConfig {
        timeout: TIMEOUT,
        retries: 1,
        retry_delay: Duration::from_millis(20),
        ..PollConfig::default()
    };
    let cases = broken();
    let mut specs: Vec<SimPodSpec> = cases
        .iter()
        .map(|(name, b)| SimPodSpec {
            behaviour: b.clone(),
            ..SimPodSpec::new(*name)
        })
        .collect();
    // Not a behaviour but a broken pod all the same: a report naming
    // another pod (a reused pod IP).
    specs.push(SimPodSpec {
        node: SimNode {
            pod_uid: Some("uid-someone-else".into()),
            fenced_serving: true,
            ..SimNode::default()
        },
        ..SimPodSpec::new("impostor")
    });
    let sim = Simulator::start(specs, &Addressing::default())
        .await
        .unwrap();
    let poller = Poller::new(config.clone());
    let instance = InstanceInfo {
        namespace: "kura".into(),
        name: "faults".into(),
        expected_pods: u32::try_from(sim.pods().len()).unwrap(),
        generation: 1,
    };
    let mut agg = InstanceAggregator::new(AggregateConfig::default());

    let t = Instant::now();
    let samples = poller.poll_pods(&sim.targets()).await;
    let took = t.elapsed();
    // Hung and slow pods cost one timeout each, concurrently, not retried.
    assert!(took < TIMEOUT * 2, "sweep took {took:?}");
    let health = agg.fold(&instance, &samples, Timestamp::now(), "test-agent");

    let mut wants: Vec<(&str, Expect)> = cases
        .iter()
        .map(|(name, b)| (*name, expected(b, &config)))
        .collect();
    wants.push(("impostor", Expect::Error("pod identity mismatch".into())));
    let reports = wants
        .iter()
        .filter(|(_, w)| matches!(w, Expect::Report))
        .count();
    assert_eq!(
        reports, 3,
        "two normal pods and one slow within the timeout"
    );
    for ((name, want), sample) in wants.iter().zip(&samples) {
        assert_eq!(&*sample.pod.name, *name);
        check(name, &sample.result, want);
        // The published aggregate carries the same outcome per pod.
        let entry = health.pods.iter().find(|p| &*p.name == *name).unwrap();
        match &sample.result {
            SampleResult::Report(_) => {
                assert_eq!(entry.error, None, "{name}");
                assert!(entry.sampled_at.is_some(), "{name}");
            }
            SampleResult::Error(e) => {
                assert_eq!(entry.error.as_deref(), Some(e.as_str()), "{name}")
            }
        }
    }
    assert_eq!(health.sampled_pods, 3);
    assert_eq!(health.expected_pods, instance.expected_pods);
    assert!(
        !health.ready,
        "an instance with failed samples is not ready"
    );

    // The agent is still up: every pod recovers and the next sweep samples
    // all of them, through the same poller.
    for pod in sim.pods() {
        pod.set(Behaviour::Normal).await.unwrap();
        pod.update(|n| n.pod_uid = None);
    }
    let samples = poller.poll_pods(&sim.targets()).await;
    for s in &samples {
        assert!(
            matches!(s.result, SampleResult::Report(_)),
            "{}: {:?}",
            s.pod.name,
            s.result
        );
    }
    let health = agg.fold(&instance, &samples, Timestamp::now(), "test-agent");
    assert_eq!(health.sampled_pods, instance.expected_pods);
    assert!(health.pods.iter().all(|p| p.error.is_none()));
}
