//! The fold of `serving_authority` over an instance's sampled pods into
//! `servingAuthority` (contract/rollout-health.md): null unless some pod
//! runs fenced serving (`enabled: true`); otherwise the enabled pods, the
//! valid writers among them, the phase by precedence (`Fencing` > any
//! unknown value > `Revoking` > `Quiescing` > `Preparing` > `Serving` >
//! none) and the highest epoch among valid writers.

use kura_schemas::report::ServingAuthority;
use kura_schemas::{ServingAuthorityHealth, fence_phase_rank};

/// Rank of a phase this version does not know ([`fence_phase_rank`]).
const UNKNOWN: u8 = 5;

/// Accumulates the fold over one sweep without allocating.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FenceFold<'a> {
    enabled_pods: u32,
    valid_writers: u32,
    epoch: u64,
    /// Highest phase rank seen (0: none reported).
    rank: u8,
    /// The phase of that rank; of several unknown values the smallest, so
    /// the result does not depend on the order of the pods.
    phase: &'a str,
}

impl<'a> FenceFold<'a> {
    /// Fold one sampled pod's `serving_authority` (`None` when the pod does
    /// not report one). A pod without `enabled: true` does not run fenced
    /// serving and is not counted; a missing `valid` is not a writer.
    pub fn add(&mut self, authority: Option<&'a ServingAuthority>) {
        let Some(a) = authority.filter(|a| a.enabled == Some(true)) else {
            return;
        };
        self.enabled_pods = self.enabled_pods.saturating_add(1);
        if a.valid == Some(true) {
            self.valid_writers = self.valid_writers.saturating_add(1);
            self.epoch = self.epoch.max(a.epoch.unwrap_or(0));
        }
        let phase = a.observed.as_ref().map_or("", |o| o.phase.as_str());
        let rank = fence_phase_rank(phase);
        if rank > self.rank || (rank == UNKNOWN && self.rank == UNKNOWN && phase < self.phase) {
            self.rank = rank;
            self.phase = phase;
        }
    }

    /// The folded value: `None` when no sampled pod runs fenced serving.
    pub fn result(&self) -> Option<ServingAuthorityHealth> {
        (self.enabled_pods > 0).then(|| ServingAuthorityHealth {
            enabled_pods: self.enabled_pods,
            valid_writers: self.valid_writers,
            phase: self.phase.to_owned(),
            epoch: self.epoch,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kura_schemas::report::ObservedGrant;

    fn pod(
        enabled: Option<bool>,
        valid: Option<bool>,
        epoch: u64,
        phase: &str,
    ) -> ServingAuthority {
        ServingAuthority {
            enabled,
            valid,
            epoch: Some(epoch),
            observed: (!phase.is_empty()).then(|| ObservedGrant {
                phase: phase.to_owned(),
            }),
            ..ServingAuthority::default()
        }
    }

    fn fold(pods: &[ServingAuthority]) -> Option<ServingAuthorityHealth> {
        let mut f = FenceFold::default();
        for p in pods {
            f.add(Some(p));
        }
        f.result()
    }

    #[test]
    fn null_unless_a_pod_runs_fenced_serving() {
        assert_eq!(FenceFold::default().result(), None);
        assert_eq!(fold(&[pod(Some(false), Some(true), 4, "Serving")]), None);
        assert_eq!(fold(&[pod(None, Some(true), 4, "Serving")]), None);
    }

    #[test]
    fn one_primary_and_a_standby() {
        let got = fold(&[
            pod(Some(true), Some(true), 3, "Serving"),
            pod(Some(true), Some(false), 0, "Serving"),
        ]);
        assert_eq!(
            got,
            Some(ServingAuthorityHealth {
                enabled_pods: 2,
                valid_writers: 1,
                phase: "Serving".into(),
                epoch: 3
            })
        );
    }

    #[test]
    fn phase_precedence_whatever_the_order() {
        let order = [
            "Serving",
            "Preparing",
            "Quiescing",
            "Revoking",
            "Zeta",
            "Alpha",
            "Fencing",
        ];
        for n in 1..=order.len() {
            let mut pods: Vec<_> = order[..n]
                .iter()
                .map(|p| pod(Some(true), Some(false), 0, p))
                .collect();
            let want = match n {
                7 => "Fencing",
                6 => "Alpha",
                5 => "Zeta",
                _ => order[n - 1],
            };
            assert_eq!(fold(&pods).map(|a| a.phase), Some(want.to_owned()), "{n}");
            pods.reverse();
            assert_eq!(
                fold(&pods).map(|a| a.phase),
                Some(want.to_owned()),
                "{n} reversed"
            );
        }
        // A pod that reports no phase does not lower the fold.
        assert_eq!(
            fold(&[
                pod(Some(true), Some(true), 2, "Quiescing"),
                pod(Some(true), Some(false), 0, "")
            ])
            .map(|a| a.phase),
            Some("Quiescing".to_owned())
        );
    }

    #[test]
    fn missing_valid_is_no_writer_and_epoch_counts_writers_only() {
        let got = fold(&[
            pod(Some(true), None, 9, "Serving"),
            pod(Some(true), Some(false), 8, "Serving"),
        ])
        .unwrap();
        assert_eq!((got.valid_writers, got.epoch), (0, 0));
    }
}
