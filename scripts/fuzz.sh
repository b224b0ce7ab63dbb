#!/usr/bin/env bash
# Fuzzing: the cargo-fuzz targets in fuzz/ (libFuzzer, nightly toolchain),
# each run for a bounded time from a seed corpus made of testdata/. Fails on
# a crash (a panic, a broken invariant, a timeout, too much memory) and
# prints the executions per target.
#
#   scripts/fuzz.sh [TARGET...]          # default: every target
#
# Targets (fuzz/fuzz_targets/): node_report (the node-report parser),
# strict_json (the strict reader against serde_json), replay (kura-gate
# replay documents, so the gate over arbitrary tick sequences: every
# non-pass verdict names a signal), aggregate_document (kura-agent aggregate
# documents: published counters never decrease, totals stay <= 2^63-1).
#
# - KURA_FUZZ_SECONDS per target (default 15: about 60 s for the four).
# - cargo-fuzz $fuzz_version is installed once into ~/.cache/kura-tools/cargo;
#   the targets build into ~/.cache/kura-fuzz-target (dependencies compiled
#   once per machine), without a sanitizer: the code under test is safe Rust,
#   and an ASan build of kube and ring would cost minutes in every cold run.
# - The nightly toolchain must be installed (rustup toolchain list); this
#   script does not download one.
# - A crash's input is kept in $KURA_FUZZ_ARTIFACTS (default a temporary
#   directory that is kept on failure): add it to testdata/ as a fixture.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
fuzz_version=0.13.1
seconds=${KURA_FUZZ_SECONDS:-15}
cache=${KURA_TOOLS_CACHE:-$HOME/.cache/kura-tools}
log() { printf 'fuzz: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

rustup toolchain list | grep -q '^nightly' \
  || die "the nightly toolchain is not installed (rustup toolchain install nightly)"

mkdir -p "$cache"
fuzz=$cache/cargo/bin/cargo-fuzz
{
  flock 9
  if ! { [ -x "$fuzz" ] && "$fuzz" --version 2>/dev/null | grep -q " $fuzz_version\$"; }; then
    log "installing cargo-fuzz $fuzz_version from crates.io into $cache/cargo (once)"
    CARGO_TARGET_DIR=$cache/cargo-fuzz-build cargo install --locked --quiet \
      "cargo-fuzz@$fuzz_version" --root "$cache/cargo"
    rm -rf "$cache/cargo-fuzz-build"
  fi
} 9>"$cache/.cargo-fuzz.lock"

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(node_report strict_json replay aggregate_document)

work=$(mktemp -d)
artifacts=${KURA_FUZZ_ARTIFACTS:-$work/artifacts}
mkdir -p "$artifacts"
keep=0
trap '[ $keep = 1 ] || rm -rf "$work"' EXIT

export CARGO_TARGET_DIR=${KURA_FUZZ_TARGET_DIR:-$HOME/.cache/kura-fuzz-target}
build_start=$(date +%s)
log "building ${targets[*]}"
PATH="$cache/cargo/bin:$PATH" cargo +nightly fuzz build --sanitizer none --fuzz-dir fuzz "${targets[@]:0:1}" >/dev/null
for t in "${targets[@]:1}"; do
  PATH="$cache/cargo/bin:$PATH" cargo +nightly fuzz build --sanitizer none --fuzz-dir fuzz "$t" >/dev/null
done
log "built in $(( $(date +%s) - build_start )) s"

seeds() { # TARGET -> seed files
  case $1 in
    node_report) ls testdata/reports/*.json ;;
    strict_json) ls testdata/reports/*.json testdata/gate/*.json testdata/aggregate/*.json ;;
    replay) ls testdata/gate/*.json ;;
    aggregate_document) ls testdata/aggregate/*.json testdata/aggregate/invalid/*.json 2>/dev/null ;;
    *) die "unknown target $1" ;;
  esac
}

failed=()
summary=()
for t in "${targets[@]}"; do
  corpus=$work/corpus/$t
  mkdir -p "$corpus"
  # Seeds under 64 KiB (libFuzzer's -max_len below).
  seeds "$t" | while read -r f; do
    [ "$(stat -c %s "$f")" -le 65536 ] && cp "$f" "$corpus/$(basename "$f")"
  done
  out=$work/$t.log
  if PATH="$cache/cargo/bin:$PATH" cargo +nightly fuzz run --sanitizer none --fuzz-dir fuzz "$t" "$corpus" -- \
      -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$artifacts/$t-" -print_final_stats=1 >"$out" 2>&1; then
    result=ok
  else
    result=CRASH
    failed+=("$t")
  fi
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$out" | grep -oE '[0-9]+$' | tail -n1)
  summary+=("$(printf '%-20s %-5s %10s executions in %ss, corpus %s inputs' "$t" "$result" "${execs:-?}" "$seconds" "$(ls "$corpus" | wc -l)")")
  if [ "$result" = CRASH ]; then
    grep -E 'panicked|ERROR|SUMMARY|Test unit written' "$out" | head -n 20 >&2 || true
  fi
done
printf 'fuzz: %s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  keep=1
  die "crashes in ${failed[*]}; inputs in $artifacts (add each to testdata/ as a fixture)"
fi
echo "fuzz: ${#targets[@]} passed, 0 failed"
