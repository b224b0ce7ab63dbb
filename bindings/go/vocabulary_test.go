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
	for _, s := range []Signal{"soaking", "not_converged", "memory_pressure_critical", "wave_deadline_exceeded"} {
		if !slices.Contains(signals, s) {
			t.Errorf("signal %s missing from %v", s, signals)
		}
	}
	c := DefaultConfig()
	if !reflect.DeepEqual(c.SoakSeconds, []uint64{900, 300}) || c.WaveDeadlineSeconds != 3600 {
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
