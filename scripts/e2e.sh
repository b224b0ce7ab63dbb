#!/usr/bin/env bash
# End-to-end tests of kura-agent against a real kube-apiserver + etcd
# (agent/tests/e2e_apiserver.rs): CRD, status writes, field ownership, pruning,
# the chart's RBAC by impersonation, image change and baseline, agent kill and
# restart, kube-apiserver outage, the status write economy at rest, the
# latency of health flips in a rollout at the default settings (issue 19),
# the gate configuration (the chart's gate ConfigMap as --gate-config, the
# per-instance annotation); exported timelines replayed by kura-gate replay
# --agent-view (issue 33); conditions next to another manager's, kubectl
# wait, kubectl events, a rollout's Events each within 15 s of their
# transition at the default Event bound (issue 41), a flapping instance's
# Event objects and calls after a minute and after five, every replica's
# answers, kstatus; then the Argo Rollouts recipes of docs/integrations.md
# applied with --dry-run=server over the vendored CRDs, and the Kargo Stage
# and baseline hook of the job recipe over Kargo's Stage CRD; then
# agent/tests/e2e_port_forward.rs: node-local instances polled through the
# API server's pod port-forward, to a kubelet stand-in built from the
# kubelet's own port-forward code (scripts/tools/kubelet-standin, issue 39);
# then agent/tests/e2e_garbage_collection.rs: the real garbage collector
# (kube-controller-manager's, which runs beside the API server throughout:
# k8s-up.sh --with-gc) deletes what a deleted KuraInstance owned.
#
#   scripts/e2e.sh [TEST_FILTER...]   # extra args go to the test binary
#
# Builds the harness tools on first use (cached in ~/.cache/kura-tools; the
# first kube-apiserver build takes ~15 min), starts kube-apiserver in a
# temporary directory with the garbage collector, renders the chart with helm,
# runs the ignored e2e tests one at a time, and stops everything. Prints the
# time of each part.
# Knobs: KURA_E2E_FLAP_SCALE (default 10: 5 minutes of flapping in 30 s; 1
# for the full figure), KURA_ARGO_CRDS (the Argo Rollouts CRDs; default
# ../shared/vendor/argo-rollouts-crds), KURA_E2E_ECONOMY_INSTANCES (default 100; 1000 for the full figure)
# and KURA_E2E_ECONOMY_SCALE (default 10: 5 simulated minutes in 30 s; use 1
# with 1000 instances: this machine cannot write 333 statuses/s in a debug
# build), KURA_E2E_FLIPS (default 12, at least 10: flips timed at the default
# settings), KURA_E2E_KEEP=1 keeps the harness directory (logs) afterwards; it
# is always kept on failure.
# Full figure (2026-12-02, 2 loaded cores, debug build):
#   KURA_E2E_ECONOMY_INSTANCES=1000 KURA_E2E_ECONOMY_SCALE=1 scripts/e2e.sh economy
#   -> 10000 writes = 10.00 per instance (bound 11); health flip in 2.1 s (bound 11 s)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

. "$root/scripts/run-lib.sh"
run_init e2e KURA_E2E_KEEP

part "tools (cached after the first build)"
eval "$("$root/scripts/build-tools.sh" helm kube-apiserver etcd kubectl kube-controller-manager integrations kubelet-standin)"
export KURA_INTEGRATIONS KURA_KUBELET_STANDIN

part "build the e2e tests"
cargo test --locked -p kura-agent --test e2e_apiserver --test e2e_port_forward --test e2e_garbage_collection --no-run
# kura-gate replay --agent-view runs over the exported timelines (issue 33).
cargo build --locked -p kura-gate --bin kura-gate
KURA_GATE_BIN=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')/debug/kura-gate
export KURA_GATE_BIN

part "kube-apiserver + etcd + garbage collector up"
# The garbage collector (kube-controller-manager) runs throughout, as in a
# real cluster: DIR/env exports KURA_GC=1 (agent/tests/support/gc.rs).
"$root/scripts/k8s-up.sh" "$k8s_dir" --with-gc
# shellcheck disable=SC1091
. "$k8s_dir/env"

part "render the chart"
"$KURA_HELM" template kura-health-agent "$root/charts/kura-health-agent" \
  --set 'networkPolicy.apiServer.cidrs={127.0.0.1/32}' \
  --namespace kura-system > "$dir/chart.yaml"
export KURA_E2E_CHART_MANIFESTS=$dir/chart.yaml
# The same chart with a gate threshold set: its gate ConfigMap is the file
# the gate-config test gives the agent (--gate-config), as the chart mounts it.
"$KURA_HELM" template kura-health-agent "$root/charts/kura-health-agent" \
  --set 'networkPolicy.apiServer.cidrs={127.0.0.1/32}' \
  --namespace kura-system --set gate.fdTimeoutBand=2 > "$dir/chart-gate.yaml"
export KURA_E2E_CHART_GATE_MANIFESTS=$dir/chart-gate.yaml
export KURA_K8S_DIR KUBECONFIG

part "e2e tests"
RUST_LOG=${RUST_LOG:-error,kube_client=off} cargo test --locked -p kura-agent --test e2e_apiserver -- \
  --ignored --test-threads=1 --nocapture "$@"

part "e2e tests: node-local instances through the port-forward"
RUST_LOG=${RUST_LOG:-error,kube_client=off} cargo test --locked -p kura-agent --test e2e_port_forward -- \
  --ignored --test-threads=1 --nocapture "$@"

part "e2e tests: the garbage collector"
RUST_LOG=${RUST_LOG:-error,kube_client=off} cargo test --locked -p kura-agent --test e2e_garbage_collection -- \
  --ignored --test-threads=1 --nocapture "$@"

part "Argo Rollouts recipes: --dry-run=server against the vendored CRDs"
argo_crds=${KURA_ARGO_CRDS:-$root/../shared/vendor/argo-rollouts-crds}
[ -d "$argo_crds" ] || argo_crds=/work/shared/vendor/argo-rollouts-crds
[ -f "$argo_crds/analysis-template-crd.yaml" ] || {
  echo "e2e: the Argo Rollouts CRDs are not at $argo_crds (set KURA_ARGO_CRDS)" >&2; exit 1; }
"$KURA_KUBECTL" apply --server-side --force-conflicts \
  -f "$argo_crds/analysis-template-crd.yaml" \
  -f "$argo_crds/cluster-analysis-template-crd.yaml" >/dev/null
# Polled, not `kubectl wait --for=condition=Established`: that fails at once
# ("accessor error: <nil>") when it reads a CRD before its first status.
for crd in analysistemplates.argoproj.io clusteranalysistemplates.argoproj.io; do
  for _ in $(seq 1 120); do
    [ "$("$KURA_KUBECTL" get crd "$crd" -o jsonpath='{.status.conditions[?(@.type=="Established")].status}')" = True ] && break
    sleep 0.5
  done
done
"$KURA_KUBECTL" apply --dry-run=server --validate=strict -n default -f "$root/docs/integrations/argo/"
# The dry run can fail: a misspelled field is refused by the CRD's schema.
sed 's/jsonPath:/jsonpath:/' "$root/docs/integrations/argo/analysis-template-web.yaml" > "$dir/misspelled.yaml"
if "$KURA_KUBECTL" apply --dry-run=server --validate=strict -n default -f "$dir/misspelled.yaml" >/dev/null 2>&1; then
  echo "e2e: a recipe with a misspelled field was accepted: the dry run checks nothing" >&2
  exit 1
fi
echo "a misspelled recipe field is refused, as it should be"

part "Kargo Stage and the baseline hook: --dry-run=server"
# Kargo's Stage CRD (testdata/vendor/kargo: Kargo v1.11.2; its module is not
# served by the Go module proxy) and the pre-upgrade hook's core objects.
"$KURA_KUBECTL" apply --server-side --force-conflicts -f "$root/testdata/vendor/kargo/kargo.akuity.io_stages.yaml" >/dev/null
for _ in $(seq 1 120); do
  [ "$("$KURA_KUBECTL" get crd stages.kargo.akuity.io -o jsonpath='{.status.conditions[?(@.type=="Established")].status}')" = True ] && break
  sleep 0.5
done
"$KURA_KUBECTL" create namespace kura-fleet >/dev/null
"$KURA_KUBECTL" apply --dry-run=server --validate=strict -n kura-fleet \
  -f "$root/docs/integrations/kargo/stage.yaml" -f "$root/docs/integrations/kargo/baseline-hook.yaml"
sed 's/analysisTemplates:/analysisTemplate:/' "$root/docs/integrations/kargo/stage.yaml" > "$dir/misspelled-stage.yaml"
if "$KURA_KUBECTL" apply --dry-run=server --validate=strict -n kura-fleet -f "$dir/misspelled-stage.yaml" >/dev/null 2>&1; then
  echo "e2e: a Stage with a misspelled field was accepted: the dry run checks nothing" >&2
  exit 1
fi
echo "a misspelled Stage field is refused, as it should be"
