//! HTTP/2 connections opened by streams in flight: [`Lanes`] is a client
//! service that keeps each connection ("lane") under a number of requests
//! in flight and opens the next one beyond it.
//!
//! hyper's client sends every request to a host on one HTTP/2 connection
//! and, when the server's `SETTINGS_MAX_CONCURRENT_STREAMS` are all taken,
//! waits for one to free up. A watch holds its stream for as long as it
//! runs, so an agent with more watches than the server allows a connection
//! would wait for good on its next list or write. Each lane is a hyper
//! client of its own (its own pool: one connection while the server
//! speaks HTTP/2, re-opened when it fails, closed when idle); a request
//! goes to the first lane with fewer than its limit in flight, and counts
//! there until its response body is dropped or it fails.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::client::legacy::connect::Connect;
use hyper_util::client::legacy::{Builder, Client, Error};

/// At most this many lanes are opened; beyond them a request goes to the
/// lane with the fewest in flight (and may wait there for a stream).
pub const MAX_LANES: usize = 64;

/// A client service over lanes of at most `limit` requests in flight each
/// (see the module documentation). Cloning shares the lanes.
pub struct Lanes<C, B> {
    builder: Builder,
    connector: C,
    limit: usize,
    lanes: Arc<Mutex<Vec<Lane<C, B>>>>,
}

impl<C: Clone, B> Clone for Lanes<C, B> {
    fn clone(&self) -> Self {
        Lanes {
            builder: self.builder.clone(),
            connector: self.connector.clone(),
            limit: self.limit,
            lanes: Arc::clone(&self.lanes),
        }
    }
}

/// One lane: a hyper client and what is in flight on it.
struct Lane<C, B> {
    client: Client<C, B>,
    in_flight: Arc<AtomicUsize>,
}

/// The lane a request goes to, given what each has in flight: the first
/// under `limit`; `None` when every lane is full and another may open
/// (fewer than `max` lanes); else the one with the fewest in flight.
pub fn pick(in_flight: &[usize], limit: usize, max: usize) -> Option<usize> {
    if let Some(i) = in_flight.iter().position(|n| *n < limit) {
        return Some(i);
    }
    if in_flight.len() < max {
        return None;
    }
    in_flight
        .iter()
        .enumerate()
        .min_by_key(|(_, n)| **n)
        .map(|(i, _)| i)
}

impl<C, B> Lanes<C, B>
where
    C: Connect + Clone + Send + Sync + 'static,
    B: Body + Send + 'static + Unpin,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    /// Lanes of hyper clients built by `builder` over `connector`, each
    /// with at most `limit` (at least 1) requests in flight.
    pub fn new(builder: Builder, connector: C, limit: usize) -> Self {
        Lanes {
            builder,
            connector,
            limit: limit.max(1),
            lanes: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// What each lane has in flight now.
    #[cfg(test)]
    pub fn in_flight(&self) -> Vec<usize> {
        self.lock()
            .iter()
            .map(|l| l.in_flight.load(Ordering::Acquire))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Lane<C, B>>> {
        self.lanes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The lane for the next request, counted in flight there.
    fn take(&self) -> (Client<C, B>, InFlight) {
        let mut lanes = self.lock();
        let counts: Vec<usize> = lanes
            .iter()
            .map(|l| l.in_flight.load(Ordering::Acquire))
            .collect();
        let index = match pick(&counts, self.limit, MAX_LANES) {
            Some(i) => i,
            None => {
                lanes.push(Lane {
                    client: self.builder.build(self.connector.clone()),
                    in_flight: Arc::new(AtomicUsize::new(0)),
                });
                lanes.len() - 1
            }
        };
        let lane = &lanes[index];
        lane.in_flight.fetch_add(1, Ordering::AcqRel);
        (lane.client.clone(), InFlight(Arc::clone(&lane.in_flight)))
    }
}

/// A request in flight on a lane: counted until dropped.
struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its request counted in flight on its lane
/// until it is dropped.
pub struct Counted {
    body: Incoming,
    _in_flight: InFlight,
}

impl Body for Counted {
    type Data = bytes::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<http::Response<Counted>, Error>> + Send + 'static>>;

impl<C, B> tower::Service<http::Request<B>> for Lanes<C, B>
where
    C: Connect + Clone + Send + Sync + 'static,
    B: Body + Send + 'static + Unpin,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = http::Response<Counted>;
    type Error = Error;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // hyper's client is always ready; a lane is chosen per request.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let (client, in_flight) = self.take();
        let response = client.request(request);
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map(|body| Counted {
                body,
                _in_flight: in_flight,
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use bytes::Bytes;
    use http_body_util::{BodyExt, Empty, StreamBody};
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use tower::Service;

    #[test]
    fn a_request_goes_to_the_first_lane_with_room() {
        assert_eq!(pick(&[], 3, 4), None, "no lane yet: one opens");
        assert_eq!(pick(&[3, 1, 0], 3, 4), Some(1));
        assert_eq!(pick(&[2, 3], 3, 4), Some(0));
        assert_eq!(pick(&[3, 3], 3, 4), None, "all full: another opens");
        assert_eq!(
            pick(&[5, 4, 6, 4], 3, 4),
            Some(1),
            "all full at the most lanes: the fewest in flight"
        );
    }

    /// An HTTP/2 (prior knowledge) server on loopback: `/hold` answers
    /// with a body that never ends, anything else with an empty one.
    /// Returns its address and how many connections it accepted.
    async fn server() -> (std::net::SocketAddr, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let service =
                        hyper::service::service_fn(|req: http::Request<Incoming>| async move {
                            let body = if req.uri().path() == "/hold" {
                                let frames = futures::stream::once(async {
                                    Ok::<_, Infallible>(Frame::data(Bytes::from_static(b"x")))
                                })
                                .chain(futures::stream::pending());
                                BodyExt::boxed(StreamBody::new(frames))
                            } else {
                                Empty::<Bytes>::new().map_err(|e| match e {}).boxed()
                            };
                            Ok::<_, Infallible>(http::Response::new(body))
                        });
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        (addr, accepted)
    }

    use futures::StreamExt as _;

    fn lanes(limit: usize) -> Lanes<HttpConnector, Empty<Bytes>> {
        let mut builder = Client::builder(TokioExecutor::new());
        builder.http2_only(true);
        Lanes::new(builder, HttpConnector::new(), limit)
    }

    fn get(addr: std::net::SocketAddr, path: &str) -> http::Request<Empty<Bytes>> {
        http::Request::get(format!("http://{addr}{path}"))
            .body(Empty::new())
            .expect("request")
    }

    #[tokio::test]
    async fn streams_held_past_a_lanes_limit_open_another_connection_and_free_it_when_dropped() {
        let (addr, accepted) = server().await;
        let mut lanes = lanes(3);
        let mut held = Vec::new();
        for _ in 0..7 {
            let mut response = lanes.call(get(addr, "/hold")).await.expect("hold");
            // The first byte is in: the stream is open and held.
            let frame = response.body_mut().frame().await;
            assert!(matches!(frame, Some(Ok(_))), "{frame:?}");
            held.push(response);
        }
        assert_eq!(lanes.in_flight(), vec![3, 3, 1]);
        assert_eq!(accepted.load(Ordering::SeqCst), 3, "one connection a lane");

        // A short request goes to the lane with room, and counts only
        // while its response lives.
        let response = lanes.call(get(addr, "/")).await.expect("get");
        assert_eq!(lanes.in_flight(), vec![3, 3, 2]);
        drop(response);
        assert_eq!(lanes.in_flight(), vec![3, 3, 1]);

        // Dropped watches free their lanes: the first lane takes requests
        // again, on its connection.
        held.truncate(2);
        assert_eq!(lanes.in_flight(), vec![2, 0, 0]);
        let response = tokio::time::timeout(Duration::from_secs(5), lanes.call(get(addr, "/")))
            .await
            .expect("not waiting")
            .expect("get");
        assert_eq!(lanes.in_flight(), vec![3, 0, 0]);
        drop(response);
        assert_eq!(accepted.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_request_that_fails_is_not_counted_in_flight() {
        // Nothing listens on this port.
        let unused = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = unused.local_addr().expect("addr");
        drop(unused);
        let mut lanes = lanes(3);
        assert!(lanes.call(get(addr, "/")).await.is_err());
        assert_eq!(lanes.in_flight(), vec![0]);
    }
}
