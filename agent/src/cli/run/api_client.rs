//! The agent's clients for the API server.
//!
//! [`ApiClients::api`] speaks HTTP/2 when the API server offers it (ALPN;
//! every kube-apiserver does over TLS), so the agent's watches, lists and
//! writes share a few connections, as client-go's do. kube's own builder
//! offers only HTTP/1.1: one connection per request in flight and per
//! watch, each with its TLS state, its read buffer and hyper's request
//! channel. With watch units that is two watches per unit (22 units for
//! the largest of 3 replicas): about 50 connections and 3 MiB of the
//! replica's memory (benches/PERFORMANCE.md, "HTTP/2 by lanes, and no
//! unit gained after a lapse"), and as many TLS connections on the API
//! server.
//!
//! One HTTP/2 connection carries at most [`STREAMS_PER_CONNECTION`]
//! requests in flight (a watch holds its stream for as long as it runs):
//! the next request opens another connection ([`Lanes`]). The API server
//! caps the streams of a connection (Go's default, 250, unless
//! `--http2-max-streams-per-connection` says otherwise) and hyper's client
//! waits for a stream to free up where Go's transport would open another
//! connection: with every stream held by a watch, a list or write on that
//! connection would wait for good (a lone replica of a companion-mode
//! group holds 192 watches at 64 units).
//!
//! The stack is kube's (`ClientBuilder::try_from(Config)`), the same
//! layers in the same order: the base URI, kube's retry of 429, 503 and
//! 504 when the config asks for it, authentication, the config's extra
//! headers (the agent's `User-Agent`), and kube's connect, read and write
//! timeouts on the socket. Only kube's tracing spans are left out (the
//! agent logs its own outcomes). The HTTP/2 settings bound what one
//! connection may hold and find a dead one:
//! - [`STREAM_WINDOW`]: what the API server may send on one stream ahead
//!   of the agent reading it (a list page of 100 pods, about 1.2 MB, takes
//!   a few window updates); the connection's window is large enough that
//!   streams read slowly never stall the others.
//! - [`KEEP_ALIVE_INTERVAL`], [`KEEP_ALIVE_TIMEOUT`]: a PING every 30 s,
//!   idle or not, and the connection (its watches) is given up when it is
//!   not answered in 15 s, as client-go's `ReadIdleTimeout` and
//!   `PingTimeout` do; the watches then start again on a new one.
//!
//! [`ApiClients::isolated`] is kube's HTTP/1.1 client, on connections of
//! its own: the Lease renewals and the Lease watch, so that membership
//! never waits behind the data on the shared connections (at start-up a
//! replica lists thousands of pods on them; a Lease view that lags 8 s
//! fences the replica's writes), and pods' port-forwards (a websocket
//! upgrade, which exists only in HTTP/1.1). Two or three connections.

use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::ConfigExt;
use kube::client::retry::RetryPolicy;
use tower::{BoxError, ServiceBuilder, retry::RetryLayer};

use super::lanes::Lanes;

/// What the API server may send on one HTTP/2 stream before the agent
/// reads it.
pub const STREAM_WINDOW: u32 = 256 * 1024;

/// What the API server may send on the connection, all streams together,
/// before the agent reads it: 64 streams' windows.
pub const CONNECTION_WINDOW: u32 = 64 * STREAM_WINDOW;

/// How often the connection is PINGed, idle or not.
pub const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);

/// How long a PING may go unanswered before the connection is closed.
pub const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(15);

/// At most this many requests in flight (watches included) on one HTTP/2
/// connection; the next opens another. Well under the 250 streams Go's
/// HTTP/2 server allows a connection by default, and under the 100 that
/// RFC 9113 recommends servers allow at least.
pub const STREAMS_PER_CONNECTION: usize = 100;

/// The agent's two clients for the API server (see the module
/// documentation).
#[derive(Clone)]
pub struct ApiClients {
    /// Every watch, list, read and write: HTTP/2 where offered.
    pub api: kube::Client,
    /// The Leases and pods' port-forwards: HTTP/1.1, connections of its
    /// own.
    pub isolated: kube::Client,
}

impl ApiClients {
    /// Both clients from one configuration.
    pub fn new(config: kube::Config) -> Result<ApiClients, kube::Error> {
        // A TLS server name other than the URL's (rare; kubeconfig's
        // `tls-server-name`): kube's own client, which resolves it.
        if config.tls_server_name.is_some() {
            return Ok(ApiClients::single(kube::Client::try_from(config)?));
        }
        let api = multiplexed(&config)?;
        let isolated = kube::Client::try_from(config)?;
        Ok(ApiClients { api, isolated })
    }

    /// One client for both (a test's client, or a server without HTTP/2).
    pub fn single(client: kube::Client) -> ApiClients {
        ApiClients {
            api: client.clone(),
            isolated: client,
        }
    }
}

/// A client over HTTP/2 when the API server offers it in ALPN (HTTP/1.1
/// otherwise), at most [`STREAMS_PER_CONNECTION`] requests in flight a
/// connection, with kube's default layers. Ignores
/// `config.tls_server_name` ([`ApiClients::new`] does not call it then).
fn multiplexed(config: &kube::Config) -> Result<kube::Client, kube::Error> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let tls = config.rustls_client_config()?;
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let https = builder.enable_http1().enable_http2().wrap_connector(http);
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let mut builder = hyper_util::client::legacy::Client::builder(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .http2_initial_stream_window_size(STREAM_WINDOW)
        .http2_initial_connection_window_size(CONNECTION_WINDOW)
        .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
        .http2_keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
        .http2_keep_alive_while_idle(true);
    let client: Lanes<_, kube::client::Body> =
        Lanes::new(builder, connector, STREAMS_PER_CONNECTION);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(client);
    Ok(kube::Client::new(service, config.default_namespace.clone()))
}
