//! The C ABI: `extern "C"` entry points over [`crate::api`].
//!
//! Every entry point catches unwinding (a caught panic is
//! [`KURA_GATE_INTERNAL`]), checks its pointers and sizes, and answers
//! with a status code plus, in `out`, either the result document or the
//! error document. Ownership and threading: docs/gate-abi.md.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;

use std::sync::Arc;

use crate::api::{self, GateHandle};
use crate::error::{ErrorCode, FfiError};
use crate::registry::{self, Stale};
pub use crate::status::*;

/// A gate: opaque to callers; create with `kura_gate_new` or
/// `kura_gate_restore`, free with `kura_gate_free`.
///
/// A `KuraGate *` is a handle, not the gate's address: never dereference
/// it. The library keeps a registry of live gates, so a call on a freed
/// handle, or on a value that is no handle of this library, answers
/// `KURA_GATE_INVALID_HANDLE` and touches no memory; so does freeing a gate
/// twice. Freeing a gate while another thread is in a call on it is safe:
/// that call finishes, later calls are refused.
///
/// What the library cannot detect: a handle of a freed gate whose registry
/// slot was reused 2^24 times since (2^12 on 32-bit targets) names the
/// slot's current gate again; a handle copied from another live gate is
/// that gate; a handle from another copy of this library (e.g. two static
/// links in one process) is refused or names a gate of this copy. Buffers
/// are real memory: freeing a buffer twice, one the library did not fill,
/// or one whose `data`/`len` were changed, and passing input pointers that
/// do not cover their length or output pointers that are not writable, are
/// undefined behaviour the library cannot detect.
pub struct KuraGate {
    _opaque: [u8; 0],
}

/// Bytes the library allocated (a UTF-8 JSON document, not NUL-terminated).
/// Free every buffer the library filled with `kura_gate_buffer_free`
/// exactly once; an empty buffer has `data` NULL and `len` 0.
#[repr(C)]
pub struct KuraGateBuffer {
    /// The bytes, or NULL.
    pub data: *mut u8,
    /// How many bytes.
    pub len: usize,
}

impl KuraGateBuffer {
    const EMPTY: KuraGateBuffer = KuraGateBuffer {
        data: ptr::null_mut(),
        len: 0,
    };

    fn from_vec(bytes: Vec<u8>) -> Self {
        if bytes.is_empty() {
            return KuraGateBuffer::EMPTY;
        }
        let boxed = bytes.into_boxed_slice();
        let len = boxed.len();
        KuraGateBuffer {
            data: Box::into_raw(boxed).cast::<u8>(),
            len,
        }
    }
}

/// The ABI version of this library. A caller built against another
/// version must not call anything else.
#[unsafe(no_mangle)]
pub extern "C" fn kura_gate_abi_version() -> u32 {
    api::ABI_VERSION
}

/// The largest document (in bytes) any call accepts.
#[unsafe(no_mangle)]
pub extern "C" fn kura_gate_max_input_bytes() -> usize {
    api::MAX_INPUT_BYTES
}

/// Writes the library's description document to `out`: ABI version, input
/// limit, every signal, verdict and error code, the aggregate fields the
/// checks read and the default configuration.
///
/// # Safety
/// `out` must be NULL or point to writable memory for one `KuraGateBuffer`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kura_gate_describe(out: *mut KuraGateBuffer) -> i32 {
    guard(out, || api::to_json(&api::describe()))
}

/// Creates a gate from a configuration document (`{}` or `null`: the
/// defaults). On success `*gate_out` is the new gate; otherwise it is NULL
/// and `error_out` holds the error document.
///
/// # Safety
/// `config` must point to `config_len` readable bytes (NULL only with
/// length 0 is still refused); `gate_out` and `error_out` must be NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kura_gate_new(
    config: *const u8,
    config_len: usize,
    gate_out: *mut *mut KuraGate,
    error_out: *mut KuraGateBuffer,
) -> i32 {
    create(gate_out, error_out, || {
        // SAFETY: the caller guarantees `config_len` readable bytes.
        let config = unsafe { bytes(config, config_len, "config")? };
        GateHandle::new(config)
    })
}

/// Creates a gate from a configuration document and a state document that
/// `kura_gate_state` returned; it continues exactly where that gate was.
/// A state no gate could have written is `KURA_GATE_INVALID_STATE` (a
/// latched verdict that is not a hard stop, an effective baseline above
/// the captured one, ...: `kura_gate::GateState::validate`); the first
/// tick restarts the soak clock when the stored `healthySince` lies before
/// the tick's wave start or after its `now` (docs/gate-abi.md, "State").
///
/// # Safety
/// As `kura_gate_new`, and `state` must point to `state_len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kura_gate_restore(
    config: *const u8,
    config_len: usize,
    state: *const u8,
    state_len: usize,
    gate_out: *mut *mut KuraGate,
    error_out: *mut KuraGateBuffer,
) -> i32 {
    create(gate_out, error_out, || {
        // SAFETY: the caller guarantees the lengths.
        let config = unsafe { bytes(config, config_len, "config")? };
        // SAFETY: as above.
        let state = unsafe { bytes(state, state_len, "state")? };
        GateHandle::restore(config, state)
    })
}

/// Judges one tick document; `out` receives the verdict document (or the
/// error document). On error the gate's state is unchanged.
///
/// A freed or unknown `gate` is `KURA_GATE_INVALID_HANDLE`; a gate in use
/// by another thread right now is `KURA_GATE_BUSY`.
///
/// # Safety
/// `input` must point to `input_len` readable bytes; `out` must be NULL or
/// writable. `gate` may be any value (see `KuraGate`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kura_gate_tick(
    gate: *const KuraGate,
    input: *const u8,
    input_len: usize,
    out: *mut KuraGateBuffer,
) -> i32 {
    guard(out, || {
        let gate = handle(gate)?;
        // SAFETY: the caller guarantees readable input.
        let input = unsafe { bytes(input, input_len, "input")? };
        api::to_json(&gate.tick(input)?)
    })
}

/// Writes the gate's state document to `out`, for the caller to store.
///
/// # Safety
/// As `kura_gate_tick`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kura_gate_state(gate: *const KuraGate, out: *mut KuraGateBuffer) -> i32 {
    guard(out, || handle(gate)?.state_json())
}

/// Captures a baseline with the gate's configuration from
/// `{"capturedAt": T, "health": aggregate-or-null}`; `out` receives
/// `{"capturedAt", "counters", "soakEligible"}`, which a tick's server
/// accepts as its `baseline`.
///
/// # Safety
/// As `kura_gate_tick`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kura_gate_capture_baseline(
    gate: *const KuraGate,
    input: *const u8,
    input_len: usize,
    out: *mut KuraGateBuffer,
) -> i32 {
    guard(out, || {
        let gate = handle(gate)?;
        // SAFETY: the caller guarantees readable input.
        let input = unsafe { bytes(input, input_len, "input")? };
        api::to_json(&gate.capture_baseline(input)?)
    })
}

/// The agent's per-instance judgement: `{config?, instance, previous,
/// specImage, baselineSource, current, now}` in, the next
/// `status.rolloutGate` out. Needs no gate.
///
/// # Safety
/// `input` must point to `input_len` readable bytes; `out` must be NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kura_gate_judge_instance(
    input: *const u8,
    input_len: usize,
    out: *mut KuraGateBuffer,
) -> i32 {
    guard(out, || {
        // SAFETY: the caller guarantees readable input.
        let input = unsafe { bytes(input, input_len, "input")? };
        api::to_json(&api::judge_instance(input)?)
    })
}

/// What-if: the replay document (or exported timeline) judged with its own
/// configuration and with the candidate configuration document (`null` or
/// `{}` is the defaults), in the wave judge's view
/// (`agent_view` 0) or the agent's (`agent_view` 1). The answer is
/// `{differences, summary}`, what `kura-gate replay --gate-config FILE
/// --diff [--agent-view]` prints. A refused document is
/// `KURA_GATE_INVALID_INPUT`, a refused candidate `KURA_GATE_INVALID_CONFIG`.
/// Needs no gate.
///
/// # Safety
/// `document` must point to `document_len` readable bytes and `candidate`
/// to `candidate_len`; `out` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kura_gate_what_if(
    document: *const u8,
    document_len: usize,
    candidate: *const u8,
    candidate_len: usize,
    agent_view: u32,
    out: *mut KuraGateBuffer,
) -> i32 {
    guard(out, || {
        // SAFETY: the caller guarantees readable input.
        let document = unsafe { bytes(document, document_len, "document")? };
        // SAFETY: the caller guarantees readable input.
        let candidate = unsafe { bytes(candidate, candidate_len, "candidate")? };
        let agent_view = match agent_view {
            0 => false,
            1 => true,
            other => {
                return Err(FfiError::new(
                    ErrorCode::InvalidInput,
                    format!("agent_view is {other}: 0 (the wave judge) or 1 (the agent)"),
                ));
            }
        };
        api::to_json(&api::what_if(document, candidate, agent_view)?)
    })
}

/// Frees a gate: `KURA_GATE_OK`, or `KURA_GATE_INVALID_HANDLE` when `gate`
/// names no live gate (freed already, or no handle of this library); NULL
/// is ignored (`KURA_GATE_OK`). The gate's memory goes when a call another
/// thread is making on it returns.
#[unsafe(no_mangle)]
pub extern "C" fn kura_gate_free(gate: *mut KuraGate) -> i32 {
    if gate.is_null() {
        return KURA_GATE_OK;
    }
    // Dropping cannot unwind out of plain data; catch it anyway.
    match caught(|| registry::remove(gate.addr()).map_err(invalid_handle)) {
        Ok(()) => KURA_GATE_OK,
        Err(error) => error.code.as_i32(),
    }
}

/// Frees a buffer the library filled. An empty buffer is ignored.
///
/// # Safety
/// `buffer` must be a buffer this library filled, not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kura_gate_buffer_free(buffer: KuraGateBuffer) {
    if buffer.data.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `data`/`len` came from a boxed slice in `from_vec`.
        drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(buffer.data, buffer.len)) });
    }));
}

/// Runs `body` with panics caught and writes its document to `out`.
fn guard(out: *mut KuraGateBuffer, body: impl FnOnce() -> Result<Vec<u8>, FfiError>) -> i32 {
    if out.is_null() {
        return KURA_GATE_NULL_ARGUMENT;
    }
    // SAFETY: `out` is non-null and the caller guarantees it is writable.
    unsafe { out.write(KuraGateBuffer::EMPTY) };
    let (code, document) = match caught(body) {
        Ok(document) => (KURA_GATE_OK, document),
        Err(error) => (error.code.as_i32(), error.to_json()),
    };
    // SAFETY: as above.
    unsafe { out.write(KuraGateBuffer::from_vec(document)) };
    code
}

/// Creates a gate with panics caught.
fn create(
    gate_out: *mut *mut KuraGate,
    error_out: *mut KuraGateBuffer,
    body: impl FnOnce() -> Result<GateHandle, FfiError>,
) -> i32 {
    if error_out.is_null() {
        return KURA_GATE_NULL_ARGUMENT;
    }
    // SAFETY: non-null, writable by the caller's contract.
    unsafe { error_out.write(KuraGateBuffer::EMPTY) };
    let result = if gate_out.is_null() {
        Err(FfiError::new(ErrorCode::NullArgument, "gate_out is NULL"))
    } else {
        // SAFETY: non-null, writable by the caller's contract.
        unsafe { gate_out.write(ptr::null_mut()) };
        caught(body)
    };
    match result {
        Ok(handle) => match registry::insert(handle) {
            Some(token) => {
                // SAFETY: checked non-null above.
                unsafe { gate_out.write(ptr::without_provenance_mut(token)) };
                KURA_GATE_OK
            }
            None => {
                let error = FfiError::new(
                    ErrorCode::Busy,
                    format!(
                        "{} gates are alive, the most this library holds; free one first",
                        registry::MAX_LIVE_GATES
                    ),
                );
                // SAFETY: as above.
                unsafe { error_out.write(KuraGateBuffer::from_vec(error.to_json())) };
                error.code.as_i32()
            }
        },
        Err(error) => {
            // SAFETY: as above.
            unsafe { error_out.write(KuraGateBuffer::from_vec(error.to_json())) };
            error.code.as_i32()
        }
    }
}

/// `body`'s result, or an internal error when it panicked.
pub fn caught<T>(body: impl FnOnce() -> Result<T, FfiError>) -> Result<T, FfiError> {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".to_owned());
        Err(FfiError::new(
            ErrorCode::Internal,
            format!("internal error (a bug in kura-gate; please report it): {what}"),
        ))
    })
}

/// The `len` bytes at `data`; NULL is refused (even with length 0).
///
/// # Safety
/// `data` must be NULL or point to `len` readable bytes that stay valid and
/// unchanged for the call.
unsafe fn bytes<'a>(data: *const u8, len: usize, name: &str) -> Result<&'a [u8], FfiError> {
    if data.is_null() {
        return Err(FfiError::new(
            ErrorCode::NullArgument,
            format!("{name} is NULL"),
        ));
    }
    // SAFETY: non-null; the caller guarantees `len` readable bytes.
    Ok(unsafe { std::slice::from_raw_parts(data, len) })
}

/// The live gate a handle names; NULL, freed and unknown handles are
/// refused.
fn handle(gate: *const KuraGate) -> Result<Arc<GateHandle>, FfiError> {
    if gate.is_null() {
        return Err(FfiError::new(ErrorCode::NullArgument, "gate is NULL"));
    }
    registry::get(gate.addr()).map_err(invalid_handle)
}

fn invalid_handle(stale: Stale) -> FfiError {
    FfiError::new(
        ErrorCode::InvalidHandle,
        match stale {
            Stale::Freed => "gate was freed (kura_gate_free); a freed handle is never valid again",
            Stale::Unknown => "gate is not a handle of a gate of this library",
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(f: impl FnOnce(*mut KuraGateBuffer) -> i32) -> (i32, String) {
        let mut out = KuraGateBuffer::EMPTY;
        let code = f(&mut out);
        let text = if out.data.is_null() {
            String::new()
        } else {
            // SAFETY: the library filled `out`.
            let bytes = unsafe { std::slice::from_raw_parts(out.data, out.len) };
            String::from_utf8(bytes.to_vec()).unwrap()
        };
        // SAFETY: filled by the library, freed once.
        unsafe { kura_gate_buffer_free(out) };
        (code, text)
    }

    #[test]
    fn a_panic_in_a_body_is_an_internal_error_not_an_abort() {
        let (code, doc) = call(|out| guard(out, || panic!("boom")));
        assert_eq!(code, KURA_GATE_INTERNAL);
        let doc: serde_json::Value = serde_json::from_str(&doc).unwrap();
        assert_eq!(doc["code"], "internal");
        assert!(doc["message"].as_str().unwrap().ends_with("boom"));
    }

    #[test]
    fn null_pointers_are_refused() {
        // SAFETY: every pointer is NULL or valid.
        unsafe {
            assert_eq!(kura_gate_describe(ptr::null_mut()), KURA_GATE_NULL_ARGUMENT);
            let (code, doc) = call(|out| kura_gate_tick(ptr::null(), b"{}".as_ptr(), 2, out));
            assert_eq!(code, KURA_GATE_NULL_ARGUMENT, "{doc}");
            let mut gate = ptr::null_mut();
            let (code, doc) = call(|out| kura_gate_new(ptr::null(), 0, &mut gate, out));
            assert_eq!(code, KURA_GATE_NULL_ARGUMENT, "{doc}");
            assert!(gate.is_null());
            let (code, _) = call(|out| kura_gate_new(b"{}".as_ptr(), 2, ptr::null_mut(), out));
            assert_eq!(code, KURA_GATE_NULL_ARGUMENT);
            assert_eq!(kura_gate_free(ptr::null_mut()), KURA_GATE_OK);
            kura_gate_buffer_free(KuraGateBuffer::EMPTY);
        }
    }

    #[test]
    fn a_gate_ticks_and_its_state_restores() {
        let tick = br#"{"now": "2026-07-21T10:00:00Z", "wave": 0,
            "waveStartedAt": "2026-07-21T10:00:00Z", "attempt": 3, "servers": []}"#;
        // SAFETY: every pointer is valid for its length.
        unsafe {
            let mut gate = ptr::null_mut();
            let (code, _) = call(|out| kura_gate_new(b"{}".as_ptr(), 2, &mut gate, out));
            assert_eq!(code, KURA_GATE_OK);
            let (code, verdict) = call(|out| kura_gate_tick(gate, tick.as_ptr(), tick.len(), out));
            assert_eq!(code, KURA_GATE_OK, "{verdict}");
            assert!(verdict.starts_with(r#"{"verdict":"pass""#), "{verdict}");
            let (code, state) = call(|out| kura_gate_state(gate, out));
            assert_eq!(code, KURA_GATE_OK);
            kura_gate_free(gate);

            let mut restored = ptr::null_mut();
            let (code, doc) = call(|out| {
                kura_gate_restore(
                    b"{}".as_ptr(),
                    2,
                    state.as_ptr(),
                    state.len(),
                    &mut restored,
                    out,
                )
            });
            assert_eq!(code, KURA_GATE_OK, "{doc}");
            let back = tick.to_vec();
            let back = String::from_utf8(back)
                .unwrap()
                .replace("\"attempt\": 3", "\"attempt\": 2");
            let (code, doc) = call(|out| kura_gate_tick(restored, back.as_ptr(), back.len(), out));
            assert_eq!(code, KURA_GATE_ATTEMPT_WENT_BACK, "{doc}");
            assert!(
                doc.contains("field attempt: attempt 2 is lower than the attempt 3"),
                "{doc}"
            );
            kura_gate_free(restored);
        }
    }
}
