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
# documents: published counters never decrease, totals stay <= 2^63-1),
# cluster_status (the /status/cluster parser: only a link's kind and
# lag_entries decide, whatever the informational keys hold, null included;
# the lag is the replica links' sum, <= 2^63-1; the lag-only read and the
# document path agree with it), gate_config (the gate-configuration reader of
# --gate-config files, JSON and YAML, and the per-instance annotation: an
# accepted configuration is valid, has no repeated key and reads the same
# through the file and the annotation).
#
# - KURA_FUZZ_SECONDS per target (default 10), KURA_FUZZ_JOBS targets at
#   once (default: the number of cores). With the rebuild of the workspace's
#   crates a fresh clone needs, the step takes about 90 s warm on 2 cores.
# - cargo-fuzz $fuzz_version is installed once into ~/.cache/kura-tools/cargo;
#   the targets build into ~/.cache/kura-fuzz-target (dependencies compiled
#   once per machine: ~18 CPU-minutes; kept under ~3.5 GB, see below), without
#   a sanitizer: the code under test is safe Rust, and an ASan build of kube
#   and ring would cost minutes more. Debug assertions and overflow checks
#   are on (cargo-fuzz's default), so an overflowing counter is a crash.
# - Each target's corpus is kept in $KURA_FUZZ_CORPUS (default
#   ~/.cache/kura-fuzz-corpus/TARGET), so every run starts from the coverage
#   the runs before it reached; the seeds from testdata/ are added every run.
#   Past 4,000 inputs it is minimised (libFuzzer's -merge=1) first.
# - fuzz/json.dict (JSON syntax, the documents' keys, int64/u64 edges) is
#   the dictionary of every target.
# - The nightly toolchain must be installed (rustup toolchain list); this
#   script does not download one.
# - A crash's input is kept in $KURA_FUZZ_ARTIFACTS (default a temporary
#   directory that is kept on failure): add it to testdata/ as a fixture.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
fuzz_version=0.13.1
seconds=${KURA_FUZZ_SECONDS:-10}
corpora=${KURA_FUZZ_CORPUS:-$HOME/.cache/kura-fuzz-corpus}
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
[ ${#targets[@]} -gt 0 ] || targets=(node_report strict_json replay aggregate_document cluster_status gate_config)

work=$(mktemp -d)
artifacts=${KURA_FUZZ_ARTIFACTS:-$work/artifacts}
mkdir -p "$artifacts"
keep=0
trap '[ $keep = 1 ] || rm -rf "$work"' EXIT

export CARGO_TARGET_DIR=${KURA_FUZZ_TARGET_DIR:-$HOME/.cache/kura-fuzz-target}
mkdir -p "$CARGO_TARGET_DIR"
exec 8>"$CARGO_TARGET_DIR/.kura-fuzz.lock"
flock 8 # one fuzz run at a time per machine: the target dir and the corpora
# Every fresh clone compiles the workspace's crates and the targets anew (a
# new path, a new hash; ~0.5 GB) and leaves the old ones behind: past 3 GB
# those go (the dependencies alone are ~1.2 GB), and if it is still past
# 3 GB, everything (the next build is cold).
size_mb() { du -sm "$CARGO_TARGET_DIR" | cut -f1; }
if [ "$(size_mb)" -gt 3072 ]; then
  log "target dir over 3 GB: removing the builds of the workspace's crates and the targets"
  ours=(-name '*kura_*' -o -name 'kura-*')
  for f in fuzz/fuzz_targets/*.rs; do ours+=(-o -name "$(basename "$f" .rs)-*"); done
  find "$CARGO_TARGET_DIR" -maxdepth 4 -path '*/release/*' \( "${ours[@]}" \) -exec rm -rf {} +
  if [ "$(size_mb)" -gt 3072 ]; then
    log "still over 3 GB: removing $CARGO_TARGET_DIR"
    find "$CARGO_TARGET_DIR" -mindepth 1 -maxdepth 1 ! -name .kura-fuzz.lock -exec rm -rf {} +
  fi
fi
build_start=$(date +%s)
log "building ${targets[*]}"
# One build for all of them (the targets share every dependency).
build_args=()
[ $# -gt 0 ] && [ ${#targets[@]} -eq 1 ] && build_args=("${targets[0]}")
PATH="$cache/cargo/bin:$PATH" cargo +nightly fuzz build --sanitizer none --fuzz-dir fuzz "${build_args[@]}" >/dev/null
log "built in $(( $(date +%s) - build_start )) s"
bin=$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release

seeds() { # TARGET -> seed files
  case $1 in
    node_report) ls testdata/reports/*.json ;;
    strict_json) ls testdata/reports/*.json testdata/gate/*.json testdata/aggregate/*.json ;;
    replay) ls testdata/gate/*.json ;;
    aggregate_document) ls testdata/aggregate/*.json testdata/aggregate/invalid/*.json 2>/dev/null ;;
    cluster_status) ls testdata/cluster/*.json ;;
    gate_config) ls testdata/gate-config/*.json testdata/gate-config/*.yaml ;;
    *) die "unknown target $1" ;;
  esac
}

fuzz_one() { # TARGET -> $work/TARGET.summary, and $work/TARGET.crash on a crash
  local t=$1 corpus=$corpora/$1 seeded=$work/seeds/$1 out=$work/$1.log result execs
  mkdir -p "$corpus" "$seeded"
  # Seeds under 64 KiB (libFuzzer's -max_len below).
  seeds "$t" | while read -r f; do
    if [ "$(stat -c %s "$f")" -le 65536 ]; then cp "$f" "$seeded/$(basename "$f")"; fi
  done
  if [ "$(find "$corpus" -type f | wc -l)" -gt 4000 ]; then
    log "$t: minimising its corpus ($(find "$corpus" -type f | wc -l) inputs)"
    rm -rf "$corpus.min" && mkdir -p "$corpus.min"
    "$bin/$t" -merge=1 -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
      "$corpus.min" "$corpus" >"$work/$t.merge.log" 2>&1 \
      || { tail -n 20 "$work/$t.merge.log" >&2; touch "$work/$t.crash"; }
    rm -rf "$corpus" && mv "$corpus.min" "$corpus"
  fi
  # New inputs go to the first directory, the kept corpus.
  if "$bin/$t" "$corpus" "$seeded" -max_total_time="$seconds" -max_len=65536 -timeout=10 \
      -rss_limit_mb=2048 -dict=fuzz/json.dict -artifact_prefix="$artifacts/$t-" \
      -print_final_stats=1 >"$out" 2>&1; then
    result=ok
  else
    result=CRASH
    touch "$work/$t.crash"
    grep -E 'panicked|ERROR|SUMMARY|Test unit written' "$out" | head -n 20 >&2 || true
  fi
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$out" | grep -oE '[0-9]+$' | tail -n1)
  printf '%-20s %-5s %10s executions in %ss, corpus %s inputs\n' "$t" "$result" "${execs:-?}" \
    "$seconds" "$(find "$corpus" -type f | wc -l)" >"$work/$t.summary"
}

# As many targets at once as there are cores (KURA_FUZZ_JOBS).
jobs=${KURA_FUZZ_JOBS:-$(nproc)}
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz_one "$t" &
  running=$((running + 1))
done
wait
failed=()
for t in "${targets[@]}"; do
  printf 'fuzz: %s\n' "$(cat "$work/$t.summary" 2>/dev/null || echo "$t: no result")"
  { [ -e "$work/$t.crash" ] || [ ! -e "$work/$t.summary" ]; } && failed+=("$t")
done
if [ ${#failed[@]} -gt 0 ]; then
  keep=1
  die "crashes in ${failed[*]}; inputs in $artifacts (add each to testdata/ as a fixture)"
fi
echo "fuzz: ${#targets[@]} passed, 0 failed"
