//! A served connection's socket: it records what the connection does for
//! the table of connections (`connections`), and bounds how long a client
//! may keep a response waiting by not reading it (issue 44: a client that
//! stops reading a large `/metrics` body held its slot for ever).
//!
//! - A byte written, a request started or a response handed over is
//!   activity. Bytes read are not: a client that trickles its next request
//!   head over a kept-alive connection, with no request in progress, is
//!   idle after the grace and may be shed for a waiting connection.
//! - A write the client makes no room for within [`WriteLimits::stall`]
//!   fails, and so does one past [`WriteLimits::response`] after its
//!   request started: hyper then closes the connection, freeing the slot.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::debug::connections::Activity;

/// How long a client may keep the server's writes waiting.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WriteLimits {
    /// A write that makes no progress for this long fails.
    pub(crate) stall: Duration,
    /// A response not handed to the socket in full this long after its
    /// request started fails.
    pub(crate) response: Duration,
}

/// A served connection's socket (see the module documentation).
pub(crate) struct Watched<S> {
    stream: S,
    activity: Arc<Activity>,
    limits: WriteLimits,
    /// Armed while a write waits for the client to make room.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> Watched<S> {
    /// `stream`, recording into `activity`, its writes bounded by `limits`.
    pub(crate) fn new(stream: S, activity: Arc<Activity>, limits: WriteLimits) -> Self {
        Self {
            stream,
            activity,
            limits,
            stalled: None,
        }
    }

    /// How much longer the response in progress may take, if one is.
    fn response_left(&self) -> Option<Duration> {
        self.activity
            .busy_for()
            .map(|busy| self.limits.response.saturating_sub(busy))
    }

    /// The outcome of one write: progress disarms the stall timer; waiting
    /// arms it (the stall bound, or what is left of the response's);
    /// either way past a bound is an error.
    fn after_write(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match polled {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    self.activity.touch();
                    self.stalled = None;
                }
                if self.response_left() == Some(Duration::ZERO) {
                    return Poll::Ready(Err(too_slow(self.limits.response, "response")));
                }
                Poll::Ready(Ok(n))
            }
            Poll::Pending => {
                let wait = self
                    .response_left()
                    .map_or(self.limits.stall, |left| left.min(self.limits.stall));
                let timer = self
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(wait)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        Poll::Ready(Err(too_slow(self.limits.stall, "stalled write")))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
        }
    }
}

fn too_slow(limit: Duration, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!("{what}: the client took nothing within {limit:?}"),
    )
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_write(cx, data);
        this.after_write(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.after_write(cx, polled)
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
    use std::time::Instant;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn a_write_the_client_never_takes_fails_after_the_stall_bound() {
        // A pipe whose reader never reads: writes fill it, then wait.
        let (mut ours, _theirs) = tokio::io::duplex(64);
        let activity = Arc::new(Activity::new(Instant::now()));
        let limits = WriteLimits {
            stall: Duration::from_millis(50),
            response: Duration::from_secs(60),
        };
        let mut watched = Watched::new(&mut ours, activity, limits);
        let started = Instant::now();
        let written = tokio::time::timeout(Duration::from_secs(5), watched.write_all(&[0u8; 4096]))
            .await
            .expect("the write gave up on its own");
        let error = written.expect_err("nobody read");
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(50));
    }

    #[tokio::test]
    async fn a_response_past_its_bound_fails_even_while_the_client_reads_slowly() {
        let (mut ours, mut theirs) = tokio::io::duplex(64);
        let activity = Arc::new(Activity::new(Instant::now()));
        let _request = activity.start_request();
        let limits = WriteLimits {
            stall: Duration::from_secs(60),
            response: Duration::from_millis(100),
        };
        let reader = tokio::spawn(async move {
            let mut byte = [0u8; 8];
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
                match tokio::io::AsyncReadExt::read(&mut theirs, &mut byte).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        });
        let mut watched = Watched::new(&mut ours, activity, limits);
        let written =
            tokio::time::timeout(Duration::from_secs(5), watched.write_all(&[0u8; 1 << 16]))
                .await
                .expect("the write gave up on its own");
        assert_eq!(
            written.expect_err("too slow").kind(),
            io::ErrorKind::TimedOut
        );
        drop(watched);
        drop(ours);
        reader.await.expect("reader");
    }
}
