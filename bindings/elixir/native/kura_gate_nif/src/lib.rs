//! Erlang NIF for the Elixir library `kura_gate`: a thin layer over
//! `kura-gate-ffi`'s safe core, so Elixir refuses and answers exactly as
//! the C ABI does. Documents come in as JSON binaries or as Elixir terms
//! (maps, lists, strings, numbers, booleans, nil and atoms), converted to
//! JSON values with a depth and size bound; verdicts go out as maps with
//! atom keys, verdicts and signals as atoms made from the gate's own
//! (closed) vocabulary, never from input.

#![forbid(unsafe_code)]

use kura_gate::{Baseline, Verdict};
use kura_gate_ffi::{Document, ErrorCode, FfiError, GateHandle, describe};
use kura_schemas::Evidence;
use kura_schemas::strict_json::{self, StrictJsonError};
use rustler::{
    Atom, Binary, Encoder, Env, ListIterator, MapIterator, NewBinary, Resource, ResourceArc, Term,
    TermType,
};
use serde_json::{Map, Number, Value};

mod atoms {
    rustler::atoms! {
        ok, error, nil, dirty, __struct__, calendar, year, month, day, hour, minute, second,
        microsecond, utc_offset, std_offset, time_zone
    }
}

/// The nesting limit, as for a JSON document (serde_json's recursion limit:
/// the 128th nested list or map is refused). The conversion keeps its own
/// stack, so the limit is the JSON path's, not a scheduler stack's.
const MAX_DEPTH: usize = 128;
/// The most terms (map entries, list elements, scalars) one input may hold.
const MAX_NODES: usize = 4_000_000;
/// What a tick may hold to run on a normal scheduler: a bounded slice of
/// conversion (a 50-server tick holds about 1,500 terms). A larger term (or a binary above [`NORMAL_BYTES`]) is
/// handed to a dirty CPU scheduler (`tick/2` answers `:dirty` and the
/// library calls `tick_dirty/2`), so a huge map never holds a normal
/// scheduler.
const NORMAL_NODES: usize = 10_000;
/// Bytes of binaries (strings, keys) a tick may hold on a normal scheduler.
const NORMAL_BYTES: usize = 64 * 1024;

/// A gate held by the BEAM; freed when the last reference is collected.
pub struct GateResource {
    handle: GateHandle,
}

#[rustler::resource_impl]
impl Resource for GateResource {}

/// `{:ok, gate}` or `{:error, error_map}`. Every call that takes a document
/// of unbounded size runs on a dirty CPU scheduler, but a small tick.
#[rustler::nif(schedule = "DirtyCpu")]
fn new<'a>(env: Env<'a>, config: Term<'a>) -> Term<'a> {
    let created = caught(|| GateHandle::new(&document(config, Document::Config)?));
    answer(env, created, |env, h| {
        ResourceArc::new(GateResource { handle: h }).encode(env)
    })
}

/// `{:ok, gate}` or `{:error, error_map}`; `state` is what `dump_state`
/// returned.
#[rustler::nif(schedule = "DirtyCpu")]
fn restore<'a>(env: Env<'a>, config: Term<'a>, state: Binary<'a>) -> Term<'a> {
    let created =
        caught(|| GateHandle::restore(&document(config, Document::Config)?, state.as_slice()));
    answer(env, created, |env, h| {
        ResourceArc::new(GateResource { handle: h }).encode(env)
    })
}

/// A small tick on the calling (normal) scheduler; `:dirty` when the
/// input is larger than [`NORMAL_NODES`] terms or [`NORMAL_BYTES`] bytes,
/// found out at that cost at most, for `tick_dirty`.
#[rustler::nif]
fn tick<'a>(env: Env<'a>, gate: ResourceArc<GateResource>, input: Term<'a>) -> Term<'a> {
    let value = match input.get_type() {
        TermType::Binary => {
            if input_binary(input).map_or(0, <[u8]>::len) > NORMAL_BYTES {
                return atoms::dirty().encode(env);
            }
            None
        }
        _ => match caught(
            || match to_value_within(input, NORMAL_NODES, NORMAL_BYTES) {
                Ok(value) => Ok(Some(value)),
                Err(Walked::Refused(e)) => Err(e),
                Err(Walked::TooLarge) => Ok(None),
            },
        ) {
            Ok(Some(value)) => Some(value),
            Ok(None) => return atoms::dirty().encode(env),
            Err(e) => return answer(env, Err::<Verdict, _>(e), encode_verdict),
        },
    };
    let verdict = caught(|| match value {
        Some(value) => gate.handle.tick_value(&value),
        None => gate.handle.tick(input_binary(input)?),
    });
    answer(env, verdict, encode_verdict)
}

/// A tick on a dirty CPU scheduler (large ticks).
#[rustler::nif(schedule = "DirtyCpu")]
fn tick_dirty<'a>(env: Env<'a>, gate: ResourceArc<GateResource>, input: Term<'a>) -> Term<'a> {
    let verdict = caught(|| match input.get_type() {
        TermType::Binary => gate.handle.tick(input_binary(input)?),
        _ => gate.handle.tick_value(&to_value(input)?),
    });
    answer(env, verdict, encode_verdict)
}

/// `{:ok, state_json}`.
#[rustler::nif(schedule = "DirtyCpu")]
fn dump_state(env: Env<'_>, gate: ResourceArc<GateResource>) -> Term<'_> {
    answer(env, caught(|| gate.handle.state_json()), |env, json| {
        binary(env, &json)
    })
}

/// `{:ok, baseline_map}` from `%{capturedAt: t, health: aggregate | nil}`.
#[rustler::nif(schedule = "DirtyCpu")]
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

/// `{:ok, %{"differences" => [...], "summary" => %{...}}}` (string keys,
/// the JSON document `kura-gate replay --gate-config FILE --diff` prints):
/// the replay document (or exported timeline) judged with its own
/// configuration and with `candidate`, in the wave judge's view or the
/// agent's.
#[rustler::nif(schedule = "DirtyCpu")]
fn what_if<'a>(env: Env<'a>, input: Term<'a>, candidate: Term<'a>, agent_view: bool) -> Term<'a> {
    let answer_doc = caught(|| {
        let doc = document(input, Document::Input)?;
        let candidate = document(candidate, Document::Config)?;
        let answer = kura_gate_ffi::what_if(&doc, &candidate, agent_view)?;
        serde_json::to_value(answer)
            .map_err(|e| FfiError::new(ErrorCode::Internal, format!("cannot serialize: {e}")))
    });
    answer(env, answer_doc, |env, v| from_value(env, &v))
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
/// reading stored documents and for the tests' comparisons. Read by the
/// gate's strict reader: a repeated key is refused, nesting is limited to
/// 128 levels as everywhere.
#[rustler::nif(schedule = "DirtyCpu")]
fn decode_json<'a>(env: Env<'a>, input: Binary<'a>) -> Term<'a> {
    let value = caught(|| {
        let text = kura_gate_ffi::api::text(Document::Input, input.as_slice())?;
        // The gate's own reader: a repeated key is refused at any depth,
        // as every document the gate reads.
        strict_json::from_slice(text.as_bytes()).map_err(strict_error)
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
    to_value_within(term, MAX_NODES, usize::MAX).map_err(|e| match e {
        Walked::Refused(e) => e,
        Walked::TooLarge => too_many(),
    })
}

/// Why a conversion stopped.
enum Walked {
    /// The term is refused.
    Refused(FfiError),
    /// More than the caller's bound of terms or bytes.
    TooLarge,
}

impl From<FfiError> for Walked {
    fn from(e: FfiError) -> Self {
        Walked::Refused(e)
    }
}

/// [`to_value`] that stops at `nodes` terms or `bytes` bytes of binaries.
fn to_value_within(term: Term<'_>, nodes: usize, bytes: usize) -> Result<Value, Walked> {
    let mut walk = Walk {
        path: String::new(),
        nodes: 0,
        bytes: 0,
        max_nodes: nodes.min(MAX_NODES),
        max_bytes: bytes,
    };
    walk.convert(term)
}

/// Where a conversion is and how much it has seen.
struct Walk {
    path: String,
    nodes: usize,
    bytes: usize,
    max_nodes: usize,
    max_bytes: usize,
}

/// A list or map being converted, on the conversion's own stack (no
/// recursion: the depth limit is the JSON path's, whatever the scheduler's
/// stack).
struct Frame<'a> {
    kind: Open<'a>,
    /// The path's length before the current child's segment.
    mark: usize,
}

enum Open<'a> {
    List(ListIterator<'a>, Vec<Value>, usize),
    Map(Box<MapIterator<'a>>, Map<String, Value>, Option<String>),
}

impl Walk {
    fn convert<'a>(&mut self, root: Term<'a>) -> Result<Value, Walked> {
        let mut stack: Vec<Frame<'a>> = Vec::new();
        let mut term = root;
        loop {
            // A scalar is a value; a list or map opens a frame.
            let mut done = self.enter(term, &mut stack)?;
            // Hand finished values up until some frame has a next child.
            loop {
                let Some(frame) = stack.last_mut() else {
                    return done.ok_or_else(|| {
                        Walked::Refused(FfiError::new(
                            ErrorCode::Internal,
                            "conversion lost its value",
                        ))
                    });
                };
                if let Some(value) = done.take() {
                    self.path.truncate(frame.mark);
                    match &mut frame.kind {
                        Open::List(_, items, _) => items.push(value),
                        Open::Map(_, map, key) => {
                            let key = key.take().unwrap_or_default();
                            if map.contains_key(&key) {
                                return Err(self
                                    .fail(format!(
                                        "key {key:?} given more than once (an atom key and a string key, or two atoms, name the same contract key)"
                                    ))
                                    .into());
                            }
                            map.insert(key, value);
                        }
                    }
                }
                frame.mark = self.path.len();
                let next = match &mut frame.kind {
                    Open::List(items, _, index) => items.next().inspect(|_| {
                        push_index(&mut self.path, *index);
                        *index += 1;
                    }),
                    Open::Map(entries, _, pending) => match entries.next() {
                        Some((key, value)) => {
                            let Some(key) = map_key(key) else {
                                return Err(self
                                    .fail("a map key that is not an atom or a UTF-8 string".into())
                                    .into());
                            };
                            self.count_bytes(key.len())?;
                            push_key(&mut self.path, &key);
                            *pending = Some(key);
                            Some(value)
                        }
                        None => None,
                    },
                };
                match next {
                    Some(child) => {
                        term = child;
                        break;
                    }
                    None => {
                        done = stack.pop().map(|frame| match frame.kind {
                            Open::List(_, items, _) => Value::Array(items),
                            Open::Map(_, map, _) => Value::Object(map),
                        });
                    }
                }
            }
        }
    }

    /// Counts `term`; a scalar is returned as a value, a list or map is
    /// pushed as a frame (`None`).
    fn enter<'a>(
        &mut self,
        term: Term<'a>,
        stack: &mut Vec<Frame<'a>>,
    ) -> Result<Option<Value>, Walked> {
        self.nodes += 1;
        if self.nodes > self.max_nodes {
            return Err(Walked::TooLarge);
        }
        let kind = match term.get_type() {
            TermType::List => {
                // The length check refuses improper lists (the iterator
                // would panic on one).
                let len = term
                    .list_length()
                    .map_err(|_| self.fail("an improper list".into()))?;
                let list: ListIterator = term
                    .decode()
                    .map_err(|_| self.fail("an improper list".into()))?;
                Open::List(list, Vec::with_capacity(len.min(self.max_nodes)), 0)
            }
            TermType::Map => {
                if let Ok(kind) = term.map_get(atoms::__struct__()) {
                    return struct_value(kind, term)
                        .map(Some)
                        .map_err(|what| self.fail(what).into());
                }
                let entries =
                    MapIterator::new(term).ok_or_else(|| self.fail("unreadable map".into()))?;
                Open::Map(Box::new(entries), Map::new(), None)
            }
            TermType::Binary => {
                let len = term.decode::<Binary>().map_or(0, |b| b.len());
                self.count_bytes(len)?;
                return scalar(term)
                    .map(Some)
                    .map_err(|what| self.fail(what).into());
            }
            _ => {
                return scalar(term)
                    .map(Some)
                    .map_err(|what| self.fail(what).into());
            }
        };
        if stack.len() + 1 >= MAX_DEPTH {
            return Err(self
                .fail(format!(
                    "nested {MAX_DEPTH} levels deep, the limit (as for a JSON document)"
                ))
                .into());
        }
        stack.push(Frame {
            kind,
            mark: self.path.len(),
        });
        Ok(None)
    }

    fn count_bytes(&mut self, len: usize) -> Result<(), Walked> {
        self.bytes = self.bytes.saturating_add(len);
        if self.bytes > self.max_bytes {
            return Err(Walked::TooLarge);
        }
        Ok(())
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

/// A UTC `%DateTime{}` as RFC 3339, the instant exactly (microseconds;
/// any year both Calendar.ISO and the gate hold, before year 0 too).
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
    let (micros, _precision): (i64, i64) = term
        .map_get(atoms::microsecond())
        .and_then(|m| m.decode())
        .map_err(|_| "a DateTime without microseconds".to_owned())?;
    let field = |key: Atom, name: &str| -> Result<i8, String> {
        i8::try_from(int(key)?).map_err(|_| format!("a DateTime whose {name} is out of range"))
    };
    let year = i16::try_from(int(atoms::year())?)
        .map_err(|_| "a DateTime whose year is out of range".to_owned())?;
    let nanos = i32::try_from(micros)
        .ok()
        .and_then(|m| m.checked_mul(1000))
        .ok_or_else(|| "a DateTime whose microseconds are out of range".to_owned())?;
    let civil = jiff::civil::DateTime::new(
        year,
        field(atoms::month(), "month")?,
        field(atoms::day(), "day")?,
        field(atoms::hour(), "hour")?,
        field(atoms::minute(), "minute")?,
        field(atoms::second(), "second")?,
        nanos,
    )
    .map_err(|e| format!("a DateTime the gate cannot hold: {e}"))?;
    let instant = civil
        .to_zoned(jiff::tz::TimeZone::UTC)
        .map_err(|e| format!("a DateTime the gate cannot hold: {e}"))?;
    Ok(instant.timestamp().to_string())
}

/// A strict JSON reader's error as the ABI's error document.
fn strict_error(e: StrictJsonError) -> FfiError {
    let (line, column) = e.position().unzip();
    FfiError {
        line,
        column,
        ..FfiError::new(
            ErrorCode::InvalidInput,
            format!("input is not valid JSON: {e}"),
        )
    }
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
        (
            "run",
            e.run.as_ref().map_or(atoms::nil().encode(env), |r| {
                let run = [
                    ("since", r.since.to_string().encode(env)),
                    ("level", r.level.encode(env)),
                ];
                atom_map(env, &run)
            }),
        ),
        (
            "update_paused",
            e.update_paused
                .as_ref()
                .map_or(atoms::nil().encode(env), |p| {
                    let pause = [
                        ("strategy", p.strategy.as_str().encode(env)),
                        ("partition", p.partition.encode(env)),
                        ("template_image", p.template_image.as_deref().encode(env)),
                        (
                            "held_pods",
                            p.held_pods
                                .iter()
                                .map(String::as_str)
                                .collect::<Vec<_>>()
                                .encode(env),
                        ),
                    ];
                    atom_map(env, &pause)
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
