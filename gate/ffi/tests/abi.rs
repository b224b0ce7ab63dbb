//! Through the C entry points: restored states met by a tick
//! (testdata/gate-restore/cases.json, the same cases the Go and Elixir
//! tests run) and handle misuse.

use std::ptr;

use kura_gate_ffi::abi::*;
use serde_json::Value;

fn call(f: impl FnOnce(*mut KuraGateBuffer) -> i32) -> (i32, Value) {
    let mut out = KuraGateBuffer {
        data: ptr::null_mut(),
        len: 0,
    };
    let code = f(&mut out);
    let doc = if out.data.is_null() {
        Value::Null
    } else {
        // SAFETY: the library filled `out`.
        let bytes = unsafe { std::slice::from_raw_parts(out.data, out.len) };
        serde_json::from_slice(bytes).unwrap()
    };
    // SAFETY: filled by the library, freed once.
    unsafe { kura_gate_buffer_free(out) };
    (code, doc)
}

fn new_gate() -> *mut KuraGate {
    let mut gate = ptr::null_mut();
    // SAFETY: valid pointers.
    let (code, doc) = call(|out| unsafe { kura_gate_new(b"{}".as_ptr(), 2, &mut gate, out) });
    assert_eq!(code, KURA_GATE_OK, "{doc}");
    gate
}

const TICK: &[u8] = br#"{"now": "2026-07-21T10:00:00Z", "wave": 0,
    "waveStartedAt": "2026-07-21T10:00:00Z", "attempt": 1, "servers": []}"#;

#[test]
fn restored_states_are_validated_against_the_tick_they_meet() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/gate-restore/cases.json"
    ))
    .unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    let config = serde_json::to_vec(&doc["config"]).unwrap();
    let cases = doc["cases"].as_array().unwrap();
    assert!(cases.len() >= 10);
    let mut wrong = Vec::new();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let state = serde_json::to_vec(&case["state"]).unwrap();
        let tick = serde_json::to_vec(&case["tick"]).unwrap();
        let mut gate = ptr::null_mut();
        // SAFETY: valid pointers and lengths.
        let (code, error) = call(|out| unsafe {
            kura_gate_restore(
                config.as_ptr(),
                config.len(),
                state.as_ptr(),
                state.len(),
                &mut gate,
                out,
            )
        });
        let expect = &case["expect"];
        let got = if code != KURA_GATE_OK {
            assert!(gate.is_null(), "{name}");
            assert_eq!(code, KURA_GATE_INVALID_STATE, "{name}: {error}");
            serde_json::json!({"code": error["code"], "field": error["field"]})
        } else {
            // SAFETY: valid pointers and lengths.
            let (code, verdict) =
                call(|out| unsafe { kura_gate_tick(gate, tick.as_ptr(), tick.len(), out) });
            assert_eq!(code, KURA_GATE_OK, "{name}: {verdict}");
            assert_eq!(kura_gate_free(gate), KURA_GATE_OK);
            serde_json::json!({ "verdict": verdict })
        };
        if &got != expect {
            wrong.push(format!("{name}:\n  got  {got}\n  want {expect}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} cases differ:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
}

#[test]
fn a_freed_gate_is_an_invalid_handle_not_busy() {
    let gate = new_gate();
    assert_eq!(kura_gate_free(gate), KURA_GATE_OK);
    // SAFETY: every pointer but the (freed) handle is valid; the handle is
    // never dereferenced.
    unsafe {
        let (code, doc) = call(|out| kura_gate_tick(gate, TICK.as_ptr(), TICK.len(), out));
        assert_eq!(code, KURA_GATE_INVALID_HANDLE, "{doc}");
        assert_eq!(doc["code"], "invalid_handle");
        assert!(
            doc["message"].as_str().unwrap().contains("was freed"),
            "{doc}"
        );
        let (code, _) = call(|out| kura_gate_state(gate, out));
        assert_eq!(code, KURA_GATE_INVALID_HANDLE);
        let input = br#"{"capturedAt": "2026-07-21T10:00:00Z", "health": null}"#;
        let (code, _) =
            call(|out| kura_gate_capture_baseline(gate, input.as_ptr(), input.len(), out));
        assert_eq!(code, KURA_GATE_INVALID_HANDLE);
    }
    // Freed twice: said, not undefined.
    assert_eq!(kura_gate_free(gate), KURA_GATE_INVALID_HANDLE);
    // New gates never get the freed handle back.
    let others: Vec<_> = (0..8).map(|_| new_gate()).collect();
    assert!(!others.contains(&gate));
    // SAFETY: as above.
    let (code, _) = call(|out| unsafe { kura_gate_tick(gate, TICK.as_ptr(), TICK.len(), out) });
    assert_eq!(code, KURA_GATE_INVALID_HANDLE);
    for other in others {
        // SAFETY: as above.
        let (code, doc) =
            call(|out| unsafe { kura_gate_tick(other, TICK.as_ptr(), TICK.len(), out) });
        assert_eq!(code, KURA_GATE_OK, "{doc}");
        assert_eq!(kura_gate_free(other), KURA_GATE_OK);
    }
}

#[test]
fn a_value_that_is_no_handle_is_refused_without_being_read() {
    let mut on_stack = [0u8; 64];
    let bogus: [*mut KuraGate; 3] = [
        ptr::without_provenance_mut(0x10),
        on_stack.as_mut_ptr().cast(),
        ptr::without_provenance_mut(usize::MAX),
    ];
    for gate in bogus {
        // SAFETY: the handle is never dereferenced.
        let (code, doc) =
            call(|out| unsafe { kura_gate_tick(gate, TICK.as_ptr(), TICK.len(), out) });
        assert_eq!(code, KURA_GATE_INVALID_HANDLE, "{doc}");
        assert!(
            doc["message"].as_str().unwrap().contains("not a handle"),
            "{doc}"
        );
        assert_eq!(kura_gate_free(gate), KURA_GATE_INVALID_HANDLE);
    }
}

#[test]
fn freeing_a_gate_while_another_thread_ticks_it_is_safe() {
    for _ in 0..50 {
        let gate = new_gate();
        let token = gate.addr();
        let ticker = std::thread::spawn(move || {
            let gate: *mut KuraGate = ptr::without_provenance_mut(token);
            let mut codes = Vec::new();
            for _ in 0..100 {
                // SAFETY: the handle is never dereferenced by the caller.
                let (code, _) =
                    call(|out| unsafe { kura_gate_tick(gate, TICK.as_ptr(), TICK.len(), out) });
                codes.push(code);
            }
            codes
        });
        assert_eq!(kura_gate_free(gate), KURA_GATE_OK);
        let codes = ticker.join().unwrap();
        // Every call either ran on the gate before the
        // free, or was refused after it; once refused, always refused.
        let first_refused = codes
            .iter()
            .position(|&c| c == KURA_GATE_INVALID_HANDLE)
            .unwrap_or(codes.len());
        assert!(
            codes[..first_refused].iter().all(|&c| c == KURA_GATE_OK),
            "{codes:?}"
        );
        assert!(
            codes[first_refused..]
                .iter()
                .all(|&c| c == KURA_GATE_INVALID_HANDLE),
            "{codes:?}"
        );
    }
}

fn what_if(document: &[u8], candidate: &[u8], agent_view: u32) -> (i32, Value) {
    // SAFETY: valid pointers and lengths.
    call(|out| unsafe {
        kura_gate_what_if(
            document.as_ptr(),
            document.len(),
            candidate.as_ptr(),
            candidate.len(),
            agent_view,
            out,
        )
    })
}

#[test]
fn what_if_through_the_c_abi_is_the_library_what_if() {
    let timeline = |name: &str| {
        std::fs::read(format!(
            "{}/../../testdata/timeline/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    };
    let holds = timeline("holds.json");
    let looser = timeline("looser-outbox.gate.json");
    for (agent_view, view) in [(0, kura_gate::View::Wave), (1, kura_gate::View::Agent)] {
        let (code, doc) = what_if(&holds, &looser, agent_view);
        assert_eq!(code, KURA_GATE_OK, "{doc}");
        let candidate =
            kura_gate::parse_config_json(std::str::from_utf8(&looser).unwrap()).unwrap();
        let want =
            kura_gate::what_if(std::str::from_utf8(&holds).unwrap(), &candidate, view).unwrap();
        assert_eq!(doc, serde_json::to_value(&want).unwrap());
        assert!(!doc["differences"].as_array().unwrap().is_empty());
    }

    let (code, doc) = what_if(&holds, br#"{"outboxBandPercent": 5000}"#, 0);
    assert_eq!(code, KURA_GATE_INVALID_CONFIG, "{doc}");
    assert_eq!(doc["field"], "config.outboxBandPercent");
    let (code, doc) = what_if(b"{\"ticks\": 1}", b"{}", 0);
    assert_eq!(code, KURA_GATE_INVALID_INPUT, "{doc}");
    assert_eq!(doc["field"], "ticks");
    let (code, doc) = what_if(&holds, b"{}", 2);
    assert_eq!(code, KURA_GATE_INVALID_INPUT, "{doc}");
    // SAFETY: a NULL document is refused before it is read.
    let (code, _) =
        call(|out| unsafe { kura_gate_what_if(ptr::null(), 0, b"{}".as_ptr(), 2, 0, out) });
    assert_eq!(code, KURA_GATE_NULL_ARGUMENT);
}
