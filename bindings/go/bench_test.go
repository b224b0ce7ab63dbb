package kuragate

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Benchmarks of one tick at 100 and 1,000 servers (benches/PERFORMANCE.md,
// "The gate from Go and Elixir"). The documents come from
// `cargo run --release -p kura-benches --bin gate-tick-docs -- DIR`:
//
//	KURA_GATE_BENCH_DOCS=DIR go test -run '^$' -bench . -benchtime 2s
//
// Raw: document bytes in, verdict bytes out (the C ABI call).
// Typed: TickInput in, Verdict out (adds Go's JSON encode and decode).
// GoJSON: Go's JSON encode of the TickInput and decode of the Verdict alone.
func BenchmarkTick(b *testing.B) {
	dir := os.Getenv("KURA_GATE_BENCH_DOCS")
	if dir == "" {
		b.Skip("KURA_GATE_BENCH_DOCS is not set")
	}
	for _, servers := range []int{100, 1000} {
		doc, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("tick-%d.json", servers)))
		if err != nil {
			b.Fatal(err)
		}
		var input TickInput
		if err := decodeStrict(doc, &input); err != nil {
			b.Fatal(err)
		}
		g, err := NewJSON([]byte("{}"))
		if err != nil {
			b.Fatal(err)
		}
		out, err := g.TickJSON(doc)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("servers=%d/raw", servers), func(b *testing.B) {
			for b.Loop() {
				if _, err := g.TickJSON(doc); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("servers=%d/raw_one_thread", servers), func(b *testing.B) {
			// The same call from one OS thread: the Rust allocations stay
			// in one malloc arena, as in criterion's loop.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for b.Loop() {
				if _, err := g.TickJSON(doc); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("servers=%d/typed", servers), func(b *testing.B) {
			for b.Loop() {
				if _, err := g.Tick(input); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("servers=%d/go_json_only", servers), func(b *testing.B) {
			for b.Loop() {
				if _, err := json.Marshal(input); err != nil {
					b.Fatal(err)
				}
				var v Verdict
				if err := decodeStrict(out, &v); err != nil {
					b.Fatal(err)
				}
			}
		})
		g.Close()
	}
}

// BenchmarkCrossing is the binding's own cost per call, with almost no
// gate or JSON work: cgo in and out, the gate's lock, one small buffer
// allocated, copied into Go and freed.
func BenchmarkCrossing(b *testing.B) {
	g, err := NewJSON([]byte("{}"))
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	for b.Loop() {
		if _, err := g.State(); err != nil {
			b.Fatal(err)
		}
	}
}
