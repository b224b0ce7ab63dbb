//! Plain HTTP on loopback for the agent's debug endpoint: a free port to
//! listen on, and one GET with `Connection: close`.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A port nothing listens on right now (127.0.0.1).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// `GET path` over plain HTTP/1.1 with `Connection: close`: the status
/// code and the body, `None` when the server cannot be reached or answers
/// nothing readable within the time limits (2 s to connect, 5 s to read).
pub async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut conn =
        tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr))
            .await
            .ok()?
            .ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    conn.write_all(request.as_bytes()).await.ok()?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut raw))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body_of(head, body)?))
}

/// The body as sent: `body` itself, or decoded when `head` says it is
/// chunked (`None`: malformed chunks). The streamed `/metrics` is chunked.
pub fn body_of(head: &str, body: &str) -> Option<String> {
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    if !chunked {
        return Some(body.to_owned());
    }
    let mut out = String::new();
    let mut rest = body;
    loop {
        let (size, after) = rest.split_once("\r\n")?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(out);
        }
        out.push_str(after.get(..size)?);
        rest = after.get(size..)?.strip_prefix("\r\n")?;
    }
}
