#!/usr/bin/env bash
# One gate tick at 100 and 1,000 servers: native and JSON alone (criterion),
# through Go and through Elixir, in ROUNDS interleaved rounds (default 3) so
# a busy machine hits every row alike; report the best of the rounds
# (benches/PERFORMANCE.md, "The gate from Go and Elixir"). Release builds.
#   benches/bindings-bench.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
rounds=${1:-3}
target=${CARGO_TARGET_DIR:-$root/target}
export CARGO_TARGET_DIR=$target
docs=$(mktemp -d "${TMPDIR:-/tmp}/kura-gate-bench.XXXXXX")
trap 'rm -rf "$docs"' EXIT
cargo build --locked --quiet --release -p kura-gate-ffi -p kura-gate-nif -p kura-benches --bin gate-tick-docs
"$target/release/gate-tick-docs" "$docs" >/dev/null
mkdir -p bindings/go/lib
cp "$target/release/libkura_gate_ffi.a" bindings/go/lib/
for round in $(seq "$rounds"); do
  echo "== round $round ($(uptime | sed 's/.*load/load/'))"
  cargo bench --locked --quiet -p kura-benches --bench gate_ffi -- --warm-up-time 1 --measurement-time 3 2>/dev/null |
    grep -E '^gate_ffi|time:' | paste - - | awk '{print "criterion", $1, $5, $6}'
  (cd bindings/go && KURA_GATE_BENCH_DOCS=$docs go test -run '^$' -bench . -benchtime 2s -count 1 . |
    awk '/^Benchmark/ {printf "go %s %.3f ms\n", $1, $3 / 1e6}')
  (cd bindings/elixir && KURA_GATE_NIF_PROFILE=release KURA_GATE_BENCH_DOCS=$docs MIX_ENV=bench \
    mix run bench/tick_bench.exs | sed 's/^/elixir /')
done
# The Go tests expect the debug library next time scripts/bindings-check.sh runs; it copies its own.
