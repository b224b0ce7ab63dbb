package kuragate

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"testing"
	"time"
)

// restoreCases is testdata/gate-restore/cases.json: stored states met by
// one tick, the same cases the C ABI (gate/ffi/tests/abi.rs) and Elixir
// tests run.
type restoreCases struct {
	Description string          `json:"description"`
	Config      json.RawMessage `json:"config"`
	Cases       []struct {
		Name   string          `json:"name"`
		State  json.RawMessage `json:"state"`
		Tick   json.RawMessage `json:"tick"`
		Expect map[string]any  `json:"expect"`
	} `json:"cases"`
}

func TestRestoredStatesAreValidatedAgainstTheTickTheyMeet(t *testing.T) {
	text, err := os.ReadFile("../../testdata/gate-restore/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc restoreCases
	if err := decodeStrict(text, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Cases) < 10 {
		t.Fatalf("only %d cases", len(doc.Cases))
	}
	wrong := 0
	for _, c := range doc.Cases {
		var got map[string]any
		g, err := RestoreJSON(doc.Config, c.State)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Status != 3 {
				t.Fatalf("%s: %v", c.Name, err)
			}
			got = map[string]any{"code": string(e.Code), "field": nil}
			if e.Field != nil {
				got["field"] = *e.Field
			}
		} else {
			out, err := g.TickJSON(c.Tick)
			g.Close()
			if err != nil {
				t.Fatalf("%s: %v", c.Name, err)
			}
			var verdict any
			if err := json.Unmarshal(out, &verdict); err != nil {
				t.Fatal(err)
			}
			got = map[string]any{"verdict": verdict}
		}
		if !reflect.DeepEqual(got, c.Expect) {
			wrong++
			t.Errorf("%s:\n got  %v\n want %v", c.Name, got, c.Expect)
		}
	}
	t.Logf("%d restored states: %d as expected", len(doc.Cases), len(doc.Cases)-wrong)
}

// A required time left zero in a typed struct is refused like the same
// document without it (the gate's own refusal), never judged as year 1.
func TestMissingRequiredTimesAreRefusedOnEveryPath(t *testing.T) {
	now := time.Date(2026, 7, 21, 10, 0, 0, 0, time.UTC)
	typed := func(in TickInput) error {
		g := newGate(t)
		_, err := g.Tick(in)
		return err
	}
	fromJSON := func(doc string) error {
		g := newGate(t)
		_, err := g.TickJSON([]byte(doc))
		return err
	}
	empty := []Server{}
	cases := []struct {
		name  string
		typed error
		json  error
		field string
	}{
		{"now", typed(TickInput{WaveStartedAt: now, Attempt: 1, Servers: empty}),
			fromJSON(`{"wave": 0, "waveStartedAt": "2026-07-21T10:00:00Z", "attempt": 1, "servers": []}`), "now"},
		{"waveStartedAt", typed(TickInput{Now: now, Attempt: 1, Servers: empty}),
			fromJSON(`{"now": "2026-07-21T10:00:00Z", "wave": 0, "attempt": 1, "servers": []}`), "waveStartedAt"},
		{"baseline capturedAt", typed(TickInput{Now: now, WaveStartedAt: now, Attempt: 1, Servers: []Server{
			{ID: "s1", Converged: true, Status: StatusActive, Baseline: &Baseline{}}}}),
			fromJSON(`{"now": "2026-07-21T10:00:00Z", "wave": 0, "waveStartedAt": "2026-07-21T10:00:00Z", "attempt": 1,
			 "servers": [{"id": "s1", "wave": 0, "converged": true, "status": "active", "baseline": {}}]}`),
			"baseline.capturedAt"},
	}
	for _, c := range cases {
		for form, err := range map[string]error{"typed": c.typed, "json": c.json} {
			e := refusal(t, c.name+" ("+form+")", err, InvalidInput, "missing")
			if e.Field == nil || *e.Field != c.field {
				t.Fatalf("%s (%s): field %v, want %s: %s", c.name, form, e.Field, c.field, e.Message)
			}
		}
	}
	g := newGate(t)
	_, err := g.CaptureBaseline(time.Time{}, nil)
	refusal(t, "CaptureBaseline without capturedAt", err, InvalidInput, "capturedAt", "missing")
	_, err = JudgeInstance(InstanceInput{Instance: "ns/a", SpecImage: "kura:2"})
	refusal(t, "JudgeInstance without now", err, InvalidInput, "missing field `now`")
	// With the times set, the same inputs are judged.
	if _, err := g.Tick(TickInput{Now: now, WaveStartedAt: now, Attempt: 1, Servers: empty}); err != nil {
		t.Fatal(err)
	}
	if _, err := JudgeInstance(InstanceInput{Instance: "ns/a", SpecImage: "kura:2", Now: now}); err != nil {
		t.Fatal(err)
	}
}
