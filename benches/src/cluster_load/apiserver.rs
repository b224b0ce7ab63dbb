//! The API server's own counters around a run's phases: watch events it
//! sent (and their bytes) by resource, and LIST requests by resource, read
//! from its `/metrics` (Prometheus text) with the harness's admin client.
//! Every user's requests count (the harness's own watch of the statuses
//! too), so they are the server's load, not the agent's alone; the audit
//! log gives the agent's own requests.

use std::collections::BTreeMap;

use kube::Client;

/// The counters read at one moment, by `"<counter> <resource>"`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counters(pub BTreeMap<String, f64>);

/// What is kept of the API server's metrics: the watch events sent and
/// their bytes (by `resource`, or `kind` on older servers), requests by
/// verb for LIST and WATCH and the bytes of LIST answers (by `resource`).
pub fn parse(text: &str) -> Counters {
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        let label = |key: &str| {
            labels.split(',').find_map(|kv| {
                let (k, v) = kv.split_once('=')?;
                (k.trim() == key).then(|| v.trim().trim_matches('"').to_owned())
            })
        };
        let resource = label("resource").or_else(|| label("kind"));
        let counter = match name {
            "apiserver_watch_events_total" => "watch_events",
            "apiserver_watch_events_sizes_sum" => "watch_event_bytes",
            "apiserver_response_sizes_sum" if label("verb").as_deref() == Some("LIST") => {
                "list_bytes"
            }
            "apiserver_request_total" => match label("verb").as_deref() {
                Some("LIST") => "lists",
                Some("WATCH") => "watches",
                _ => continue,
            },
            _ => continue,
        };
        let Some(resource) = resource.filter(|r| !r.is_empty()) else {
            continue;
        };
        *out.entry(format!("{counter} {}", resource.to_lowercase()))
            .or_default() += value;
    }
    Counters(out)
}

/// Per second between `from` and `to`, `seconds` apart (counters that
/// did not move left out).
pub fn rates(from: &Counters, to: &Counters, seconds: f64) -> BTreeMap<String, f64> {
    to.0.iter()
        .filter_map(|(k, v)| {
            let d = v - from.0.get(k).copied().unwrap_or(0.0);
            (d > 0.0 && seconds > 0.0).then(|| (k.clone(), d / seconds))
        })
        .collect()
}

/// The API server's counters now (`None` when its metrics cannot be read:
/// the run goes on without them).
pub async fn read(client: &Client) -> Option<Counters> {
    let req = http::Request::get("/metrics").body(Vec::new()).ok()?;
    let text = client.request_text(req).await.ok()?;
    Some(parse(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_events_and_lists_are_kept_by_resource() {
        let text = r#"# HELP apiserver_watch_events_total x
# TYPE apiserver_watch_events_total counter
apiserver_watch_events_total{group="",resource="pods",version="v1"} 120
apiserver_watch_events_total{group="kura.tuist.dev",resource="kurainstances",version="v1alpha1"} 30
apiserver_watch_events_sizes_sum{group="",resource="pods",version="v1"} 1.2e+06
apiserver_watch_events_total{group="",kind="Pod",version="v1"} 5
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="cluster",subresource="",verb="LIST",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",group="",resource="pods",verb="GET",version="v1"} 99
apiserver_request_total{code="0",component="apiserver",group="",resource="pods",verb="WATCH",version="v1"} 2
apiserver_response_sizes_sum{component="apiserver",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 4.5e+06
apiserver_response_sizes_sum{component="apiserver",group="",resource="pods",scope="namespace",subresource="",verb="GET",version="v1"} 9e+03
other_metric{resource="pods"} 1
"#;
        let c = parse(text);
        assert_eq!(c.0.get("watch_events pods"), Some(&120.0));
        assert_eq!(
            c.0.get("watch_events pod"),
            Some(&5.0),
            "older servers: by kind"
        );
        assert_eq!(c.0.get("watch_events kurainstances"), Some(&30.0));
        assert_eq!(c.0.get("watch_event_bytes pods"), Some(&1.2e6));
        assert_eq!(c.0.get("lists pods"), Some(&10.0));
        assert_eq!(c.0.get("watches pods"), Some(&2.0));
        assert_eq!(
            c.0.get("list_bytes pods"),
            Some(&4.5e6),
            "LIST answers only"
        );
        assert_eq!(c.0.len(), 7, "{c:?}");
        let later = parse(&text.replace("} 120", "} 180"));
        let r = rates(&c, &later, 2.0);
        assert_eq!(r.get("watch_events pods"), Some(&30.0));
        assert_eq!(r.len(), 1, "unmoved counters are left out");
    }
}
