//! [`InstanceTraits`]: what sets an instance apart from the usual case
//! (rollout-health.md, "Instances the agent must treat apart"), read from
//! the `KuraInstance` by discovery, by `kura-agent aggregate` from its
//! document, and carried by the target into the fold and the judge.

use kura_schemas::UpdatePaused;

/// The `KuraInstance` annotation whose presence means the instance runs
/// fenced serving (Kura's rollback floor for it).
pub const SERVING_ROLLBACK_FLOOR_ANNOTATION: &str = "kura.tuist.dev/serving-rollback-floor";

/// The `spec.servingMode` of fenced serving.
pub const FENCED_SERVING_MODE: &str = "PositiveFenceV1";

/// The `status.phase` values of a suspension under way or done.
pub const SUSPENDED_PHASES: [&str; 2] = ["Suspending", "Suspended"];

/// How an instance differs from one whose pods just run: suspended, held
/// on an old image by an operator, configured for fenced serving. The
/// default is none of those.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstanceTraits {
    /// `spec.suspended`, or `status.phase` `Suspending`/`Suspended`: no
    /// pods to poll, the verdict is `suspended`.
    pub suspended: bool,
    /// Kura's controller's `status.updatePaused`, copied into the
    /// aggregate (gate check 19).
    pub update_paused: Option<UpdatePaused>,
    /// `spec.servingMode` is [`FENCED_SERVING_MODE`] or the instance
    /// carries [`SERVING_ROLLBACK_FLOOR_ANNOTATION`]: with no pod reporting
    /// fenced serving, `servingAuthority` is all zeros rather than null.
    pub fence_configured: bool,
}

impl InstanceTraits {
    /// Whether `spec.suspended` and `status.phase` say the instance is
    /// suspended (or being suspended).
    pub fn is_suspended(spec_suspended: bool, phase: Option<&str>) -> bool {
        spec_suspended || phase.is_some_and(|p| SUSPENDED_PHASES.contains(&p))
    }

    /// Whether `spec.servingMode` and the annotation say fenced serving is
    /// configured.
    pub fn is_fence_configured(
        serving_mode: Option<&str>,
        rollback_floor_annotation: bool,
    ) -> bool {
        serving_mode == Some(FENCED_SERVING_MODE) || rollback_floor_annotation
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suspension_is_the_spec_flag_or_either_suspension_phase() {
        assert!(InstanceTraits::is_suspended(true, None));
        assert!(InstanceTraits::is_suspended(false, Some("Suspending")));
        assert!(InstanceTraits::is_suspended(false, Some("Suspended")));
        assert!(!InstanceTraits::is_suspended(false, Some("Running")));
        assert!(!InstanceTraits::is_suspended(false, Some("suspended")));
        assert!(!InstanceTraits::is_suspended(false, None));
    }

    #[test]
    fn fenced_serving_is_configured_by_the_mode_or_the_annotation() {
        assert!(InstanceTraits::is_fence_configured(
            Some("PositiveFenceV1"),
            false
        ));
        assert!(InstanceTraits::is_fence_configured(None, true));
        assert!(!InstanceTraits::is_fence_configured(Some("Legacy"), false));
        assert!(!InstanceTraits::is_fence_configured(None, false));
    }
}
