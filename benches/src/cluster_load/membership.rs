//! The membership-change phase (`--membership-change`, with `--replicas N`,
//! N > 1), after the rollout: a replica **joins** (replica N starts), then
//! a replica **leaves** (replica 0 gets SIGTERM). Each change lasts until
//! the replica set has settled: the living replicas' `kura_agent_owned_units`
//! sum to the units owned before the change, each replica watches exactly
//! the units it owns (`kura_agent_watched_units`), the joiner owns some, and
//! that has held for [`STABLE_FOR`].
//!
//! What each change reports, as evidence that a membership change lists
//! only the units that moved (the run fails on [`violations`]):
//!
//! - each replica's LIST requests by resource, from the API server's audit
//!   log (the agent's `User-Agent` names its identity): how many, how many
//!   distinct label selectors, and how many without one (first pages and
//!   further pages: a list of everything);
//! - the API server's own LIST counters and the bytes of its LIST answers
//!   (`apiserver_response_sizes_sum`), every user's, by resource;
//! - per instance, how often its status writer changed in the window (from
//!   the audit log): a handover changes it once; two writers alternating
//!   change it more than once, which the harness counts as
//!   `alternating_writers` (and fails the run on).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use kube::Client;
use serde_json::Value;

use crate::cluster_load::agents::Agents;
use crate::cluster_load::apiserver::{self, Counters};
use crate::cluster_load::error::ClusterLoadError;
use crate::cluster_load::measure::{each_audit_event, stage_time};
use crate::cluster_load::{ClusterLoadConfig, Publication};

/// The owned units must hold this long, unchanged, for a change to count
/// as settled.
pub const STABLE_FOR: Duration = Duration::from_secs(6);
/// How often the replicas' metrics are read while waiting.
const POLL_EVERY: Duration = Duration::from_secs(1);
/// At most this long for a change to settle.
const SETTLE_WITHIN: Duration = Duration::from_secs(180);

/// One replica's LIST requests of one resource in a window.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Lists {
    /// LIST requests.
    pub requests: u64,
    /// Distinct label selectors among them.
    pub selectors: usize,
    /// Requests with a selector that continue a list (its next page: a
    /// unit of more than a page's objects is two requests or more, not
    /// two lists).
    pub selected_further_pages: u64,
    /// Requests without a label selector: first pages (the publication
    /// probe of a replica that watches its own units reads one page of
    /// instances, metadata only).
    pub unselected_first_pages: u64,
    /// Requests without a label selector that continue a list (a list of
    /// everything of that resource).
    pub unselected_pages: u64,
}

/// The resources whose lists must follow the units.
const UNIT_RESOURCES: [&str; 3] = ["pods", "kurainstances", "kurainstancehealths"];

/// One membership change and what it cost.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Change {
    /// `join` or `leave`.
    pub kind: String,
    /// The replica that joined or left.
    pub replica: String,
    /// Seconds from the change until the replica set had settled (the
    /// last [`STABLE_FOR`] included).
    pub seconds: f64,
    /// Units each living replica owned before the change.
    pub owned_before: BTreeMap<String, f64>,
    /// Units each living replica owned once settled.
    pub owned_units: BTreeMap<String, f64>,
    /// Units the replica that joined or left owned (before leaving, or
    /// once settled after joining).
    pub units_moved: f64,
    /// Each replica's LIST requests in the window, by resource (audit log;
    /// replicas that listed nothing are absent).
    pub lists: BTreeMap<String, BTreeMap<String, Lists>>,
    /// The API server's LIST requests in the window, every user's, by
    /// resource.
    pub server_lists: BTreeMap<String, f64>,
    /// The bytes of the API server's LIST answers in the window, every
    /// user's, by resource.
    pub server_list_bytes: BTreeMap<String, f64>,
    /// Instances whose status was written in the window by more than one
    /// replica.
    pub handed_over: usize,
    /// Instances whose status writer changed more than once in the window
    /// (two writers alternating; must be 0).
    pub alternating_writers: usize,
}

/// Both changes.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct MembershipReport {
    /// Replica N joins.
    pub join: Change,
    /// Replica 0 leaves.
    pub leave: Change,
}

/// Each living replica's identity, units owned and units watched.
type UnitCounts = Vec<(String, f64, f64)>;

/// Units owned and watched by each living replica now.
fn units(agents: &mut Agents) -> UnitCounts {
    agents
        .living()
        .into_iter()
        .map(|(id, m)| {
            (
                id,
                m.get("kura_agent_owned_units").unwrap_or(0.0),
                m.get("kura_agent_watched_units").unwrap_or(-1.0),
            )
        })
        .collect()
}

/// Wait until the living replicas own `total` units between them, each
/// watching what it owns, `must_own` owning some, unchanged for
/// [`STABLE_FOR`]. Answers what each owns.
async fn settle(
    agents: &mut Agents,
    total: f64,
    must_own: Option<&str>,
) -> Result<BTreeMap<String, f64>, ClusterLoadError> {
    let deadline = Instant::now() + SETTLE_WITHIN;
    let mut stable: Option<(UnitCounts, Instant)> = None;
    loop {
        let now = units(agents);
        let sum: f64 = now.iter().map(|(_, owned, _)| owned).sum();
        let ok = (sum - total).abs() < 0.5
            && now.iter().all(|(_, owned, watched)| owned == watched)
            && must_own.is_none_or(|id| now.iter().any(|(i, owned, _)| i == id && *owned > 0.0));
        stable = match stable {
            Some((prev, since)) if ok && prev == now => {
                if since.elapsed() >= STABLE_FOR {
                    return Ok(now.into_iter().map(|(id, owned, _)| (id, owned)).collect());
                }
                Some((prev, since))
            }
            _ if ok => Some((now, Instant::now())),
            _ => None,
        };
        if Instant::now() > deadline {
            return Err(ClusterLoadError::Timeout(format!(
                "the replicas to settle on {total} units after a membership change (now: {:?})",
                units(agents)
            )));
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// Run the join and the leave (see the module doc).
pub async fn run(
    config: &ClusterLoadConfig,
    agents: &mut Agents,
    admin: &Client,
) -> Result<MembershipReport, ClusterLoadError> {
    let before = units(agents);
    let total: f64 = before.iter().map(|(_, owned, _)| owned).sum();
    let owned_before: BTreeMap<String, f64> = before
        .into_iter()
        .map(|(id, owned, _)| (id, owned))
        .collect();
    if total < 1.0 {
        return Err(ClusterLoadError::Protocol(
            "no replica owns a unit (does the agent export kura_agent_owned_units?)".into(),
        ));
    }

    // ---- join ------------------------------------------------------------
    let from = Timestamp::now();
    let at = Instant::now();
    let server_from = apiserver::read(admin).await;
    let joiner = agents.add(config)?;
    eprintln!("cluster-load: {joiner} joins");
    let owned = settle(agents, total, Some(&joiner)).await?;
    let mut join = Change {
        kind: "join".into(),
        units_moved: owned.get(&joiner).copied().unwrap_or(0.0),
        replica: joiner,
        seconds: at.elapsed().as_secs_f64(),
        owned_before,
        owned_units: owned,
        ..Change::default()
    };
    let to = Timestamp::now();
    let server_to = apiserver::read(admin).await;
    server_figures(&mut join, server_from.as_ref(), server_to.as_ref());

    // ---- leave -----------------------------------------------------------
    let leaver = agents.identity(0);
    let units_moved = join.owned_units.get(&leaver).copied().unwrap_or(0.0);
    let leave_from = Timestamp::now();
    let at = Instant::now();
    let server_from = apiserver::read(admin).await;
    eprintln!("cluster-load: {leaver} leaves");
    agents.stop_one(0);
    let owned = settle(agents, total, None).await?;
    let mut leave = Change {
        kind: "leave".into(),
        replica: leaver,
        seconds: at.elapsed().as_secs_f64(),
        owned_before: join.owned_units.clone(),
        owned_units: owned,
        units_moved,
        ..Change::default()
    };
    let leave_to = Timestamp::now();
    let server_to = apiserver::read(admin).await;
    server_figures(&mut leave, server_from.as_ref(), server_to.as_ref());

    if let Some(log) = &config.audit_log {
        let resource = match config.publication {
            Publication::Instance => "kurainstances",
            Publication::Companion => "kurainstancehealths",
        };
        let windows = [(from, to), (leave_from, leave_to)];
        let found = audit_windows(log, &config.agent_user, resource, &windows)?;
        for (change, (lists, writers)) in [&mut join, &mut leave].into_iter().zip(found) {
            change.lists = lists;
            change.handed_over = writers.values().filter(|w| w.writers > 1).count();
            change.alternating_writers = writers.values().filter(|w| w.changes > 1).count();
        }
    }
    Ok(MembershipReport { join, leave })
}

fn server_figures(change: &mut Change, from: Option<&Counters>, to: Option<&Counters>) {
    let (Some(from), Some(to)) = (from, to) else {
        return;
    };
    for (key, v) in &to.0 {
        let d = v - from.0.get(key).copied().unwrap_or(0.0);
        if d <= 0.0 {
            continue;
        }
        if let Some(resource) = key.strip_prefix("lists ") {
            change.server_lists.insert(resource.to_owned(), d);
        } else if let Some(resource) = key.strip_prefix("list_bytes ") {
            change.server_list_bytes.insert(resource.to_owned(), d);
        }
    }
}

/// The identity in an agent's `User-Agent` (`kura-agent/<v> (<identity>)`).
pub fn identity_of(user_agent: &str) -> Option<&str> {
    let rest = user_agent.strip_prefix("kura-agent/")?;
    let (_, id) = rest.split_once(" (")?;
    id.strip_suffix(')')
}

/// The label selector of a request URI, decoded (`None`: none, or empty).
pub fn label_selector(uri: &str) -> Option<String> {
    let query = uri.split_once('?')?.1;
    form_urlencoded::parse(query.as_bytes())
        .find(|(key, _)| key == "labelSelector")
        .map(|(_, value)| value.into_owned())
        .filter(|s| !s.is_empty())
}

/// Who wrote one instance's status in a window.
#[derive(Debug, Default)]
struct Writers {
    last: Option<String>,
    writers: usize,
    seen: BTreeSet<String>,
    changes: usize,
}

type Found = (
    BTreeMap<String, BTreeMap<String, Lists>>,
    HashMap<String, Writers>,
);

/// Each window's LIST requests by replica and resource, and each
/// instance's status writers, from the audit log.
fn audit_windows(
    log: &Path,
    user: &str,
    resource: &str,
    windows: &[(Timestamp, Timestamp)],
) -> Result<Vec<Found>, ClusterLoadError> {
    let mut out: Vec<Found> = windows.iter().map(|_| Found::default()).collect();
    let mut selectors: Vec<BTreeMap<(String, String), BTreeSet<String>>> =
        windows.iter().map(|_| BTreeMap::new()).collect();
    each_audit_event(log, user, |event| {
        if event["stage"] != "ResponseComplete" {
            return;
        }
        let Some(at) = stage_time(event) else {
            return;
        };
        let Some(w) = windows.iter().position(|w| at >= w.0 && at < w.1) else {
            return;
        };
        let who = event["userAgent"]
            .as_str()
            .and_then(identity_of)
            .unwrap_or("?")
            .to_owned();
        let verb = event["verb"].as_str().unwrap_or("");
        let object = event.pointer("/objectRef/resource").and_then(Value::as_str);
        let (lists, writers) = &mut out[w];
        match verb {
            "list" => {
                let object = object.unwrap_or("?").to_owned();
                let entry = lists
                    .entry(who.clone())
                    .or_default()
                    .entry(object.clone())
                    .or_default();
                entry.requests += 1;
                let uri = event["requestURI"].as_str().unwrap_or("");
                match label_selector(uri) {
                    Some(s) => {
                        if uri.contains("continue=") {
                            entry.selected_further_pages += 1;
                        }
                        let set = selectors[w].entry((who, object)).or_default();
                        set.insert(s);
                        entry.selectors = set.len();
                    }
                    None if uri.contains("continue=") => entry.unselected_pages += 1,
                    None => entry.unselected_first_pages += 1,
                }
            }
            "patch"
                if object == Some(resource)
                    && event
                        .pointer("/objectRef/subresource")
                        .and_then(Value::as_str)
                        == Some("status") =>
            {
                let name = format!(
                    "{}/{}",
                    event
                        .pointer("/objectRef/namespace")
                        .and_then(Value::as_str)
                        .unwrap_or(""),
                    event
                        .pointer("/objectRef/name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                );
                let entry = writers.entry(name).or_default();
                if entry.last.as_deref() != Some(who.as_str()) {
                    if entry.last.is_some() {
                        entry.changes += 1;
                    }
                    entry.last = Some(who.clone());
                }
                entry.seen.insert(who);
                entry.writers = entry.seen.len();
            }
            _ => {}
        }
    })?;
    Ok(out)
}

/// The changes as a table.
pub fn table(r: &MembershipReport) -> String {
    let mut out = String::new();
    for c in [&r.join, &r.leave] {
        out.push_str(&format!(
            "membership {}: {} ({} units) settled after {:.1} s; units {:?} -> {:?}; {} instances handed over, {} with alternating writers\n",
            c.kind, c.replica, c.units_moved, c.seconds, c.owned_before, c.owned_units, c.handed_over, c.alternating_writers
        ));
        for (who, by) in &c.lists {
            for (resource, l) in by {
                out.push_str(&format!(
                    "  {who} listed {resource}: {} requests, {} selectors ({} of the requests further pages), {} first pages and {} further pages without a selector\n",
                    l.requests, l.selectors, l.selected_further_pages, l.unselected_first_pages, l.unselected_pages
                ));
            }
        }
        if c.lists.is_empty() {
            out.push_str("  no replica listed anything\n");
        }
        for (resource, n) in &c.server_lists {
            out.push_str(&format!(
                "  API server: {n} LIST {resource}, {:.1} KB answered\n",
                c.server_list_bytes.get(resource).copied().unwrap_or(0.0) / 1000.0
            ));
        }
    }
    out
}

/// What a membership change must not do: alternate writers, or list pods,
/// instances or companions without a selector beyond one first page of
/// instances (the publication probe). Who listed which units is reported,
/// not judged here: bounded load may move a unit between two replicas that
/// stayed (their lists show in the table).
pub fn violations(r: &MembershipReport) -> Vec<String> {
    let mut out = Vec::new();
    for c in [&r.join, &r.leave] {
        if c.alternating_writers > 0 {
            out.push(format!(
                "{} of {}: {} instances with alternating status writers",
                c.kind, c.replica, c.alternating_writers
            ));
        }
        for (who, by) in &c.lists {
            for (resource, l) in by {
                if !UNIT_RESOURCES.contains(&resource.as_str()) {
                    continue;
                }
                let probes = if resource == "kurainstances" { 1 } else { 0 };
                if l.unselected_pages > 0 || l.unselected_first_pages > probes {
                    out.push(format!(
                        "{} of {}: {who} listed {resource} without a selector ({} first pages, {} further pages)",
                        c.kind, c.replica, l.unselected_first_pages, l.unselected_pages
                    ));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_comes_from_the_user_agent() {
        assert_eq!(
            identity_of("kura-agent/0.1.0 (cluster-load-agent-3)"),
            Some("cluster-load-agent-3")
        );
        assert_eq!(identity_of("kura-agent/0.1.0"), None);
        assert_eq!(identity_of("kubectl/v1.31"), None);
    }

    #[test]
    fn the_label_selector_is_decoded() {
        assert_eq!(
            label_selector(
                "/api/v1/namespaces/n/pods?labelSelector=kura.tuist.dev%2Fshard+in+%2800%2C01%29&limit=500"
            )
            .as_deref(),
            Some("kura.tuist.dev/shard in (00,01)")
        );
        assert_eq!(label_selector("/api/v1/pods?limit=500"), None);
        assert_eq!(
            label_selector("/api/v1/pods?labelSelector=a%2"),
            Some("a%2".into())
        );
    }
}
