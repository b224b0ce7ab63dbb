//! Issue 44 item 1, over real sockets on loopback: clients that send their
//! request heads a byte at a time, or never read their answers, hold no
//! serving slot for long, and kubelet's probes are answered within its 1 s
//! timeout whatever they do.

use kura_agent::debug::{DebugServer, DebugState, Limits};
use kura_agent::view::FleetView;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// kubelet's probe timeout.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// The 200 slow clients: more than there are serving slots.
const CLIENTS: usize = 200;

struct Server {
    addr: SocketAddr,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// A server whose `/metrics` has `padding` extra series (about 1 KB
/// each), with `limits`.
async fn start(padding: usize, limits: Limits) -> Server {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    metrics::with_local_recorder(&recorder, || {
        for i in 0..padding {
            metrics::counter!("kura_test_padding", "i" => format!("{i:0>1000}")).absolute(1);
        }
    });
    let view = FleetView::new();
    let server = DebugServer::bind(
        "127.0.0.1:0".parse().expect("addr"),
        // The initial lists are in: /readyz answers 200.
        DebugState::new(
            view,
            recorder.handle(),
            Arc::new(kura_agent::model::SystemClock),
        )
        .with_sync_probe(Arc::new(Vec::new)),
    )
    .await
    .expect("bind")
    .with_limits(limits);
    let addr = server.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.serve(async move {
        let _ = stopped.await;
    }));
    Server { addr, _stop: stop }
}

/// One request on a new connection, as kubelet sends a probe: the status
/// and how long it took, or why it failed (reset, closed, or no answer
/// within `PROBE_TIMEOUT`).
async fn ask(addr: SocketAddr, path: &str) -> Result<(u16, Duration), String> {
    let started = Instant::now();
    let answer = tokio::time::timeout(PROBE_TIMEOUT, async {
        let mut stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: kube-probe/1.33\r\nConnection: close\r\n\r\n"
        );
        stream
            .write_all(req.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut raw = Vec::new();
        stream
            .read_to_end(&mut raw)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(raw)
    })
    .await
    .map_err(|_| format!("{path}: no answer within {PROBE_TIMEOUT:?}"))??;
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{path}: no status line in {text:?}"))?;
    Ok((status, started.elapsed()))
}

/// Probes `/healthz` and `/readyz` and asks for a verdict every 100 ms
/// for `during`; the failures, and how many were asked.
async fn probe_for(addr: SocketAddr, during: Duration) -> (Vec<String>, usize) {
    let until = Instant::now() + during;
    let mut failures = Vec::new();
    let mut asked = 0;
    while Instant::now() < until {
        for (path, want) in [
            ("/healthz", 200),
            ("/readyz", 200),
            ("/api/v1/instances/acme/eu-west/verdict", 404),
        ] {
            asked += 1;
            match ask(addr, path).await {
                Ok((status, _)) if status == want => {}
                Ok((status, took)) => failures.push(format!("{path}: {status} after {took:?}")),
                Err(e) => failures.push(e),
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (failures, asked)
}

/// Whether the server closed `stream` within `wait`, reading (and
/// counting) whatever it had sent first.
async fn closed_within(stream: &mut TcpStream, wait: Duration) -> Option<usize> {
    let mut received = 0;
    let mut buf = vec![0u8; 64 * 1024];
    tokio::time::timeout(wait, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return received,
                Ok(n) => received += n,
            }
        }
    })
    .await
    .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_sending_their_heads_a_byte_at_a_time_do_not_starve_probes() {
    let limits = Limits {
        header_read: Duration::from_secs(2),
        ..Limits::default()
    };
    let server = start(0, limits).await;
    // The attack: a byte of a request head every 300 ms, from more
    // clients than there are slots.
    let head = b"GET /api/v1/instances/acme/eu-west/verdict HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut slow = Vec::new();
    for _ in 0..CLIENTS {
        let stream = TcpStream::connect(server.addr).await.expect("connect");
        slow.push(tokio::spawn(async move {
            let mut stream = stream;
            let started = Instant::now();
            for byte in head {
                if stream.write_all(&[*byte]).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            // Closed by the server once the head was late: after how long.
            closed_within(&mut stream, Duration::from_secs(10))
                .await
                .map(|_| started.elapsed())
        }));
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    let (failures, asked) = probe_for(server.addr, Duration::from_millis(1500)).await;
    println!(
        "{CLIENTS} slow clients: {} of {asked} probes and verdicts failed: {failures:?}",
        failures.len()
    );
    assert!(failures.is_empty(), "{failures:?}");
    for client in slow {
        let closed_after = client.await.expect("client");
        let closed_after = closed_after.expect("the server closed the slow client");
        assert!(
            closed_after < limits.header_read + Duration::from_secs(1),
            "a slow client was closed only after {closed_after:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_stop_reading_their_scrape_lose_their_slots_and_probes_are_answered() {
    // Two slots (the bound is the same at 64; two keep the test light),
    // both held by scrapes nobody reads.
    let limits = Limits {
        slots: 2,
        write_stall: Duration::from_millis(500),
        ..Limits::default()
    };
    // A scrape of about 10 MB: more than the kernel buffers for a client
    // that reads nothing (the server's send buffer grows to 4 MiB at most;
    // the client's receive buffer is 4 KiB).
    let server = start(10_000, limits).await;
    let mut stuck = Vec::new();
    for _ in 0..limits.slots {
        let socket = socket2::Socket::new(
            socket2::Domain::IPV4,
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )
        .expect("socket");
        socket.set_recv_buffer_size(4096).expect("rcvbuf");
        socket.connect(&server.addr.into()).expect("connect");
        socket.set_nonblocking(true).expect("nonblocking");
        let mut stream = TcpStream::from_std(socket.into()).expect("tokio stream");
        let req = format!("GET /metrics HTTP/1.1\r\nHost: {}\r\n\r\n", server.addr);
        stream.write_all(req.as_bytes()).await.expect("send");
        stuck.push(stream);
    }
    // Every slot holds a scrape nobody reads: probes are still answered,
    // and the verdict once the stuck scrapes are cut.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (failures, asked) = probe_for(server.addr, Duration::from_millis(1000)).await;
    println!(
        "{} stuck scrapes: {} of {asked} probes and verdicts failed: {failures:?}",
        limits.slots,
        failures.len()
    );
    assert!(failures.is_empty(), "{failures:?}");
    let whole = {
        let mut s = TcpStream::connect(server.addr).await.expect("connect");
        let req = format!(
            "GET /metrics HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            server.addr
        );
        s.write_all(req.as_bytes()).await.expect("send");
        let mut all = Vec::new();
        s.read_to_end(&mut all).await.expect("read");
        all.len()
    };
    assert!(whole > 9_000_000, "the scrape is {whole} bytes");
    // Each stuck scrape was cut: the server closed the connection before
    // the whole body was sent.
    for stream in &mut stuck {
        let received = closed_within(stream, Duration::from_secs(5))
            .await
            .expect("the server closed the stuck scrape");
        assert!(
            received < whole,
            "a client that stopped reading was sent all {whole} bytes"
        );
    }
}
