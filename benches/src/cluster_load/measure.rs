//! What the harness reads about the agent: its resident memory and CPU
//! time from `/proc`, its own counters from `/metrics` on its debug port,
//! and the requests it made from the API server's audit log.

use crate::cluster_load::error::ClusterLoadError;
use jiff::Timestamp;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A `kB` field of `/proc/<pid>/status` in bytes.
fn status_kb(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| {
        let rest = l.strip_prefix(field)?.strip_prefix(':')?;
        let kb: u64 = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
        Some(kb * 1024)
    })
}

/// Current resident set size (`VmRSS`) of `pid` in bytes.
pub fn rss_of(pid: u32) -> Option<u64> {
    status_kb(pid, "VmRSS")
}

/// Peak resident set size (`VmHWM`) of `pid` in bytes.
pub fn peak_rss_of(pid: u32) -> Option<u64> {
    status_kb(pid, "VmHWM")
}

/// `VmRSS` of one process sampled on a thread of its own.
#[derive(Debug)]
pub struct RssSampler {
    samples: Arc<Mutex<Vec<(Instant, u64)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RssSampler {
    /// Sample `pid` every `every` until dropped or the process is gone.
    pub fn start(pid: u32, every: Duration) -> RssSampler {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let samples = Arc::clone(&samples);
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Some(rss) = rss_of(pid) else { return };
                    if let Ok(mut s) = samples.lock() {
                        s.push((Instant::now(), rss));
                    }
                    std::thread::sleep(every);
                }
            })
        };
        RssSampler {
            samples,
            stop,
            thread: Some(thread),
        }
    }

    /// The samples taken between `from` and `to`, in bytes.
    pub fn between(&self, from: Instant, to: Instant) -> Vec<u64> {
        self.samples
            .lock()
            .map(|s| {
                s.iter()
                    .filter(|(t, _)| *t >= from && *t <= to)
                    .map(|(_, v)| *v)
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The median of `values` (0 when empty).
pub fn median(values: &[u64]) -> u64 {
    let mut v = values.to_vec();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// The agent's counters at one moment, summed over their labels (or over
/// the series carrying one label value).
#[derive(Debug, Clone, Default)]
pub struct AgentMetrics {
    series: Vec<(String, f64)>,
}

impl AgentMetrics {
    /// `GET /metrics` from the agent's debug server at `addr` (HTTP/1.0:
    /// the server closes the connection after the answer).
    pub fn scrape(addr: SocketAddr) -> Result<AgentMetrics, ClusterLoadError> {
        let err = |source| ClusterLoadError::Metrics { addr, source };
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(err)?;
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .map_err(err)?;
        stream
            .write_all(b"GET /metrics HTTP/1.0\r\nHost: agent\r\n\r\n")
            .map_err(err)?;
        let mut text = String::new();
        stream.read_to_string(&mut text).map_err(err)?;
        let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        let series = body
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (series, value) = l.rsplit_once(' ')?;
                Some((series.to_owned(), value.parse::<f64>().ok()?))
            })
            .collect();
        Ok(AgentMetrics { series })
    }

    /// The sum of every series of `name` whose labels contain `label`
    /// (empty: all of them).
    pub fn sum(&self, name: &str, label: &str) -> f64 {
        self.series
            .iter()
            .filter(|(s, _)| s.split('{').next() == Some(name) && s.contains(label))
            .map(|(_, v)| v)
            .sum()
    }

    /// The sum of every series of `name`, `None` when the agent exports no
    /// series of that name (absent is not zero).
    pub fn get(&self, name: &str) -> Option<f64> {
        let mut values = self
            .series
            .iter()
            .filter(|(s, _)| s.split('{').next() == Some(name))
            .map(|(_, v)| *v)
            .peekable();
        values.peek()?;
        Some(values.sum())
    }
}

/// Requests one user made in a time window, from the API server's audit
/// log (policy level `Metadata` for that user, stage `RequestReceived`
/// omitted): a request counts once, at `ResponseComplete`, or at
/// `ResponseStarted` for a watch (whose completion is its end).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RequestCounts {
    /// Every request.
    pub total: u64,
    /// By `verb resource[/subresource]`.
    pub by_kind: BTreeMap<String, u64>,
}

/// Calls `each` with every event of `user` in the audit log `log` (JSON
/// lines, audit.k8s.io/v1 events; a line that is not JSON is skipped), in
/// the log's order. The one reader of the log for every count below and
/// for the membership changes.
pub fn each_audit_event(
    log: &Path,
    user: &str,
    mut each: impl FnMut(&Value),
) -> Result<(), ClusterLoadError> {
    let err = |source| ClusterLoadError::Audit {
        path: log.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(log).map_err(err)?;
    for line in BufReader::new(file).lines() {
        let line = line.map_err(err)?;
        let Ok(event) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if event.pointer("/user/username").and_then(Value::as_str) == Some(user) {
            each(&event);
        }
    }
    Ok(())
}

/// When the API server reached an audit event's stage.
pub fn stage_time(event: &Value) -> Option<Timestamp> {
    event["stageTimestamp"].as_str()?.parse().ok()
}

/// The requests `user` made in each of `windows` (`[from, to)`), from
/// `log` (JSON lines, audit.k8s.io/v1 events).
pub fn audit_requests(
    log: &Path,
    user: &str,
    windows: &[(Timestamp, Timestamp)],
) -> Result<Vec<RequestCounts>, ClusterLoadError> {
    let mut out = vec![RequestCounts::default(); windows.len()];
    each_audit_event(log, user, |event| {
        let verb = event["verb"].as_str().unwrap_or("?");
        let stage = event["stage"].as_str().unwrap_or("");
        let counts = match (verb, stage) {
            ("watch", "ResponseStarted") => true,
            ("watch", _) => false,
            (_, "ResponseComplete") => true,
            _ => false,
        };
        if !counts {
            return;
        }
        let Some(at) = stage_time(event) else {
            return;
        };
        let resource = event.pointer("/objectRef/resource").and_then(Value::as_str);
        let sub = event
            .pointer("/objectRef/subresource")
            .and_then(Value::as_str);
        let kind = match (resource, sub) {
            (Some(r), Some(s)) => format!("{verb} {r}/{s}"),
            (Some(r), None) => format!("{verb} {r}"),
            _ => format!("{verb} {}", event["requestURI"].as_str().unwrap_or("?")),
        };
        for (w, c) in windows.iter().zip(out.iter_mut()) {
            if at >= w.0 && at < w.1 {
                c.total += 1;
                *c.by_kind.entry(kind.clone()).or_default() += 1;
            }
        }
    })?;
    Ok(out)
}

/// When the API server completed the last of `user`'s first successful
/// status writes: for each object of `resource` (plural) written at
/// `.../status` at or after `since`, the first 2xx answer; the latest of
/// those. `None` when there were none. This is when every instance's
/// first status was stored, whatever reads it and how often.
pub fn audit_last_first_status(
    log: &Path,
    user: &str,
    resource: &str,
    since: Timestamp,
) -> Result<Option<(Timestamp, usize)>, ClusterLoadError> {
    let mut first: HashMap<String, Timestamp> = HashMap::new();
    each_audit_event(log, user, |event| {
        if event["stage"] != "ResponseComplete"
            || event["verb"] != "patch"
            || event.pointer("/objectRef/resource").and_then(Value::as_str) != Some(resource)
            || event
                .pointer("/objectRef/subresource")
                .and_then(Value::as_str)
                != Some("status")
            || !event
                .pointer("/responseStatus/code")
                .and_then(Value::as_u64)
                .is_some_and(|c| (200..300).contains(&c))
        {
            return;
        }
        let (Some(name), Some(at)) = (
            event.pointer("/objectRef/name").and_then(Value::as_str),
            stage_time(event),
        ) else {
            return;
        };
        if at < since {
            return;
        }
        let e = first.entry(name.to_owned()).or_insert(at);
        if at < *e {
            *e = at;
        }
    })?;
    Ok(first.values().max().map(|last| (*last, first.len())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_first_status_is_the_latest_of_each_objects_first_2xx_write() {
        let dir = std::env::temp_dir().join(format!("cluster-load-first-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let log = dir.join("audit.log");
        let ev = |user: &str, name: &str, code: u64, at: &str, sub: Option<&str>| {
            serde_json::json!({"user": {"username": user}, "verb": "patch",
                "stage": "ResponseComplete", "stageTimestamp": at,
                "responseStatus": {"code": code},
                "objectRef": {"resource": "kurainstancehealths", "name": name, "subresource": sub}})
            .to_string()
        };
        let lines = [
            ev("agent", "a", 200, "2026-01-01T00:00:02Z", Some("status")),
            ev("agent", "a", 200, "2026-01-01T00:00:30Z", Some("status")),
            ev("agent", "b", 404, "2026-01-01T00:00:03Z", Some("status")),
            ev("agent", "b", 201, "2026-01-01T00:00:04Z", None),
            ev("agent", "b", 200, "2026-01-01T00:00:05Z", Some("status")),
            ev("admin", "c", 200, "2026-01-01T00:00:40Z", Some("status")),
            ev("agent", "d", 200, "2025-12-31T23:59:59Z", Some("status")),
        ];
        std::fs::write(&log, lines.join("\n")).expect("write");
        let t = |s: &str| s.parse::<Timestamp>().expect("ts");
        let got = audit_last_first_status(
            &log,
            "agent",
            "kurainstancehealths",
            t("2026-01-01T00:00:00Z"),
        )
        .expect("read");
        assert_eq!(got, Some((t("2026-01-01T00:00:05Z"), 2)));
        let none =
            audit_last_first_status(&log, "agent", "kurainstances", t("2026-01-01T00:00:00Z"))
                .expect("read");
        assert_eq!(none, None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn audit_counts_a_watch_once_and_other_requests_at_completion() {
        let dir = std::env::temp_dir().join(format!("cluster-load-audit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let log = dir.join("audit.log");
        let ev = |user: &str, verb: &str, stage: &str, at: &str, sub: Option<&str>| {
            let mut o = serde_json::json!({"user": {"username": user}, "verb": verb, "stage": stage,
                "stageTimestamp": at, "objectRef": {"resource": "kurainstances"}});
            if let Some(s) = sub {
                o["objectRef"]["subresource"] = serde_json::json!(s);
            }
            o.to_string()
        };
        let lines = [
            ev(
                "agent",
                "watch",
                "ResponseStarted",
                "2026-01-01T00:00:01Z",
                None,
            ),
            ev(
                "agent",
                "watch",
                "ResponseComplete",
                "2026-01-01T00:00:09Z",
                None,
            ),
            ev(
                "agent",
                "patch",
                "ResponseComplete",
                "2026-01-01T00:00:02Z",
                Some("status"),
            ),
            ev(
                "agent",
                "patch",
                "ResponseComplete",
                "2026-01-01T00:00:12Z",
                Some("status"),
            ),
            ev(
                "admin",
                "list",
                "ResponseComplete",
                "2026-01-01T00:00:03Z",
                None,
            ),
            "not json".to_owned(),
        ];
        std::fs::write(&log, lines.join("\n")).expect("write");
        let t = |s: &str| s.parse::<Timestamp>().expect("ts");
        let got = audit_requests(
            &log,
            "agent",
            &[
                (t("2026-01-01T00:00:00Z"), t("2026-01-01T00:00:10Z")),
                (t("2026-01-01T00:00:10Z"), t("2026-01-01T00:00:20Z")),
            ],
        )
        .expect("counts");
        assert_eq!(got[0].total, 2);
        assert_eq!(got[0].by_kind.get("watch kurainstances"), Some(&1));
        assert_eq!(got[0].by_kind.get("patch kurainstances/status"), Some(&1));
        assert_eq!(got[1].total, 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn metrics_sum_over_labels() {
        let m = AgentMetrics {
            series: vec![
                ("kura_agent_polls_total{result=\"ok\"}".to_owned(), 5.0),
                ("kura_agent_polls_total{result=\"timeout\"}".to_owned(), 2.0),
                ("kura_agent_polls_total_other".to_owned(), 100.0),
            ],
        };
        assert!((m.sum("kura_agent_polls_total", "") - 7.0).abs() < 1e-9);
        assert!((m.sum("kura_agent_polls_total", "result=\"ok\"") - 5.0).abs() < 1e-9);
    }

    #[test]
    fn metrics_get_tells_absent_from_zero() {
        let m = AgentMetrics {
            series: vec![
                ("kura_agent_owned_instances".to_owned(), 0.0),
                ("kura_agent_members".to_owned(), 3.0),
            ],
        };
        assert_eq!(m.get("kura_agent_owned_instances"), Some(0.0));
        assert_eq!(m.get("kura_agent_members"), Some(3.0));
        assert_eq!(m.get("kura_agent_owned"), None);
        assert_eq!(AgentMetrics::default().get("kura_agent_members"), None);
    }
}
