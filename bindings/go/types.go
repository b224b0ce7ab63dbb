package kuragate

import (
	"encoding/json"
	"time"
)

// Config is the gate configuration (contract/gate.md, "Defaults"). Start
// from DefaultConfig and change what differs.
type Config struct {
	// SoakSeconds: entry n is wave n's soak; the last repeats.
	SoakSeconds               []uint64 `json:"soakSeconds"`
	WaveDeadlineSeconds       uint64   `json:"waveDeadlineSeconds"`
	MaxSampleAgeSeconds       uint64   `json:"maxSampleAgeSeconds"`
	FutureSkewSeconds         uint64   `json:"futureSkewSeconds"`
	OutboxBandPercent         uint64   `json:"outboxBandPercent"`
	OutboxBandMinimum         uint64   `json:"outboxBandMinimum"`
	ReplicationLagBandPercent uint64   `json:"replicationLagBandPercent"`
	ReplicationLagBandMinimum uint64   `json:"replicationLagBandMinimum"`
	FdTimeoutBand             uint64   `json:"fdTimeoutBand"`
	PeerFailureBandPercent    uint64   `json:"peerFailureBandPercent"`
	PeerFailureBandMinimum    uint64   `json:"peerFailureBandMinimum"`
	// BacklogDrainWindowSeconds: a backlog (outbox, replication lag)
	// above its band fails only once it has not fallen for this long;
	// 0: the band alone decides. Default 900.
	BacklogDrainWindowSeconds uint64 `json:"backlogDrainWindowSeconds"`
}

// Deployment is a server's deployment as the orchestrator sees it.
type Deployment string

// Deployments.
const (
	DeploymentPending   Deployment = "pending"
	DeploymentRunning   Deployment = "running"
	DeploymentSucceeded Deployment = "succeeded"
	DeploymentFailed    Deployment = "failed"
	DeploymentCancelled Deployment = "cancelled"
)

// ServerStatus is a server's lifecycle status.
type ServerStatus string

// Server statuses.
const (
	StatusActive    ServerStatus = "active"
	StatusFailed    ServerStatus = "failed"
	StatusDestroyed ServerStatus = "destroyed"
)

// TickInput is everything one tick judges. Now and WaveStartedAt are
// required: a zero time.Time is sent as missing (omitzero) and the gate
// refuses it, as it refuses a document without them; it is never judged
// as year 1.
type TickInput struct {
	Now           time.Time `json:"now,omitzero"`
	Wave          uint32    `json:"wave"`
	WaveStartedAt time.Time `json:"waveStartedAt,omitzero"`
	Attempt       uint32    `json:"attempt"`
	// Servers: every server of the scope so far (all waves up to Wave).
	Servers []Server `json:"servers"`
}

// Server is one server of the rollout's scope in one tick.
type Server struct {
	ID         string       `json:"id"`
	Wave       uint32       `json:"wave"`
	Converged  bool         `json:"converged"`
	Deployment *Deployment  `json:"deployment"`
	Status     ServerStatus `json:"status"`
	// Baseline: nil means none was captured (not soak-eligible).
	Baseline *Baseline `json:"baseline"`
	// Health: the current aggregate, nil when there is none.
	Health *Health `json:"health"`
}

// Baseline is a server's baseline in either form the gate accepts: an
// aggregate to capture from (CapturedAt and Health), or a baseline captured
// earlier by CaptureBaseline (CapturedAt, Counters and SoakEligible).
// CapturedAt is required (a zero time is sent as missing and refused).
type Baseline struct {
	CapturedAt   time.Time `json:"capturedAt,omitzero"`
	Health       *Health   `json:"health,omitempty"`
	Counters     *Counters `json:"counters,omitempty"`
	SoakEligible *bool     `json:"soakEligible,omitempty"`
}

// Counters are the baseline counters (nil: never compared).
type Counters struct {
	OutboxMessages         *uint64 `json:"outboxMessages"`
	ReplicationLagEntries  *uint64 `json:"replicationLagEntries"`
	FdTimeoutCount         *uint64 `json:"fdTimeoutCount"`
	PeerConnectionFailures *uint64 `json:"peerConnectionFailures"`
}

// ServingAuthority is an aggregate's fence state (fenced serving only).
type ServingAuthority struct {
	EnabledPods  uint32 `json:"enabledPods"`
	ValidWriters uint32 `json:"validWriters"`
	Phase        string `json:"phase"`
	Epoch        uint64 `json:"epoch"`
}

// UpdatePaused is an operator's update pause as Kura's controller reports
// it (status.updatePaused: OnDelete or a partition holds pods on the old
// image): gate check 19, a hard stop.
type UpdatePaused struct {
	Strategy      string   `json:"strategy"`
	Partition     *uint64  `json:"partition,omitempty"`
	TemplateImage *string  `json:"templateImage,omitempty"`
	HeldPods      []string `json:"heldPods,omitempty"`
}

// Health is a rollout-health aggregate (contract rollout-health.md,
// `status.rolloutHealth` of a KuraInstance), every field optional: a
// missing field the checks need fails its check, it never passes. Pods and
// RetiredCounters are carried as they are; the gate does not read them.
type Health struct {
	SchemaVersion                *uint32           `json:"schemaVersion,omitempty"`
	ObservedAt                   *time.Time        `json:"observedAt,omitempty"`
	SampledAt                    *time.Time        `json:"sampledAt,omitempty"`
	ObservedGeneration           *int64            `json:"observedGeneration,omitempty"`
	ExpectedPods                 *uint32           `json:"expectedPods,omitempty"`
	SampledPods                  *uint32           `json:"sampledPods,omitempty"`
	Ready                        *bool             `json:"ready,omitempty"`
	Serving                      *bool             `json:"serving,omitempty"`
	WriterLockOwned              *bool             `json:"writerLockOwned,omitempty"`
	InitialDiscoveryCompleted    *bool             `json:"initialDiscoveryCompleted,omitempty"`
	GenerationConsistent         *bool             `json:"generationConsistent,omitempty"`
	RingConsistent               *bool             `json:"ringConsistent,omitempty"`
	RingMembers                  *uint64           `json:"ringMembers,omitempty"`
	BootstrapInflightPeers       *uint64           `json:"bootstrapInflightPeers,omitempty"`
	BackfillInitialCycle         *string           `json:"backfillInitialCycle,omitempty"`
	BackfillingPeers             *uint64           `json:"backfillingPeers,omitempty"`
	BackfillDegraded             *bool             `json:"backfillDegraded,omitempty"`
	BackfillBudgetExhaustedPeers *uint64           `json:"backfillBudgetExhaustedPeers,omitempty"`
	OutboxMessages               *uint64           `json:"outboxMessages,omitempty"`
	ReplicationLagEntries        *uint64           `json:"replicationLagEntries,omitempty"`
	ServingAuthority             *ServingAuthority `json:"servingAuthority,omitempty"`
	FdTimeoutCount               *uint64           `json:"fdTimeoutCount,omitempty"`
	PeerConnectionFailures       *uint64           `json:"peerConnectionFailures,omitempty"`
	MemoryPressureState          *uint8            `json:"memoryPressureState,omitempty"`
	InflightRequests             *uint64           `json:"inflightRequests,omitempty"`
	CounterResets                *uint64           `json:"counterResets,omitempty"`
	Pods                         json.RawMessage   `json:"pods,omitempty"`
	RetiredCounters              json.RawMessage   `json:"retiredCounters,omitempty"`
	// Suspended: the instance is suspended (no pods); it leaves the
	// wave's scope.
	Suspended *bool `json:"suspended,omitempty"`
	// UpdatePaused: an operator's update pause (check 19, a hard stop).
	UpdatePaused *UpdatePaused `json:"updatePaused,omitempty"`
	Agent        *string       `json:"agent,omitempty"`
}

// VerdictKind is pass, soak or hard_stop.
type VerdictKind string

// Verdict kinds.
const (
	Pass     VerdictKind = "pass"
	Soak     VerdictKind = "soak"
	HardStop VerdictKind = "hard_stop"
)

// Signal names a check or a state of the wave (`soaking`,
// `not_converged`, a server check, a hard stop). The set grows with the
// gate: take the current list from Signals(), not from a copy here.
type Signal string

// Verdict is the answer of one tick.
type Verdict struct {
	Verdict VerdictKind `json:"verdict"`
	// Signal is nil for pass.
	Signal *Signal `json:"signal"`
	// ServerID names the server behind the signal, if any.
	ServerID *string `json:"serverId"`
	// HealthySince: since when the wave has been converged and healthy.
	HealthySince *time.Time `json:"healthySince"`
	// RemainingSeconds of soak; nil unless soaking.
	RemainingSeconds *uint64 `json:"remainingSeconds"`
	// Evidence: why (empty for pass and soaking; at most 16 entries).
	Evidence []Evidence `json:"evidence"`
}

// Evidence is one failed check.
type Evidence struct {
	Server   string  `json:"server"`
	Signal   Signal  `json:"signal"`
	Observed *uint64 `json:"observed"`
	BandTop  *uint64 `json:"bandTop"`
	Baseline *uint64 `json:"baseline"`
	Detail   *string `json:"detail,omitempty"`
	// Fence: the fence state behind serving_fenced and no_valid_writer.
	Fence *FenceEvidence `json:"fence,omitempty"`
	// Run: the backlog's run behind outbox_regressed and
	// replication_lag_regressed (the drain rule): not below Level since
	// Since; nil with a drain window of 0.
	Run *BacklogRun `json:"run,omitempty"`
	// UpdatePaused: the pause behind update_paused.
	UpdatePaused *UpdatePaused `json:"updatePaused,omitempty"`
}

// BacklogRun is a backlog's run (the drain rule of checks 13 and 18):
// since Since the backlog has not fallen below Level.
type BacklogRun struct {
	Since time.Time `json:"since"`
	Level uint64    `json:"level"`
}

// BacklogRuns are an instance's runs, kept in status.rolloutGate so that
// a restarted agent continues them.
type BacklogRuns struct {
	Outbox         *BacklogRun `json:"outbox,omitempty"`
	ReplicationLag *BacklogRun `json:"replicationLag,omitempty"`
}

// FenceEvidence is the fence state a fencing check saw.
type FenceEvidence struct {
	Phase        string `json:"phase"`
	EnabledPods  uint32 `json:"enabledPods"`
	ValidWriters uint32 `json:"validWriters"`
	Epoch        uint64 `json:"epoch"`
}

// InstanceInput is the per-instance judgement's input.
type InstanceInput struct {
	// Config: nil for the defaults.
	Config *Config `json:"config,omitempty"`
	// Instance names the instance in the evidence (namespace/name).
	Instance string `json:"instance"`
	// Previous is the instance's last status.rolloutGate, nil at first sight.
	Previous *RolloutGate `json:"previous"`
	// SpecImage is the instance's spec.image.
	SpecImage string `json:"specImage"`
	// BaselineSource and Current are full status.rolloutHealth aggregates
	// as kura-agent writes them (raw JSON), or nil.
	BaselineSource json.RawMessage `json:"baselineSource,omitempty"`
	Current        json.RawMessage `json:"current,omitempty"`
	// Now is required (a zero time is sent as missing and refused).
	Now time.Time `json:"now,omitzero"`
}

// RolloutGate is an instance's status.rolloutGate.
type RolloutGate struct {
	TargetImage        string     `json:"targetImage"`
	BaselineImage      *string    `json:"baselineImage"`
	BaselineCapturedAt *time.Time `json:"baselineCapturedAt"`
	Baseline           Counters   `json:"baseline"`
	EffectiveBaseline  Counters   `json:"effectiveBaseline"`
	SoakEligible       bool       `json:"soakEligible"`
	// Verdict: healthy, unhealthy, hard_stop or suspended.
	Verdict      string     `json:"verdict"`
	Signal       *Signal    `json:"signal"`
	HealthySince *time.Time `json:"healthySince"`
	EvaluatedAt  time.Time  `json:"evaluatedAt,omitzero"`
	Evidence     []Evidence `json:"evidence"`
	// BacklogRuns: pass them back in Previous so the runs continue.
	BacklogRuns *BacklogRuns `json:"backlogRuns,omitempty"`
}
