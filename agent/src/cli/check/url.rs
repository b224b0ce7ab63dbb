//! Node URLs as `kura-agent check` accepts them.

use http::Uri;

use kura_schemas::REPORT_PATH;

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
    /// The same node twice (its counters would be counted twice).
    #[error("{url:?} is given twice")]
    Duplicate {
        /// The normalised URL.
        url: String,
    },
}

/// The report URL of a node given as `http://host:port`, `http://host:port/`
/// or the full report URL (a path ending in `/status/rollout`, e.g. behind a
/// path-prefixing proxy). Only `http://` is accepted; a query is kept.
pub fn node_report_url(input: &str) -> Result<Uri, NodeUrlError> {
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
        .authority(authority.as_str())
        .path_and_query(path_and_query)
        .build()
        .map_err(|e| NodeUrlError::Invalid {
            url: url.to_owned(),
            reason: e.to_string(),
        })
}

/// Every node's report URL, in input order; the first invalid or repeated
/// one is an error.
pub fn node_report_urls<S: AsRef<str>>(inputs: &[S]) -> Result<Vec<Uri>, NodeUrlError> {
    let mut out: Vec<Uri> = Vec::with_capacity(inputs.len());
    for input in inputs {
        let uri = node_report_url(input.as_ref())?;
        if out.contains(&uri) {
            return Err(NodeUrlError::Duplicate {
                url: uri.to_string(),
            });
        }
        out.push(uri);
    }
    Ok(out)
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
}
