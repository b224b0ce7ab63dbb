//! Reading a connection's first request head before it is served: the
//! connection waits in the waiting room (no serving slot, no HTTP buffers)
//! until its whole head is in, so a client that sends its head slowly
//! holds no slot (issue 44: as many slow clients as there are slots held
//! every slot and starved kubelet's probes). The head is then replayed to
//! hyper ([`Prefixed`]), which parses it as if it had read it itself.
//!
//! Only the request line is looked at here, to tell a probe (`GET` or
//! `HEAD` of `/healthz` or `/readyz`) from the rest: probes may be answered
//! outside the serving slots (see `server`).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// The largest request head read (request line and headers); a larger one
/// is answered 431 and the connection closed.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// How reading a request head ended.
#[derive(Debug)]
pub(crate) enum HeadRead {
    /// The whole head (and whatever followed it in the same reads).
    Complete(Head),
    /// The client closed the connection (or it failed) before its head was
    /// complete.
    Closed,
    /// More than [`MAX_HEAD_BYTES`] without the end of the head.
    TooLarge,
}

/// A complete request head, as read.
#[derive(Debug)]
pub(crate) struct Head {
    /// The bytes read: the head, and possibly the start of what follows.
    pub(crate) bytes: Vec<u8>,
    /// The request is a probe: `GET` or `HEAD` of `/healthz` or `/readyz`.
    pub(crate) probe: bool,
}

/// Reads from `stream` until a whole request head is in (an empty line
/// ends it; blank lines before the request line are skipped as hyper
/// does). Not bounded in time: the caller bounds it.
pub(crate) async fn read<S: AsyncRead + Unpin>(stream: &mut S) -> HeadRead {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 2048];
    loop {
        let n = match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return HeadRead::Closed,
            Ok(n) => n,
        };
        let scanned = bytes.len();
        bytes.extend_from_slice(&chunk[..n]);
        if let Some(end) = head_end(&bytes, scanned) {
            let probe = is_probe(&bytes[..end]);
            return HeadRead::Complete(Head { bytes, probe });
        }
        if bytes.len() > MAX_HEAD_BYTES {
            return HeadRead::TooLarge;
        }
    }
}

/// Where the head ends (just past its empty line) in `bytes`, looking only
/// at what may have changed since `scanned` bytes were looked at (each byte
/// is looked at a few times at most, however slowly the head arrives).
fn head_end(bytes: &[u8], scanned: usize) -> Option<usize> {
    let start = bytes.iter().position(|b| *b != b'\r' && *b != b'\n')?;
    // A terminator is `\n\n` or `\n\r\n`: it may begin up to 2 bytes before
    // the new ones.
    let from = scanned.saturating_sub(2).max(start);
    let tail = &bytes[from..];
    tail.windows(2)
        .position(|w| w == b"\n\n")
        .map(|at| from + at + 2)
        .into_iter()
        .chain(
            tail.windows(3)
                .position(|w| w == b"\n\r\n")
                .map(|at| from + at + 3),
        )
        .min()
}

/// Whether `head`'s request line asks for a probe's answer.
fn is_probe(head: &[u8]) -> bool {
    let line = head
        .split(|b| *b == b'\n')
        .find(|l| !l.is_empty() && *l != b"\r")
        .unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_ascii_whitespace();
    let (Some(method), Some(target)) = (words.next(), words.next()) else {
        return false;
    };
    let path = target.split_once('?').map_or(target, |(path, _)| path);
    matches!(method, "GET" | "HEAD") && matches!(path.trim_end_matches('/'), "/healthz" | "/readyz")
}

/// The answer to a head larger than [`MAX_HEAD_BYTES`].
pub(crate) const TOO_LARGE: &[u8] = b"HTTP/1.1 431 Request Header Fields Too Large\r\n\
content-type: text/plain; charset=utf-8\r\ncontent-length: 23\r\nconnection: close\r\n\r\n\
request head too large\n";

/// A stream whose first bytes are `prefix` (a head read already), then the
/// stream's own; writes go to the stream.
#[derive(Debug)]
pub(crate) struct Prefixed<S> {
    prefix: Vec<u8>,
    at: usize,
    stream: S,
}

impl<S> Prefixed<S> {
    /// `prefix`, then `stream`.
    pub(crate) fn new(prefix: Vec<u8>, stream: S) -> Self {
        Self {
            prefix,
            at: 0,
            stream,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.at < this.prefix.len() {
            let rest = &this.prefix[this.at..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            this.at += n;
            if this.at == this.prefix.len() {
                // Replayed: its memory is not held for the connection's life.
                this.prefix = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, data)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read_all_of(input: &[u8]) -> HeadRead {
        let mut input = input;
        read(&mut input).await
    }

    #[tokio::test]
    async fn a_head_ends_at_its_empty_line_and_probes_are_told_apart() {
        for (input, probe) in [
            (&b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n"[..], true),
            (b"HEAD /readyz/?x=1 HTTP/1.1\r\n\r\n", true),
            (b"\r\nGET /healthz HTTP/1.1\n\n", true),
            (b"GET /metrics HTTP/1.1\r\n\r\n", false),
            (b"POST /healthz HTTP/1.1\r\n\r\n", false),
            (b"GET /healthzz HTTP/1.1\r\n\r\n", false),
        ] {
            match read_all_of(input).await {
                HeadRead::Complete(head) => {
                    assert_eq!(head.probe, probe, "{:?}", String::from_utf8_lossy(input));
                    assert_eq!(head.bytes, input);
                }
                other => panic!("{other:?} for {:?}", String::from_utf8_lossy(input)),
            }
        }
        assert!(matches!(
            read_all_of(b"GET /healthz HTTP/1.1\r\nHost: a\r\n").await,
            HeadRead::Closed
        ));
        let huge = format!("GET / HTTP/1.1\r\nX: {}\r\n", "x".repeat(MAX_HEAD_BYTES));
        assert!(matches!(
            read_all_of(huge.as_bytes()).await,
            HeadRead::TooLarge
        ));
    }

    #[test]
    fn the_end_is_found_whatever_the_reads_split() {
        let head = b"GET / HTTP/1.1\r\nA: b\r\n\r\nbody";
        // `scanned` bytes were looked at before without finding the end.
        for scanned in 0..24 {
            for len in scanned..=head.len() {
                let found = head_end(&head[..len], scanned);
                let want = (len >= 24).then_some(24);
                assert_eq!(found, want, "scanned {scanned}, len {len}");
            }
        }
    }

    #[tokio::test]
    async fn the_prefix_is_read_first_then_the_stream() {
        let mut io = Prefixed::new(b"abc".to_vec(), &b"def"[..]);
        let mut all = Vec::new();
        io.read_to_end(&mut all).await.expect("read");
        assert_eq!(all, b"abcdef");
    }
}
