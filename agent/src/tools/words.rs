//! What the tools print beside the gate's own words (a failing check's
//! evidence is `kura_schemas::Evidence::summary`/`figures`, the one
//! phrasing every surface shares): counts that may be absent, shared by
//! `kura-agent check` and `kura-agent demo`.

/// An optional count, `null` when absent (absent is never 0).
pub fn count(value: Option<u64>) -> String {
    value.map_or_else(|| "null".to_owned(), |v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kura_schemas::{Evidence, Signal};

    #[test]
    fn a_counter_regression_names_field_band_and_baseline() {
        let e = Evidence {
            fence: None,
            server: "kura/acme-eu".into(),
            signal: Signal::FdTimeoutsRegressed,
            observed: Some(9),
            band_top: Some(4),
            baseline: Some(4),
            detail: None,
        };
        assert_eq!(
            e.summary(),
            "server kura/acme-eu: fd_timeouts_regressed: fd timeouts 9, band top 4, baseline 4"
        );
        let e = Evidence {
            fence: None,
            server: "nodes".into(),
            signal: Signal::NotReady,
            observed: Some(0),
            band_top: None,
            baseline: None,
            detail: Some("ready is false".into()),
        };
        assert_eq!(e.summary(), "server nodes: not_ready: ready is false");
        assert_eq!(count(None), "null");
    }

    #[test]
    fn the_new_signals_read_as_the_gate_words_them() {
        let lag = Evidence {
            observed: Some(71),
            band_top: Some(70),
            baseline: Some(20),
            ..Evidence::new("kura/acme-eu", Signal::ReplicationLagRegressed)
        };
        assert_eq!(
            lag.summary(),
            "server kura/acme-eu: replication_lag_regressed: replication lag entries 71, band top 70, baseline 20"
        );
        let fence = kura_schemas::FenceEvidence {
            phase: "Fencing".into(),
            enabled_pods: 2,
            valid_writers: 0,
            epoch: 0,
        };
        let fenced = Evidence {
            observed: Some(0),
            detail: Some(fence.describe()),
            fence: Some(fence),
            ..Evidence::new("kura/acme-eu", Signal::ServingFenced)
        };
        assert_eq!(
            fenced.summary(),
            "server kura/acme-eu: serving_fenced: grant phase Fencing, 2 pods with fenced serving, 0 valid writers, highest epoch 0"
        );
    }
}
