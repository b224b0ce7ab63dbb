//! The `/status/cluster` parser over arbitrary bytes: no panic; an accepted
//! body's replication lag is a count the API server can store, and it is
//! never more than the sum of its replica links (a region link or a link of
//! an unknown kind is never summed).
#![no_main]

use kura_schemas::api_int::API_INT_MAX;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(status) = kura_schemas::parse_cluster_status(data) {
        let lag = status.replication_lag_entries();
        assert_eq!(lag.is_some(), status.sync_links.is_some());
        if let (Some(lag), Some(links)) = (lag, status.sync_links.as_ref()) {
            assert!(lag <= API_INT_MAX, "an accepted body holds {lag}");
            let replica: u128 = links
                .iter()
                .filter(|l| l.kind == kura_schemas::cluster::REPLICA_KIND)
                .map(|l| u128::from(l.lag_entries.expect("a replica link has its lag")))
                .sum();
            assert_eq!(u128::from(lag), replica.min(u128::from(API_INT_MAX)));
        }
    }
});
