//! The HTTP/1.1 client for the one request the agent makes: `GET` of a
//! small body from a known address, with one idle connection per address
//! kept between sweeps.
//!
//! The framing is hyper's (`hyper::client::conn::http1`: response heads,
//! content-length, chunked coding with trailers, close-delimited bodies,
//! interim 1xx answers, keep-alive). The pool is ours, because hyper-util's
//! pooled client keeps a task, a request channel and read and write buffers
//! for every idle connection, far more than a socket (at a fleet's size
//! the largest share of the agent's memory).
//! Here an idle connection is its socket and nothing else: per request the
//! socket is handed to a fresh hyper connection, the request is driven
//! together with that connection in the caller's task (no task per
//! request), and once the body is read the socket is taken back with
//! [`Connection::into_parts`] and returned to the pool when hyper found the
//! answer reusable and nothing is left unread. Everything a request holds
//! (hyper's buffers and channels) lives only while the request does.
//!
//! The same exchange runs over any other byte stream, without the pool:
//! [`Client::get_on`] (a port-forward's stream, `poll::forward`).
//!
//! Rules kept around hyper, where it is more lenient than the poller wants:
//! a transfer coding other than exactly `chunked` is refused
//! ([`PollError::TransferCoding`]; hyper would hand back a body still
//! gzipped, or read it to the connection's close), and so is a response
//! carrying both `Transfer-Encoding` and `Content-Length` (a smuggling
//! shape, [`PollError::Protocol`]).

use crate::poll::PollError;
use crate::telemetry;
use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_LENGTH, HOST, HeaderMap, HeaderValue, TRANSFER_ENCODING};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, LengthLimitError, Limited};
use hyper::body::{Body as _, Incoming};
use hyper::client::conn::http1::{Builder, Connection};
use hyper_util::rt::TokioIo;
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// Largest response head (status line and headers) accepted, in bytes; it
/// is also hyper's exact read buffer of a request and the limit on a
/// chunked body's trailers. hyper accepts up to 100 headers within it.
pub const MAX_HEAD: usize = 16 * 1024;

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
}

/// The idle connections kept between requests: at most one per address,
/// dropped after `idle_timeout` unused (swept lazily).
#[derive(Debug)]
pub struct Client {
    keep_alive: bool,
    idle_timeout: Duration,
    user_agent: HeaderValue,
    builder: Builder,
    pool: Mutex<Pool>,
}

#[derive(Debug)]
struct Pool {
    idle: HashMap<SocketAddr, Idle>,
    last_prune: Instant,
}

#[derive(Debug)]
struct Idle {
    stream: TcpStream,
    since: Instant,
}

/// The outcome of one exchange on one connection.
enum Exchange<S = TcpStream> {
    /// The connection failed before a response head arrived: on a reused
    /// connection the pod most likely closed it while idle.
    NoResponse,
    /// A body, and the connection if it may be used again.
    Done(Bytes, Option<S>),
    Failed(PollError),
}

/// What gets the stream back out of a finished hyper connection, if it
/// may carry another request.
type TakeBack<S> = fn(Connection<TokioIo<S>, Empty<Bytes>>) -> Option<S>;

/// Why reading a response stopped.
enum Failure {
    NoResponse,
    Poll(PollError),
}

impl From<PollError> for Failure {
    fn from(e: PollError) -> Failure {
        Failure::Poll(e)
    }
}

impl Client {
    /// A client; with `keep_alive` false every request opens and closes
    /// its own connection.
    pub fn new(keep_alive: bool, idle_timeout: Duration, user_agent: &'static str) -> Client {
        let mut builder = Builder::new();
        builder
            // One exact buffer: a report and its head fit in one read, and
            // it bounds the head (hyper refuses a head that fills it).
            .read_buf_exact_size(Some(MAX_HEAD))
            .max_header_size(MAX_HEAD)
            // RFC 9112 §5.2: a user agent replaces obs-fold with spaces.
            .allow_obsolete_multiline_headers_in_responses(true);
        Client {
            keep_alive,
            idle_timeout,
            user_agent: HeaderValue::from_static(user_agent),
            builder,
            pool: Mutex::new(Pool {
                idle: HashMap::new(),
                last_prune: Instant::now(),
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
    pub async fn get(&self, target: Target<'_>, limits: Limits) -> Result<Bytes, PollError> {
        if let Some(stream) = self.checkout(target.addr) {
            let done = self
                .exchange(stream, self.request(&target)?, limits, take_back)
                .await;
            if !matches!(done, Exchange::NoResponse) {
                return self.finish(target.addr, done);
            }
        }
        let request = self.request(&target)?;
        let stream = connect(target.addr, limits.connect_timeout).await?;
        let done = self.exchange(stream, request, limits, take_back).await;
        self.finish(target.addr, done)
    }

    /// `GET` `path` over `stream`, a connection opened by someone else (a
    /// port-forward's), with `host` as the `Host` header: the body of a
    /// `200` answer as [`Client::get`] reads it (same framing rules and
    /// body limit), and the stream back when it may carry another request.
    /// A stream that ends before a response head is [`PollError::Closed`].
    /// Nothing is pooled and nothing here bounds the time: the caller does.
    pub async fn get_on<S>(
        &self,
        stream: S,
        host: &str,
        path: &str,
        body_limit: usize,
    ) -> Result<(Bytes, Option<S>), PollError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let host = HeaderValue::from_str(host).map_err(|_| PollError::NoAddress)?;
        let request = self.request_to(host, path)?;
        let limits = Limits {
            connect_timeout: Duration::ZERO,
            body_limit,
        };
        match self.exchange(stream, request, limits, hand_back).await {
            Exchange::Done(body, stream) => Ok((body, stream)),
            Exchange::Failed(e) => Err(e),
            Exchange::NoResponse => Err(PollError::Closed),
        }
    }

    fn request(&self, target: &Target<'_>) -> Result<Request<Empty<Bytes>>, PollError> {
        let host = match target.host {
            Some(host) => HeaderValue::from_str(host),
            None => HeaderValue::try_from(target.addr.to_string()),
        }
        .map_err(|_| PollError::NoAddress)?;
        self.request_to(host, target.path)
    }

    fn request_to(
        &self,
        host: HeaderValue,
        path: &str,
    ) -> Result<Request<Empty<Bytes>>, PollError> {
        Request::get(path)
            .header(HOST, host)
            .header(http::header::USER_AGENT, self.user_agent.clone())
            .header(ACCEPT, HeaderValue::from_static("application/json"))
            .body(Empty::new())
            .map_err(|_| PollError::NoAddress)
    }

    fn finish(&self, addr: SocketAddr, done: Exchange) -> Result<Bytes, PollError> {
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

    /// One request on `stream`: the connection future is polled together
    /// with the request and its body in this task, then taken apart to get
    /// the stream back (`take`: the stream, if it may be used again).
    async fn exchange<S>(
        &self,
        stream: S,
        request: Request<Empty<Bytes>>,
        limits: Limits,
        take: TakeBack<S>,
    ) -> Exchange<S>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Ok((mut sender, conn)) = self
            .builder
            .handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
            .await
        else {
            // hyper's HTTP/1 handshake does no IO; this does not happen.
            return Exchange::NoResponse;
        };
        let mut conn = Some(conn);
        let mut reading = pin!(read(sender.send_request(request), limits.body_limit));
        let result = std::future::poll_fn(|cx| {
            if let Some(c) = conn.as_mut()
                && c.poll_without_shutdown(cx).is_ready()
            {
                // Closed (by HTTP or an error): dropping it ends the body
                // and answers the request, so `reading` cannot wait on it.
                conn = None;
            }
            reading.as_mut().poll(cx)
        })
        .await;
        match result {
            Ok(body) => {
                // hyper asks for the next request only on a connection it
                // keeps: the answer allowed keep-alive, its body ended where
                // its framing said, and no byte came after it.
                let reusable = conn.filter(|_| sender.is_ready()).and_then(take);
                Exchange::Done(body, reusable)
            }
            Err(Failure::NoResponse) => Exchange::NoResponse,
            Err(Failure::Poll(e)) => Exchange::Failed(e),
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
        if now.duration_since(pool.last_prune) > self.idle_timeout / 2 {
            let timeout = self.idle_timeout;
            pool.idle
                .retain(|_, i| now.duration_since(i.since) <= timeout);
            pool.last_prune = now;
        }
        pool.idle.insert(addr, Idle { stream, since: now });
    }
}

/// The socket of a connection hyper keeps, if nothing was read past the
/// answer and nothing has arrived since.
fn take_back(conn: Connection<TokioIo<TcpStream>, Empty<Bytes>>) -> Option<TcpStream> {
    let parts = conn.into_parts();
    if !parts.read_buf.is_empty() {
        return None;
    }
    let stream = parts.io.into_inner();
    // hyper's last read (the check that nothing follows the answer) left
    // this task's waker with the socket; a no-op waker replaces it, so an
    // idle socket holds no reference to a finished task. Readable now means
    // stray bytes or the end of the stream: not reusable.
    match stream.poll_read_ready(&mut Context::from_waker(Waker::noop())) {
        Poll::Pending => Some(stream),
        Poll::Ready(_) => None,
    }
}

/// The stream of a connection hyper keeps, if nothing was read past the
/// answer (a stream that is not a socket: nothing to re-register).
fn hand_back<S>(conn: Connection<TokioIo<S>, Empty<Bytes>>) -> Option<S>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let parts = conn.into_parts();
    parts.read_buf.is_empty().then(|| parts.io.into_inner())
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
    metrics::counter!(telemetry::POLL_CONNECTIONS_OPENED_TOTAL).increment(1);
    // Best effort: a request is one small write, Nagle only delays it.
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// The response to the request, checked, and its body read up to `limit`
/// bytes.
async fn read(
    response: impl Future<Output = hyper::Result<Response<Incoming>>>,
    limit: usize,
) -> Result<Bytes, Failure> {
    let response = response.await.map_err(|e| {
        if e.is_parse() {
            Failure::Poll(PollError::Protocol)
        } else {
            // Closed, reset or failed to write before a head arrived.
            Failure::NoResponse
        }
    })?;
    framing(response.headers())?;
    if response.status() != StatusCode::OK {
        return Err(PollError::HttpStatus(response.status().as_u16()).into());
    }
    let body = response.into_body();
    // A declared length past the limit is refused before reading any of it.
    if body.size_hint().lower() > limit as u64 {
        return Err(PollError::TooLarge { limit }.into());
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) => Err(body_error(&*e, limit).into()),
    }
}

/// The rules on a response's framing that hyper does not enforce: the only
/// transfer coding read is `chunked`, alone, and not together with a
/// content length.
fn framing(headers: &HeaderMap) -> Result<(), PollError> {
    let mut codings = 0;
    for value in headers.get_all(TRANSFER_ENCODING) {
        let list = value.to_str().map_err(|_| PollError::TransferCoding)?;
        for coding in list.split(',') {
            codings += 1;
            if !coding
                .trim_matches([' ', '\t'])
                .eq_ignore_ascii_case("chunked")
            {
                return Err(PollError::TransferCoding);
            }
        }
    }
    if codings > 1 {
        // `chunked, chunked` is not a coding a sender may apply (RFC 9112 §6.1).
        return Err(PollError::TransferCoding);
    }
    if codings == 1 && headers.contains_key(CONTENT_LENGTH) {
        return Err(PollError::Protocol);
    }
    Ok(())
}

/// What a failed body read means: past the limit, a broken framing (bad
/// chunk size line, trailers past their limit) or a connection that broke
/// off.
fn body_error(e: &(dyn std::error::Error + 'static), limit: usize) -> PollError {
    if e.is::<LengthLimitError>() {
        return PollError::TooLarge { limit };
    }
    let mut source = e.source();
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::InvalidData | std::io::ErrorKind::InvalidInput => {
                    PollError::Protocol
                }
                _ => PollError::Body,
            };
        }
        source = cause.source();
    }
    PollError::Body
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    const LIMITS: Limits = Limits {
        connect_timeout: Duration::from_secs(1),
        body_limit: 64,
    };

    /// A loopback server that answers each accepted connection's requests
    /// with the given raw responses in turn (one per request read), then
    /// closes it a moment later (after the client has taken the connection
    /// back). Returns its address and a count of accepted connections.
    async fn server(script: Vec<Vec<&'static [u8]>>) -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            for answers in script {
                let (mut s, _) = listener.accept().await.unwrap();
                count.fetch_add(1, Ordering::SeqCst);
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
                    tokio::time::sleep(Duration::from_millis(20)).await;
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

    /// One `GET`, bounded here as the poller bounds every attempt.
    async fn get(c: &Client, addr: &SocketAddr) -> Result<Bytes, PollError> {
        tokio::time::timeout(Duration::from_secs(5), c.get(target(addr), LIMITS))
            .await
            .unwrap_or(Err(PollError::Timeout))
    }

    #[tokio::test]
    async fn content_length_body_and_connection_reused() {
        let ok: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        let (addr, accepted) = server(vec![vec![ok, ok]]).await;
        let c = client();
        assert_eq!(get(&c, &addr).await.unwrap(), &b"hello"[..]);
        assert_eq!(c.idle_connections(), 1);
        assert_eq!(get(&c, &addr).await.unwrap(), &b"hello"[..]);
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn chunked_body_with_extension_and_trailer() {
        let ok: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
            3;ext=1\r\nabc\r\n4\r\ndefg\r\n0\r\nX-Trailer: 1\r\n\r\n";
        let (addr, _) = server(vec![vec![ok, ok]]).await;
        let c = client();
        assert_eq!(get(&c, &addr).await.unwrap(), &b"abcdefg"[..]);
        assert_eq!(c.idle_connections(), 1, "a clean chunked end keeps it");
        assert_eq!(get(&c, &addr).await.unwrap(), &b"abcdefg"[..]);
    }

    #[tokio::test]
    async fn interim_responses_are_skipped() {
        let ok: &[u8] =
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        let (addr, _) = server(vec![vec![ok]]).await;
        assert_eq!(get(&client(), &addr).await.unwrap(), &b"ok"[..]);
    }

    #[tokio::test]
    async fn close_delimited_and_connection_close_are_not_kept() {
        let close: &[u8] = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok";
        let eof: &[u8] = b"HTTP/1.0 200 OK\r\n\r\nuntil the end";
        let (addr, accepted) = server(vec![vec![close], vec![eof]]).await;
        let c = client();
        assert_eq!(get(&c, &addr).await.unwrap(), &b"ok"[..]);
        assert_eq!(c.idle_connections(), 0);
        assert_eq!(get(&c, &addr).await.unwrap(), &b"until the end"[..]);
        assert_eq!(c.idle_connections(), 0);
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn stray_bytes_after_the_body_drop_the_connection() {
        let extra: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA";
        let (addr, _) = server(vec![vec![extra]]).await;
        let c = client();
        assert_eq!(get(&c, &addr).await.unwrap(), &b"ok"[..]);
        assert_eq!(c.idle_connections(), 0);
    }

    #[tokio::test]
    async fn a_kept_connection_closed_by_the_server_is_replaced_without_error() {
        let ok: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        // The first connection answers once, then the server closes it.
        let (addr, accepted) = server(vec![vec![ok], vec![ok]]).await;
        let c = client();
        assert_eq!(get(&c, &addr).await.unwrap(), &b"ok"[..]);
        assert_eq!(c.idle_connections(), 1);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(get(&c, &addr).await.unwrap(), &b"ok"[..]);
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_kept_connection_closed_instead_of_answering_is_replaced_without_error() {
        let ok: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        let nothing: &[u8] = b"";
        // The first connection answers once, reads the second request and
        // closes without an answer: the request goes again on a new one.
        let (addr, accepted) = server(vec![vec![ok, nothing], vec![ok]]).await;
        let c = client();
        assert_eq!(get(&c, &addr).await.unwrap(), &b"ok"[..]);
        assert_eq!(c.idle_connections(), 1);
        assert_eq!(get(&c, &addr).await.unwrap(), &b"ok"[..]);
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn status_and_limits() {
        let not_found: &[u8] = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
        let declared: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 65\r\n\r\n";
        // One chunk of 65 bytes: refused once more than 64 have come.
        let chunk: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n41\r\n\
            01234567890123456789012345678901234567890123456789012345678901234\r\n";
        let chunks: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
            20\r\n01234567890123456789012345678901\r\n20\r\n01234567890123456789012345678901\r\n1\r\nx\r\n";
        let eof: &[u8] = b"HTTP/1.1 200 OK\r\n\r\n0123456789012345678901234567890123456789012345678901234567890123456789";
        // Exactly the limit is accepted.
        let exact: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 64\r\n\r\n\
            0123456789012345678901234567890123456789012345678901234567890123";
        let (addr, _) = server(vec![
            vec![not_found],
            vec![declared],
            vec![chunk],
            vec![chunks],
            vec![eof],
            vec![exact],
        ])
        .await;
        let c = client();
        let too_large = PollError::TooLarge { limit: 64 };
        assert_eq!(get(&c, &addr).await, Err(PollError::HttpStatus(404)));
        for _ in 0..4 {
            assert_eq!(get(&c, &addr).await, Err(too_large.clone()));
        }
        assert_eq!(get(&c, &addr).await.unwrap().len(), 64);
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
        assert_eq!(get(&c, &addr).await, Err(PollError::Protocol));
        assert_eq!(get(&c, &addr).await, Err(PollError::Body));
        assert_eq!(get(&c, &addr).await, Err(PollError::Protocol));
        assert_eq!(get(&c, &addr).await, Err(PollError::TransferCoding));
        assert_eq!(get(&c, &addr).await, Err(PollError::Protocol));
        assert_eq!(get(&c, &addr).await, Err(PollError::Closed));
        assert_eq!(get(&c, &addr).await, Err(PollError::Closed));
    }

    #[tokio::test]
    async fn a_head_past_the_limit_is_refused() {
        let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
        while head.len() <= MAX_HEAD {
            head.extend_from_slice(b"X-Padding: 0123456789012345678901234567890123456789\r\n");
        }
        let head: &'static [u8] = Box::leak(head.into_boxed_slice());
        let (addr, _) = server(vec![vec![head]]).await;
        assert_eq!(get(&client(), &addr).await, Err(PollError::Protocol));
    }

    #[tokio::test]
    async fn refused_and_no_keep_alive() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        assert_eq!(get(&client(), &addr).await, Err(PollError::Refused));
        let ok: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        let (addr, accepted) = server(vec![vec![ok], vec![ok]]).await;
        let c = Client::new(false, Duration::from_secs(60), "test");
        for _ in 0..2 {
            assert_eq!(get(&c, &addr).await.unwrap(), &b"ok"[..]);
            assert_eq!(c.idle_connections(), 0);
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn only_chunked_alone_is_a_transfer_coding_read() {
        let check = |pairs: &[(&str, &str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.append(
                    http::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                );
            }
            framing(&h)
        };
        let te = "transfer-encoding";
        assert_eq!(check(&[]), Ok(()));
        assert_eq!(check(&[("content-length", "3")]), Ok(()));
        assert_eq!(check(&[(te, "chunked")]), Ok(()));
        assert_eq!(check(&[(te, " Chunked\t")]), Ok(()));
        let refused = Err(PollError::TransferCoding);
        assert_eq!(check(&[(te, "gzip, chunked")]), refused);
        assert_eq!(check(&[(te, "gzip"), (te, "chunked")]), refused);
        assert_eq!(check(&[(te, "chunked, chunked")]), refused);
        assert_eq!(check(&[(te, "chunked"), (te, "chunked")]), refused);
        assert_eq!(check(&[(te, "identity")]), refused);
        assert_eq!(check(&[(te, "")]), refused);
        assert_eq!(
            check(&[(te, "chunked"), ("content-length", "3")]),
            Err(PollError::Protocol)
        );
    }
}
