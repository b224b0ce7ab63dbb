//! Per-pod reset clamping of the per-process counters
//! (`fd_timeout_count`, `peer_connection_failure_count`).

use kura_schemas::api_int::saturating_add;

/// One counter of one tracked pod: the last raw value and the offset that
/// absorbed every earlier reset. The clamped value is `offset + last_raw`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counter {
    /// The last raw value the pod reported.
    pub(crate) last_raw: u64,
    /// Sum of the raw values seen just before each reset.
    pub(crate) offset: u64,
}

impl Counter {
    /// `offset + last_raw`, saturating at 2^63-1 (what the API server
    /// stores).
    pub(crate) fn clamped(self) -> u64 {
        saturating_add(self.offset, self.last_raw)
    }

    /// Rebuild a counter from the published clamped and raw values of a pod
    /// entry. A clamped value below the raw one (never written by this code)
    /// restarts from the raw value, which can only raise the published sum.
    pub(crate) fn restore(clamped: Option<u64>, raw: Option<u64>) -> Option<Counter> {
        match (clamped, raw) {
            (None, None) => None,
            (Some(c), None) => Some(Counter {
                last_raw: 0,
                offset: c,
            }),
            (None, Some(r)) => Some(Counter {
                last_raw: r,
                offset: 0,
            }),
            (Some(c), Some(r)) => Some(Counter {
                last_raw: r,
                offset: c.saturating_sub(r),
            }),
        }
    }
}

/// Fold one raw value into a pod's counter. Returns whether a reset was
/// absorbed: the pod's identity changed since the last valid sample, or the
/// raw value dropped. A counter seen for the first time starts at offset 0.
pub(crate) fn observe(counter: &mut Option<Counter>, raw: u64, identity_changed: bool) -> bool {
    match counter {
        None => {
            *counter = Some(Counter {
                last_raw: raw,
                offset: 0,
            });
            false
        }
        Some(c) => {
            let reset = identity_changed || raw < c.last_raw;
            if reset {
                c.offset = saturating_add(c.offset, c.last_raw);
            }
            c.last_raw = raw;
            reset
        }
    }
}

/// A counter the new report does not carry (e.g. a pod rolled back to a
/// generation without it): when the process changed, its old value is final,
/// so it moves into the offset; the clamped value is unchanged.
pub(crate) fn close_on_identity_change(counter: &mut Option<Counter>, identity_changed: bool) {
    if let Some(c) = counter
        && identity_changed
    {
        c.offset = saturating_add(c.offset, c.last_raw);
        c.last_raw = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_value_starts_at_offset_zero() {
        let mut c = None;
        assert!(!observe(&mut c, 7, true));
        assert_eq!(c.map(Counter::clamped), Some(7));
    }

    #[test]
    fn raw_drop_is_a_reset() {
        let mut c = None;
        observe(&mut c, 7, false);
        assert!(observe(&mut c, 2, false));
        assert_eq!(c.map(Counter::clamped), Some(9));
        assert!(!observe(&mut c, 5, false));
        assert_eq!(c.map(Counter::clamped), Some(12));
    }

    #[test]
    fn identity_change_is_a_reset_even_when_raw_rises() {
        let mut c = None;
        observe(&mut c, 7, false);
        assert!(observe(&mut c, 10, true));
        assert_eq!(c.map(Counter::clamped), Some(17));
    }

    #[test]
    fn closing_keeps_the_clamped_value() {
        let mut c = None;
        observe(&mut c, 7, false);
        close_on_identity_change(&mut c, true);
        assert_eq!(
            c,
            Some(Counter {
                last_raw: 0,
                offset: 7
            })
        );
        close_on_identity_change(&mut c, false);
        assert_eq!(
            c,
            Some(Counter {
                last_raw: 0,
                offset: 7
            })
        );
    }

    #[test]
    fn restore_round_trips() {
        let c = Counter {
            last_raw: 3,
            offset: 9,
        };
        assert_eq!(
            Counter::restore(Some(c.clamped()), Some(c.last_raw)),
            Some(c)
        );
        assert_eq!(Counter::restore(None, None), None);
        assert_eq!(
            Counter::restore(Some(4), Some(9)).map(Counter::clamped),
            Some(9)
        );
        assert_eq!(
            Counter::restore(Some(4), None).map(Counter::clamped),
            Some(4)
        );
    }

    #[test]
    fn saturates_at_what_the_api_server_stores() {
        use kura_schemas::api_int::API_INT_MAX;
        let mut c = None;
        observe(&mut c, API_INT_MAX, false);
        assert!(observe(&mut c, 1, false));
        assert_eq!(c.map(Counter::clamped), Some(API_INT_MAX));
        // Even from a raw value the parser would have refused.
        let mut c = None;
        observe(&mut c, u64::MAX, false);
        assert!(observe(&mut c, 1, false));
        assert_eq!(c.map(Counter::clamped), Some(API_INT_MAX));
    }
}
