//! Evidence in words: one short phrase per failed check, shared by
//! `kura-agent check` and `kura-agent demo`.

use kura_schemas::{Evidence, Signal};

/// The aggregate field (or quantity) a signal's `observed` value is, for
/// the signals that compare a number (the one wording, next to the signal:
/// [`Signal::observed_field`]).
pub fn observed_field(signal: Signal) -> Option<&'static str> {
    signal.observed_field()
}

/// One evidence entry as a phrase, e.g. `fd_timeouts_regressed on
/// kura/acme-eu: fdTimeoutCount 9 above band top 4 (baseline 4)`.
pub fn describe(evidence: &Evidence) -> String {
    let fields = describe_fields(evidence);
    if fields.is_empty() {
        format!("{} on {}", evidence.signal, evidence.server)
    } else {
        format!("{} on {}: {fields}", evidence.signal, evidence.server)
    }
}

/// The numbers and detail of an evidence entry without its signal and
/// server, e.g. `fdTimeoutCount 9 above band top 4, baseline 4`.
pub fn describe_fields(evidence: &Evidence) -> String {
    let mut parts: Vec<String> = Vec::new();
    match (evidence.observed, evidence.band_top) {
        (Some(observed), Some(top)) => {
            let field = observed_field(evidence.signal).unwrap_or("observed");
            let band = evidence.signal.is_banded();
            let relation = match (evidence.signal, band, observed > top) {
                (Signal::PodsUnsampled, _, _) => "below expected",
                (_, true, true) => "above band top",
                (_, false, true) => "above limit",
                (_, _, false) => "at limit",
            };
            parts.push(format!("{field} {observed} {relation} {top}"));
        }
        (Some(observed), None) => {
            let field = observed_field(evidence.signal).unwrap_or("observed");
            parts.push(format!("{field} {observed}"));
        }
        (None, Some(top)) => parts.push(format!("limit {top}")),
        (None, None) => {}
    }
    if let Some(baseline) = evidence.baseline {
        parts.push(format!("baseline {baseline}"));
    }
    if let Some(detail) = &evidence.detail {
        parts.push(detail.clone());
    }
    parts.join(", ")
}

/// An optional count, `null` when absent (absent is never 0).
pub fn count(value: Option<u64>) -> String {
    value.map_or_else(|| "null".to_owned(), |v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

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
            describe(&e),
            "fd_timeouts_regressed on kura/acme-eu: fdTimeoutCount 9 above band top 4, baseline 4"
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
        assert_eq!(
            describe(&e),
            "not_ready on nodes: observed 0, ready is false"
        );
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
            describe(&lag),
            "replication_lag_regressed on kura/acme-eu: replicationLagEntries 71 above band top 70, baseline 20"
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
            describe(&fenced),
            "serving_fenced on kura/acme-eu: servingAuthority.validWriters 0, grant phase Fencing, 2 pods with fenced serving, 0 valid writers, highest epoch 0"
        );
    }
}
