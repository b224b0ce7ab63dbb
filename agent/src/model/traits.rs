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
    pub update_paused: Option<Box<UpdatePaused>>,
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

/// Most held pod names kept of an `updatePaused`.
const MAX_HELD_PODS: usize = 32;

/// Kura's controller's `status.updatePaused`, read leniently: present and
/// not null is a pause whatever its content (a value of an unexpected
/// type is dropped, never the pause); `heldPods` as a list of names (an
/// integer count is not a list of names and is dropped).
pub fn update_paused_of(value: &serde_json::Value) -> Option<Box<UpdatePaused>> {
    if value.is_null() {
        return None;
    }
    let text = |key: &str, max: usize| {
        value
            .get(key)
            .and_then(serde_json::Value::as_str)
            .filter(|s| s.len() <= max)
            .map(str::to_owned)
    };
    Some(Box::new(UpdatePaused {
        strategy: text("strategy", 64).unwrap_or_default(),
        partition: value.get("partition").and_then(serde_json::Value::as_u64),
        template_image: text("templateImage", 512),
        held_pods: value
            .get("heldPods")
            .and_then(serde_json::Value::as_array)
            .map(|names| {
                names
                    .iter()
                    .filter_map(serde_json::Value::as_str)
                    .filter(|n| n.len() <= 253)
                    .take(MAX_HELD_PODS)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
    }))
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
