//! The node-report parser over arbitrary bytes: no panic; an accepted
//! report carries only counts the API server can store.
#![no_main]

use kura_schemas::api_int::API_INT_MAX;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(report) = kura_schemas::parse_report(data) {
        assert!(report.fd_timeout_count <= API_INT_MAX);
        for n in [
            report.peer_connection_failure_count,
            report.http_inflight_requests,
            report.grpc_inflight_requests,
            report.outbox_messages,
            report.bootstrap_inflight_peers,
        ]
        .into_iter()
        .flatten()
        {
            assert!(n <= API_INT_MAX, "an accepted report holds {n}");
        }
    }
});
