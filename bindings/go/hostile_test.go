package kuragate

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

const goodTick = `{"now": "2026-07-21T10:00:00Z", "wave": 0,
 "waveStartedAt": "2026-07-21T10:00:00Z", "attempt": 1, "servers": [
 {"id": "s1", "wave": 0, "converged": true, "deployment": "succeeded", "status": "active",
  "baseline": {"capturedAt": "2026-07-21T09:59:50Z", "health": null},
  "health": {"sampledAt": "2026-07-21T09:59:55Z", "expectedPods": 3, "sampledPods": 3,
   "ready": true, "serving": true, "ringConsistent": true}}]}`

func newGate(t testing.TB) *Gate {
	t.Helper()
	g, err := NewJSON([]byte(`{"soakSeconds": [60]}`))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// refusal asserts err is a gate Error with code and a message containing
// every part.
func refusal(t *testing.T, name string, err error, code ErrorCode, parts ...string) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: expected a %s error, got %v", name, code, err)
	}
	if e.Code != code {
		t.Fatalf("%s: code %s, expected %s (%s)", name, e.Code, code, e.Message)
	}
	for _, p := range parts {
		if !strings.Contains(e.Message, p) {
			t.Fatalf("%s: message %q lacks %q", name, e.Message, p)
		}
	}
	return e
}

func TestHostileTicksAreLocatedErrors(t *testing.T) {
	g := newGate(t)
	big := 10 << 20
	var servers strings.Builder
	count := 0
	for ; servers.Len() < big; count++ {
		fmt.Fprintf(&servers, `{"id": "x%07d", "wave": 0, "converged": true, "status": "active"},`, count)
	}
	cases := []struct {
		name  string
		doc   []byte
		code  ErrorCode
		parts []string
		line  bool
	}{
		{"malformed", []byte("{\n \"now\": ,}"), InvalidInput, []string{"line 2 column 9"}, true},
		{"empty", nil, InvalidInput, []string{"EOF"}, true},
		{"truncated", []byte(goodTick[:200]), InvalidInput, []string{"EOF while parsing"}, true},
		{"deep nesting", bytes.Repeat([]byte("["), 100000), InvalidInput, []string{"input is not valid JSON: recursion limit exceeded at line 1 column 128"}, true},
		{"deep nesting in a field", []byte(strings.Replace(goodTick, `"wave": 0,`, `"wave": `+strings.Repeat("[", 5000)+`,`, 1)), InvalidInput, []string{"recursion limit"}, true},
		{"10 MiB of whitespace then garbage", append(bytes.Repeat([]byte(" "), big), '}'), InvalidInput, []string{"line 1 column 10485761"}, true},
		{"10 MiB string in a number field", []byte(strings.Replace(goodTick, `"attempt": 1`, `"attempt": "`+strings.Repeat("a", big)+`"`, 1)), InvalidInput, []string{"field attempt: expected a non-negative integer"}, false},
		{"10 MiB of servers, the last one wrong", []byte(`{"now": "2026-07-21T10:00:00Z", "wave": 0, "waveStartedAt": "2026-07-21T10:00:00Z", "attempt": 1, "servers": [` + servers.String() + `{"id": 7}]}`), InvalidInput, []string{fmt.Sprintf("field servers[%d].id: expected a string, got 7", count)}, false},
		{"over the size limit", bytes.Repeat([]byte(" "), 16<<20+1), InputTooLarge, []string{"16777217 bytes, above the limit of 16777216"}, false},
		{"wrong type", []byte(strings.Replace(goodTick, `"ready": true`, `"ready": "yes"`, 1)), InvalidInput, []string{`server "s1", field health.ready: expected a boolean, got "yes"`}, false},
		{"array for object", []byte(`[1, 2]`), InvalidInput, []string{"field (tick): expected an object"}, false},
		{"huge number", []byte(strings.Replace(goodTick, `"attempt": 1`, `"attempt": 1e400`, 1)), InvalidInput, []string{"number out of range"}, true},
		{"above u64", []byte(strings.Replace(goodTick, `"expectedPods": 3`, `"expectedPods": 18446744073709551616`, 1)), InvalidInput, []string{"field health.expectedPods"}, false},
		{"above u32", []byte(strings.Replace(goodTick, `"attempt": 1`, `"attempt": 4294967296`, 1)), InvalidInput, []string{"field attempt: 4294967296 is out of range", "the largest accepted is 4294967295"}, false},
		{"negative", []byte(strings.Replace(goodTick, `"wave": 0,`, `"wave": -1,`, 1)), InvalidInput, []string{"field wave: expected a non-negative integer, got -1"}, false},
		{"fraction", []byte(strings.Replace(goodTick, `"sampledPods": 3`, `"sampledPods": 2.5`, 1)), InvalidInput, []string{"field health.sampledPods"}, false},
		{"raw NUL byte", []byte(strings.Replace(goodTick, `"s1"`, "\"s\x001\"", 1)), InvalidInput, []string{"control character"}, true},
		{"NUL byte before the document", append([]byte{0}, goodTick...), InvalidInput, []string{"line 1 column 1"}, true},
		{"not UTF-8", []byte(strings.Replace(goodTick, `"s1"`, "\"s\xff1\"", 1)), InvalidInput, []string{"not UTF-8: invalid byte at line 3 column 11"}, true},
		{"bad time", []byte(strings.Replace(goodTick, `"now": "2026-07-21T10:00:00Z"`, `"now": "yesterday"`, 1)), InvalidInput, []string{"field now: not an RFC 3339 time"}, false},
		{"unknown field", []byte(strings.Replace(goodTick, `"wave": 0,`, `"wave": 0, "wav": 1,`, 1)), InvalidInput, []string{"field wav: unknown field"}, false},
		{"repeated key", []byte(strings.Replace(goodTick, `"wave": 0,`, `"wave": 0, "wave": 1,`, 1)), InvalidInput, []string{`key "wave" appears more than once`}, true},
		{"duplicate server", []byte(strings.Replace(goodTick, `"servers": [`, `"servers": [{"id": "s1", "wave": 0, "converged": false, "status": "active"},`, 1)), InvalidInput, []string{`server "s1", field id: appears more than once`}, false},
	}
	for _, c := range cases {
		_, err := g.TickJSON(c.doc)
		e := refusal(t, c.name, err, c.code, c.parts...)
		if c.line && (e.Line == nil || e.Column == nil) {
			t.Fatalf("%s: no line and column in %+v", c.name, e)
		}
	}
	// After all that the gate still judges, from unchanged state.
	out, err := g.TickJSON([]byte(goodTick))
	if err != nil || !strings.Contains(string(out), `"verdict":"soak"`) {
		t.Fatalf("after the refusals: %s %v", out, err)
	}
	// An escaped NUL in a server id is a valid string: judged, and echoed escaped.
	ok := strings.Replace(goodTick, `"converged": true`, `"converged": false`, 1)
	ok = strings.Replace(ok, `"s1"`, `"s\u00001"`, 1)
	out, err = g.TickJSON([]byte(ok))
	if err != nil || !strings.Contains(string(out), `"serverId":"s\u00001"`) {
		t.Fatalf("escaped NUL: %s %v", out, err)
	}
}

func TestAnAttemptGoingBackIsRefusedAndLeavesTheStateAlone(t *testing.T) {
	g := newGate(t)
	if _, err := g.TickJSON([]byte(goodTick)); err != nil {
		t.Fatal(err)
	}
	before, _ := g.State()
	_, err := g.TickJSON([]byte(strings.Replace(goodTick, `"attempt": 1`, `"attempt": 0`, 1)))
	e := refusal(t, "attempt back", err, AttemptWentBack, "field attempt: attempt 0 is lower than the attempt 1 already judged")
	if e.Field == nil || *e.Field != "attempt" || e.Status != 4 {
		t.Fatalf("%+v", e)
	}
	after, _ := g.State()
	if !bytes.Equal(before, after) {
		t.Fatalf("state changed: %s -> %s", before, after)
	}
}

func TestHostileConfigsAndStatesAreRefused(t *testing.T) {
	_, err := NewJSON([]byte(`{"soakSeconds": []}`))
	refusal(t, "empty soak", err, InvalidConfig, "field config.soakSeconds: must list at least one value")
	_, err = NewJSON([]byte(`{"soakSeconds": [60], "maxSampleAge": 5}`))
	refusal(t, "unknown key", err, InvalidConfig, "field config.maxSampleAge: unknown field")
	_, err = NewJSON([]byte(`{"soakSeconds": [-5]}`))
	refusal(t, "negative soak", err, InvalidConfig, "config.soakSeconds[0]")
	_, err = NewJSON([]byte("{\"soakSeconds\": [60\n"))
	refusal(t, "truncated config", err, InvalidConfig, "line 2 column 0")
	_, err = NewJSON(nil)
	refusal(t, "empty config", err, InvalidConfig, "EOF")

	g := newGate(t)
	if _, err := g.TickJSON([]byte(goodTick)); err != nil {
		t.Fatal(err)
	}
	state, _ := g.State()
	_, err = RestoreJSON([]byte(`{}`), []byte(`{"attempt": 1, "latchd": null, "effectiveBaselines": {}}`))
	refusal(t, "unknown state key", err, InvalidState, "unknown field `latchd`", "line 1 column")
	_, err = RestoreJSON([]byte(`{}`), state[:len(state)/2])
	refusal(t, "truncated state", err, InvalidState, "EOF while parsing")
	_, err = RestoreJSON([]byte(`{}`), []byte(`{"attempt": -1, "effectiveBaselines": {}}`))
	refusal(t, "negative attempt in state", err, InvalidState, "invalid value")
	_, err = RestoreJSON([]byte(`{"soakSeconds": "x"}`), state)
	refusal(t, "bad config on restore", err, InvalidConfig, "field config.soakSeconds")
	r, err := RestoreJSON([]byte(`{}`), state)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
}

func TestAClosedGateRefusesAndConcurrentCallersAreSerialized(t *testing.T) {
	g := newGate(t)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 8 {
				if _, err := g.TickJSON([]byte(goodTick)); err != nil {
					errs <- err
				}
				if _, err := g.State(); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	g.Close()
	g.Close()
	if _, err := g.TickJSON([]byte(goodTick)); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed gate: %v", err)
	}
	if _, err := g.State(); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed gate: %v", err)
	}
}
