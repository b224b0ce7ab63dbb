//! Erlang NIF for the Elixir library `kura_gate`: a thin layer over
//! `kura-gate-ffi`'s safe core, so Elixir refuses and answers exactly as
//! the C ABI does. Documents come in as JSON binaries or as Elixir terms
//! (maps, lists, strings, numbers, booleans, nil and atoms), converted to
//! JSON values with a depth and size bound; verdicts go out as maps with
//! atom keys, verdicts and signals as atoms made from the gate's own
//! (closed) vocabulary, never from input.

use kura_gate::{Baseline, Verdict};
use kura_gate_ffi::{Document, ErrorCode, FfiError, GateHandle, describe};
use kura_schemas::Evidence;
use rustler::{
    Atom, Binary, Encoder, Env, ListIterator, MapIterator, NewBinary, Resource, ResourceArc, Term,
    TermType,
};
use serde_json::{Map, Number, Value};

mod atoms {
    rustler::atoms! {
        ok, error, nil, __struct__, calendar, year, month, day, hour, minute, second,
        microsecond, utc_offset, std_offset, time_zone
    }
}

/// The deepest term accepted. Contract documents nest 8 levels at most;
/// the bound keeps the recursion well inside a scheduler's stack (a dirty
/// CPU scheduler has 320 KiB by default, and a debug build's frames are
/// large).
const MAX_DEPTH: usize = 32;
/// The most terms (map entries, list elements, scalars) one input may hold.
const MAX_NODES: usize = 4_000_000;

/// A gate held by the BEAM; freed when the last reference is collected.
pub struct GateResource {
    handle: GateHandle,
}

#[rustler::resource_impl]
impl Resource for GateResource {}

/// `{:ok, gate}` or `{:error, error_map}`.
#[rustler::nif]
fn new<'a>(env: Env<'a>, config: Term<'a>) -> Term<'a> {
    let created = caught(|| GateHandle::new(&document(config, Document::Config)?));
    answer(env, created, |env, h| {
        ResourceArc::new(GateResource { handle: h }).encode(env)
    })
}

/// `{:ok, gate}` or `{:error, error_map}`; `state` is what `dump_state`
/// returned.
#[rustler::nif]
fn restore<'a>(env: Env<'a>, config: Term<'a>, state: Binary<'a>) -> Term<'a> {
    let created =
        caught(|| GateHandle::restore(&document(config, Document::Config)?, state.as_slice()));
    answer(env, created, |env, h| {
        ResourceArc::new(GateResource { handle: h }).encode(env)
    })
}

/// A tick on the calling scheduler (small ticks).
#[rustler::nif]
fn tick<'a>(env: Env<'a>, gate: ResourceArc<GateResource>, input: Term<'a>) -> Term<'a> {
    run_tick(env, &gate, input)
}

/// A tick on a dirty CPU scheduler (large ticks).
#[rustler::nif(schedule = "DirtyCpu")]
fn tick_dirty<'a>(env: Env<'a>, gate: ResourceArc<GateResource>, input: Term<'a>) -> Term<'a> {
    run_tick(env, &gate, input)
}

fn run_tick<'a>(env: Env<'a>, gate: &GateResource, input: Term<'a>) -> Term<'a> {
    let verdict = caught(|| match input.get_type() {
        TermType::Binary => gate.handle.tick(input_binary(input)?),
        _ => gate.handle.tick_value(&to_value(input)?),
    });
    answer(env, verdict, encode_verdict)
}

/// `{:ok, state_json}`.
#[rustler::nif]
fn dump_state(env: Env<'_>, gate: ResourceArc<GateResource>) -> Term<'_> {
    answer(env, caught(|| gate.handle.state_json()), |env, json| {
        binary(env, &json)
    })
}

/// `{:ok, baseline_map}` from `%{capturedAt: t, health: aggregate | nil}`.
#[rustler::nif]
fn capture_baseline<'a>(
    env: Env<'a>,
    gate: ResourceArc<GateResource>,
    input: Term<'a>,
) -> Term<'a> {
    let baseline = caught(|| {
        let doc = document(input, Document::Input)?;
        gate.handle.capture_baseline(&doc)
    });
    answer(env, baseline, encode_baseline)
}

/// `{:ok, rollout_gate_map}` (string keys, the status document as is).
#[rustler::nif(schedule = "DirtyCpu")]
fn judge_instance<'a>(env: Env<'a>, input: Term<'a>) -> Term<'a> {
    let gate = caught(|| {
        let doc = document(input, Document::Input)?;
        let gate = kura_gate_ffi::judge_instance(&doc)?;
        serde_json::to_value(gate)
            .map_err(|e| FfiError::new(ErrorCode::Internal, format!("cannot serialize: {e}")))
    });
    answer(env, gate, |env, v| from_value(env, &v))
}

/// The library's description (string keys, as the JSON document).
#[rustler::nif]
fn describe_library(env: Env<'_>) -> Term<'_> {
    let description = caught(|| {
        serde_json::to_value(describe())
            .map_err(|e| FfiError::new(ErrorCode::Internal, format!("cannot serialize: {e}")))
    });
    answer(env, description, |env, v| from_value(env, &v))
}

/// Any JSON document as terms (objects are maps with string keys): for
/// reading stored documents and for the tests' comparisons.
#[rustler::nif(schedule = "DirtyCpu")]
fn decode_json<'a>(env: Env<'a>, input: Binary<'a>) -> Term<'a> {
    let value = caught(|| {
        let text = kura_gate_ffi::api::text(Document::Input, input.as_slice())?;
        serde_json::from_str::<Value>(text).map_err(|e| FfiError::serde(Document::Input, &e))
    });
    answer(env, value, |env, v| from_value(env, &v))
}

/// Terms as a JSON document (atom keys in Elixir style become camelCase,
/// as for every input): for storing documents, and for the tests.
#[rustler::nif(schedule = "DirtyCpu")]
fn encode_json<'a>(env: Env<'a>, input: Term<'a>) -> Term<'a> {
    let json = caught(|| {
        let value = to_value(input)?;
        serde_json::to_vec(&value)
            .map_err(|e| FfiError::new(ErrorCode::Internal, format!("cannot serialize: {e}")))
    });
    answer(env, json, |env, json| binary(env, &json))
}

/// The bytes of a document given as a binary, or a term converted to JSON.
fn document(term: Term<'_>, kind: Document) -> Result<Vec<u8>, FfiError> {
    if term.get_type() == TermType::Binary {
        return Ok(input_binary(term)?.to_vec());
    }
    let value = to_value(term).map_err(|e| FfiError {
        code: match kind {
            Document::Config => ErrorCode::InvalidConfig,
            Document::State => ErrorCode::InvalidState,
            Document::Input => e.code,
        },
        ..e
    })?;
    serde_json::to_vec(&value)
        .map_err(|e| FfiError::new(ErrorCode::Internal, format!("cannot serialize: {e}")))
}

fn input_binary<'a>(term: Term<'a>) -> Result<&'a [u8], FfiError> {
    term.decode::<Binary<'a>>()
        .map(|b| b.as_slice())
        .map_err(|_| FfiError::new(ErrorCode::InvalidInput, "input is not a binary"))
}

/// A term as a JSON value, bounded in depth and size.
fn to_value(term: Term<'_>) -> Result<Value, FfiError> {
    let mut walk = Walk {
        path: String::new(),
        nodes: 0,
    };
    walk.convert(term, 0)
}

/// Where a conversion is and how much it has seen. The recursive frame is
/// kept small (scalars, keys and errors are handled in helpers that are
/// never inlined) so [`MAX_DEPTH`] levels fit any scheduler's stack.
struct Walk {
    path: String,
    nodes: usize,
}

impl Walk {
    fn convert(&mut self, term: Term<'_>, depth: usize) -> Result<Value, FfiError> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(too_many());
        }
        if depth > MAX_DEPTH {
            return Err(self.fail(format!("nested deeper than {MAX_DEPTH} levels")));
        }
        match term.get_type() {
            TermType::List => {
                // The length check refuses improper lists (the iterator
                // would panic on one).
                let len = term
                    .list_length()
                    .map_err(|_| self.fail("an improper list".into()))?;
                let list: ListIterator = term
                    .decode()
                    .map_err(|_| self.fail("an improper list".into()))?;
                let mut items = Vec::with_capacity(len.min(MAX_NODES));
                for (i, item) in list.enumerate() {
                    let mark = self.path.len();
                    push_index(&mut self.path, i);
                    items.push(self.convert(item, depth + 1)?);
                    self.path.truncate(mark);
                }
                Ok(Value::Array(items))
            }
            TermType::Map => {
                if let Ok(kind) = term.map_get(atoms::__struct__()) {
                    return struct_value(kind, term).map_err(|what| self.fail(what));
                }
                let entries =
                    MapIterator::new(term).ok_or_else(|| self.fail("unreadable map".into()))?;
                let mut map = Map::new();
                for (key, value) in entries {
                    let key = map_key(key).ok_or_else(|| {
                        self.fail("a map key that is not an atom or a UTF-8 string".into())
                    })?;
                    let mark = self.path.len();
                    push_key(&mut self.path, &key);
                    let value = self.convert(value, depth + 1)?;
                    self.path.truncate(mark);
                    map.insert(key, value);
                }
                Ok(Value::Object(map))
            }
            _ => scalar(term).map_err(|what| self.fail(what)),
        }
    }

    #[inline(never)]
    fn fail(&self, what: String) -> FfiError {
        let place = if self.path.is_empty() {
            "(document)"
        } else {
            self.path.as_str()
        };
        FfiError {
            field: Some(place.to_owned()),
            ..FfiError::new(ErrorCode::InvalidInput, format!("field {place}: {what}"))
        }
    }
}

#[inline(never)]
fn too_many() -> FfiError {
    FfiError::new(
        ErrorCode::InputTooLarge,
        format!("input holds more than {MAX_NODES} terms"),
    )
}

#[inline(never)]
fn push_index(path: &mut String, i: usize) {
    path.push('[');
    path.push_str(&i.to_string());
    path.push(']');
}

#[inline(never)]
fn push_key(path: &mut String, key: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(key);
}

/// A map key: an atom (Elixir style, made camelCase) or a UTF-8 string.
#[inline(never)]
fn map_key(key: Term<'_>) -> Option<String> {
    match key.get_type() {
        TermType::Atom => key.atom_to_string().ok().map(|k| camel_case(&k)),
        TermType::Binary => key
            .decode::<Binary>()
            .ok()
            .and_then(|b| std::str::from_utf8(b.as_slice()).ok().map(str::to_owned)),
        _ => None,
    }
}

/// A struct: only a `%DateTime{}` has a JSON form.
#[inline(never)]
fn struct_value(kind: Term<'_>, term: Term<'_>) -> Result<Value, String> {
    match kind.atom_to_string().as_deref() {
        Ok("Elixir.DateTime") => date_time(term).map(Value::String),
        Ok(other) => Err(format!("a %{other}{{}} struct has no JSON form")),
        Err(_) => Err("a struct of unknown kind".into()),
    }
}

/// A term that is neither a list nor a map.
#[inline(never)]
fn scalar(term: Term<'_>) -> Result<Value, String> {
    match term.get_type() {
        TermType::Atom => {
            let name = term
                .atom_to_string()
                .map_err(|_| "unreadable atom".to_owned())?;
            Ok(match name.as_str() {
                "nil" => Value::Null,
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                _ => Value::String(name),
            })
        }
        TermType::Binary => {
            let bytes = term
                .decode::<Binary>()
                .map_err(|_| "unreadable binary".to_owned())?
                .as_slice();
            std::str::from_utf8(bytes)
                .map(|s| Value::String(s.to_owned()))
                .map_err(|e| format!("not UTF-8 (byte offset {})", e.valid_up_to()))
        }
        TermType::Integer => {
            if let Ok(n) = term.decode::<u64>() {
                Ok(Value::Number(n.into()))
            } else if let Ok(n) = term.decode::<i64>() {
                Ok(Value::Number(n.into()))
            } else {
                Err("integer out of the 64-bit range".into())
            }
        }
        TermType::Float => {
            let f = term
                .decode::<f64>()
                .map_err(|_| "unreadable float".to_owned())?;
            Number::from_f64(f)
                .map(Value::Number)
                .ok_or_else(|| "not a finite number".into())
        }
        other => Err(format!("{other:?} terms have no JSON form")),
    }
}

/// An atom key in Elixir style (`wave_started_at`) as the contract's key
/// (`waveStartedAt`); a key without underscores stays as it is.
fn camel_case(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut upper = false;
    for c in key.chars() {
        if c == '_' && !out.is_empty() {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// A UTC `%DateTime{}` as RFC 3339 (`2026-07-21T10:00:00Z`, with the
/// microseconds it carries).
fn date_time(term: Term<'_>) -> Result<String, String> {
    let int = |key: Atom| -> Result<i64, String> {
        term.map_get(key)
            .and_then(|v| v.decode::<i64>())
            .map_err(|_| "a DateTime without its fields".to_owned())
    };
    let zone = term
        .map_get(atoms::time_zone())
        .and_then(|z| z.decode::<Binary>())
        .map(|b| b.as_slice() == b"Etc/UTC")
        .unwrap_or(false);
    if !zone || int(atoms::utc_offset())? != 0 || int(atoms::std_offset())? != 0 {
        return Err("a DateTime must be in UTC (Etc/UTC)".into());
    }
    let (micros, precision): (i64, i64) = term
        .map_get(atoms::microsecond())
        .and_then(|m| m.decode())
        .map_err(|_| "a DateTime without microseconds".to_owned())?;
    let mut text = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        int(atoms::year())?,
        int(atoms::month())?,
        int(atoms::day())?,
        int(atoms::hour())?,
        int(atoms::minute())?,
        int(atoms::second())?
    );
    if precision > 0 {
        let digits = format!("{micros:06}");
        let keep = usize::try_from(precision.min(6)).unwrap_or(6);
        text.push('.');
        text.push_str(&digits[..keep]);
    }
    text.push('Z');
    Ok(text)
}

/// A JSON value as terms: objects as maps with string keys.
fn from_value<'a>(env: Env<'a>, value: &Value) -> Term<'a> {
    match value {
        Value::Null => atoms::nil().encode(env),
        Value::Bool(b) => b.encode(env),
        Value::Number(n) => n
            .as_u64()
            .map(|u| u.encode(env))
            .or_else(|| n.as_i64().map(|i| i.encode(env)))
            .unwrap_or_else(|| n.as_f64().unwrap_or(0.0).encode(env)),
        Value::String(s) => s.as_str().encode(env),
        Value::Array(items) => items
            .iter()
            .map(|v| from_value(env, v))
            .collect::<Vec<_>>()
            .encode(env),
        Value::Object(map) => {
            let keys: Vec<Term> = map.keys().map(|k| k.as_str().encode(env)).collect();
            let values: Vec<Term> = map.values().map(|v| from_value(env, v)).collect();
            Term::map_from_term_arrays(env, &keys, &values)
                .unwrap_or_else(|_| atoms::nil().encode(env))
        }
    }
}

/// An atom from the gate's own vocabulary (a closed set of names).
fn atom<'a>(env: Env<'a>, name: &str) -> Term<'a> {
    Atom::from_str(env, name)
        .map(|a| a.encode(env))
        .unwrap_or_else(|_| name.encode(env))
}

fn encode_verdict<'a>(env: Env<'a>, verdict: Verdict) -> Term<'a> {
    let kind = serde_json::to_value(verdict.verdict)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let evidence: Vec<Term> = verdict
        .evidence
        .iter()
        .map(|e| encode_evidence(env, e))
        .collect();
    let pairs = [
        ("verdict", atom(env, &kind)),
        (
            "signal",
            verdict
                .signal
                .map_or(atoms::nil().encode(env), |s| atom(env, s.as_str())),
        ),
        ("server_id", verdict.server_id.encode(env)),
        (
            "healthy_since",
            verdict.healthy_since.map(|t| t.to_string()).encode(env),
        ),
        ("remaining_seconds", verdict.remaining_seconds.encode(env)),
        ("evidence", evidence.encode(env)),
    ];
    atom_map(env, &pairs)
}

fn encode_evidence<'a>(env: Env<'a>, e: &Evidence) -> Term<'a> {
    let pairs = [
        ("server", e.server.as_str().encode(env)),
        ("signal", atom(env, e.signal.as_str())),
        ("observed", e.observed.encode(env)),
        ("band_top", e.band_top.encode(env)),
        ("baseline", e.baseline.encode(env)),
        ("detail", e.detail.as_deref().encode(env)),
        (
            "fence",
            e.fence.as_ref().map_or(atoms::nil().encode(env), |f| {
                let fence = [
                    ("phase", f.phase.as_str().encode(env)),
                    ("enabled_pods", f.enabled_pods.encode(env)),
                    ("valid_writers", f.valid_writers.encode(env)),
                    ("epoch", f.epoch.encode(env)),
                ];
                atom_map(env, &fence)
            }),
        ),
    ];
    atom_map(env, &pairs)
}

fn encode_baseline<'a>(env: Env<'a>, b: Baseline) -> Term<'a> {
    let counters = [
        ("outbox_messages", b.counters.outbox_messages.encode(env)),
        (
            "replication_lag_entries",
            b.counters.replication_lag_entries.encode(env),
        ),
        ("fd_timeout_count", b.counters.fd_timeout_count.encode(env)),
        (
            "peer_connection_failures",
            b.counters.peer_connection_failures.encode(env),
        ),
    ];
    let pairs = [
        ("captured_at", b.captured_at.to_string().encode(env)),
        ("counters", atom_map(env, &counters)),
        ("soak_eligible", b.soak_eligible.encode(env)),
    ];
    atom_map(env, &pairs)
}

fn atom_map<'a>(env: Env<'a>, pairs: &[(&str, Term<'a>)]) -> Term<'a> {
    let keys: Vec<Term> = pairs.iter().map(|(k, _)| atom(env, k)).collect();
    let values: Vec<Term> = pairs.iter().map(|(_, v)| *v).collect();
    Term::map_from_term_arrays(env, &keys, &values).unwrap_or_else(|_| atoms::nil().encode(env))
}

fn binary<'a>(env: Env<'a>, bytes: &[u8]) -> Term<'a> {
    let mut out = NewBinary::new(env, bytes.len());
    out.as_mut_slice().copy_from_slice(bytes);
    Binary::from(out).encode(env)
}

/// `{:ok, encode(value)}` or `{:error, error_map}`.
fn answer<'a, T>(
    env: Env<'a>,
    result: Result<T, FfiError>,
    encode: impl FnOnce(Env<'a>, T) -> Term<'a>,
) -> Term<'a> {
    match result {
        Ok(value) => (atoms::ok(), encode(env, value)).encode(env),
        Err(e) => {
            let pairs = [
                ("code", atom(env, e.code.as_str())),
                ("message", e.message.as_str().encode(env)),
                ("field", e.field.as_deref().encode(env)),
                ("server", e.server.as_deref().encode(env)),
                ("line", e.line.encode(env)),
                ("column", e.column.encode(env)),
            ];
            (atoms::error(), atom_map(env, &pairs)).encode(env)
        }
    }
}

/// `body`'s result, a caught panic being an internal error.
fn caught<T>(body: impl FnOnce() -> Result<T, FfiError>) -> Result<T, FfiError> {
    kura_gate_ffi::abi::caught(body)
}

rustler::init!("Elixir.KuraGate.Native");
