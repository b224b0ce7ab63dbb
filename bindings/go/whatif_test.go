package kuragate

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// whatIfCandidates are the candidate configurations every document is
// judged against: the looser outbox band of testdata/timeline, a shorter
// soak with a wider fd band, and the defaults.
func whatIfCandidates(t *testing.T) [][]byte {
	t.Helper()
	looser, err := os.ReadFile("../../testdata/timeline/looser-outbox.gate.json")
	if err != nil {
		t.Fatal(err)
	}
	return [][]byte{looser, []byte(`{"soakSeconds": [60], "fdTimeoutBand": 2}`), []byte(`{}`)}
}

// whatIfDocuments: the scenarios, the exported timelines of
// testdata/timeline and the first 40 generated timelines.
func whatIfDocuments(t *testing.T) []string {
	t.Helper()
	exported, err := filepath.Glob("../../testdata/timeline/*.json")
	if err != nil {
		t.Fatal(err)
	}
	var docs []string
	generated := 0
	for _, d := range documents(t) {
		if strings.Contains(d, "testdata/gate") {
			docs = append(docs, d)
		} else if generated < 40 {
			docs = append(docs, d)
			generated++
		}
	}
	for _, e := range exported {
		if !strings.HasSuffix(e, ".gate.json") {
			docs = append(docs, e)
		}
	}
	return docs
}

// whatIfReplay is `kura-gate replay --gate-config CANDIDATE --diff
// [--agent-view] PATH` as the binding's document: its lines but the last
// are the differences, the last is the summary. ok is false when it
// refused the input (exit 2).
func whatIfReplay(t *testing.T, path, candidate string, agentView bool) (any, bool) {
	t.Helper()
	args := []string{"replay", "--gate-config", candidate, "--diff"}
	if agentView {
		args = append(args, "--agent-view")
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(os.Getenv("KURA_GATE_BIN"), append(args, path)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if exit, ok := err.(*exec.ExitError); ok && exit.ExitCode() == 2 {
		return nil, false
	}
	if exit, ok := err.(*exec.ExitError); err != nil && !(ok && exit.ExitCode() == 1) {
		t.Fatalf("%s: kura-gate replay --diff: %v %s", path, err, stderr.String())
	}
	differences := []any{}
	var summary any
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	for i, line := range lines {
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("%s: line %d: %v", path, i, err)
		}
		if i == len(lines)-1 {
			summary = v["summary"]
		} else {
			differences = append(differences, v)
		}
	}
	return map[string]any{"differences": differences, "summary": summary}, true
}

// The what-if through the binding is exactly `kura-gate replay --diff`'s,
// in both views, for every document and candidate; what replay refuses,
// the binding refuses.
func TestWhatIfIsTheReplayDiff(t *testing.T) {
	if os.Getenv("KURA_GATE_BIN") == "" {
		t.Fatal("KURA_GATE_BIN is not set: run scripts/bindings-check.sh")
	}
	dir := t.TempDir()
	compared, refused, differing := 0, 0, 0
	for c, candidate := range whatIfCandidates(t) {
		candidatePath := filepath.Join(dir, "candidate.json")
		if err := os.WriteFile(candidatePath, candidate, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, path := range whatIfDocuments(t) {
			document, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, agentView := range []bool{false, true} {
				want, ok := whatIfReplay(t, path, candidatePath, agentView)
				got, err := WhatIfJSON(document, candidate, agentView)
				if !ok {
					if err == nil {
						t.Fatalf("%s: replay refused it, the binding answered %s", path, got)
					}
					refused++
					continue
				}
				if err != nil {
					t.Fatalf("%s (candidate %d, agent view %v): %v", path, c, agentView, err)
				}
				if g := parsed(t, got); !reflect.DeepEqual(g, want) {
					t.Fatalf("%s (candidate %d, agent view %v):\n binding %s\n replay  %v", path, c, agentView, got, want)
				}
				if n := len(want.(map[string]any)["differences"].([]any)); n > 0 {
					differing++
				}
				compared++
			}
		}
	}
	if differing == 0 {
		t.Fatal("no what-if differed: the comparison proves nothing")
	}
	t.Logf("%d what-ifs identical (%d with differences), %d refused by both", compared, differing, refused)
}

// A refused candidate is an invalid config naming the key.
func TestWhatIfRefusesABadCandidate(t *testing.T) {
	doc, err := os.ReadFile("../../testdata/timeline/holds.json")
	if err != nil {
		t.Fatal(err)
	}
	_, err = WhatIfJSON(doc, []byte(`{"outboxBandPercent": 5000}`), false)
	var e *Error
	if err == nil || !asError(err, &e) || e.Code != "invalid_config" || e.Field == nil || *e.Field != "config.outboxBandPercent" {
		t.Fatalf("got %v", err)
	}
}
