//! `kura-agent aggregate` documents: no panic; the published counters never
//! decrease from one sweep to the next, and every total stays within what
//! the API server stores.
#![no_main]

use kura_agent::aggregate::{AggregateConfig, input};
use kura_schemas::api_int::API_INT_MAX;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(doc) = input::parse_input(data) else {
        return;
    };
    let out = input::run(&doc, AggregateConfig::default(), "fuzz");
    assert_eq!(out.len(), doc.sweeps.len());
    let mut previous = doc.previous.as_ref();
    for h in &out {
        assert!(h.fd_timeout_count <= API_INT_MAX);
        assert!(h.counter_resets <= API_INT_MAX);
        assert!(h.inflight_requests <= API_INT_MAX);
        if let Some(p) = previous {
            assert!(
                h.fd_timeout_count >= p.fd_timeout_count.min(API_INT_MAX),
                "fdTimeoutCount went from {} to {}",
                p.fd_timeout_count,
                h.fd_timeout_count
            );
            assert!(h.counter_resets >= p.counter_resets.min(API_INT_MAX));
            if let (Some(before), Some(now)) =
                (p.peer_connection_failures, h.peer_connection_failures)
            {
                assert!(
                    now >= before.min(API_INT_MAX),
                    "peerConnectionFailures {before} -> {now}"
                );
            }
        }
        previous = Some(h);
    }
});
