//! The fold of `backfill_initial_cycle` over an instance's sampled pods:
//! `degraded` > any unknown value > `pending` > `complete` > absent ("").

use kura_schemas::report::BackfillCycle;

/// Accumulates the fold over one sweep without allocating.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackfillFold<'a> {
    /// Highest rank seen so far (0 = absent).
    rank: u8,
    /// The smallest unknown value seen, so that several unknown values fold
    /// to the same result whatever the order of the pods.
    unknown: Option<&'a str>,
}

const COMPLETE: u8 = 1;
const PENDING: u8 = 2;
const UNKNOWN: u8 = 3;
const DEGRADED: u8 = 4;

impl<'a> BackfillFold<'a> {
    /// Fold one sampled pod's value (`None` when the pod does not report it).
    pub fn add(&mut self, value: Option<&'a BackfillCycle>) {
        let rank = match value {
            None => 0,
            Some(BackfillCycle::Complete) => COMPLETE,
            Some(BackfillCycle::Pending) => PENDING,
            Some(BackfillCycle::Degraded) => DEGRADED,
            Some(BackfillCycle::Other(s)) => {
                self.unknown = Some(match self.unknown {
                    Some(u) if u <= s.as_str() => u,
                    _ => s.as_str(),
                });
                UNKNOWN
            }
        };
        self.rank = self.rank.max(rank);
    }

    /// The folded wire value ("" when no pod reported one).
    pub fn result(&self) -> &'a str {
        match self.rank {
            DEGRADED => "degraded",
            UNKNOWN => self.unknown.unwrap_or(""),
            PENDING => "pending",
            COMPLETE => "complete",
            _ => "",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fold(values: &[Option<&str>]) -> String {
        let parsed: Vec<Option<BackfillCycle>> = values
            .iter()
            .map(|v| v.map(BackfillCycle::from_wire))
            .collect();
        let mut f = BackfillFold::default();
        for v in &parsed {
            f.add(v.as_ref());
        }
        f.result().to_owned()
    }

    #[test]
    fn every_case_of_the_issue() {
        assert_eq!(fold(&[]), "");
        assert_eq!(fold(&[None, None]), "");
        assert_eq!(fold(&[Some("complete"), Some("pending")]), "pending");
        assert_eq!(
            fold(&[Some("complete"), Some("pending"), Some("degraded")]),
            "degraded"
        );
        assert_eq!(fold(&[None, Some("complete")]), "complete");
        assert_eq!(
            fold(&[Some("pending"), Some("some-new-value")]),
            "some-new-value"
        );
        assert_eq!(
            fold(&[Some("some-new-value"), Some("degraded")]),
            "degraded"
        );
    }

    #[test]
    fn several_unknown_values_fold_independently_of_order() {
        assert_eq!(fold(&[Some("zeta"), Some("alpha")]), "alpha");
        assert_eq!(fold(&[Some("alpha"), Some("zeta")]), "alpha");
    }
}
