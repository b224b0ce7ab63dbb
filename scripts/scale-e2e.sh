#!/usr/bin/env bash
# Sharding end-to-end tests against a real API server: starts kube-apiserver
# + etcd in a temporary directory (scripts/k8s-up.sh), runs the ignored tests
# of agent/tests/scale_*.rs one at a time, stops the server.
#
#   scripts/scale-e2e.sh [extra cargo test args...]
#
# Knobs: KURA_SCALE_KEEP=1 keeps the directory (logs) afterwards;
# CARGO_TARGET_DIR as usual. The figures (handover time, Lease API load) are
# printed by the tests (--nocapture).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)

dir=$(mktemp -d "${TMPDIR:-/tmp}/kura-scale.XXXXXX")
finish() {
  local rc=$?
  "$here/k8s-down.sh" "$dir" || rc=1
  if [ "${KURA_SCALE_KEEP:-}" = 1 ] || [ $rc -ne 0 ]; then
    echo "scale-e2e: logs kept in $dir" >&2
  else
    rm -rf "$dir"
  fi
  exit $rc
}
trap finish EXIT

# Build first, so the API server does not idle through a compile.
tests=()
for f in "$root"/agent/tests/scale_*.rs; do
  tests+=(--test "$(basename "$f" .rs)")
done
(cd "$root" && cargo test -p kura-agent "${tests[@]}" --no-run)

"$here/k8s-up.sh" "$dir"
# shellcheck disable=SC1091
. "$dir/env"
(cd "$root" && cargo test -p kura-agent "${tests[@]}" "$@" -- --ignored --test-threads=1 --nocapture)
