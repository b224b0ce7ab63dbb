//! Tick documents for the gate's binding benchmarks: the same bytes go
//! through native `Gate::tick` (criterion, `benches/gate_ffi.rs`), the Go
//! package and the Elixir library (benches/PERFORMANCE.md, "The gate from
//! Go and Elixir"). `gate-tick-docs DIR` writes them for the bindings.

use serde_json::{Value, json};

/// The time every document is judged at.
pub const NOW: &str = "2026-07-21T10:00:00Z";

/// A healthy aggregate sampled at `sampled_at` (every field the checks read).
fn health(sampled_at: &str) -> Value {
    json!({
        "sampledAt": sampled_at, "expectedPods": 3, "sampledPods": 3,
        "ready": true, "serving": true, "ringConsistent": true,
        "bootstrapInflightPeers": 0, "backfillDegraded": false,
        "backfillBudgetExhaustedPeers": 0, "outboxMessages": 1000,
        "fdTimeoutCount": 90, "peerConnectionFailures": 40, "memoryPressureState": 0
    })
}

/// One tick over `servers` converged, healthy, soak-eligible servers in ten
/// waves (the tenth is current), each with its baseline as an aggregate
/// and its current aggregate: the gate soaks.
pub fn tick_document(servers: usize) -> String {
    let list: Vec<Value> = (0..servers)
        .map(|i| {
            json!({
                "id": format!("acme-{i:05}/eu-west"), "wave": i % 10, "converged": true,
                "deployment": "succeeded", "status": "active",
                "baseline": {"capturedAt": "2026-07-21T09:10:00Z",
                             "health": health("2026-07-21T09:09:55Z")},
                "health": health("2026-07-21T09:59:40Z"),
            })
        })
        .collect();
    json!({
        "now": NOW, "wave": 9, "waveStartedAt": "2026-07-21T09:58:00Z",
        "attempt": 0, "servers": list,
    })
    .to_string()
}
