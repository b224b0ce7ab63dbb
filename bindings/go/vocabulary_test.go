package kuragate

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func asError(err error, target **Error) bool { return errors.As(err, target) }

// The package's closed lists (error codes, verdict kinds, Health fields)
// are checked against what the library says, so a change in Rust fails
// here instead of drifting.
func TestThePackageAgreesWithTheLibrary(t *testing.T) {
	d, err := Describe()
	if err != nil {
		t.Fatal(err)
	}
	if d.ABIVersion != ABIVersion {
		t.Fatalf("ABI %d, package %d", d.ABIVersion, ABIVersion)
	}
	codes := map[float64]ErrorCode{}
	for _, c := range d.ErrorCodes {
		codes[c[0].(float64)] = ErrorCode(c[1].(string))
	}
	want := map[float64]ErrorCode{1: InvalidInput, 2: InvalidConfig, 3: InvalidState,
		4: AttemptWentBack, 5: NullArgument, 6: InputTooLarge, 7: Busy, 8: Internal,
		9: InvalidHandle}
	if !reflect.DeepEqual(codes, want) {
		t.Fatalf("error codes: library %v, package %v", codes, want)
	}
	if !reflect.DeepEqual(d.Verdicts, []VerdictKind{Pass, Soak, HardStop}) {
		t.Fatalf("verdicts: %v", d.Verdicts)
	}
	tags := map[string]bool{}
	ty := reflect.TypeOf(Health{})
	for i := range ty.NumField() {
		tags[strings.Split(ty.Field(i).Tag.Get("json"), ",")[0]] = true
	}
	for _, f := range d.HealthFields {
		if !tags[f] {
			t.Errorf("the gate reads health.%s, which kuragate.Health lacks", f)
		}
	}
	signals := Signals()
	for _, s := range []Signal{"soaking", "not_converged", "memory_pressure_critical", "wave_deadline_exceeded",
		"update_paused", "instance_suspended"} {
		if !slices.Contains(signals, s) {
			t.Errorf("signal %s missing from %v", s, signals)
		}
	}
	c := DefaultConfig()
	if !reflect.DeepEqual(c.SoakSeconds, []uint64{900, 300}) || c.WaveDeadlineSeconds != 3600 ||
		c.BacklogDrainWindowSeconds != 900 {
		t.Fatalf("default config %+v", c)
	}
	var raw map[string]any
	if err := json.Unmarshal(d.DefaultConfig, &raw); err != nil || len(raw) != reflect.TypeOf(Config{}).NumField() {
		t.Fatalf("Config has %d fields, the library's %d", reflect.TypeOf(Config{}).NumField(), len(raw))
	}
}

// backfill_pending was added to the gate after this package was written:
// it arrives through the library's list, with no change here.
func TestANewSignalArrivesWithoutAPackageChange(t *testing.T) {
	if !slices.Contains(Signals(), Signal("backfill_pending")) {
		t.Fatalf("signals: %v", Signals())
	}
}

func TestJudgeInstanceGivesTheAgentsRolloutGate(t *testing.T) {
	now := time.Date(2026, 7, 21, 10, 0, 0, 0, time.UTC)
	gate, err := JudgeInstance(InstanceInput{Instance: "ns/kura", SpecImage: "kura:2", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if gate.TargetImage != "kura:2" || gate.Verdict != "unhealthy" || gate.Signal == nil || *gate.Signal != "sample_missing" {
		t.Fatalf("%+v", gate)
	}
	_, err = JudgeInstanceJSON([]byte(`{"instance": 5}`))
	refusal(t, "instance", err, InvalidInput, "line 1 column")
}

// Check 19: an operator's update pause stops the wave, on a server that
// has not converged too, and the evidence names the pause.
func TestAnUpdatePauseIsAHardStop(t *testing.T) {
	g := newGate(t)
	now := time.Date(2026, 7, 21, 10, 0, 0, 0, time.UTC)
	running := DeploymentRunning
	partition := uint64(2)
	image := "kura:0.7"
	v, err := g.Tick(TickInput{Now: now, WaveStartedAt: now, Attempt: 1, Servers: []Server{{
		ID: "eu-1", Deployment: &running, Status: StatusActive,
		Health: &Health{UpdatePaused: &UpdatePaused{Strategy: "Partition", Partition: &partition,
			TemplateImage: &image, HeldPods: []string{"eu-1-0", "eu-1-1"}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if v.Verdict != HardStop || v.Signal == nil || *v.Signal != "update_paused" {
		t.Fatalf("%+v", v)
	}
	e := v.Evidence[0]
	if e.UpdatePaused == nil || *e.UpdatePaused.Partition != 2 || len(e.UpdatePaused.HeldPods) != 2 ||
		e.Detail == nil || *e.Detail != "Partition pause, partition 2, template image kura:0.7, holding eu-1-0, eu-1-1" {
		t.Fatalf("%+v", e)
	}
}

// The drain rule: an outbox above its band starts a run (no hold); it
// fails once it has not fallen for BacklogDrainWindowSeconds, naming the
// run; a window of 0 is the band alone.
func TestTheDrainWindowDecidesTheOutbox(t *testing.T) {
	start := time.Date(2026, 7, 21, 10, 0, 0, 0, time.UTC)
	u := func(v uint64) *uint64 { return &v }
	b := func(v bool) *bool { return &v }
	p := func(v uint8) *uint8 { return &v }
	eligible := true
	health := func(at time.Time, outbox uint64) *Health {
		three := uint32(3)
		return &Health{SampledAt: &at, ExpectedPods: &three, SampledPods: &three, Ready: b(true),
			Serving: b(true), RingConsistent: b(true), BootstrapInflightPeers: u(0),
			BackfillDegraded: b(false), BackfillBudgetExhaustedPeers: u(0), OutboxMessages: u(outbox),
			FdTimeoutCount: u(0), PeerConnectionFailures: u(0), MemoryPressureState: p(0)}
	}
	succeeded := DeploymentSucceeded
	tick := func(g *Gate, seconds int) Verdict {
		now := start.Add(time.Duration(seconds) * time.Second)
		v, err := g.Tick(TickInput{Now: now, WaveStartedAt: start, Attempt: 1, Servers: []Server{{
			ID: "eu-1", Converged: true, Deployment: &succeeded, Status: StatusActive,
			Baseline: &Baseline{CapturedAt: start.Add(-10 * time.Second), SoakEligible: &eligible,
				Counters: &Counters{OutboxMessages: u(100), FdTimeoutCount: u(0), PeerConnectionFailures: u(0)}},
			Health: health(now.Add(-5*time.Second), 400),
		}}})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	config := DefaultConfig()
	config.SoakSeconds = []uint64{3600}
	g, err := New(config)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if v := tick(g, 60); *v.Signal != "soaking" {
		t.Fatalf("the run starts: %+v", v)
	}
	if v := tick(g, 959); *v.Signal != "soaking" {
		t.Fatalf("one second before the window: %+v", v)
	}
	v := tick(g, 960)
	if *v.Signal != "outbox_regressed" || v.Evidence[0].Run == nil || v.Evidence[0].Run.Level != 400 ||
		!v.Evidence[0].Run.Since.Equal(start.Add(60*time.Second)) {
		t.Fatalf("at the window: %+v", v)
	}
	config.BacklogDrainWindowSeconds = 0
	g0, err := New(config)
	if err != nil {
		t.Fatal(err)
	}
	defer g0.Close()
	if v := tick(g0, 60); *v.Signal != "outbox_regressed" || v.Evidence[0].Run != nil {
		t.Fatalf("window 0: %+v", v)
	}
}

func TestASuspendedInstanceIsSuspended(t *testing.T) {
	now := time.Date(2026, 7, 21, 10, 0, 0, 0, time.UTC)
	gate, err := JudgeInstance(InstanceInput{Instance: "ns/kura", SpecImage: "kura:2", Now: now,
		Current: json.RawMessage(`{"schemaVersion": 1, "observedAt": "2026-07-21T10:00:00Z",
			"observedGeneration": 4, "expectedPods": 0, "sampledPods": 0, "ready": false,
			"serving": false, "writerLockOwned": false, "initialDiscoveryCompleted": false,
			"generationConsistent": false, "ringConsistent": false, "ringMembers": 0,
			"backfillInitialCycle": "", "backfillDegraded": false, "fdTimeoutCount": 7,
			"memoryPressureState": 0, "inflightRequests": 0, "counterResets": 0,
			"suspended": true}`)})
	if err != nil {
		t.Fatal(err)
	}
	if gate.Verdict != "suspended" || gate.Signal == nil || *gate.Signal != "instance_suspended" {
		t.Fatalf("%+v", gate)
	}
}
