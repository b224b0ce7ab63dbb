#!/usr/bin/env bash
# The gate from other languages (README, "Use the gate from your
# orchestrator"; docs/gate-abi.md):
#   1. the C header is what cbindgen makes of gate/ffi (drift fails)
#   2. one cargo build: kura-gate (replay), kura-gate-ffi (static and shared
#      library, the timeline generator) and the Elixir NIF
#   3. 200 generated timelines for the identity tests; the C entry points
#      own tests (testdata/gate-restore cases, freed and bogus handles)
#   4. Go: go vet, go test -race (identity with `kura-gate replay`, hostile
#      input, RSS over 100,000 ticks, the README example)
#   5. Elixir: mix test (the same, and the README doctest)
# Installs what it needs when missing and caches it under ~/.cache:
# Erlang/OTP 25 + Elixir 1.14 from Debian (apt, .debs kept in
# ~/.cache/kura-apt), cbindgen (cargo install, ~/.cache/kura-tools/cbindgen).
#
#   scripts/bindings-check.sh                 # check
#   scripts/bindings-check.sh --write-header  # regenerate the header
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
target=${CARGO_TARGET_DIR:-$root/target}
export CARGO_TARGET_DIR=$target
cbindgen_version=0.29.4
cbindgen_root=$HOME/.cache/kura-tools/cbindgen-$cbindgen_version
cbindgen=$cbindgen_root/bin/cbindgen
header=gate/ffi/include/kura_gate.h
work=$(mktemp -d "${TMPDIR:-/tmp}/kura-bindings.XXXXXX")
trap 'rm -rf "$work"' EXIT
t0=$(date +%s) t_part=$t0 part_name='' timings=()
part() {
  local now; now=$(date +%s)
  [ -z "$part_name" ] || timings+=("$(printf '%-44s %4ss' "$part_name" $((now - t_part)))")
  part_name=$1 t_part=$now
  echo "[bindings +$((now - t0))s] $1"
}

part "tools: cbindgen $cbindgen_version, Erlang/OTP and Elixir"
if [ ! -x "$cbindgen" ]; then
  cargo install --quiet --locked --version "$cbindgen_version" --root "$cbindgen_root" cbindgen
fi
if ! command -v elixir >/dev/null || ! command -v erl >/dev/null || [ ! -e /usr/lib/erlang/usr/include/erl_nif.h ]; then
  mkdir -p "$HOME/.cache/kura-apt/archives/partial"
  apt-get update -qq
  apt-get install -y -qq -o Dir::Cache::archives="$HOME/.cache/kura-apt/archives" elixir erlang-dev >/dev/null
fi

part "header: $header is current (cbindgen)"
"$cbindgen" --quiet --config gate/ffi/cbindgen.toml --crate kura-gate-ffi --output "$work/kura_gate.h" gate/ffi
if [ "${1:-}" = --write-header ]; then
  cp "$work/kura_gate.h" "$header"
  echo "wrote $header"
elif ! diff -u "$header" "$work/kura_gate.h"; then
  echo "$header is out of date: run scripts/bindings-check.sh --write-header" >&2
  exit 1
fi

# The dev profile: it shares its dependencies with `cargo test --workspace`
# (built just before in CI), and the identity and hostile tests do not need
# speed; the benchmarks (benches/PERFORMANCE.md) build release themselves.
part "build: kura-gate, kura-gate-ffi, kura-gate-nif (once)"
cargo build --locked --quiet -p kura-gate -p kura-gate-ffi -p kura-gate-nif --lib --bins --examples
mkdir -p bindings/go/lib
cp "$target/debug/libkura_gate_ffi.a" bindings/go/lib/
export KURA_GATE_BIN=$target/debug/kura-gate
export KURA_GATE_TIMELINES=$work/timelines
"$target/debug/examples/timelines" "$KURA_GATE_TIMELINES" 200 "${KURA_GATE_TIMELINE_SEED:-21}"

part "C ABI: cargo test -p kura-gate-ffi (restored states, handle misuse)"
cargo test --locked --quiet -p kura-gate-ffi

part "Go: go vet, go test -race"
(
  cd bindings/go
  test -z "$(gofmt -l .)" || { gofmt -l . >&2; echo "gofmt: files above need formatting" >&2; exit 1; }
  go vet ./...
  go test -race -count=1 -v ./... 2>&1 | grep -E '^(--- |ok |FAIL|PASS)|_test\.go:[0-9]+:'
)

part "Elixir: mix test"
(
  cd bindings/elixir
  export MIX_ENV=test
  mix format --check-formatted
  mix compile --warnings-as-errors
  mix test
)

part "done"
printf '%s\n' "bindings timings:" "${timings[@]/#/  }"
