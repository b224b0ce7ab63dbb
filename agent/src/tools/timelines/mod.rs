//! `kura-agent timelines --from URL [--out DIR] [--namespace NS]`: fetches
//! every instance's timeline from a running agent's debug endpoint and
//! writes one `kura-gate replay` document per instance,
//! `DIR/{namespace}.{name}.timeline.json`, so an operator can replay a
//! fleet's waves against a candidate configuration (`kura-gate replay
//! --gate-config FILE`). A name too long for a file name is shortened
//! with a digest (`files`); no two instances share a file. Each file is
//! written new and renamed into place: a link, FIFO or file planted under
//! its name is replaced, never followed or opened.
//!
//! The instances are listed by `GET /debug/instances`; each timeline is
//! `GET /api/v1/instances/{ns}/{name}/timeline` (at most 10,000 ticks, the
//! newest). Only the replica that sweeps an instance holds its timeline:
//! for the others the endpoint answers 404 with `ownedBy`, which is
//! printed (run the command against that replica too). Requests go a few
//! at a time (`--concurrency`), each bounded in time (`--timeout`, which
//! bounds writing its file too) and size (`--body-limit`, which bounds the
//! memory a body takes: it is copied into one buffer as it arrives).
//! `--from` is parsed as `check`'s node URLs are (`check::http_url`).
//!
//! Standard output: one line per instance (`wrote`, `not here` with the
//! owner, or `failed` with the reason), then a summary line. Exit code 0
//! when every timeline this replica holds was written, 1 when any fetch
//! or write failed, 2 for bad arguments or an unreadable instance list.

mod files;

pub use files::{MAX_FILE_NAME, file_name, is_name, is_namespace};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::header::{ACCEPT, HOST};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use tokio::net::TcpStream;

use crate::cli::terminal;
use crate::model::parse::parse_positive_duration;
use crate::tools::check::http_url;

/// Arguments of `kura-agent timelines`.
#[derive(Debug, Clone, clap::Args)]
pub struct TimelinesArgs {
    /// The agent's debug endpoint, e.g. `http://127.0.0.1:8080` (a
    /// `kubectl port-forward` to one replica).
    #[arg(long, value_name = "URL")]
    pub from: String,
    /// Where to write the files (created if missing).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub out: PathBuf,
    /// Only the instances of this namespace.
    #[arg(long, value_name = "NS")]
    pub namespace: Option<String>,
    /// Requests in flight at most.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=32))]
    pub concurrency: u16,
    /// Time limit of one instance (connect, send, read the whole body,
    /// write its file); also of the instance list.
    #[arg(long, default_value = "30s", value_parser = parse_positive_duration)]
    pub timeout: Duration,
    /// Largest body read, in bytes (room for the longest timeline an
    /// agent keeps); a body takes about this much memory at most, however
    /// it is sent.
    #[arg(long, default_value_t = 64 * 1024 * 1024,
          value_parser = clap::value_parser!(u64).range(1..=1024 * 1024 * 1024))]
    pub body_limit: u64,
}

/// Why a fetch failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// `--from` is not an `http://host[:port]` URL (the reason).
    #[error("--from {0}")]
    Url(String),
    /// The request (or writing its file) took longer than `--timeout`.
    #[error("no complete answer within {0:?}")]
    Timeout(Duration),
    /// Connecting failed.
    #[error("cannot connect: {0}")]
    Connect(std::io::Error),
    /// HTTP failed.
    #[error("HTTP: {0}")]
    Http(String),
    /// The body is larger than `--body-limit`.
    #[error("the answer is larger than {0} bytes (--body-limit)")]
    TooLarge(u64),
    /// The answer is not the JSON expected.
    #[error("unexpected answer: {0}")]
    Answer(String),
    /// Writing a file failed.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// The agent to fetch from.
#[derive(Debug, Clone)]
struct Endpoint {
    /// `host:port`, as connected to and sent in `Host`.
    authority: String,
}

impl Endpoint {
    fn parse(url: &str) -> Result<Endpoint, FetchError> {
        let (uri, authority) = http_url(url).map_err(|e| FetchError::Url(e.to_string()))?;
        if uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
            return Err(FetchError::Url(format!(
                "{:?}: expected http://HOST[:PORT], no path",
                url.trim()
            )));
        }
        // The port is checked (1-65535) when written; 80 when not.
        let authority = if uri.port().is_some() {
            authority
        } else {
            format!("{authority}:80")
        };
        Ok(Endpoint { authority })
    }

    /// `GET path`: the status and the whole body (at most `limit` bytes),
    /// within `timeout`.
    async fn get(
        &self,
        path: &str,
        limit: u64,
        timeout: Duration,
    ) -> Result<(StatusCode, Bytes), FetchError> {
        tokio::time::timeout(timeout, self.get_unbounded(path, limit))
            .await
            .map_err(|_| FetchError::Timeout(timeout))?
    }

    async fn get_unbounded(
        &self,
        path: &str,
        limit: u64,
    ) -> Result<(StatusCode, Bytes), FetchError> {
        let stream = TcpStream::connect(self.authority.as_str())
            .await
            .map_err(FetchError::Connect)?;
        let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
            .max_buf_size(READ_BUFFER_MAX)
            .handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
            .await
            .map_err(|e| FetchError::Http(e.to_string()))?;
        let driver = tokio::spawn(connection);
        let request = Request::get(path)
            .header(HOST, &self.authority)
            .header(ACCEPT, "application/json")
            .body(Empty::new())
            .map_err(|e| FetchError::Http(e.to_string()))?;
        let answer = async {
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| FetchError::Http(e.to_string()))?;
            let status = response.status();
            let body = read_body(response.into_body(), limit).await?;
            Ok((status, body))
        }
        .await;
        driver.abort();
        answer
    }
}

/// The most the connection's read buffer may grow to. Hyper's default
/// (about 400 KiB) is reached when the server writes faster than the
/// answer is read, as on a loaded machine; a debug tool fetching one
/// answer at a time needs far less, and its memory stays about the body.
const READ_BUFFER_MAX: usize = 32 * 1024;

/// A body, copied into one buffer as its frames arrive (however small they
/// are, memory stays about the bytes received), at most `limit` bytes.
async fn read_body<B>(mut body: B, limit: u64) -> Result<Bytes, FetchError>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let mut bytes: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| FetchError::Http(e.to_string()))?;
        if let Ok(data) = frame.into_data() {
            if (bytes.len() as u64).saturating_add(data.len() as u64) > limit {
                return Err(FetchError::TooLarge(limit));
            }
            bytes.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(bytes))
}

/// One entry of `/debug/instances` (only what is read).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Listed {
    namespace: String,
    name: String,
}

/// The 404 body of the timeline route.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NotHere {
    owned_by: Option<String>,
}

/// What became of one instance.
#[derive(Debug)]
enum Outcome {
    Wrote {
        path: PathBuf,
        ticks: usize,
        complete: bool,
    },
    NotHere {
        owned_by: Option<String>,
    },
    Failed(FetchError),
}

/// The file of one instance's timeline under `out` (its namespace and name
/// checked by [`is_namespace`] and [`is_name`]; see [`file_name`]).
pub fn timeline_file(out: &Path, namespace: &str, name: &str) -> PathBuf {
    out.join(file_name(namespace, name))
}

/// A path segment percent-encoded (names are safe already; this keeps the
/// request well-formed whatever the list says).
fn segment(part: &str) -> String {
    part.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_' {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Fetches one instance's timeline and writes its file, all within
/// `--timeout`.
async fn fetch_one(endpoint: &Endpoint, args: &TimelinesArgs, listed: &Listed) -> Outcome {
    match tokio::time::timeout(args.timeout, fetch_and_write(endpoint, args, listed)).await {
        Ok(outcome) => outcome,
        Err(_) => Outcome::Failed(FetchError::Timeout(args.timeout)),
    }
}

async fn fetch_and_write(endpoint: &Endpoint, args: &TimelinesArgs, listed: &Listed) -> Outcome {
    let path = format!(
        "/api/v1/instances/{}/{}/timeline",
        segment(&listed.namespace),
        segment(&listed.name)
    );
    let (status, body) = match endpoint.get_unbounded(&path, args.body_limit).await {
        Ok(answer) => answer,
        Err(e) => return Outcome::Failed(e),
    };
    if status == StatusCode::NOT_FOUND {
        return match serde_json::from_slice::<NotHere>(&body) {
            Ok(not_here) => Outcome::NotHere {
                owned_by: not_here.owned_by,
            },
            Err(e) => Outcome::Failed(FetchError::Answer(format!("404 without its JSON: {e}"))),
        };
    }
    if status != StatusCode::OK {
        return Outcome::Failed(FetchError::Answer(format!("HTTP {status}")));
    }
    // Written as received once it reads as a timeline document.
    let doc: kura_schemas::InstanceTimeline = match serde_json::from_slice(&body) {
        Ok(doc) => doc,
        Err(e) => return Outcome::Failed(FetchError::Answer(format!("not a timeline: {e}"))),
    };
    let name = file_name(&listed.namespace, &listed.name);
    let file = match files::write_replacing(&args.out, &name, &body).await {
        Ok(file) => file,
        Err(source) => {
            return Outcome::Failed(FetchError::Write {
                path: args.out.join(&name).display().to_string(),
                source,
            });
        }
    };
    Outcome::Wrote {
        path: file,
        ticks: doc.ticks.len(),
        complete: doc.window.complete,
    }
}

/// What a run did: one line per instance and the counts.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Fetched {
    /// One line per instance, in namespace and name order.
    pub lines: Vec<String>,
    /// Files written.
    pub written: usize,
    /// Instances another replica sweeps.
    pub elsewhere: usize,
    /// Fetches or writes that failed.
    pub failed: usize,
}

/// Fetches every listed instance's timeline into `args.out`. The error is
/// for what stops the whole run (a bad URL, no instance list, no
/// directory).
pub async fn fetch_all(args: &TimelinesArgs) -> Result<Fetched, FetchError> {
    let endpoint = Endpoint::parse(&args.from)?;
    tokio::fs::create_dir_all(&args.out)
        .await
        .map_err(|source| FetchError::Write {
            path: args.out.display().to_string(),
            source,
        })?;
    let (status, body) = endpoint
        .get("/debug/instances", args.body_limit, args.timeout)
        .await?;
    if status != StatusCode::OK {
        return Err(FetchError::Answer(format!(
            "/debug/instances answered HTTP {status}"
        )));
    }
    let mut listed: Vec<Listed> = serde_json::from_slice(&body)
        .map_err(|e| FetchError::Answer(format!("/debug/instances: {e}")))?;
    listed.retain(|l| args.namespace.as_ref().is_none_or(|ns| *ns == l.namespace));
    let mut out = Fetched::default();
    // One file per instance: a name that is not Kubernetes', or a second
    // instance of one file (the list naming an instance twice), is refused.
    let mut files: HashMap<String, String> = HashMap::new();
    let mut fine = Vec::with_capacity(listed.len());
    for l in listed {
        let id = format!("{}/{}", l.namespace, l.name);
        if !is_namespace(&l.namespace) || !is_name(&l.name) {
            out.failed += 1;
            out.lines.push(format!(
                "failed   {id}: not a Kubernetes name, no file written"
            ));
            continue;
        }
        let file = file_name(&l.namespace, &l.name);
        if let Some(first) = files.get(&file) {
            out.failed += 1;
            out.lines.push(format!(
                "failed   {id}: listed twice (its file {file} is {first}'s), written once"
            ));
            continue;
        }
        files.insert(file, id);
        fine.push(l);
    }
    let endpoint = Arc::new(endpoint);
    let outcomes: Vec<(Listed, Outcome)> = futures::stream::iter(fine)
        .map(|l| {
            let endpoint = Arc::clone(&endpoint);
            async move {
                let outcome = fetch_one(&endpoint, args, &l).await;
                (l, outcome)
            }
        })
        .buffered(usize::from(args.concurrency))
        .collect()
        .await;
    for (l, outcome) in outcomes {
        let id = format!("{}/{}", l.namespace, l.name);
        let line = match outcome {
            Outcome::Wrote {
                path,
                ticks,
                complete,
            } => {
                out.written += 1;
                format!(
                    "wrote    {id}: {ticks} tick(s){} -> {}",
                    if complete { "" } else { ", incomplete" },
                    path.display()
                )
            }
            Outcome::NotHere { owned_by } => {
                out.elsewhere += 1;
                match owned_by {
                    Some(owner) => format!("not here {id}: swept by {}", &owner),
                    None => format!("not here {id}: not swept by this replica"),
                }
            }
            Outcome::Failed(e) => {
                out.failed += 1;
                format!("failed   {id}: {}", &e.to_string())
            }
        };
        out.lines.push(line);
    }
    Ok(out)
}

/// Entry point of `kura-agent timelines`.
pub fn run(args: &TimelinesArgs) -> ExitCode {
    let runtime = match crate::cli::multi_thread_runtime("timelines") {
        Ok(r) => r,
        Err(code) => return code,
    };
    let fetched = runtime.block_on(fetch_all(args));
    // Nothing is left running (every write ends within --timeout); a stuck
    // blocking file operation does not keep the process.
    runtime.shutdown_timeout(Duration::from_secs(1));
    match fetched {
        Ok(fetched) => {
            for line in &fetched.lines {
                println!("{}", terminal::line(line));
            }
            println!(
                "{} written, {} swept by another replica, {} failed",
                fetched.written, fetched.elsewhere, fetched.failed
            );
            if fetched.failed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("kura-agent timelines: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_http_endpoints_are_accepted() {
        assert_eq!(
            Endpoint::parse("http://127.0.0.1:8080").unwrap().authority,
            "127.0.0.1:8080"
        );
        assert_eq!(
            Endpoint::parse("http://agent/").unwrap().authority,
            "agent:80"
        );
        assert_eq!(
            Endpoint::parse("http://[::1]:8080").unwrap().authority,
            "[::1]:8080"
        );
        assert_eq!(
            Endpoint::parse("http://Agent:08080").unwrap().authority,
            "agent:8080"
        );
        // Issue 44 item 4: an invalid or empty port was port 80.
        for bad in [
            "https://agent:8080",
            "agent:8080",
            "http://agent:8080/debug",
            "http://agent:8080/?x",
            "http://u:p@agent:8080",
            "http://127.0.0.1:99999",
            "http://127.0.0.1:65536",
            "http://127.0.0.1:",
            "http://127.0.0.1:0",
            "",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_file_of_an_instance() {
        assert_eq!(
            timeline_file(Path::new("/o"), "ns", "a.b"),
            PathBuf::from("/o/ns.a.b.timeline.json")
        );
    }
}
