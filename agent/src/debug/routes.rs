//! The debug server's routes: one function per route, each reading the
//! [`DebugState`] it is handed and building its whole answer (the streamed
//! `GET /metrics` is `server`'s), and [`route`], the one table from a
//! request's path segments to them. The table of routes and what they
//! answer is in `server`'s documentation.

use bytes::Bytes;
use http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
};
use http::{Response, StatusCode};
use http_body_util::Full;
use jiff::Timestamp;
use serde::Serialize;

use crate::debug::answers;
use crate::debug::fleet_page::{self, Fleet};
use crate::debug::fleet_query::FleetQuery;
use crate::debug::fleet_window;
use crate::debug::html;
use crate::debug::instance_metrics;
use crate::debug::instance_page::{self, Instance};
use crate::debug::state::DebugState;
use crate::debug::timeline_query;
use crate::model::InstanceKey;

/// A whole answer.
pub(crate) type Answer = Response<Full<Bytes>>;

/// The Content-Type of Prometheus text.
pub(crate) const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
const PLAIN_TEXT: &str = "text/plain; charset=utf-8";

/// The answer of the route `segments` (the path's percent-decoded
/// segments) with the query string `query`, at `now`; `None` for a path no
/// route serves.
pub(crate) fn route(
    segments: &[&str],
    query: &str,
    state: &DebugState,
    now: Timestamp,
) -> Option<Answer> {
    Some(match *segments {
        [] | [""] => fleet(state, query, now),
        ["instances", namespace, name] => instance(state, &key(namespace, name), query, now),
        ["instances", namespace, name, "metrics"] => {
            instance_series(state, &key(namespace, name), now)
        }
        ["healthz"] => healthz(),
        ["readyz"] => readyz(state),
        ["metrics"] => metrics_head(),
        ["debug", "instances"] => debug_instances(state, now),
        ["debug", "members"] => debug_members(state, now),
        ["debug", "instances", namespace, name] => {
            debug_instance(state, &key(namespace, name), now)
        }
        ["api", "v1", "instances", namespace, name, "verdict"] => {
            verdict(state, &key(namespace, name), now)
        }
        ["api", "v1", "instances", namespace, name, "timeline"] => {
            timeline(state, &key(namespace, name), query, now)
        }
        _ => return None,
    })
}

fn key(namespace: &str, name: &str) -> InstanceKey {
    InstanceKey::new(namespace, name)
}

/// `body` as `content_type`, never cached.
pub(crate) fn text(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Answer {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, http::HeaderValue::from_static(content_type));
    r.headers_mut()
        .insert(CACHE_CONTROL, http::HeaderValue::from_static("no-store"));
    r
}

/// Plain text.
pub(crate) fn plain(status: StatusCode, body: impl Into<Bytes>) -> Answer {
    text(status, PLAIN_TEXT, body)
}

/// An HTML page with its Content-Security-Policy.
fn page(status: StatusCode, body: String) -> Answer {
    let mut r = text(status, "text/html; charset=utf-8", body);
    let headers = r.headers_mut();
    if let Ok(csp) = http::HeaderValue::from_str(html::content_security_policy()) {
        headers.insert(CONTENT_SECURITY_POLICY, csp);
    }
    headers.insert(
        X_CONTENT_TYPE_OPTIONS,
        http::HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        REFERRER_POLICY,
        http::HeaderValue::from_static("no-referrer"),
    );
    r
}

/// `value` as pretty JSON.
fn json<T: Serialize>(status: StatusCode, value: &T) -> Answer {
    match serde_json::to_vec_pretty(value) {
        Ok(body) => text(status, "application/json", body),
        Err(e) => cannot_encode(&e),
    }
}

fn cannot_encode(e: &serde_json::Error) -> Answer {
    plain(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("cannot encode: {e}\n"),
    )
}

fn no_such_instance() -> Answer {
    plain(StatusCode::NOT_FOUND, "no such instance\n")
}

/// `GET /`: the fleet page.
fn fleet(state: &DebugState, query: &str, now: Timestamp) -> Answer {
    let query = FleetQuery::parse(query);
    let members = state.members.as_ref().map(|m| m.members(now));
    let owner = html::owner(members.as_ref());
    let window = fleet_window::gather(&state.view, &query, &owner, now);
    let readiness = state.readiness();
    let publication = state.view.publication();
    let fleet = Fleet {
        window: &window,
        owner: &owner,
        readiness: &readiness,
        members: members.as_ref(),
        now,
        publication: &publication,
    };
    page(StatusCode::OK, fleet_page::render(&fleet, &query))
}

/// `GET /instances/{namespace}/{name}`: the instance page, or a 404 page.
fn instance(state: &DebugState, key: &InstanceKey, query: &str, now: Timestamp) -> Answer {
    let readiness = state.readiness();
    let Some(view) = state.view.instance(key) else {
        return page(
            StatusCode::NOT_FOUND,
            instance_page::not_found(&key.namespace, &key.name, &readiness, now),
        );
    };
    let history = state.view.history(key, now);
    let members = state.members.as_ref().map(|m| m.members(now));
    let refresh = !html::query_pairs(query)
        .iter()
        .any(|(k, v)| k == "refresh" && v == "off");
    let notes = state.view.publication_notes(key, now);
    let body = instance_page::render(&Instance {
        view: &view,
        history: history.as_ref(),
        readiness: &readiness,
        members: members.as_ref(),
        now,
        refresh,
        publication_notes: &notes,
    });
    page(StatusCode::OK, body)
}

/// `GET /instances/{namespace}/{name}/metrics`: the instance's
/// `kura_instance_*` series.
fn instance_series(state: &DebugState, key: &InstanceKey, now: Timestamp) -> Answer {
    match state.view.instance(key) {
        Some(view) => text(
            StatusCode::OK,
            PROMETHEUS_TEXT,
            instance_metrics::render(std::slice::from_ref(&view), now),
        ),
        None => no_such_instance(),
    }
}

/// `GET /healthz`.
fn healthz() -> Answer {
    plain(StatusCode::OK, "ok\n")
}

/// `GET /readyz`: 200 or 503, with the reasons.
fn readyz(state: &DebugState) -> Answer {
    let r = state.readiness();
    let status = if r.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json(status, &r)
}

/// `HEAD /metrics` (a GET is streamed by the server): the headers alone.
fn metrics_head() -> Answer {
    text(StatusCode::OK, PROMETHEUS_TEXT, Bytes::new())
}

/// `GET /debug/instances`: every instance this replica sweeps or watches.
fn debug_instances(state: &DebugState, now: Timestamp) -> Answer {
    let all: Vec<answers::AnswerSummary> =
        state.answers(now).iter().map(answers::summary_of).collect();
    json(StatusCode::OK, &all)
}

/// `GET /debug/members`: the sharding members, 404 when sharding is off.
fn debug_members(state: &DebugState, now: Timestamp) -> Answer {
    match &state.members {
        Some(members) => json(StatusCode::OK, &members.members(now)),
        None => plain(StatusCode::NOT_FOUND, "sharding is off\n"),
    }
}

/// `GET /debug/instances/{namespace}/{name}`: one instance in detail.
fn debug_instance(state: &DebugState, key: &InstanceKey, now: Timestamp) -> Answer {
    match state.answer(key, now) {
        Some(answer) => match answers::detail_json(&answer) {
            Ok(body) => text(StatusCode::OK, "application/json", body),
            Err(e) => cannot_encode(&e),
        },
        None => no_such_instance(),
    }
}

/// `GET /api/v1/instances/{namespace}/{name}/verdict`: the verdict
/// document.
fn verdict(state: &DebugState, key: &InstanceKey, now: Timestamp) -> Answer {
    match state.answer(key, now) {
        Some(answer) => json(StatusCode::OK, &answers::verdict_of(&answer)),
        None => json(
            StatusCode::NOT_FOUND,
            &serde_json::json!({"error": "no such instance", "namespace": key.namespace, "name": key.name}),
        ),
    }
}

/// `GET /api/v1/instances/{namespace}/{name}/timeline`: the instance's
/// timeline (compact JSON: it may hold thousands of ticks), 400 for a
/// malformed query, 404 (with the owner, when known) for an instance this
/// replica holds no timeline of.
fn timeline(state: &DebugState, key: &InstanceKey, query: &str, now: Timestamp) -> Answer {
    let query = match timeline_query::parse(query) {
        Ok(q) => q,
        Err(reason) => {
            return json(
                StatusCode::BAD_REQUEST,
                &serde_json::json!({"error": reason}),
            );
        }
    };
    if let Some(doc) = state.view.timeline(key, &query, now) {
        return match serde_json::to_vec(&doc) {
            Ok(body) => text(StatusCode::OK, "application/json", body),
            Err(e) => cannot_encode(&e),
        };
    }
    let (error, owned_by) = match state.answer(key, now) {
        None => ("no such instance", None),
        Some(answer) => (
            "this replica holds no timeline of the instance: only the replica that sweeps it \
             does (ownedBy)",
            answer.owned_by,
        ),
    };
    json(
        StatusCode::NOT_FOUND,
        &serde_json::json!({
            "error": error,
            "namespace": key.namespace,
            "name": key.name,
            "ownedBy": owned_by,
        }),
    )
}
