//! End-to-end tests of node-local instances (`spec.nodeLocalNetwork`,
//! issue 39): their pods are polled through the API server's pod
//! port-forward, never at their pod IP.
//!
//! Run by `scripts/e2e.sh`: it starts kube-apiserver + etcd
//! (scripts/k8s-up.sh, `--kubelet-preferred-address-types=InternalIP`),
//! builds the kubelet stand-in (scripts/tools/kubelet-standin: the
//! kubelet's own port-forward code behind HTTPS on loopback) and exports
//! `KUBECONFIG` and `KURA_KUBELET_STANDIN`. Every test is `#[ignore]`d so
//! that `cargo test --workspace` skips them; run by hand without that
//! environment they fail.
//!
//! Each test starts its own stand-in and a Node object pointing at it
//! (InternalIP 127.0.0.1, `daemonEndpoints.kubeletEndpoint.Port` = the
//! stand-in's port): kube-apiserver proxies `pods/portforward` of the pods
//! on that node there, and the stand-in forwards each stream to a
//! simulated Kura pod on loopback (its routes file maps `ns/pod` to the
//! simulated pod's address). The Pod objects carry TEST-NET pod IPs
//! (192.0.2.x) that nothing answers on: a poll by pod IP fails.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, Config};
use kura_agent::cli::run::RunArgs;
use kura_sim::{Addressing, SimPodSpec, Simulator};
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::{Value, json};

mod support {
    pub mod agent;
    pub mod cluster;
}
use support::agent::{Agent, init_test_logging, run_args as parse_run_args};
use support::cluster::{apply_crd, kube_config, shipped_crd, statefulset_owner, wait_status};

const T: Duration = Duration::from_secs(40);
const IMAGE: &str = "ghcr.io/tuist/kura:1.0.0";

fn standin_bin() -> PathBuf {
    PathBuf::from(std::env::var("KURA_KUBELET_STANDIN").unwrap_or_else(|_| {
        panic!("KURA_KUBELET_STANDIN is not set: run by scripts/e2e.sh, which builds the kubelet stand-in")
    }))
}

fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let handle = kura_agent::telemetry::prometheus_builder()
                .expect("buckets")
                .install_recorder()
                .expect("install the metrics recorder");
            kura_agent::telemetry::describe();
            init_test_logging("warn");
            handle
        })
        .clone()
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{:06x}", rand::random::<u32>() & 0xff_ffff)
}

async fn admin() -> Client {
    Client::try_from(kube_config(None).await).expect("admin client")
}

// ---------------------------------------------------------------------------
// The kubelet stand-in
// ---------------------------------------------------------------------------

/// A running stand-in: its port, routes file and every line it printed.
struct Standin {
    child: Child,
    port: u16,
    routes: PathBuf,
    lines: Arc<Mutex<Vec<String>>>,
    dir: PathBuf,
}

impl Standin {
    /// Starts the stand-in; every forward waits `hold` before it connects.
    fn start(hold: Duration) -> Standin {
        let dir = std::env::temp_dir().join(unique("kura-kubelet-standin"));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let routes = dir.join("routes.json");
        std::fs::write(&routes, "{}").expect("routes file");
        let mut child = Command::new(standin_bin())
            .arg("--listen=127.0.0.1:0")
            .arg(format!("--routes={}", routes.display()))
            .arg(format!("--hold={}ms", hold.as_millis()))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the kubelet stand-in");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut first = String::new();
        stdout
            .read_line(&mut first)
            .expect("the stand-in's first line");
        let port = first
            .trim()
            .strip_prefix("listening ")
            .and_then(|a| a.rsplit_once(':'))
            .and_then(|(_, p)| p.parse().ok())
            .unwrap_or_else(|| panic!("stand-in said {first:?}"));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Standin {
            child,
            port,
            routes,
            lines,
            dir,
        }
    }

    /// Routes `ns/pod` to `host` (or `"refuse"`), written at once.
    fn set_routes(&self, routes: &BTreeMap<String, String>) {
        let tmp = self.routes.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_vec(routes).unwrap()).unwrap();
        std::fs::rename(&tmp, &self.routes).unwrap();
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// The forwards of `ns/pod` so far (`forward ns/pod PORT -> ADDR ...`).
    fn forwards_of(&self, key: &str) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|l| l.starts_with(&format!("forward {key} ")))
            .collect()
    }

    /// The most forwards ever inside their hold at once.
    fn max_holding(&self) -> usize {
        self.lines()
            .iter()
            .filter_map(|l| l.rsplit_once("maxHolding=")?.1.parse().ok())
            .max()
            .unwrap_or(0)
    }
}

impl Drop for Standin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// ---------------------------------------------------------------------------
// Cluster objects
// ---------------------------------------------------------------------------

/// A Node whose kubelet is the stand-in on 127.0.0.1:`port`.
async fn create_node(client: &Client, port: u16) -> String {
    let name = unique("pf-node");
    let api: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    api.create(&PostParams::default(), &node)
        .await
        .expect("create node");
    let status = json!({"status": {
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
        "conditions": [{"type": "Ready", "status": "True",
                        "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    }});
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("patch node status");
    name
}

async fn create_namespace(client: &Client) -> String {
    let name = unique("e2e-pf");
    let api: Api<Namespace> = Api::all(client.clone());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
    )
    .await
    .expect("create namespace");
    name
}

async fn create_instance(client: &Client, ns: &str, name: &str, replicas: usize, node_local: bool) {
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &kura_agent::cluster::kura_instance_resource(),
    );
    let mut spec = json!({"image": IMAGE, "replicas": replicas, "region": "local"});
    if node_local {
        spec["nodeLocalNetwork"] = json!({});
    }
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kura.tuist.dev/v1alpha1",
        "kind": "KuraInstance",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec
    }))
    .unwrap();
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create KuraInstance");
}

/// A running Pod of the StatefulSet `instance` (created, inert, if missing:
/// the garbage collector deletes pods whose owner does not exist) on
/// `node`, at pod IP `ip`; returns its UID.
async fn create_pod(
    client: &Client,
    ns: &str,
    instance: &str,
    name: &str,
    node: &str,
    ip: &str,
) -> String {
    let owner = statefulset_owner(client, ns, instance).await;
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/name": "kura", "app.kubernetes.io/instance": instance},
            "ownerReferences": [owner]
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "kura", "image": IMAGE, "ports": [{"name": "http", "containerPort": 4000}]}]
        }
    }))
    .unwrap();
    let created = api
        .create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
    let status = json!({"status": {
        "phase": "Running", "hostIP": "127.0.0.1", "podIP": ip, "podIPs": [{"ip": ip}],
        "startTime": "2026-01-01T00:00:00Z",
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "containerStatuses": [{
            "name": "kura", "ready": true, "started": true, "restartCount": 0,
            "image": IMAGE, "imageID": "", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
        }]
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("patch pod status");
    created.metadata.uid.expect("pod uid")
}

/// A node-local instance `name` of `replicas` pods on `node`, each at a
/// TEST-NET pod IP, simulated on loopback from `first_ip` and routed by the
/// stand-in; returns the simulator and the pods' status port.
async fn node_local_fleet(
    client: &Client,
    ns: &str,
    name: &str,
    replicas: usize,
    node: &str,
    standin: &Standin,
    first_ip: Ipv4Addr,
) -> (Simulator, u16) {
    create_instance(client, ns, name, replicas, true).await;
    let mut specs = Vec::new();
    for r in 0..replicas {
        let pod = format!("{name}-{r}");
        let ip = format!("192.0.2.{}", r + 1);
        let mut spec = SimPodSpec::new(pod.clone());
        spec.uid = create_pod(client, ns, name, &pod, node, &ip).await;
        specs.push(spec);
    }
    let sim = Simulator::start(specs, &Addressing::Loopback { first_ip, port: 0 })
        .await
        .expect("start the simulator");
    let port = sim.pods()[0].addr().port();
    let routes = sim
        .pods()
        .iter()
        .map(|p| (format!("{ns}/{}", p.name()), p.addr().ip().to_string()))
        .collect();
    standin.set_routes(&routes);
    (sim, port)
}

fn run_args(ns: &str, port: u16, extra: &[&str]) -> RunArgs {
    let mut argv: Vec<String> = [
        "kura-agent".to_owned(),
        format!("--namespace={ns}"),
        format!("--port={port}"),
        "--sweep-interval=1s".to_owned(),
        "--heartbeat=3s".to_owned(),
        "--poll-timeout=2s".to_owned(),
        "--debug-listen=127.0.0.1:0".to_owned(),
        "--agent-identity=e2e-pf-agent".to_owned(),
        "--log-format=text".to_owned(),
    ]
    .to_vec();
    argv.extend(extra.iter().map(|s| (*s).to_owned()));
    parse_run_args(argv)
}

fn pod_errors(status: &Value) -> BTreeMap<String, Value> {
    status["rolloutHealth"]["pods"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or_default().to_owned(),
                p["error"].clone(),
            )
        })
        .collect()
}

fn start_agent(args: RunArgs, config: Config) -> Agent {
    Agent::start(args, config, metrics_handle(), None)
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

/// A node-local instance's four pods, at pod IPs nothing answers on, get a
/// full status through the port-forward: every pod sampled without error,
/// a verdict; the stand-in saw a forward to each pod's status port, and
/// never more than `--port-forward-streams=2` open at once (while a sweep
/// of four pods, each forward held 300 ms, does reach two). An instance
/// without `nodeLocalNetwork` on the same kind of pod IP is polled by IP,
/// and fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real API server and the kubelet stand-in: scripts/e2e.sh"]
async fn node_local_pods_are_polled_through_the_port_forward() {
    let client = admin().await;
    apply_crd(&client, &shipped_crd()).await;
    let standin = Standin::start(Duration::from_millis(300));
    let node = create_node(&client, standin.port).await;
    let ns = create_namespace(&client).await;
    let (sim, port) = node_local_fleet(
        &client,
        &ns,
        "local",
        4,
        &node,
        &standin,
        Ipv4Addr::new(127, 61, 0, 1),
    )
    .await;
    // The control: polled by pod IP, which nothing answers on.
    create_instance(&client, &ns, "routed", 1, false).await;
    create_pod(&client, &ns, "routed", "routed-0", &node, "192.0.2.99").await;

    let mut agent = start_agent(
        run_args(&ns, port, &["--port-forward-streams=2"]),
        kube_config(None).await,
    );
    let status = wait_status(&client, &ns, "local", "4 pods sampled", T, |s| {
        s["rolloutHealth"]["sampledPods"] == 4 && s["rolloutGate"]["verdict"].is_string()
    })
    .await;
    for (pod, error) in pod_errors(&status) {
        assert!(error.is_null(), "{pod}: {error}");
    }
    let pods = status["rolloutHealth"]["pods"].as_array().expect("pods");
    for p in pods {
        let name = p["name"].as_str().expect("name");
        let sim_pod = sim.pod(name).expect("a simulated pod");
        assert_eq!(p["uid"], sim_pod.uid(), "{p}");
        assert!(
            p["ip"]
                .as_str()
                .is_some_and(|ip| ip.starts_with("192.0.2.")),
            "the pod IP of the Pod object, never polled: {p}"
        );
        // The stand-in forwarded this pod's stream to its status port.
        let want = format!("-> {}:{port} ", sim_pod.addr().ip());
        let forwards = standin.forwards_of(&format!("{ns}/{name}"));
        assert!(
            forwards.iter().any(|l| l.contains(&want)),
            "{name}: no forward {want:?} in {forwards:?}"
        );
    }
    assert_eq!(status["rolloutGate"]["verdict"], "healthy", "{status}");

    // The bound: reached, never passed.
    let max = standin.max_holding();
    assert_eq!(max, 2, "streams open at once: {:?}", standin.lines());

    let routed = wait_status(&client, &ns, "routed", "its pod polled", T, |s| {
        !pod_errors(s).is_empty()
    })
    .await;
    let error = pod_errors(&routed)["routed-0"].clone();
    assert!(
        error
            .as_str()
            .is_some_and(|e| !e.starts_with("port-forward:")),
        "polled by pod IP, and failed: {error}"
    );
    assert!(standin.forwards_of(&format!("{ns}/routed-0")).is_empty());
    assert!(!agent.is_finished(), "the agent still runs");
    eprintln!(
        "port-forward e2e: {} forwards through the stand-in, at most {max} at once; IP path: {error}",
        standin
            .lines()
            .iter()
            .filter(|l| l.starts_with("forward "))
            .count()
    );
    agent.stop().await;
}

/// A failed port-forward is a failed sample naming it, never healthy: the
/// stand-in refuses one pod (as a kubelet does when nothing listens in the
/// pod), and an agent without the chart's `pods/portforward` rule gets 403
/// for every pod; with the rule (`get`, what this API server checks for the
/// websocket upgrade, and `create`, the SPDY form's verb) every pod is
/// sampled again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real API server and the kubelet stand-in: scripts/e2e.sh"]
async fn a_failed_port_forward_is_a_failed_sample_naming_it() {
    let client = admin().await;
    apply_crd(&client, &shipped_crd()).await;
    let standin = Standin::start(Duration::ZERO);
    let node = create_node(&client, standin.port).await;
    let ns = create_namespace(&client).await;
    let (sim, port) = node_local_fleet(
        &client,
        &ns,
        "local",
        2,
        &node,
        &standin,
        Ipv4Addr::new(127, 62, 0, 1),
    )
    .await;
    let mut routes: BTreeMap<String, String> = sim
        .pods()
        .iter()
        .map(|p| (format!("{ns}/{}", p.name()), p.addr().ip().to_string()))
        .collect();
    routes.insert(format!("{ns}/local-1"), "refuse".to_owned());
    standin.set_routes(&routes);

    let mut agent = start_agent(run_args(&ns, port, &[]), kube_config(None).await);
    let status = wait_status(&client, &ns, "local", "local-1 failed", T, |s| {
        s["rolloutHealth"]["sampledPods"] == 1 && pod_errors(s).len() == 2
    })
    .await;
    let errors = pod_errors(&status);
    assert!(errors["local-0"].is_null(), "{errors:?}");
    let refused = errors["local-1"].as_str().unwrap_or_default();
    assert!(
        refused.starts_with("port-forward: ") && refused.contains("connection refused"),
        "{refused}"
    );
    assert_ne!(status["rolloutGate"]["verdict"], "healthy", "{status}");
    eprintln!("refused by the kubelet: {refused}");
    agent.stop().await;

    // Without the permission: the API server refuses every port-forward.
    let sa = "kura-agent-no-portforward";
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": sa},
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["kura.tuist.dev"], "resources": ["kurainstances"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["kura.tuist.dev"], "resources": ["kurainstances/status"], "verbs": ["patch"]},
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}
        ]
    }))
    .unwrap();
    Api::<Role>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &role)
        .await
        .expect("create role");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": sa},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": sa},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &binding)
        .await
        .expect("create role binding");
    standin.set_routes(
        &sim.pods()
            .iter()
            .map(|p| (format!("{ns}/{}", p.name()), p.addr().ip().to_string()))
            .collect(),
    );
    let mut config = kube_config(None).await;
    config.auth_info.impersonate = Some(format!("system:serviceaccount:{ns}:{sa}"));
    config.auth_info.impersonate_groups = Some(vec![
        "system:serviceaccounts".to_owned(),
        "system:authenticated".to_owned(),
    ]);
    let before = standin.lines().len();
    // This minimal Role cannot read the KuraInstance CRD (cluster-scoped),
    // so `auto` would choose the companion: name the instance target.
    let mut agent = start_agent(
        run_args(&ns, port, &["--publication-target=instance"]),
        config,
    );
    let status = wait_status(&client, &ns, "local", "403 for both pods", T, |s| {
        let errors = pod_errors(s);
        errors.len() == 2
            && errors
                .values()
                .all(|e| e.as_str().is_some_and(|e| e.contains("403")))
    })
    .await;
    for (pod, error) in pod_errors(&status) {
        let error = error.as_str().unwrap_or_default();
        assert!(
            error.starts_with("port-forward: 403 Forbidden"),
            "{pod}: {error}"
        );
    }
    eprintln!("without the rule: {}", pod_errors(&status)["local-0"]);
    assert_ne!(status["rolloutGate"]["verdict"], "healthy", "{status}");
    assert!(
        standin.lines()[before..]
            .iter()
            .all(|l| !l.starts_with("forward ")),
        "a refused port-forward never reaches the kubelet"
    );

    // The chart's rule (nodeLocal.enabled): both pods are sampled again.
    let mut role = role;
    if let Some(rules) = role.rules.as_mut() {
        rules.push(
            serde_json::from_value(json!({"apiGroups": [""], "resources": ["pods/portforward"],
                                         "verbs": ["get", "create"]}))
            .unwrap(),
        );
    }
    Api::<Role>::namespaced(client.clone(), &ns)
        .replace(sa, &PostParams::default(), &role)
        .await
        .expect("grant pods/portforward");
    wait_status(
        &client,
        &ns,
        "local",
        "both pods sampled with the rule",
        T,
        |s| s["rolloutHealth"]["sampledPods"] == 2 && pod_errors(s).values().all(Value::is_null),
    )
    .await;
    agent.stop().await;
}

/// Bytes both ways through a loopback TCP proxy in front of `upstream`,
/// counted as they pass (client → upstream, upstream → client).
struct CountingProxy {
    addr: std::net::SocketAddr,
    up: Arc<std::sync::atomic::AtomicU64>,
    down: Arc<std::sync::atomic::AtomicU64>,
}

impl CountingProxy {
    async fn start(upstream: std::net::SocketAddr) -> CountingProxy {
        use std::sync::atomic::{AtomicU64, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let up = Arc::new(AtomicU64::new(0));
        let down = Arc::new(AtomicU64::new(0));
        let (u, d) = (Arc::clone(&up), Arc::clone(&down));
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let (u, d) = (Arc::clone(&u), Arc::clone(&d));
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    while let Ok(n) = cr.read(&mut buf).await {
                        if n == 0 || sw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                        u.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    let _ = sw.shutdown().await;
                });
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    while let Ok(n) = sr.read(&mut buf).await {
                        if n == 0 || cw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                        d.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    let _ = cw.shutdown().await;
                });
            }
        });
        CountingProxy { addr, up, down }
    }

    fn bytes(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering;
        (
            self.up.load(Ordering::Relaxed),
            self.down.load(Ordering::Relaxed),
        )
    }
}

/// Not a timed test: the cost of one poll through the port-forward against
/// one by pod IP (loopback, one pod, one after another), printed for
/// benches/PERFORMANCE.md ("Port-forward polls"). Time per poll (median and
/// 90th percentile) and the agent's bytes on the wire per poll: to the API
/// server (TLS, the websocket upgrade, the framed HTTP exchange) for the
/// port-forward, to the pod for the IP path (kept-alive and not). Asserts
/// only that every poll succeeded.
///
///   KURA_PF_COST_POLLS=500 scripts/e2e.sh cost_per_poll
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real API server and the kubelet stand-in: scripts/e2e.sh"]
async fn cost_per_poll() {
    use kura_agent::model::PodIdentity;
    use kura_agent::poll::{PollConfig, Poller};
    let polls: usize = std::env::var("KURA_PF_COST_POLLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let client = admin().await;
    apply_crd(&client, &shipped_crd()).await;
    let standin = Standin::start(Duration::ZERO);
    let node = create_node(&client, standin.port).await;
    let ns = create_namespace(&client).await;
    let (sim, _port) = node_local_fleet(
        &client,
        &ns,
        "cost",
        1,
        &node,
        &standin,
        Ipv4Addr::new(127, 63, 0, 1),
    )
    .await;
    let pod = &sim.pods()[0];
    let identity = Arc::new(PodIdentity {
        name: pod.name().into(),
        uid: pod.uid().into(),
        restart_count: 0,
        image: None,
        ip: None,
    });

    // The API server through a counting proxy (its certificate names
    // 127.0.0.1, so TLS verifies as before).
    let mut config = kube_config(None).await;
    let api_addr: std::net::SocketAddr = format!(
        "{}:{}",
        config.cluster_url.host().expect("host"),
        config.cluster_url.port_u16().expect("port")
    )
    .parse()
    .expect("API server address");
    let api_proxy = CountingProxy::start(api_addr).await;
    config.cluster_url = format!("https://{}", api_proxy.addr).parse().unwrap();
    let forwarding = Poller::with_port_forward(
        PollConfig::default(),
        Client::try_from(config).expect("client"),
    );
    let pod_proxy = CountingProxy::start(pod.addr()).await;
    let kept = Poller::new(PollConfig::default());
    let fresh = Poller::new(PollConfig {
        keep_alive: false,
        ..PollConfig::default()
    });

    let mut rows = Vec::new();
    for (path, proxy) in [
        ("port-forward", &api_proxy),
        ("pod IP, kept-alive", &pod_proxy),
        ("pod IP, new connection", &pod_proxy),
    ] {
        // One poll first: connections, TLS sessions and caches warmed.
        // The port-forward asks for the pod's own port (the address is
        // never connected to); the IP path goes through the proxy.
        let addr = if path == "port-forward" {
            pod.addr()
        } else {
            pod_proxy.addr
        };
        let target = [(Arc::clone(&identity), addr)];
        let sweep = || async {
            match path {
                "port-forward" => forwarding.poll_pods_port_forward(&ns, &target).await,
                "pod IP, kept-alive" => kept.poll_pods(&target).await,
                _ => fresh.poll_pods(&target).await,
            }
        };
        let _ = sweep().await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (up0, down0) = proxy.bytes();
        let mut times = Vec::with_capacity(polls);
        for _ in 0..polls {
            let started = std::time::Instant::now();
            let samples = sweep().await;
            times.push(started.elapsed());
            assert!(
                matches!(
                    samples[0].result,
                    kura_agent::model::SampleResult::Report(_)
                ),
                "{path}: {:?}",
                samples[0].result
            );
        }
        // Let closing handshakes pass the proxy before counting.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (up1, down1) = proxy.bytes();
        times.sort();
        let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
        rows.push(format!(
            "{path:<24} median {:>7.3} ms  p90 {:>7.3} ms  agent→ {:>6} B  ←agent {:>6} B per poll",
            at(0.5).as_secs_f64() * 1e3,
            at(0.9).as_secs_f64() * 1e3,
            (up1 - up0) / polls as u64,
            (down1 - down0) / polls as u64,
        ));
    }
    eprintln!("cost per poll, {polls} polls each (/status/rollout and /status/cluster):");
    for row in rows {
        eprintln!("  {row}");
    }
}
