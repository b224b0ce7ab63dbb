package kuragate

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

func rssKiB(t *testing.T) int {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			return kib
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// 100,000 ticks, errors, state exports and gate lifetimes in a loop keep
// the process's RSS flat: every buffer and handle is freed. The figures are
// logged (go test -v -run RSS).
func TestRSSStaysFlatOver100000TicksAndErrors(t *testing.T) {
	const rounds = 100_000
	g := newGate(t)
	bad := []byte(strings.Replace(goodTick, `"ready": true`, `"ready": "yes"`, 1))
	var samples []int
	for i := 1; i <= rounds; i++ {
		if _, err := g.TickJSON([]byte(goodTick)); err != nil {
			t.Fatal(err)
		}
		if _, err := g.TickJSON(bad); err == nil {
			t.Fatal("bad tick accepted")
		}
		if i%10 == 0 {
			state, err := g.State()
			if err != nil {
				t.Fatal(err)
			}
			r, err := RestoreJSON([]byte(`{"soakSeconds": [60]}`), state)
			if err != nil {
				t.Fatal(err)
			}
			r.Close()
		}
		if i%10_000 == 0 {
			runtime.GC()
			samples = append(samples, rssKiB(t))
		}
	}
	t.Logf("RSS (KiB) after every 10,000 rounds of tick + refused tick (+ state, restore, close every 10th): %v", samples)
	// Warm-up is the first 10,000; after that the growth must be noise.
	if growth := samples[len(samples)-1] - samples[0]; growth > 8*1024 {
		t.Fatalf("RSS grew by %d KiB from round 10,000 to %d: %v", growth, rounds, samples)
	}
}
