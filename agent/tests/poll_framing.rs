//! The poller against scripted raw HTTP/1.1 answers on loopback: framing a
//! hand parser got wrong and hyper gets right (or that the poller refuses
//! around hyper), each ending as a report or a short stable error. Every
//! answer carries a valid report, so only the framing decides.

use kura_agent::poll::{PollConfig, PollError, Poller};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A valid report, the body of every answer below.
fn report() -> Vec<u8> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/reports/g4-pull-sync.json");
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A head with these header lines and a `Content-Length` of the report,
/// then the report.
fn answer(headers: &[&[u8]]) -> Vec<u8> {
    let body = report();
    let mut out = b"HTTP/1.1 200 OK\r\n".to_vec();
    for h in headers {
        out.extend_from_slice(h);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
    out.extend_from_slice(&body);
    out
}

/// A loopback server answering every request on every connection with
/// `raw`, keeping connections open. Returns the report URL and a count of
/// accepted connections.
async fn serve(raw: Vec<u8>) -> (http::Uri, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!("http://{}/status/rollout", listener.local_addr().unwrap())
        .parse()
        .unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    let raw = Arc::new(raw);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let raw = Arc::clone(&raw);
            tokio::spawn(async move {
                let mut req = Vec::new();
                let mut buf = [0u8; 1024];
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                    while let Some(end) = req.windows(4).position(|w| w == b"\r\n\r\n") {
                        req.drain(..end + 4);
                        if s.write_all(&raw).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (uri, accepted)
}

fn poller() -> Poller {
    Poller::new(PollConfig {
        timeout: Duration::from_secs(2),
        retry_delay: Duration::from_millis(20),
        ..PollConfig::default()
    })
}

/// Two polls of `raw` through one poller (the second on the kept
/// connection): both results.
async fn twice(raw: Vec<u8>) -> [Result<(), PollError>; 2] {
    let (uri, _) = serve(raw).await;
    let p = poller();
    [p.fetch(&uri).await.map(drop), p.fetch(&uri).await.map(drop)]
}

#[tokio::test]
async fn gzip_then_chunked_is_refused_with_its_reason() {
    // A real gzip stream of `{"ready":true}`, chunked: hyper would undo the
    // chunking and hand back the gzip bytes.
    let gzip: &[u8] = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03\xab\x56\x2a\x4a\x4d\x4c\
        \xa9\x54\xb2\x2a\x29\x2a\x4d\xad\x05\x00\x23\x05\x2a\x96\x0e\x00\x00\x00";
    let mut raw = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
        Transfer-Encoding: gzip, chunked\r\n\r\n"
        .to_vec();
    raw.extend_from_slice(format!("{:x}\r\n", gzip.len()).as_bytes());
    raw.extend_from_slice(gzip);
    raw.extend_from_slice(b"\r\n0\r\n\r\n");
    let (uri, _) = serve(raw).await;
    let err = poller().fetch(&uri).await.unwrap_err();
    assert_eq!(err, PollError::TransferCoding);
    assert_eq!(
        (err.to_string().as_str(), err.reason()),
        ("unsupported transfer coding", "body_error")
    );
    // The same coding on two lines is the same list.
    let mut raw =
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
    raw.extend_from_slice(b"3\r\nabc\r\n0\r\n\r\n");
    let (uri, _) = serve(raw).await;
    assert_eq!(
        poller().fetch(&uri).await.unwrap_err(),
        PollError::TransferCoding
    );
}

#[tokio::test]
async fn a_signed_or_padded_content_length_is_refused() {
    let body = report();
    for length in [
        format!("+{}", body.len()),
        format!("-{}", body.len()),
        // U+00A0 NO-BREAK SPACE around the digits: `str::trim` strips it.
        format!("\u{a0}{}\u{a0}", body.len()),
        format!("0x{:x}", body.len()),
    ] {
        let mut raw = b"HTTP/1.1 200 OK\r\nContent-Length: ".to_vec();
        raw.extend_from_slice(length.as_bytes());
        raw.extend_from_slice(b"\r\n\r\n");
        raw.extend_from_slice(&body);
        let (uri, _) = serve(raw).await;
        let err = poller().fetch(&uri).await.unwrap_err();
        assert_eq!(err, PollError::Protocol, "Content-Length: {length:?}");
        assert_eq!(err.to_string(), "invalid http response");
    }
    // Digits only, spaces and tabs around them are fine.
    let (uri, _) = serve(answer(&[])).await;
    assert!(poller().fetch(&uri).await.is_ok());
}

#[tokio::test]
async fn an_obs_text_header_value_is_accepted_and_the_connection_kept() {
    let raw = answer(&[b"Server: caf\xe9", b"X-Note: \x80\xff raw bytes"]);
    let (uri, accepted) = serve(raw).await;
    let p = poller();
    assert!(p.fetch(&uri).await.is_ok());
    assert!(p.fetch(&uri).await.is_ok());
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "one kept connection");
}

#[tokio::test]
async fn an_obs_fold_header_is_accepted() {
    let raw = answer(&[
        b"X-Folded: first part",
        b"  continued here",
        b"Server: kura",
    ]);
    assert_eq!(twice(raw).await, [Ok(()), Ok(())]);
}

#[tokio::test]
async fn a_hundred_headers_within_the_head_limit_are_accepted() {
    let lines: Vec<Vec<u8>> = (0..99)
        .map(|i| format!("X-Header-{i:03}: value number {i} of a long head").into_bytes())
        .collect();
    let refs: Vec<&[u8]> = lines.iter().map(Vec::as_slice).collect();
    // 99 lines and the Content-Length: 100 headers, about 4.6 KiB.
    let raw = answer(&refs);
    assert!(raw.len() - report().len() < 16 * 1024);
    assert_eq!(twice(raw).await, [Ok(()), Ok(())]);

    // One more is past hyper's 100: refused, not truncated.
    let lines: Vec<Vec<u8>> = (0..100)
        .map(|i| format!("X-Header-{i:03}: v").into_bytes())
        .collect();
    let refs: Vec<&[u8]> = lines.iter().map(Vec::as_slice).collect();
    let (uri, _) = serve(answer(&refs)).await;
    assert_eq!(poller().fetch(&uri).await.unwrap_err(), PollError::Protocol);
}

#[tokio::test]
async fn a_head_over_the_limit_is_refused() {
    // Few headers, but longer than the 16 KiB head limit in all.
    let long = format!("X-Long: {}", "a".repeat(17 * 1024));
    let (uri, _) = serve(answer(&[long.as_bytes()])).await;
    assert_eq!(poller().fetch(&uri).await.unwrap_err(), PollError::Protocol);
}

#[tokio::test]
async fn content_length_with_chunked_is_refused() {
    let mut raw =
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n".to_vec();
    raw.extend_from_slice(b"3\r\nabc\r\n0\r\n\r\n");
    let (uri, _) = serve(raw).await;
    assert_eq!(poller().fetch(&uri).await.unwrap_err(), PollError::Protocol);
}

#[tokio::test]
async fn endless_interim_answers_end_in_the_timeout() {
    let raw = b"HTTP/1.1 100 Continue\r\n\r\n".repeat(20_000);
    let (uri, _) = serve(raw).await;
    let p = Poller::new(PollConfig {
        timeout: Duration::from_millis(300),
        ..PollConfig::default()
    });
    let started = std::time::Instant::now();
    assert_eq!(p.fetch(&uri).await.unwrap_err(), PollError::Timeout);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

/// A loopback server that answers the first request on each connection
/// with `head`, then writes `drip` every 20 ms until the client goes.
async fn dripping(head: &'static [u8], drip: &'static [u8]) -> http::Uri {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!("http://{}/status/rollout", listener.local_addr().unwrap())
        .parse()
        .unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut req = Vec::new();
                let mut buf = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                if s.write_all(head).await.is_err() {
                    return;
                }
                // Bounded: 30 s at most, far past any timeout below.
                for _ in 0..1500 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    if s.write_all(drip).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    uri
}

/// One poll with a 300 ms timeout: its result and how long it took.
async fn timed_poll(uri: &http::Uri) -> (PollError, Duration) {
    let p = Poller::new(PollConfig {
        timeout: Duration::from_millis(300),
        ..PollConfig::default()
    });
    let started = std::time::Instant::now();
    let err = p.fetch(uri).await.unwrap_err();
    (err, started.elapsed())
}

#[tokio::test]
async fn a_slow_head_a_slow_body_and_endless_trailers_end_in_the_timeout() {
    let cases: [(&str, &'static [u8], &'static [u8]); 3] = [
        // A head that never ends: a header line every 20 ms.
        ("slow head", b"HTTP/1.1 200 OK\r\n", b"X-Slow: 1\r\n"),
        // A declared body a byte at a time.
        (
            "slow body",
            b"HTTP/1.1 200 OK\r\nContent-Length: 60000\r\n\r\n{",
            b" ",
        ),
        // The last chunk, then trailer lines that never end.
        (
            "endless trailers",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n",
            b"X-Trailer: 1\r\n",
        ),
    ];
    for (what, head, drip) in cases {
        let uri = dripping(head, drip).await;
        let (err, took) = timed_poll(&uri).await;
        assert_eq!(err, PollError::Timeout, "{what}");
        assert!(took < Duration::from_secs(2), "{what}: {took:?}");
    }
}
