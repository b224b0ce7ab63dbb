//! [`Transition`]: a change in what the agent has published about an
//! instance that an operator should hear about once, as a Kubernetes Event
//! (`kubectl events --for kura/NAME`, `kubectl describe kura NAME`): a
//! baseline captured, the verdict turning healthy or unhealthy, a hard
//! stop, a status the cluster's CRD dropped. The write path detects them
//! from what it wrote; the events adapter publishes them. Never a
//! per-sweep repeat.

use std::borrow::Cow;
use std::sync::Arc;

use super::key::InstanceKey;

/// What changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TransitionKind {
    /// A new baseline was captured (`spec.image` changed): Normal.
    BaselineCaptured,
    /// `RolloutHealthy` turned `True`: Normal.
    RolloutHealthy,
    /// `RolloutHealthy` turned `False`, or stayed `False` with another
    /// reason: Warning, with the evidence.
    RolloutUnhealthy,
    /// `RolloutHardStopped` turned `True`: Warning.
    RolloutHardStopped,
    /// The API server dropped or refused status fields (the CRD in the
    /// cluster is too old): Warning.
    StatusPruned,
    /// Another manager writes the instance's `status.rolloutHealth`
    /// (instance mode): the agent stopped writing it. Warning.
    StatusContested,
}

impl TransitionKind {
    /// The Event's `reason`.
    pub fn reason(self) -> &'static str {
        match self {
            TransitionKind::BaselineCaptured => "BaselineCaptured",
            TransitionKind::RolloutHealthy => "RolloutHealthy",
            TransitionKind::RolloutUnhealthy => "RolloutUnhealthy",
            TransitionKind::RolloutHardStopped => "RolloutHardStopped",
            TransitionKind::StatusPruned => "StatusPruned",
            TransitionKind::StatusContested => "StatusContested",
        }
    }

    /// Whether the Event is a Warning (else Normal).
    pub fn is_warning(self) -> bool {
        matches!(
            self,
            TransitionKind::RolloutUnhealthy
                | TransitionKind::RolloutHardStopped
                | TransitionKind::StatusPruned
                | TransitionKind::StatusContested
        )
    }
}

/// One transition of one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// What changed.
    pub kind: TransitionKind,
    /// The Event's `action` (CamelCase): the signal for a failing check
    /// (repeats of the same signal aggregate into one Event series, a new
    /// signal is a new Event), else what the agent did (`Judge`,
    /// `CaptureBaseline`, `WriteStatus`; static text, not held on the
    /// heap).
    pub action: Cow<'static, str>,
    /// The Event's note: one line with the evidence.
    pub note: String,
    /// The image the verdict or baseline is about (`rolloutGate.targetImage`),
    /// when there is one: Events about another image never fold into the
    /// same series, so `kubectl describe` during a rollout shows the
    /// rollout's own `RolloutHealthy` with its note, not a count added to
    /// the previous image's (repeats about one image still fold). One
    /// write's transitions share it.
    pub image: Option<Arc<str>>,
}

/// The transitions of one instance from one status write, with what the
/// Event needs to point at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceTransitions {
    /// The instance.
    pub key: InstanceKey,
    /// Its UID as the API server returned it (`kubectl describe` matches
    /// Events by UID); `None` when no write of it was accepted yet.
    pub uid: Option<String>,
    /// What changed, in the order to publish.
    pub transitions: Vec<Transition>,
}
