//! The body of `GET /metrics`: the recorder's own series first, then the
//! per-instance series streamed from the view a chunk at a time
//! ([`FleetScrape`]), each chunk rendered when hyper asks for the next
//! frame (so after the previous one was handed to the socket): a scrape
//! holds one chunk, never the whole text.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame};
use jiff::Timestamp;

use crate::debug::instance_metrics::FleetScrape;
use crate::view::FleetView;

/// A streamed scrape of the whole fleet.
pub struct ScrapeBody {
    head: Option<Bytes>,
    view: FleetView,
    now: Timestamp,
    scrape: FleetScrape,
}

impl ScrapeBody {
    /// `head` (the recorder's rendering), then every instance of `view`
    /// at `now`.
    pub fn new(head: String, view: FleetView, now: Timestamp) -> Self {
        ScrapeBody {
            head: Some(Bytes::from(head)),
            view,
            now,
            scrape: FleetScrape::default(),
        }
    }
}

impl Body for ScrapeBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if let Some(head) = this.head.take() {
            return Poll::Ready(Some(Ok(Frame::data(head))));
        }
        Poll::Ready(
            this.scrape
                .next_chunk(&this.view, this.now)
                .map(|chunk| Ok(Frame::data(Bytes::from(chunk)))),
        )
    }
}
