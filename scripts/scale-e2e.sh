#!/usr/bin/env bash
# Sharding end-to-end tests against a real API server: starts kube-apiserver
# + etcd in a temporary directory (scripts/k8s-up.sh), checks the chart's
# shapes (deployment, HA deployment, daemonset; no two writers without
# sharding) and applies the sharded rendering to check its Lease RBAC with
# `kubectl auth can-i`, runs the ignored tests of agent/tests/scale_*.rs one
# at a time, stops the server.
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

# ---- chart shapes and Lease RBAC -------------------------------------------
eval "$("$here/build-tools.sh" helm)"
chart=$root/charts/kura-health-agent
fail=0
# The API server listens on loopback (the NetworkPolicy requires its address).
render() { "$KURA_HELM" template kha "$chart" --namespace kura-scale-chart \
  --set 'networkPolicy.apiServer.cidrs={127.0.0.1/32}' "$@"; }
expect_render() { # DESCRIPTION PATTERN HELM-ARGS...
  local desc=$1 pattern=$2; shift 2
  if render "$@" 2>&1 | grep -Eq "$pattern"; then echo "ok   - chart: $desc"
  else echo "FAIL - chart: $desc"; fail=1; fi
}
expect_refused() { # DESCRIPTION HELM-ARGS...
  local desc=$1; shift
  if render "$@" >/dev/null 2>&1; then echo "FAIL - chart: $desc rendered"; fail=1
  else echo "ok   - chart: $desc refused"; fi
}
expect_render "default: one sharded Deployment replica" '^kind: Deployment'
expect_render "HA: three replicas, rolling update" 'replicas: 3' --set replicaCount=3
expect_render "daemonset mode" '^kind: DaemonSet' --set mode=daemonset
expect_render "unsharded: Recreate, no Lease Role" 'type: Recreate' --set sharding.enabled=false
if render --set sharding.enabled=false | grep -q 'resources: \["leases"\]'; then
  echo "FAIL - chart: Lease RBAC without sharding"; fail=1
else echo "ok   - chart: no Lease RBAC without sharding"; fi
expect_refused "two replicas without sharding" --set sharding.enabled=false --set replicaCount=2
expect_refused "daemonset without sharding" --set sharding.enabled=false --set mode=daemonset
expect_refused "unknown mode" --set mode=statefulset

kubectl create namespace kura-scale-chart >/dev/null
kubectl create namespace kura-scale-other >/dev/null
# The companion CRD (crds/) and the project's KuraInstance CRD (files/,
# kuraInstanceCRD.install): no Kura controller here.
kubectl apply -f "$chart/crds/" -f "$chart/files/kurainstances.kura.tuist.dev.yaml" >/dev/null
render --set replicaCount=3 | kubectl apply -f - >/dev/null
if render --set mode=daemonset | kubectl apply --dry-run=server -f - >/dev/null; then
  echo "ok   - chart: the daemonset rendering is accepted by the API server (server dry-run)"
else echo "FAIL - chart: the daemonset rendering is rejected"; fail=1; fi
sa=system:serviceaccount:kura-scale-chart:kha-kura-health-agent
can() { kubectl auth can-i --as="$sa" "$@" 2>/dev/null; }
for verb in get list watch create update patch delete; do
  if [ "$(can "$verb" leases.coordination.k8s.io -n kura-scale-chart)" = yes ]; then
    echo "ok   - rbac: $verb leases in the release namespace"
  else echo "FAIL - rbac: $verb leases in the release namespace"; fail=1; fi
done
# Three replicas watch their own units (sharding.podSelection auto) and
# stamp the shard label: patch on kurainstances (narrowed to that label by
# the chart's ValidatingAdmissionPolicy), never update.
if [ "$(can patch kurainstances.kura.tuist.dev -n kura-scale-other)" = yes ]; then
  echo "ok   - rbac: patch kurainstances (the shard-label stamps of unit watches)"
else echo "FAIL - rbac: no patch on kurainstances for the stamps"; fail=1; fi
for what in "create leases.coordination.k8s.io -n kura-scale-other" "get secrets -n kura-scale-chart" \
            "update kurainstances.kura.tuist.dev -n kura-scale-other" "update configmaps -n kura-scale-chart"; do
  # shellcheck disable=SC2086
  if [ "$(can $what)" = no ]; then echo "ok   - rbac: may not $what"
  else echo "FAIL - rbac: may $what"; fail=1; fi
done
[ $fail = 0 ] || { echo "scale-e2e: chart checks failed" >&2; exit 1; }
(cd "$root" && cargo test -p kura-agent "${tests[@]}" "$@" -- --ignored --test-threads=1 --nocapture)
