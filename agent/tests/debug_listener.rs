//! The debug server's listener and connection handling over real sockets on
//! loopback: kubelet's probes are answered at once while idle clients hold
//! connections open, the number of open connections stays bounded, and the
//! default listen address serves IPv4 and IPv6.

use clap::Parser;
use kura_agent::cli::run::RunArgs;
use kura_agent::debug::{DebugServer, DebugState, MAX_CONNECTIONS};
use kura_agent::view::FleetView;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// kubelet's probe timeout is 1 s; the bound is 100 ms.
const PROBE_BUDGET: Duration = Duration::from_millis(100);
const IDLE_CONNECTIONS: usize = 200;

struct Server {
    addr: SocketAddr,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn start(listen: SocketAddr) -> Server {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let view = FleetView::new();
    // The initial lists are in: /readyz answers 200.
    view.set_sync_probe(Arc::new(Vec::new));
    let server = DebugServer::bind(
        listen,
        DebugState {
            view,
            metrics: recorder.handle(),
            clock: Arc::new(kura_agent::model::SystemClock),
        },
    )
    .await
    .expect("bind");
    let addr = server.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.serve(async move {
        let _ = stopped.await;
    }));
    Server { addr, _stop: stop }
}

/// One probe as kubelet sends it, on a new connection: the status code and
/// how long connect-to-last-byte took.
async fn probe(addr: SocketAddr, path: &str) -> (u16, Duration) {
    let started = Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(15), async {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: kube-probe/1.33\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(req.as_bytes()).await.expect("send");
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.expect("read");
        raw
    })
    .await
    .expect("the probe is answered within 15 s");
    let elapsed = started.elapsed();
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    (status, elapsed)
}

/// Whether the server has closed `stream` (EOF or reset within `wait`).
async fn closed_by_server(stream: &mut TcpStream, wait: Duration) -> bool {
    let mut byte = [0u8; 1];
    match tokio::time::timeout(wait, stream.read(&mut byte)).await {
        Ok(Ok(0)) | Ok(Err(_)) => true,
        Ok(Ok(_)) => panic!("an idle connection was sent data"),
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_are_answered_at_once_while_200_idle_connections_are_held() {
    let server = start("127.0.0.1:0".parse().expect("addr")).await;
    // 200 clients connect and send nothing (as a port scanner, a broken
    // client or an attacker would).
    let mut idle = Vec::with_capacity(IDLE_CONNECTIONS);
    for _ in 0..IDLE_CONNECTIONS {
        idle.push(TcpStream::connect(server.addr).await.expect("connect"));
    }
    // Let the server take them all off its queue.
    tokio::time::sleep(Duration::from_millis(200)).await;

    let mut latencies = Vec::new();
    for round in 0..10 {
        for path in ["/healthz", "/readyz"] {
            let (status, took) = probe(server.addr, path).await;
            assert_eq!(status, 200, "{path} in round {round}");
            latencies.push((path, took));
        }
        // The idle crowd is renewed between probes, as the attack did.
        for _ in 0..10 {
            idle.remove(0);
            idle.push(TcpStream::connect(server.addr).await.expect("connect"));
        }
    }
    let worst = latencies.iter().map(|(_, d)| *d).max().expect("probes");
    let mut sorted: Vec<Duration> = latencies.iter().map(|(_, d)| *d).collect();
    sorted.sort();
    println!(
        "{} probes with {IDLE_CONNECTIONS} idle connections held: median {:?}, worst {worst:?}",
        sorted.len(),
        sorted[sorted.len() / 2]
    );
    for (path, took) in &latencies {
        assert!(
            *took < PROBE_BUDGET,
            "{path} took {took:?} with {IDLE_CONNECTIONS} idle connections held (budget {PROBE_BUDGET:?})"
        );
    }

    // The bound on open connections held: all but at most MAX_CONNECTIONS
    // of the idle ones were closed by the server.
    let mut closed = 0;
    for stream in &mut idle {
        if closed_by_server(stream, Duration::from_millis(20)).await {
            closed += 1;
        }
    }
    println!(
        "{closed} of {} idle connections closed by the server",
        idle.len()
    );
    assert!(
        closed >= idle.len() - MAX_CONNECTIONS,
        "only {closed} of {} idle connections were closed: more than {MAX_CONNECTIONS} open",
        idle.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_keeps_asking_outlives_idle_newcomers() {
    // A scraper on a kept-alive connection that just asked is the most
    // recently active: fewer than MAX_CONNECTIONS idle newcomers never shed it.
    let server = start("127.0.0.1:0".parse().expect("addr")).await;
    let mut scraper = TcpStream::connect(server.addr).await.expect("connect");
    let mut idle = Vec::new();
    for _ in 0..(MAX_CONNECTIONS - 2) {
        idle.push(TcpStream::connect(server.addr).await.expect("connect"));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let req = format!("GET /healthz HTTP/1.1\r\nHost: {}\r\n\r\n", server.addr);
    scraper.write_all(req.as_bytes()).await.expect("send");
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), scraper.read(&mut buf))
        .await
        .expect("answered")
        .expect("read");
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );
    // Idle newcomers fill the table and shed the older idle connections.
    for _ in 0..(MAX_CONNECTIONS - 2) {
        idle.push(TcpStream::connect(server.addr).await.expect("connect"));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !closed_by_server(&mut scraper, Duration::from_millis(50)).await,
        "the scraper's connection was shed"
    );
    scraper.write_all(req.as_bytes()).await.expect("send again");
    let n = tokio::time::timeout(Duration::from_secs(5), scraper.read(&mut buf))
        .await
        .expect("answered again")
        .expect("read");
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );
    // The first idle connections were the ones shed.
    assert!(closed_by_server(&mut idle[0], Duration::from_millis(500)).await);
}

#[derive(Parser)]
struct Run {
    #[command(flatten)]
    args: RunArgs,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_listen_address_serves_ipv4_and_ipv6() {
    let default = Run::try_parse_from(["run"])
        .expect("defaults")
        .args
        .debug_listen;
    // The default, on a free port.
    let server = start(SocketAddr::new(default.ip(), 0)).await;
    let port = server.addr.port();
    for client in ["127.0.0.1", "::1"] {
        let addr = SocketAddr::new(client.parse().expect("ip"), port);
        let (status, _) = probe(addr, "/healthz").await;
        assert_eq!(status, 200, "/healthz over {addr} (listening on {default})");
        let (status, _) = probe(addr, "/readyz").await;
        assert_eq!(status, 200, "/readyz over {addr} (listening on {default})");
    }
}
