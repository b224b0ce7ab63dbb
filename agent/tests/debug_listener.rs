//! The debug server's listener and connection handling over real sockets on
//! loopback: kubelet's probes are answered at once while idle clients hold
//! connections open, busy clients are never reset, the number of open
//! connections stays bounded, and the default listen address serves IPv4
//! and IPv6.

use clap::Parser;
use kura_agent::cli::run::RunArgs;
use kura_agent::debug::{DebugServer, DebugState, IDLE_GRACE, MAX_WAITING};
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
    let server = DebugServer::bind(
        listen,
        // The initial lists are in: /readyz answers 200.
        DebugState::new(
            view,
            recorder.handle(),
            Arc::new(kura_agent::model::SystemClock),
        )
        .with_sync_probe(Arc::new(Vec::new)),
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
async fn probes_are_answered_at_once_while_more_idle_connections_than_the_room_are_held() {
    let server = start("127.0.0.1:0".parse().expect("addr")).await;
    // More clients than the waiting room connect and send nothing (as a
    // port scanner, a broken client or an attacker would).
    let held = MAX_WAITING + 64;
    let mut idle = Vec::with_capacity(held);
    for _ in 0..held {
        idle.push(TcpStream::connect(server.addr).await.expect("connect"));
    }
    // The room is full: past the grace the longest silent ones make room.
    tokio::time::sleep(IDLE_GRACE + Duration::from_millis(300)).await;

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
    let mut sorted: Vec<Duration> = latencies.iter().map(|(_, d)| *d).collect();
    sorted.sort();
    println!(
        "{} probes with {held} idle connections held: median {:?}, worst {:?}",
        sorted.len(),
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1]
    );
    for (path, took) in &latencies {
        assert!(
            *took < PROBE_BUDGET,
            "{path} took {took:?} with {held} idle connections held (budget {PROBE_BUDGET:?})"
        );
    }

    // The bound on waiting connections held: all but at most MAX_WAITING
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
        closed >= idle.len() - MAX_WAITING,
        "only {closed} of {} idle connections were closed: more than {MAX_WAITING} open",
        idle.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_keeps_asking_outlives_idle_newcomers() {
    // A scraper on a kept-alive connection holds a serving slot; idle
    // newcomers wait in the room and, when it overflows, shed each other,
    // never the scraper.
    let server = start("127.0.0.1:0".parse().expect("addr")).await;
    let mut scraper = TcpStream::connect(server.addr).await.expect("connect");
    let req = format!("GET /healthz HTTP/1.1\r\nHost: {}\r\n\r\n", server.addr);
    scraper.write_all(req.as_bytes()).await.expect("send");
    let mut buf = Vec::new();
    let answer = tokio::time::timeout(
        Duration::from_secs(5),
        read_response(&mut scraper, &mut buf),
    )
    .await
    .expect("answered");
    assert_eq!(answer, Some((200, false)));
    let mut idle = Vec::new();
    for _ in 0..MAX_WAITING {
        idle.push(TcpStream::connect(server.addr).await.expect("connect"));
    }
    tokio::time::sleep(IDLE_GRACE + Duration::from_millis(200)).await;
    for _ in 0..10 {
        idle.push(TcpStream::connect(server.addr).await.expect("connect"));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !closed_by_server(&mut scraper, Duration::from_millis(50)).await,
        "the scraper's connection was shed"
    );
    scraper.write_all(req.as_bytes()).await.expect("send again");
    let answer = tokio::time::timeout(
        Duration::from_secs(5),
        read_response(&mut scraper, &mut buf),
    )
    .await
    .expect("answered again");
    assert_eq!(answer, Some((200, false)));
    // The first idle connections were the ones shed.
    assert!(closed_by_server(&mut idle[0], Duration::from_millis(500)).await);
    assert!(!closed_by_server(&mut idle[MAX_WAITING], Duration::from_millis(20)).await);
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
        .debug
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

/// How a busy client's requests ended.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    answered: u64,
    /// Reset, closed before the answer, an unexpected status, or no answer
    /// within 10 s.
    failed: u64,
}

/// Reads one HTTP/1.1 response (headers and a Content-Length or chunked
/// body: `/metrics` is streamed) from `stream`: the status and whether
/// the server said it closes the connection. `None` when the connection
/// failed or closed first.
async fn read_response(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(u16, bool)> {
    buf.clear();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let closes = head.lines().any(|l| l.trim() == "connection: close");
    if head
        .lines()
        .any(|l| l.trim() == "transfer-encoding: chunked")
    {
        // The last chunk is empty: the body ends with "0\r\n\r\n" (no
        // trailers from this server).
        while !buf[head_end..].ends_with(b"0\r\n\r\n") {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        return Some((status, closes));
    }
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())?;
    while buf.len() < head_end + length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    Some((status, closes))
}

/// A client polling the server as fast as it answers until `until`: on one
/// kept-alive connection (reconnecting when the server says it closes) or a
/// new connection a request. Cycles through `/healthz`, `/metrics` and a
/// verdict (404 for the empty view).
async fn busy_client(addr: SocketAddr, keep_alive: bool, until: Instant) -> Tally {
    let paths = [
        ("/healthz", 200),
        ("/metrics", 200),
        ("/api/v1/instances/acme/eu-west/verdict", 404),
    ];
    let mut tally = Tally::default();
    let mut stream: Option<TcpStream> = None;
    let mut buf = Vec::new();
    let mut n = 0usize;
    while Instant::now() < until {
        let (path, expected) = paths[n % paths.len()];
        n += 1;
        let outcome = tokio::time::timeout(Duration::from_secs(10), async {
            if stream.is_none() {
                stream = Some(TcpStream::connect(addr).await.ok()?);
            }
            let s = stream.as_mut()?;
            let close = if keep_alive {
                ""
            } else {
                "Connection: close\r\n"
            };
            let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{close}\r\n");
            s.write_all(req.as_bytes()).await.ok()?;
            read_response(s, &mut buf).await
        })
        .await
        .ok()
        .flatten();
        match outcome {
            Some((status, closes)) if status == expected => {
                tally.answered += 1;
                if closes || !keep_alive {
                    stream = None;
                }
            }
            _ => {
                tally.failed += 1;
                stream = None;
            }
        }
    }
    tally
}

const BUSY_CLIENTS: usize = 200;

/// A probe as [`probe`] sends it; `None` when it was reset, closed without
/// an answer or not answered within 10 s.
async fn try_probe(addr: SocketAddr, path: &str) -> Option<(u16, Duration)> {
    let started = Instant::now();
    let mut buf = Vec::new();
    let (status, _) = tokio::time::timeout(Duration::from_secs(10), async {
        let mut stream = TcpStream::connect(addr).await.ok()?;
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: kube-probe/1.33\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(req.as_bytes()).await.ok()?;
        read_response(&mut stream, &mut buf).await
    })
    .await
    .ok()
    .flatten()?;
    Some((status, started.elapsed()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_clients_are_never_reset_and_probes_stay_fast_with_idle_connections_held() {
    // Issue 32 item 1: shedding the least recently active connection reset
    // 27-32 % of busy clients' requests. Both halves hold at once here:
    // 200 idle connections are held throughout; 200 busy clients (half on
    // kept-alive connections, half a connection a request) lose no request
    // while kubelet-like probes are answered; then, the busy clients gone,
    // every probe is answered within 100 ms.
    let server = start("127.0.0.1:0".parse().expect("addr")).await;
    let mut idle = Vec::with_capacity(IDLE_CONNECTIONS);
    for _ in 0..IDLE_CONNECTIONS {
        idle.push(TcpStream::connect(server.addr).await.expect("connect"));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;

    let until = Instant::now() + Duration::from_secs(3);
    let clients: Vec<_> = (0..BUSY_CLIENTS)
        .map(|n| tokio::spawn(busy_client(server.addr, n % 2 == 0, until)))
        .collect();
    let mut loaded_probes = Vec::new();
    let mut failed_probes = 0;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
        match try_probe(server.addr, "/healthz").await {
            Some(p) => loaded_probes.push(p),
            None => failed_probes += 1,
        }
    }
    let mut total = Tally::default();
    for client in clients {
        let t = client.await.expect("client");
        total.answered += t.answered;
        total.failed += t.failed;
    }
    let loaded_worst = loaded_probes.iter().map(|(_, d)| *d).max();
    println!(
        "{BUSY_CLIENTS} busy clients, {IDLE_CONNECTIONS} idle held: {} answered, {} failed; {} probes meanwhile, {failed_probes} failed, worst {loaded_worst:?}",
        total.answered,
        total.failed,
        loaded_probes.len()
    );

    // The busy clients are gone; the idle crowd stays (renewed).
    let mut latencies = Vec::new();
    for _ in 0..10 {
        for path in ["/healthz", "/readyz"] {
            match try_probe(server.addr, path).await {
                Some(p) => latencies.push(p),
                None => failed_probes += 1,
            }
        }
        for _ in 0..10 {
            idle.remove(0);
            idle.push(TcpStream::connect(server.addr).await.expect("connect"));
        }
    }
    let worst = latencies.iter().map(|(_, d)| *d).max().expect("probes");
    println!(
        "{} probes with {IDLE_CONNECTIONS} idle connections held: worst {worst:?}",
        latencies.len()
    );

    assert_eq!(total.failed, 0, "busy clients' requests failed: {total:?}");
    assert_eq!(failed_probes, 0, "probes failed");
    assert!(total.answered > 0);
    for (status, took) in loaded_probes.iter().chain(&latencies) {
        assert_eq!(*status, 200);
        assert!(
            *took < Duration::from_secs(1),
            "a probe took {took:?} (kubelet's timeout is 1 s)"
        );
    }
    assert!(
        worst < PROBE_BUDGET,
        "a probe took {worst:?} with {IDLE_CONNECTIONS} idle connections held (budget {PROBE_BUDGET:?})"
    );
}
