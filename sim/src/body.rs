//! The response body of a simulated pod: either a small buffer or a large
//! padding stream produced chunk by chunk from one static buffer, so an
//! oversized answer never allocates its full size.

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

/// Size of one padding chunk.
const CHUNK: usize = 64 * 1024;
/// JSON whitespace: a body of it is "valid so far" JSON that never ends.
static PAD: [u8; CHUNK] = [b' '; CHUNK];

/// A simulated pod's response body. Every byte handed to hyper is added to
/// the pod's `sent` counter, so tests can see how much a client read.
#[derive(Debug)]
pub struct SimBody {
    kind: Kind,
    sent: Arc<AtomicU64>,
}

#[derive(Debug)]
enum Kind {
    Full(Option<Bytes>),
    Pad { remaining: u64 },
}

impl SimBody {
    /// A body of these bytes, sent with a `content-length`.
    pub(crate) fn full(bytes: impl Into<Bytes>, sent: Arc<AtomicU64>) -> Self {
        SimBody {
            kind: Kind::Full(Some(bytes.into())),
            sent,
        }
    }

    /// `len` bytes of padding, sent chunked (no `content-length`).
    pub(crate) fn padding(len: u64, sent: Arc<AtomicU64>) -> Self {
        SimBody {
            kind: Kind::Pad { remaining: len },
            sent,
        }
    }
}

impl Body for SimBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        let chunk = match &mut this.kind {
            Kind::Full(b) => b.take(),
            Kind::Pad { remaining } if *remaining > 0 => {
                let n = usize::try_from(*remaining).map_or(CHUNK, |r| r.min(CHUNK));
                *remaining -= n as u64;
                Some(Bytes::from_static(&PAD[..n]))
            }
            Kind::Pad { .. } => None,
        };
        Poll::Ready(chunk.map(|c| {
            this.sent.fetch_add(c.len() as u64, Ordering::Relaxed);
            Ok(Frame::data(c))
        }))
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Full(b) => b.is_none(),
            Kind::Pad { remaining } => *remaining == 0,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            Kind::Full(None) => SizeHint::with_exact(0),
            Kind::Pad { .. } => SizeHint::default(),
        }
    }
}
