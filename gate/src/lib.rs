//! Pure rollout gate rules (contract/gate.md).
