//! Node URLs as `kura-agent check` and `kura-agent baseline` accept them,
//! and the duplicate rule: one node given twice would count its counters
//! twice, so two URLs reaching the same address, port and path are
//! refused, whether they are spelled alike or not (`:04100` is `:4100`,
//! `localhost` is `127.0.0.1`).

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use http::Uri;

use kura_schemas::REPORT_PATH;

/// How long resolving one node's host name may take at start-up.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a `--node` URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeUrlError {
    /// Not a URL at all.
    #[error("{url:?} is not a URL: {reason}")]
    Invalid {
        /// The input.
        url: String,
        /// The parser's reason.
        reason: String,
    },
    /// A scheme other than `http`.
    #[error("{url:?}: only http:// node URLs are supported")]
    Scheme {
        /// The input.
        url: String,
    },
    /// No host.
    #[error("{url:?} has no host")]
    NoHost {
        /// The input.
        url: String,
    },
    /// A path that is neither empty nor the report path.
    #[error("{url:?}: the path must be empty, `/` or end in {REPORT_PATH}")]
    Path {
        /// The input.
        url: String,
    },
    /// Credentials in the URL.
    #[error("{url:?}: credentials in node URLs are not supported")]
    UserInfo {
        /// The input.
        url: String,
    },
    /// A port that is not a number from 1 to 65535.
    #[error("{url:?}: the port must be a number from 1 to 65535, not {port:?}")]
    Port {
        /// The input.
        url: String,
        /// The port as written.
        port: String,
    },
    /// The same node twice (its counters would be counted twice).
    #[error("{url:?} is given twice")]
    Duplicate {
        /// The normalised URL.
        url: String,
    },
    /// Two URLs that reach the same address, port and path: one node.
    #[error("{second:?} and {first:?} are one node (both reach {addr}{path})")]
    SameNode {
        /// The URL given first.
        first: String,
        /// The URL given later.
        second: String,
        /// The address both reach.
        addr: SocketAddr,
        /// The path both ask for.
        path: String,
    },
}

/// The port written in an authority (`host:port`, `[v6]:port`), if any.
fn written_port(authority: &str) -> Option<&str> {
    let tail = match authority.rfind(']') {
        Some(i) => &authority[i + 1..],
        None => authority,
    };
    tail.rfind(':').map(|i| &tail[i + 1..])
}

/// An `http://` URL whose authority is checked (a host, no credentials,
/// a port from 1 to 65535 if one is written), and that authority in its
/// normal form (`host` or `host:port`, the host lower-cased). The one URL
/// parser of the tools that connect to a node or an agent: `check`'s and
/// `baseline`'s node URLs and `timelines --from`.
pub fn http_url(input: &str) -> Result<(Uri, String), NodeUrlError> {
    let url = input.trim();
    let uri: Uri = url
        .parse()
        .map_err(|e: http::uri::InvalidUri| NodeUrlError::Invalid {
            url: url.to_owned(),
            reason: e.to_string(),
        })?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(_) => {
            return Err(NodeUrlError::Scheme {
                url: url.to_owned(),
            });
        }
        None => {
            return Err(NodeUrlError::Invalid {
                url: url.to_owned(),
                reason: "no scheme (write http://host:port)".to_owned(),
            });
        }
    }
    let Some(authority) = uri.authority() else {
        return Err(NodeUrlError::NoHost {
            url: url.to_owned(),
        });
    };
    if authority.as_str().contains('@') {
        return Err(NodeUrlError::UserInfo {
            url: url.to_owned(),
        });
    }
    if authority.host().is_empty() {
        return Err(NodeUrlError::NoHost {
            url: url.to_owned(),
        });
    }
    // `http` reads a port it cannot hold as no port at all (port 80): an
    // out-of-range port would silently poll another one.
    let port = match written_port(authority.as_str()) {
        None => None,
        Some(written) => match written.parse::<u16>() {
            Ok(port) if port != 0 && written.bytes().all(|b| b.is_ascii_digit()) => Some(port),
            _ => {
                return Err(NodeUrlError::Port {
                    url: url.to_owned(),
                    port: written.to_owned(),
                });
            }
        },
    };
    // Host names are case-insensitive and a port is a number: one spelling
    // per node (`HOST:04100` is `host:4100`).
    let host = authority.host().to_ascii_lowercase();
    let authority = match port {
        Some(port) => format!("{host}:{port}"),
        None => host,
    };
    Ok((uri, authority))
}

/// The report URL of a node given as `http://host:port`, `http://host:port/`
/// or the full report URL (a path ending in `/status/rollout`, e.g. behind a
/// path-prefixing proxy). Only `http://` is accepted; a query is kept.
pub fn node_report_url(input: &str) -> Result<Uri, NodeUrlError> {
    let url = input.trim();
    let (uri, authority) = http_url(url)?;
    let path = uri.path();
    let path = if path.is_empty() || path == "/" {
        REPORT_PATH
    } else if path.ends_with(REPORT_PATH) {
        path
    } else {
        return Err(NodeUrlError::Path {
            url: url.to_owned(),
        });
    };
    let path_and_query = match uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_owned(),
    };
    Uri::builder()
        .scheme("http")
        .authority(authority)
        .path_and_query(path_and_query)
        .build()
        .map_err(|e| NodeUrlError::Invalid {
            url: url.to_owned(),
            reason: e.to_string(),
        })
}

/// Every node's report URL, in input order; the first invalid or repeated
/// one (in its normal form: same host, port and path) is an error.
pub fn node_report_urls<S: AsRef<str>>(inputs: &[S]) -> Result<Vec<Uri>, NodeUrlError> {
    let mut out: Vec<Uri> = Vec::with_capacity(inputs.len());
    let mut seen = BTreeSet::new();
    for input in inputs {
        let uri = node_report_url(input.as_ref())?;
        let key = (
            uri.host().unwrap_or_default().to_owned(),
            uri.port_u16().unwrap_or(80),
            uri.path_and_query().map(|p| p.as_str().to_owned()),
        );
        if !seen.insert(key) {
            return Err(NodeUrlError::Duplicate {
                url: uri.to_string(),
            });
        }
        out.push(uri);
    }
    Ok(out)
}

/// The addresses a node URL reaches: an IP literal itself, a name through
/// the system resolver (at most [`RESOLVE_TIMEOUT`]; a name that does not
/// resolve yet, such as a pod still starting, reaches nothing known).
async fn addresses(uri: &Uri) -> BTreeSet<SocketAddr> {
    let port = uri.port_u16().unwrap_or(80);
    let host = uri.host().unwrap_or_default();
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return [SocketAddr::new(ip, port)].into();
    }
    match tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((bare, port))).await {
        Ok(Ok(addrs)) => addrs.collect(),
        _ => BTreeSet::new(),
    }
}

/// Refuses two URLs (already normal, see [`node_report_urls`]) that reach
/// a common address and port with the same path: they are one node under
/// two names. Names that do not resolve are compared by name only.
pub async fn refuse_same_nodes(urls: &[Uri]) -> Result<(), NodeUrlError> {
    let resolved =
        futures::future::join_all(urls.iter().map(|u| async move { (u, addresses(u).await) }))
            .await;
    for (i, (second, theirs)) in resolved.iter().enumerate() {
        for (first, ours) in &resolved[..i] {
            if first.path_and_query() != second.path_and_query() {
                continue;
            }
            if let Some(addr) = ours.intersection(theirs).next() {
                return Err(NodeUrlError::SameNode {
                    first: first.to_string(),
                    second: second.to_string(),
                    addr: *addr,
                    path: second
                        .path_and_query()
                        .map_or_else(String::new, |p| p.as_str().to_owned()),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_get_the_report_path_and_report_urls_stay() {
        for (input, want) in [
            (
                "http://10.0.0.5:4000",
                "http://10.0.0.5:4000/status/rollout",
            ),
            (
                "http://10.0.0.5:4000/",
                "http://10.0.0.5:4000/status/rollout",
            ),
            (
                " http://kura-0.kura:4000/status/rollout ",
                "http://kura-0.kura:4000/status/rollout",
            ),
            (
                "http://proxy/kura-1/status/rollout?x=1",
                "http://proxy/kura-1/status/rollout?x=1",
            ),
        ] {
            assert_eq!(node_report_url(input).unwrap().to_string(), want, "{input}");
        }
    }

    #[test]
    fn other_schemes_paths_and_junk_are_refused() {
        assert!(matches!(
            node_report_url("https://10.0.0.5:4000"),
            Err(NodeUrlError::Scheme { .. })
        ));
        assert!(matches!(
            node_report_url("10.0.0.5:4000"),
            Err(NodeUrlError::Scheme { .. } | NodeUrlError::Invalid { .. })
        ));
        assert!(matches!(
            node_report_url("http://10.0.0.5:4000/status"),
            Err(NodeUrlError::Path { .. })
        ));
        assert!(matches!(
            node_report_url("http://user:pw@10.0.0.5:4000"),
            Err(NodeUrlError::UserInfo { .. })
        ));
        assert!(matches!(
            node_report_url("not a url"),
            Err(NodeUrlError::Invalid { .. })
        ));
        assert!(matches!(
            node_report_urls(&["http://a:1", "http://a:1/status/rollout"]),
            Err(NodeUrlError::Duplicate { .. })
        ));
    }

    #[test]
    fn ports_out_of_range_are_refused_never_read_as_80() {
        for input in [
            "http://host:99999",
            "http://host:65536",
            "http://10.0.0.5:0",
            "http://[::1]:70000",
            "http://host:",
            "http://host:+80",
        ] {
            match node_report_url(input) {
                Err(NodeUrlError::Port { .. } | NodeUrlError::Invalid { .. }) => {}
                other => panic!("{input}: {other:?}"),
            }
        }
        assert!(matches!(
            node_report_url("http://host:99999"),
            Err(NodeUrlError::Port { port, .. }) if port == "99999"
        ));
        for (input, want) in [
            ("http://host:65535", "http://host:65535/status/rollout"),
            ("http://HOST:04100", "http://host:4100/status/rollout"),
            ("http://[::1]:4100", "http://[::1]:4100/status/rollout"),
            ("http://[::1]", "http://[::1]/status/rollout"),
            ("http://host", "http://host/status/rollout"),
        ] {
            assert_eq!(node_report_url(input).unwrap().to_string(), want, "{input}");
        }
    }

    #[test]
    fn one_node_spelled_twice_is_a_duplicate() {
        for pair in [
            ["http://127.0.0.2:4100", "http://127.0.0.2:04100"],
            ["http://Kura-0:4000", "http://kura-0:4000/"],
            ["http://kura-0", "http://kura-0:80/status/rollout"],
        ] {
            assert!(
                matches!(node_report_urls(&pair), Err(NodeUrlError::Duplicate { .. })),
                "{pair:?}"
            );
        }
        // Behind one proxy, two paths are two nodes.
        assert!(
            node_report_urls(&[
                "http://proxy/kura-0/status/rollout",
                "http://proxy/kura-1/status/rollout"
            ])
            .is_ok()
        );
    }

    #[tokio::test]
    async fn two_names_of_one_address_are_one_node() {
        let urls = node_report_urls(&["http://127.0.0.1:4100", "http://localhost:4100"]).unwrap();
        let err = refuse_same_nodes(&urls).await.expect_err("one node");
        assert!(
            err.to_string()
                .contains("are one node (both reach 127.0.0.1:4100/status/rollout)"),
            "{err}"
        );
        let distinct = node_report_urls(&[
            "http://127.0.0.1:4100",
            "http://127.0.0.2:4100",
            "http://localhost:4101",
        ])
        .unwrap();
        assert_eq!(refuse_same_nodes(&distinct).await, Ok(()));
        // A name that does not resolve is no error here (the pod may not
        // be up yet): it is compared by name only.
        let unresolved =
            node_report_urls(&["http://kura-0.invalid:4000", "http://kura-1.invalid:4000"])
                .unwrap();
        assert_eq!(refuse_same_nodes(&unresolved).await, Ok(()));
    }
}
