//! Handovers and stored statuses (issue 41): a stopped task's instance
//! has its status read again (one GET) before a task may start for it
//! again. These tests drive the store's watch events by hand and answer
//! the GETs through a mocked API server, so every interleaving the issue
//! names is reproduced exactly.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response};
use jiff::Timestamp;
use kube::Client;
use kube::client::Body;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use tower_test::mock::{Handle, SendResponse};

use super::discovery::Discovery;
use super::pods::TargetConfig;
use super::source::ClusterTargets;
use super::store::FactStore;
use super::wire::InstanceObject;
use crate::engine::EngineConfig;
use crate::model::{
    DesiredStatus, InstanceKey, InstanceTarget, PublicationTarget, StatusLifecycle, StatusSink,
    StoredStatusSource, SystemClock, TargetSource,
};
use crate::poll::{PollConfig, Poller};
use crate::runner::{AgentLoop, Cadence, LoopConfig};
use crate::view::FleetView;

type Mock = Handle<Request<Body>, Response<Body>>;

const V1: &str = "ghcr.io/tuist/kura:0.6.0";
const V2: &str = "ghcr.io/tuist/kura:0.6.1";

fn key(name: &str) -> InstanceKey {
    InstanceKey::new("kura", name)
}

/// The instance `name` as the API server sends it (JSON), with `image`
/// and `status`.
fn instance_json(name: &str, image: &str, status: Value) -> Value {
    json!({
        "apiVersion": "kura.tuist.dev/v1alpha1", "kind": "KuraInstance",
        "metadata": {"name": name, "namespace": "kura", "generation": 3,
                     "uid": format!("iu-{name}"), "resourceVersion": "7"},
        "spec": {"image": image, "replicas": 1, "region": "eu"},
        "status": status
    })
}

fn object(v: Value) -> InstanceObject {
    serde_json::from_value(v).expect("instance")
}

/// A status with a captured baseline: what a new owner must continue
/// from; `second` tells one write from another (its `evaluatedAt`).
fn published(second: u64) -> Value {
    json!({
        "rolloutGate": {"targetImage": V1, "verdict": "healthy",
            "evaluatedAt": format!("2026-07-21T10:00:{second:02}Z"),
            "baselineCapturedAt": "2026-07-21T09:00:00Z"}
    })
}

/// A store of one scope listing `objects`.
fn listed(objects: Vec<Value>) -> FactStore {
    let mut store = FactStore::new(1, TargetConfig::default());
    store.apply_instance(0, &Event::Init);
    for o in objects {
        store.apply_instance(0, &Event::InitApply(object(o)));
    }
    store.apply_instance(0, &Event::InitDone);
    store
}

/// A discovery over `store` whose GETs go to the returned mock.
fn discovery(store: FactStore) -> (Discovery, Mock) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    (
        Discovery::over(store, client, PublicationTarget::Instance),
        handle,
    )
}

fn ok(body: &Value) -> Response<Body> {
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(body).expect("encode")))
        .expect("response")
}

fn unavailable() -> Response<Body> {
    Response::builder()
        .status(503)
        .header("content-type", "application/json")
        .body(Body::from(
            serde_json::to_vec(&json!({"kind": "Status", "apiVersion": "v1",
                "status": "Failure", "message": "brownout", "reason": "ServiceUnavailable",
                "code": 503}))
            .expect("encode"),
        ))
        .expect("response")
}

/// The next request (a GET of one instance), within 5 s.
async fn next_get(mock: &mut Mock) -> (String, SendResponse<Response<Body>>) {
    let (req, send) = tokio::time::timeout(Duration::from_secs(5), mock.next_request())
        .await
        .expect("a GET within 5 s")
        .expect("a request");
    assert_eq!(req.method(), http::Method::GET);
    (req.uri().path().to_owned(), send)
}

async fn until(what: &str, cond: impl Fn() -> bool) {
    let waited = tokio::time::timeout(Duration::from_secs(5), async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "timed out waiting for {what}");
}

fn gate_verdict(t: &InstanceTarget) -> Option<String> {
    t.previous_status
        .as_ref()?
        .rollout_gate
        .as_ref()
        .map(|g| g.verdict.as_str().to_owned())
}

/// Item 2: a re-list that started while the instance was released (its
/// entries read without the status) and completes after the GET brought
/// the status keeps the status the GET read.
#[tokio::test]
async fn a_relist_completing_during_a_reread_keeps_the_status_read() {
    let (discovery, mut mock) = discovery(listed(vec![instance_json("acme", V1, published(5))]));
    discovery.release_status(&key("acme"));
    // A re-list starts while the task holds the status.
    discovery.with_store(|s| {
        s.apply_instance(0, &Event::Init);
        s.apply_instance(
            0,
            &Event::InitApply(object(instance_json("acme", V1, published(5)))),
        );
    });
    // The task stops; the status is read again, and the GET answers.
    discovery.keep_status(&key("acme"), None);
    let (path, send) = next_get(&mut mock).await;
    assert!(path.ends_with("/kurainstances/acme"), "{path}");
    send.send_response(ok(&instance_json("acme", V1, published(9))));
    until("the GET's status to land", || {
        !discovery.status_pending(&key("acme"))
    })
    .await;
    // Only now does the re-list complete.
    discovery.with_store(|s| s.apply_instance(0, &Event::InitDone));
    let targets = discovery.targets_of(&[key("acme")]);
    assert_eq!(targets.len(), 1);
    let evaluated = targets[0]
        .previous_status
        .as_ref()
        .and_then(|s| s.rollout_gate.as_ref())
        .map(|g| g.evaluated_at.to_string());
    assert_eq!(
        evaluated.as_deref(),
        Some("2026-07-21T10:00:09Z"),
        "the status the GET read is what a task starts from"
    );
}

/// Item 3: the watch showing the instance without a status (never
/// written), or with a spec that cannot be read, ends the re-read even
/// while the GET keeps failing (an API server brownout): a task may start.
#[tokio::test]
async fn a_reread_ends_when_the_instance_shows_no_status_or_an_unreadable_spec() {
    let (discovery, mut mock) = discovery(listed(vec![
        instance_json("acme", V1, json!(null)),
        instance_json("beta", V1, published(3)),
    ]));
    for name in ["acme", "beta"] {
        discovery.release_status(&key(name));
        discovery.keep_status(&key(name), None);
    }
    // Every GET fails.
    let failing = tokio::spawn(async move {
        while let Some((_, send)) = mock.next_request().await {
            send.send_response(unavailable());
        }
    });
    assert!(discovery.status_pending(&key("acme")));
    // The watch brings acme, never written, and beta with its spec broken.
    let mut broken = instance_json("beta", V1, published(3));
    broken["spec"] = json!({"replicas": 1});
    discovery.with_store(|s| {
        s.apply_instance(
            0,
            &Event::Apply(object(instance_json("acme", V1, json!(null)))),
        );
        s.apply_instance(0, &Event::Apply(object(broken)));
    });
    assert!(
        !discovery.status_pending(&key("acme")),
        "acme's object was read whole: it has no status, and a task may start"
    );
    assert!(
        !discovery.status_pending(&key("beta")),
        "beta's object was read whole: skipped until its spec is fixed"
    );
    assert_eq!(discovery.targets_of(&[key("acme")]).len(), 1);
    // beta's spec fixed: a task may start from its status.
    discovery.with_store(|s| {
        s.apply_instance(
            0,
            &Event::Apply(object(instance_json("beta", V1, published(4)))),
        );
    });
    let beta = discovery.targets_of(&[key("beta")]);
    assert_eq!(beta.len(), 1);
    assert_eq!(gate_verdict(&beta[0]).as_deref(), Some("healthy"));
    failing.abort();
}

/// Item 4: the GET's answer is applied only while it is still wanted and
/// never over what the watch showed since: a deleted instance stays
/// deleted, a newer `spec.image` is not replaced by the GET's older one.
#[tokio::test]
async fn a_reread_answer_no_longer_wanted_or_older_is_dropped() {
    let (discovery, mut mock) = discovery(listed(vec![
        instance_json("acme", V1, published(5)),
        instance_json("beta", V1, published(5)),
    ]));
    // acme: deleted while its GET is in flight.
    discovery.release_status(&key("acme"));
    discovery.keep_status(&key("acme"), None);
    let (_, acme_get) = next_get(&mut mock).await;
    discovery.with_store(|s| {
        s.apply_instance(
            0,
            &Event::Delete(object(instance_json("acme", V1, published(5)))),
        );
    });
    acme_get.send_response(ok(&instance_json("acme", V1, published(5))));
    // beta: upgraded (the watch shows V2) while its GET, answered before
    // the upgrade, is in flight.
    discovery.release_status(&key("beta"));
    discovery.keep_status(&key("beta"), None);
    let (_, beta_get) = next_get(&mut mock).await;
    let upgraded = discovery.with_store(|s| {
        s.apply_instance(
            0,
            &Event::Apply(object(instance_json("beta", V2, published(6)))),
        )
    });
    assert!(upgraded.image_changed);
    beta_get.send_response(ok(&instance_json("beta", V1, published(5))));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let targets = discovery.targets();
    let names: Vec<&str> = targets
        .instances
        .iter()
        .map(|t| t.info.name.as_str())
        .collect();
    assert_eq!(names, ["beta"], "a deleted instance does not come back");
    assert_eq!(
        targets.instances[0].spec_image, V2,
        "the watch's newer spec.image stands"
    );
}

/// Item 6: after a Lease lapse every instance of the replica is read again
/// at once; the GETs in flight are bounded.
#[tokio::test]
async fn rereads_in_flight_are_bounded() {
    let names: Vec<String> = (0..100).map(|i| format!("i{i:03}")).collect();
    let (discovery, mut mock) = discovery(listed(
        names
            .iter()
            .map(|n| instance_json(n, V1, published(1)))
            .collect(),
    ));
    for n in &names {
        discovery.release_status(&key(n));
        discovery.keep_status(&key(n), None);
    }
    let mut held = Vec::new();
    while let Ok(Some(req)) =
        tokio::time::timeout(Duration::from_millis(300), mock.next_request()).await
    {
        held.push(req);
    }
    assert!(
        held.len() <= 16,
        "{} GETs in flight at once (bound: 16)",
        held.len()
    );
    assert!(!held.is_empty());
    // Answered, the others follow, and every re-read completes.
    let answering = tokio::spawn(async move {
        for (req, send) in held {
            let name = req.uri().path().rsplit('/').next().unwrap_or("").to_owned();
            send.send_response(ok(&instance_json(&name, V1, published(2))));
        }
        while let Some((req, send)) = mock.next_request().await {
            let name = req.uri().path().rsplit('/').next().unwrap_or("").to_owned();
            send.send_response(ok(&instance_json(&name, V1, published(2))));
        }
    });
    until("every re-read to complete", || {
        names.iter().all(|n| !discovery.status_pending(&key(n)))
    })
    .await;
    answering.abort();
}

/// A sink that records, per task start, whether it started from a stored
/// status, and keeps the last published status per instance.
#[derive(Default)]
struct Seeds {
    seeds: Mutex<Vec<(InstanceKey, bool)>>,
}

impl StatusSink for Seeds {
    fn seed(&self, target: &InstanceTarget) {
        self.seeds
            .lock()
            .expect("lock")
            .push((target.key(), target.previous_status.is_some()));
    }
    fn publish(&self, _key: &InstanceKey, _desired: DesiredStatus, _now: Timestamp) {}
    fn forget(&self, _key: &InstanceKey) {}
}

type Hook = Box<dyn FnOnce() + Send>;

/// `ClusterTargets` with instances hidden (ownership moved away) and a
/// hook run once right after the next read of the targets: what happens
/// between the read and the loop's use of it.
struct Handover {
    inner: ClusterTargets,
    /// The hidden instances, and the hook for the next read (set together).
    state: Mutex<(BTreeSet<InstanceKey>, Option<Hook>)>,
}

impl Handover {
    fn visible(&self, mut targets: Vec<InstanceTarget>) -> Vec<InstanceTarget> {
        let (hidden, hook) = {
            let mut state = self.state.lock().expect("lock");
            (state.0.clone(), state.1.take())
        };
        if let Some(hook) = hook {
            hook();
        }
        targets.retain(|t| !hidden.contains(&t.key()));
        targets
    }

    fn hide(&self, key: &InstanceKey) {
        self.state.lock().expect("lock").0.insert(key.clone());
    }
}

impl TargetSource for Handover {
    fn targets(&self) -> Vec<InstanceTarget> {
        self.visible(self.inner.targets())
    }
    fn ready(&self) -> bool {
        true
    }
    fn targets_of(&self, keys: &[InstanceKey]) -> Vec<InstanceTarget> {
        self.visible(self.inner.targets_of(keys))
    }
    fn lifecycle(&self) -> Option<&dyn StatusLifecycle> {
        self.inner.lifecycle()
    }
}

/// A loop over `source` (re-read every 10 ms, swept every 20 ms) running
/// until the returned flag is set.
fn run_loop(
    source: Arc<Handover>,
    sink: Arc<Seeds>,
    view: FleetView,
) -> (Arc<AtomicBool>, tokio::task::JoinHandle<()>) {
    let stop = Arc::new(AtomicBool::new(false));
    let agent_loop = AgentLoop::new(
        LoopConfig {
            cadence: Cadence::fixed(Duration::from_millis(20)),
            reconcile_every: Duration::from_millis(10),
            engine: EngineConfig::default(),
        },
        Poller::new(PollConfig::default()),
        source,
        sink,
        view,
        Arc::new(SystemClock),
    );
    let stopping = Arc::clone(&stop);
    let task = tokio::spawn(agent_loop.run(async move {
        while !stopping.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }));
    (stop, task)
}

/// A running loop whose task of `acme` swept once and released its
/// status, then lost the instance (hidden): its GET is the mock's next
/// request.
async fn handed_away() -> (Discovery, Mock, Arc<Handover>, Arc<Seeds>, FleetView) {
    let (discovery, mock) = discovery(listed(vec![instance_json("acme", V1, published(5))]));
    let source = Arc::new(Handover {
        inner: ClusterTargets::new(discovery.clone()),
        state: Mutex::new((BTreeSet::new(), None)),
    });
    let sink = Arc::new(Seeds::default());
    let view = FleetView::new();
    (discovery, mock, source, sink, view)
}

/// Item 1: a target read while its status is still being read again is
/// never started without it, even when the GET lands between the read of
/// the targets and the loop's use of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_read_while_its_status_is_read_again_never_starts_without_it() {
    let (discovery, mut mock, source, sink, view) = handed_away().await;
    let (stop, running) = run_loop(Arc::clone(&source), Arc::clone(&sink), view.clone());
    let acme = key("acme");
    until("acme's first sweep", || {
        view.instance(&acme).is_some_and(|v| v.swept_at.is_some())
    })
    .await;
    until("acme's status let go", || {
        discovery.stored_one_status(&acme).is_some_and(|has| !has)
    })
    .await;
    source.hide(&acme);
    let (_, get) = next_get(&mut mock).await;
    // The GET lands right after the next read of the targets.
    let landed = discovery.clone();
    let hook_key = acme.clone();
    let hook: Hook = Box::new(move || {
        // Answered from another thread: woken from this (blocked) worker,
        // the GET's task would wait in its local slot, never stolen.
        let answer = std::thread::spawn(move || {
            get.send_response(ok(&instance_json("acme", V1, published(9))));
        });
        let _ = answer.join();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while landed.status_pending(&hook_key) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    // Back to this replica; the GET lands during the first read that
    // shows it.
    *source.state.lock().expect("lock") = (BTreeSet::new(), Some(hook));
    until("acme's task to start again", || {
        sink.seeds.lock().expect("lock").len() >= 2
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    let _ = running.await;
    let seeds = sink.seeds.lock().expect("lock").clone();
    assert!(
        seeds.iter().all(|(_, with_status)| *with_status),
        "a task started without its stored status: {seeds:?}"
    );
}

/// Item 6: while the status of an instance this replica no longer sweeps
/// is read again, its answer is the last verdict it published, marked as
/// being read again, not `Unknown`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_former_owner_answers_its_last_verdict_while_rereading() {
    let (discovery, mut mock, source, sink, view) = handed_away().await;
    let (stop, running) = run_loop(Arc::clone(&source), Arc::clone(&sink), view.clone());
    let acme = key("acme");
    until("acme's first sweep", || {
        view.instance(&acme).is_some_and(|v| v.swept_at.is_some())
    })
    .await;
    let last = view
        .instance(&acme)
        .and_then(|v| v.gate)
        .map(|g| g.verdict.as_str().to_owned());
    assert!(last.is_some());
    until("acme's status let go", || {
        discovery.stored_one_status(&acme).is_some_and(|has| !has)
    })
    .await;
    source.hide(&acme);
    let (_, _get_unanswered) = next_get(&mut mock).await;
    until("acme's task to stop", || view.instance(&acme).is_none()).await;
    // What the debug server answers from for an instance it does not sweep.
    assert!(view.instance(&acme).is_none());
    let stored = discovery.stored_instance(&acme).expect("watched");
    let verdict = stored
        .status
        .as_ref()
        .and_then(|s| s.rollout_gate.as_ref())
        .map(|g| g.verdict.as_str().to_owned());
    assert_eq!(
        verdict, last,
        "the last verdict this replica published, not Unknown"
    );
    assert!(
        stored.notes.iter().any(|n| n.contains("being read again")),
        "{:?}",
        stored.notes
    );
    stop.store(true, Ordering::SeqCst);
    let _ = running.await;
}
