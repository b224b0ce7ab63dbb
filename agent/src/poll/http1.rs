//! A minimal HTTP/1.1 client for the one request the agent makes: `GET` of
//! a small body from a known address, with one idle connection per address
//! kept between sweeps.
//!
//! Why not hyper's client: every connection hyper keeps alive holds its own
//! task, a request channel and read and write buffers, about 18 KiB in all;
//! at 10,000 pods that alone is 176 MiB. Here an idle connection is its
//! socket and nothing else (a few hundred bytes), and a request's buffer
//! lives only while the request does. Responses are parsed with `httparse`
//! (the parser hyper itself uses); bodies may be framed by
//! `content-length`, by chunked transfer coding, or by the connection's
//! close. Anything else is refused as [`PollError::Protocol`].

use crate::poll::PollError;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest response head (status line and headers) accepted, in bytes.
pub const MAX_HEAD: usize = 16 * 1024;
/// Most headers accepted in one response.
const MAX_HEADERS: usize = 48;
/// A chunk-size line longer than this is refused (hex digits plus
/// extensions).
const MAX_CHUNK_LINE: usize = 1024;

/// Where and what to `GET`.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The address to connect to.
    pub addr: SocketAddr,
    /// The `Host` header; `None`: the address itself (`ip:port`, what a
    /// pod gets).
    pub host: Option<&'a str>,
    /// The request path.
    pub path: &'a str,
}

/// Per-request settings.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Limit on the TCP connect alone.
    pub connect_timeout: Duration,
    /// Largest body accepted, in bytes.
    pub body_limit: usize,
    /// Size of the first read buffer; it grows by doubling when a response
    /// does not fit.
    pub read_buffer: usize,
}

/// The idle connections kept between requests: at most one per address,
/// dropped after `idle_timeout` unused (swept lazily).
#[derive(Debug)]
pub struct Client {
    keep_alive: bool,
    idle_timeout: Duration,
    user_agent: &'static str,
    pool: Mutex<Pool>,
}

#[derive(Debug)]
struct Pool {
    idle: HashMap<SocketAddr, Idle>,
    last_sweep: Instant,
}

#[derive(Debug)]
struct Idle {
    stream: TcpStream,
    since: Instant,
}

/// How a response's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Length(usize),
    Chunked,
    Close,
}

/// The outcome of one exchange on one connection.
enum Exchange {
    /// The connection failed before any byte of a response arrived: on a
    /// reused connection the pod most likely closed it while idle.
    NoResponse,
    /// A body, and the connection if it may be used again.
    Done(Vec<u8>, Option<TcpStream>),
    Failed(PollError),
}

impl Client {
    /// A client; with `keep_alive` false every request opens and closes
    /// its own connection.
    pub fn new(keep_alive: bool, idle_timeout: Duration, user_agent: &'static str) -> Client {
        Client {
            keep_alive,
            idle_timeout,
            user_agent,
            pool: Mutex::new(Pool {
                idle: HashMap::new(),
                last_sweep: Instant::now(),
            }),
        }
    }

    /// Connections idle in the pool now.
    pub fn idle_connections(&self) -> usize {
        self.lock().idle.len()
    }

    /// `GET` the target and return the body of a `200` answer. Any other
    /// status is [`PollError::HttpStatus`]; nothing is followed. A kept
    /// connection that turns out closed is replaced by a new one at once,
    /// without counting as a retry.
    pub async fn get(&self, target: Target<'_>, limits: Limits) -> Result<Vec<u8>, PollError> {
        let request = {
            // Scoped: a `dyn Display` is not `Sync`, and this future is sent.
            let host: &dyn std::fmt::Display = match &target.host {
                Some(host) => host,
                None => &target.addr,
            };
            format!(
                "GET {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: {}\r\nAccept: application/json\r\n\r\n",
                target.path, self.user_agent
            )
        };
        if let Some(stream) = self.checkout(target.addr) {
            let done = exchange(stream, request.as_bytes(), limits).await;
            if !matches!(done, Exchange::NoResponse) {
                return self.finish(target.addr, done);
            }
        }
        let stream = connect(target.addr, limits.connect_timeout).await?;
        let done = exchange(stream, request.as_bytes(), limits).await;
        self.finish(target.addr, done)
    }

    fn finish(&self, addr: SocketAddr, done: Exchange) -> Result<Vec<u8>, PollError> {
        match done {
            Exchange::Done(body, stream) => {
                if let Some(stream) = stream.filter(|_| self.keep_alive) {
                    self.checkin(addr, stream);
                }
                Ok(body)
            }
            Exchange::Failed(e) => Err(e),
            Exchange::NoResponse => Err(PollError::Closed),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The idle connection to `addr`, if there is one that has not been
    /// closed by the other side.
    fn checkout(&self, addr: SocketAddr) -> Option<TcpStream> {
        if !self.keep_alive {
            return None;
        }
        let idle = self.lock().idle.remove(&addr)?;
        if idle.since.elapsed() > self.idle_timeout {
            return None;
        }
        // An idle connection has nothing to read: end of stream, stray bytes
        // or an error all mean it cannot carry the next exchange.
        let mut probe = [0u8; 1];
        match idle.stream.try_read(&mut probe) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Some(idle.stream),
            _ => None,
        }
    }

    fn checkin(&self, addr: SocketAddr, stream: TcpStream) {
        let now = Instant::now();
        let mut pool = self.lock();
        if now.duration_since(pool.last_sweep) > self.idle_timeout / 2 {
            let timeout = self.idle_timeout;
            pool.idle
                .retain(|_, i| now.duration_since(i.since) <= timeout);
            pool.last_sweep = now;
        }
        pool.idle.insert(addr, Idle { stream, since: now });
    }
}

async fn connect(addr: SocketAddr, timeout: Duration) -> Result<TcpStream, PollError> {
    let stream = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Err(_) => return Err(PollError::ConnectTimeout),
        Ok(Err(e)) => {
            return Err(match e.kind() {
                std::io::ErrorKind::ConnectionRefused => PollError::Refused,
                std::io::ErrorKind::TimedOut => PollError::ConnectTimeout,
                _ => PollError::Connect,
            });
        }
        Ok(Ok(s)) => s,
    };
    // Best effort: a request is one small write, Nagle only delays it.
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// Read more bytes into `buf`, growing it by doubling but by no more than
/// what `max` bytes in all need. Returns how many bytes were read (0 at the
/// end of the stream).
async fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>, max: usize) -> std::io::Result<usize> {
    if buf.len() == buf.capacity() {
        let grow = buf.capacity().max(1024).min(max.saturating_sub(buf.len()));
        buf.reserve_exact(grow.max(1));
    }
    stream.read_buf(buf).await
}

async fn exchange(mut stream: TcpStream, request: &[u8], limits: Limits) -> Exchange {
    if stream.write_all(request).await.is_err() {
        return Exchange::NoResponse;
    }
    let mut buf: Vec<u8> = Vec::with_capacity(limits.read_buffer.max(256));
    // The head, skipping any 1xx interim responses.
    let (status, framing, reusable, head_len) = loop {
        match parse_head(&buf) {
            Ok(Some(head)) if (100..200).contains(&head.status) && head.status != 101 => {
                buf.drain(..head.len);
            }
            Ok(Some(head)) => break (head.status, head.framing, head.reusable, head.len),
            Ok(None) if buf.len() >= MAX_HEAD => return Exchange::Failed(PollError::Protocol),
            Ok(None) => {
                let nothing_yet = buf.is_empty();
                match fill(&mut stream, &mut buf, MAX_HEAD).await {
                    Ok(0) | Err(_) if nothing_yet => return Exchange::NoResponse,
                    Ok(0) | Err(_) => return Exchange::Failed(PollError::Closed),
                    Ok(_) => {}
                }
            }
            Err(e) => return Exchange::Failed(e),
        }
    };
    if status != 200 {
        return Exchange::Failed(PollError::HttpStatus(status));
    }
    buf.drain(..head_len);
    let limit = limits.body_limit;
    let body = match framing {
        Framing::Length(n) if n > limit => Err(PollError::TooLarge { limit }),
        Framing::Length(n) => read_length(&mut stream, buf, n).await,
        Framing::Chunked => read_chunked(&mut stream, buf, limit).await,
        Framing::Close => read_to_close(&mut stream, buf, limit).await,
    };
    match body {
        Ok((body, clean)) => {
            let keep = reusable && clean && framing != Framing::Close;
            Exchange::Done(body, keep.then_some(stream))
        }
        Err(e) => Exchange::Failed(e),
    }
}

struct Head {
    status: u16,
    framing: Framing,
    reusable: bool,
    len: usize,
}

/// Parse a response head from the start of `buf`: `None` while incomplete.
fn parse_head(buf: &[u8]) -> Result<Option<Head>, PollError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(PollError::Protocol),
    };
    let status = resp.code.ok_or(PollError::Protocol)?;
    let mut length: Option<usize> = None;
    let mut chunked = false;
    let mut close = resp.version != Some(1);
    for h in resp.headers.iter() {
        let value = std::str::from_utf8(h.value).map_err(|_| PollError::Protocol)?;
        if h.name.eq_ignore_ascii_case("content-length") {
            let n: usize = value.trim().parse().map_err(|_| PollError::Protocol)?;
            if length.is_some_and(|l| l != n) {
                return Err(PollError::Protocol);
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            // Only chunked is understood; it must be the last coding.
            let last = value.rsplit(',').next().unwrap_or("").trim();
            if !last.eq_ignore_ascii_case("chunked") {
                return Err(PollError::Protocol);
            }
            chunked = true;
        } else if h.name.eq_ignore_ascii_case("connection") {
            close |= value
                .split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("close"));
        }
    }
    let framing = match (chunked, length) {
        // Both is a smuggling shape: refuse it.
        (true, Some(_)) => return Err(PollError::Protocol),
        (true, None) => Framing::Chunked,
        (false, Some(n)) => Framing::Length(n),
        (false, None) => Framing::Close,
    };
    Ok(Some(Head {
        status,
        framing,
        reusable: !close,
        len,
    }))
}

/// A body of exactly `n` bytes. `clean` is false when more bytes than that
/// came (the connection then cannot be trusted with another exchange).
async fn read_length(
    stream: &mut TcpStream,
    mut buf: Vec<u8>,
    n: usize,
) -> Result<(Vec<u8>, bool), PollError> {
    while buf.len() < n {
        match fill(stream, &mut buf, n).await {
            Ok(0) | Err(_) => return Err(PollError::Body),
            Ok(_) => {}
        }
    }
    let clean = buf.len() == n;
    buf.truncate(n);
    Ok((buf, clean))
}

/// A body up to the end of the stream, at most `limit` bytes.
async fn read_to_close(
    stream: &mut TcpStream,
    mut buf: Vec<u8>,
    limit: usize,
) -> Result<(Vec<u8>, bool), PollError> {
    loop {
        if buf.len() > limit {
            return Err(PollError::TooLarge { limit });
        }
        match fill(stream, &mut buf, limit + 1).await {
            Ok(0) => return Ok((buf, false)),
            Ok(_) => {}
            Err(_) => return Err(PollError::Body),
        }
    }
}

/// A chunked body, decoded, at most `limit` bytes. `raw` holds what was
/// read past the head.
async fn read_chunked(
    stream: &mut TcpStream,
    mut raw: Vec<u8>,
    limit: usize,
) -> Result<(Vec<u8>, bool), PollError> {
    let mut body = Vec::new();
    let mut decoder = Chunked::default();
    let mut pos = 0;
    loop {
        match decoder.step(&raw[pos..], &mut body, limit)? {
            Step::Consumed(n) => pos += n,
            Step::Done(n) => return Ok((body, pos + n == raw.len())),
            Step::NeedMore => {
                // Keep only the unparsed tail, then read more.
                raw.drain(..pos);
                pos = 0;
                let max = raw.len() + MAX_CHUNK_LINE + limit.saturating_sub(body.len());
                match fill(stream, &mut raw, max).await {
                    Ok(0) | Err(_) => return Err(PollError::Body),
                    Ok(_) => {}
                }
            }
        }
    }
}

/// Where the chunked decoder stands.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Chunked {
    /// Expecting a chunk-size line.
    #[default]
    Size,
    /// Inside a chunk's data, this many bytes left.
    Data(usize),
    /// Expecting the CRLF after a chunk's data.
    DataEnd,
    /// After the last chunk: trailer lines until an empty one.
    Trailer,
}

enum Step {
    Consumed(usize),
    Done(usize),
    NeedMore,
}

impl Chunked {
    /// Decode what `input` allows; `Consumed(0)` never comes back.
    fn step(&mut self, input: &[u8], body: &mut Vec<u8>, limit: usize) -> Result<Step, PollError> {
        match *self {
            Chunked::Size => match httparse::parse_chunk_size(input) {
                Ok(httparse::Status::Complete((used, size))) => {
                    let size = usize::try_from(size).map_err(|_| PollError::TooLarge { limit })?;
                    if body.len().saturating_add(size) > limit {
                        return Err(PollError::TooLarge { limit });
                    }
                    *self = if size == 0 {
                        Chunked::Trailer
                    } else {
                        Chunked::Data(size)
                    };
                    Ok(Step::Consumed(used))
                }
                Ok(httparse::Status::Partial) if input.len() > MAX_CHUNK_LINE => {
                    Err(PollError::Protocol)
                }
                Ok(httparse::Status::Partial) => Ok(Step::NeedMore),
                Err(_) => Err(PollError::Protocol),
            },
            Chunked::Data(left) => {
                if input.is_empty() {
                    return Ok(Step::NeedMore);
                }
                let take = left.min(input.len());
                body.extend_from_slice(&input[..take]);
                *self = if take == left {
                    Chunked::DataEnd
                } else {
                    Chunked::Data(left - take)
                };
                Ok(Step::Consumed(take))
            }
            Chunked::DataEnd => match input {
                [b'\r', b'\n', ..] => {
                    *self = Chunked::Size;
                    Ok(Step::Consumed(2))
                }
                [] | [b'\r'] => Ok(Step::NeedMore),
                _ => Err(PollError::Protocol),
            },
            Chunked::Trailer => match input.iter().position(|&b| b == b'\n') {
                // The empty line ends the message.
                Some(1) if input[0] == b'\r' => Ok(Step::Done(2)),
                Some(0) => Ok(Step::Done(1)),
                Some(i) => Ok(Step::Consumed(i + 1)),
                None if input.len() > MAX_HEAD => Err(PollError::Protocol),
                None => Ok(Step::NeedMore),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    const LIMITS: Limits = Limits {
        connect_timeout: Duration::from_secs(1),
        body_limit: 64,
        read_buffer: 16,
    };

    /// A loopback server that answers each accepted connection's requests
    /// with the given raw responses in turn (one per request read), then
    /// closes it. Returns its address and a count of accepted connections.
    async fn server(
        script: Vec<Vec<&'static [u8]>>,
    ) -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            for answers in script {
                let (mut s, _) = listener.accept().await.unwrap();
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    for answer in answers {
                        let mut req = Vec::new();
                        while !req.ends_with(b"\r\n\r\n") {
                            let mut b = [0u8; 256];
                            let n = s.read(&mut b).await.unwrap();
                            if n == 0 {
                                return;
                            }
                            req.extend_from_slice(&b[..n]);
                        }
                        // Write in small pieces to exercise partial reads.
                        for piece in answer.chunks(7) {
                            s.write_all(piece).await.unwrap();
                            s.flush().await.unwrap();
                        }
                    }
                });
            }
        });
        (addr, accepted)
    }

    fn target(addr: &SocketAddr) -> Target<'static> {
        Target {
            addr: *addr,
            host: Some("pod"),
            path: "/status/rollout",
        }
    }

    fn client() -> Client {
        Client::new(true, Duration::from_secs(60), "test")
    }

    #[tokio::test]
    async fn content_length_body_and_connection_reused() {
        let ok: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        let (addr, accepted) = server(vec![vec![ok, ok]]).await;
        let c = client();
        assert_eq!(c.get(target(&addr), LIMITS).await.unwrap(), b"hello");
        assert_eq!(c.idle_connections(), 1);
        assert_eq!(c.get(target(&addr), LIMITS).await.unwrap(), b"hello");
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn chunked_body_with_extension_and_trailer() {
        let ok: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
            3;ext=1\r\nabc\r\n4\r\ndefg\r\n0\r\nX-Trailer: 1\r\n\r\n";
        let (addr, _) = server(vec![vec![ok, ok]]).await;
        let c = client();
        assert_eq!(c.get(target(&addr), LIMITS).await.unwrap(), b"abcdefg");
        assert_eq!(c.idle_connections(), 1, "a clean chunked end keeps it");
        assert_eq!(c.get(target(&addr), LIMITS).await.unwrap(), b"abcdefg");
    }

    #[tokio::test]
    async fn interim_responses_are_skipped() {
        let ok: &[u8] =
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        let (addr, _) = server(vec![vec![ok]]).await;
        assert_eq!(client().get(target(&addr), LIMITS).await.unwrap(), b"ok");
    }

    #[tokio::test]
    async fn close_delimited_and_connection_close_are_not_kept() {
        let close: &[u8] = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok";
        let eof: &[u8] = b"HTTP/1.0 200 OK\r\n\r\nuntil the end";
        let (addr, accepted) = server(vec![vec![close], vec![eof]]).await;
        let c = client();
        assert_eq!(c.get(target(&addr), LIMITS).await.unwrap(), b"ok");
        assert_eq!(c.idle_connections(), 0);
        assert_eq!(
            c.get(target(&addr), LIMITS).await.unwrap(),
            b"until the end"
        );
        assert_eq!(c.idle_connections(), 0);
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn stray_bytes_after_the_body_drop_the_connection() {
        let extra: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA";
        let (addr, _) = server(vec![vec![extra]]).await;
        let c = client();
        assert_eq!(c.get(target(&addr), LIMITS).await.unwrap(), b"ok");
        assert_eq!(c.idle_connections(), 0);
    }

    #[tokio::test]
    async fn a_kept_connection_closed_by_the_server_is_replaced_without_error() {
        let ok: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        // The first connection answers once, then the server closes it.
        let (addr, accepted) = server(vec![vec![ok], vec![ok]]).await;
        let c = client();
        assert_eq!(c.get(target(&addr), LIMITS).await.unwrap(), b"ok");
        assert_eq!(c.idle_connections(), 1);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(c.get(target(&addr), LIMITS).await.unwrap(), b"ok");
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn status_and_limits() {
        let not_found: &[u8] = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
        let declared: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 65\r\n\r\n";
        let chunk: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n41\r\n";
        let chunks: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
            20\r\n01234567890123456789012345678901\r\n20\r\n01234567890123456789012345678901\r\n1\r\nx\r\n";
        let eof: &[u8] = b"HTTP/1.1 200 OK\r\n\r\n0123456789012345678901234567890123456789012345678901234567890123456789";
        let (addr, _) = server(vec![
            vec![not_found],
            vec![declared],
            vec![chunk],
            vec![chunks],
            vec![eof],
        ])
        .await;
        let c = client();
        let too_large = PollError::TooLarge { limit: 64 };
        assert_eq!(
            c.get(target(&addr), LIMITS).await,
            Err(PollError::HttpStatus(404))
        );
        for _ in 0..4 {
            assert_eq!(c.get(target(&addr), LIMITS).await, Err(too_large.clone()));
        }
    }

    #[tokio::test]
    async fn broken_answers() {
        let garbage: &[u8] = b"SSH-2.0-OpenSSH\r\n\r\n";
        let short: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc";
        let both: &[u8] =
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n";
        let gzip: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n";
        let bad_chunk: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
        let nothing: &[u8] = b"";
        let half_head: &[u8] = b"HTTP/1.1 200 OK\r\nContent-";
        let (addr, _) = server(vec![
            vec![garbage],
            vec![short],
            vec![both],
            vec![gzip],
            vec![bad_chunk],
            vec![nothing],
            vec![half_head],
        ])
        .await;
        let c = client();
        let get = || c.get(target(&addr), LIMITS);
        assert_eq!(get().await, Err(PollError::Protocol));
        assert_eq!(get().await, Err(PollError::Body));
        assert_eq!(get().await, Err(PollError::Protocol));
        assert_eq!(get().await, Err(PollError::Protocol));
        assert_eq!(get().await, Err(PollError::Protocol));
        assert_eq!(get().await, Err(PollError::Closed));
        assert_eq!(get().await, Err(PollError::Closed));
    }

    #[tokio::test]
    async fn a_head_past_the_limit_is_refused() {
        let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
        while head.len() <= MAX_HEAD {
            head.extend_from_slice(b"X-Padding: 0123456789012345678901234567890123456789\r\n");
        }
        let head: &'static [u8] = Box::leak(head.into_boxed_slice());
        let (addr, _) = server(vec![vec![head]]).await;
        assert_eq!(
            client().get(target(&addr), LIMITS).await,
            Err(PollError::Protocol)
        );
    }

    #[tokio::test]
    async fn refused_and_no_keep_alive() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        assert_eq!(
            client().get(target(&addr), LIMITS).await,
            Err(PollError::Refused)
        );
        let ok: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        let (addr, accepted) = server(vec![vec![ok], vec![ok]]).await;
        let c = Client::new(false, Duration::from_secs(60), "test");
        for _ in 0..2 {
            assert_eq!(c.get(target(&addr), LIMITS).await.unwrap(), b"ok");
            assert_eq!(c.idle_connections(), 0);
        }
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}
