package kuragate

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// replayDoc is a replay document split into its parts.
type replayDoc struct {
	Config json.RawMessage   `json:"config"`
	Ticks  []json.RawMessage `json:"ticks"`
}

// replayRun is what `kura-gate replay` answered for one document.
type replayRun struct {
	lines []any  // verdicts without "tick", one per tick
	err   string // the one-line error, when it exited 2
}

// documents lists the replay scenarios in testdata/gate and the generated
// timelines (KURA_GATE_TIMELINES, written by the timelines example).
func documents(t *testing.T) []string {
	t.Helper()
	scenarios, err := filepath.Glob("../../testdata/gate/*.json")
	if err != nil {
		t.Fatal(err)
	}
	var docs []string
	for _, s := range scenarios {
		if !strings.HasSuffix(s, ".expected.json") {
			docs = append(docs, s)
		}
	}
	if len(docs) < 20 {
		t.Fatalf("only %d scenarios in testdata/gate", len(docs))
	}
	dir := os.Getenv("KURA_GATE_TIMELINES")
	if dir == "" {
		t.Fatal("KURA_GATE_TIMELINES is not set: run scripts/bindings-check.sh")
	}
	timelines, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(timelines) == 0 {
		t.Fatalf("no timelines in %s: %v", dir, err)
	}
	sort.Strings(timelines)
	return append(docs, timelines...)
}

func replay(t *testing.T, path string) replayRun {
	t.Helper()
	bin := os.Getenv("KURA_GATE_BIN")
	if bin == "" {
		t.Fatal("KURA_GATE_BIN is not set: run scripts/bindings-check.sh")
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "replay", path)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if exit, ok := err.(*exec.ExitError); ok && exit.ExitCode() == 2 {
		return replayRun{err: strings.TrimSpace(stderr.String())}
	}
	if err != nil {
		t.Fatalf("%s: kura-gate replay: %v %s", path, err, stderr.String())
	}
	var run replayRun
	for i, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("%s: line %d: %v", path, i, err)
		}
		if v["tick"] != float64(i) {
			t.Fatalf("%s: line %d has tick %v", path, i, v["tick"])
		}
		delete(v, "tick")
		run.lines = append(run.lines, v)
	}
	return run
}

func load(t *testing.T, path string) replayDoc {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// A scenario may start with a byte-order mark (kura-gate replay skips
	// one; testdata/gate/byte-order-mark.json checks that); Go's decoder
	// does not.
	text = bytes.TrimPrefix(text, []byte("\xef\xbb\xbf"))
	var doc replayDoc
	if err := json.Unmarshal(text, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return doc
}

func parsed(t *testing.T, doc []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, doc)
	}
	return v
}

func configDoc(doc replayDoc) []byte {
	if len(doc.Config) == 0 {
		return []byte("null")
	}
	return doc.Config
}

var tickOfError = regexp.MustCompile(`^tick (\d+), `)

// A replay error about the document's bytes, located by line and column
// rather than by tick.
var documentLevel = regexp.MustCompile(`^line \d+ column \d+: `)

// Every scenario and timeline, tick by tick through the binding, gives
// exactly the verdicts of `kura-gate replay` (parsed JSON, evidence order
// included); a document replay refuses is refused by the binding at the
// same tick, naming the same field.
func TestBindingVerdictsAreTheReplayVerdicts(t *testing.T) {
	ticks, refused := 0, 0
	docs := documents(t)
	for _, path := range docs {
		want := replay(t, path)
		if documentLevel.MatchString(want.err) {
			// replay refused the file's bytes before any tick (a repeated
			// key, say): there is no tick to compare, and Go's decoder
			// reads such a file differently; hostile_test checks that the
			// binding refuses such bytes with their line and column.
			refused++
			continue
		}
		doc := load(t, path)
		gate, err := NewJSON(configDoc(doc))
		if want.err != "" && err != nil {
			var e *Error
			if !asError(err, &e) || e.Field == nil || !strings.Contains(want.err, "field "+*e.Field) {
				t.Fatalf("%s: binding refused the config with %v, replay with %q", path, err, want.err)
			}
			refused++
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		badTick := -1
		if m := tickOfError.FindStringSubmatch(want.err); m != nil {
			badTick, _ = strconv.Atoi(m[1])
		} else if want.err != "" {
			t.Fatalf("%s: replay error names no tick: %q", path, want.err)
		}
		for i, tick := range doc.Ticks {
			out, err := gate.TickJSON(tick)
			if i == badTick {
				var e *Error
				if err == nil || !asError(err, &e) || e.Field == nil || !strings.Contains(want.err, "field "+*e.Field) {
					t.Fatalf("%s: tick %d: binding gave %v, replay refused with %q", path, i, err, want.err)
				}
				refused++
				break
			}
			if err != nil {
				t.Fatalf("%s: tick %d: %v", path, i, err)
			}
			if want.err != "" {
				continue // replay refused the whole document: nothing to compare before the bad tick
			}
			if got := parsed(t, out); !reflect.DeepEqual(got, want.lines[i]) {
				t.Fatalf("%s: tick %d:\n binding %s\n replay  %v", path, i, out, want.lines[i])
			}
			ticks++
		}
		gate.Close()
	}
	t.Logf("%d documents, %d ticks identical, %d refusals at the same tick and field", len(docs), ticks, refused)
}

// The typed path (Go structs in, Verdict out) gives the same verdicts: the
// structs' JSON tags are the contract's, strictly decoded both ways.
func TestTypedStructsRoundTripTheContract(t *testing.T) {
	ticks := 0
	for _, path := range documents(t) {
		want := replay(t, path)
		if want.err != "" {
			continue
		}
		doc := load(t, path)
		config := DefaultConfig()
		if len(doc.Config) > 0 && string(doc.Config) != "null" {
			if err := decodeStrict(doc.Config, &config); err != nil {
				t.Fatalf("%s: config: %v", path, err)
			}
		}
		gate, err := New(config)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for i, raw := range doc.Ticks {
			var in TickInput
			if err := decodeStrict(raw, &in); err != nil {
				t.Fatalf("%s: tick %d into TickInput: %v", path, i, err)
			}
			verdict, err := gate.Tick(in)
			if err != nil {
				t.Fatalf("%s: tick %d: %v", path, i, err)
			}
			back, err := json.Marshal(verdict)
			if err != nil {
				t.Fatal(err)
			}
			if got := parsed(t, back); !reflect.DeepEqual(got, want.lines[i]) {
				t.Fatalf("%s: tick %d:\n typed  %s\n replay %v", path, i, back, want.lines[i])
			}
			ticks++
		}
		gate.Close()
	}
	t.Logf("%d ticks through typed structs identical", ticks)
}

// Dumping the state after tick k, restoring it into a new gate and going
// on gives the verdicts of the uninterrupted run: at every k for the
// scenarios, at a third and two thirds of every timeline.
func TestDumpAndRestoreContinuesExactly(t *testing.T) {
	restores := 0
	for _, path := range documents(t) {
		want := replay(t, path)
		if want.err != "" {
			continue
		}
		doc := load(t, path)
		n := len(doc.Ticks)
		cuts := []int{n / 3, 2 * n / 3}
		if strings.Contains(path, "testdata/gate") {
			cuts = cuts[:0]
			for k := 1; k < n; k++ {
				cuts = append(cuts, k)
			}
		}
		for _, k := range cuts {
			first, err := NewJSON(configDoc(doc))
			if err != nil {
				t.Fatal(err)
			}
			for _, tick := range doc.Ticks[:k] {
				if _, err := first.TickJSON(tick); err != nil {
					t.Fatalf("%s: %v", path, err)
				}
			}
			state, err := first.State()
			if err != nil {
				t.Fatal(err)
			}
			first.Close()
			second, err := RestoreJSON(configDoc(doc), state)
			if err != nil {
				t.Fatalf("%s: restore after %d: %v", path, k, err)
			}
			for i := k; i < n; i++ {
				out, err := second.TickJSON(doc.Ticks[i])
				if err != nil {
					t.Fatalf("%s: tick %d after restore at %d: %v", path, i, k, err)
				}
				if got := parsed(t, out); !reflect.DeepEqual(got, want.lines[i]) {
					t.Fatalf("%s: restored at %d, tick %d:\n binding %s\n replay  %v", path, k, i, out, want.lines[i])
				}
			}
			second.Close()
			restores++
		}
	}
	t.Logf("%d restores continued identically", restores)
}
