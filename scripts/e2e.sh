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
# answers, kstatus, a rollback after a hard stop recorded step by step and
# fed to every consumer (scripts/check_rollback.py, issue 41); then
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
# The recipes of docs/integrations/ (Argo Rollouts, Kargo, the job recipe)
# are installed and run on the real API server by scripts/argo-rollouts-check.sh,
# over each supported release's own CRDs (testdata/vendor/argo-rollouts/).
# Knobs: KURA_E2E_FLAP_SCALE (default 10: 5 minutes of flapping in 30 s; 1
# for the full figure), KURA_E2E_ECONOMY_INSTANCES (default 100; 1000 for the full figure)
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

# Issue 41's rollback, as this run recorded it (the test writes it into the
# harness directory unless KURA_E2E_ROLLBACK_RECORD names another), through
# every consumer against the table in docs/integrations.md.
if [ -d "$k8s_dir/rollback" ]; then
  part "the recorded rollback through every consumer (scripts/check_rollback.py)"
  eval "$("$root/scripts/build-promtool.sh")"
  py=python3
  "$py" -c 'import yaml' 2>/dev/null || py=$root/.cache/venv/bin/python   # scripts/test.sh's venv
  "$py" "$root/scripts/check_rollback.py" --recording "$k8s_dir/rollback" --docs "$root/docs/integrations.md" \
    --integrations "$KURA_INTEGRATIONS" --promtool "$KURA_PROMTOOL"
fi

part "e2e tests: node-local instances through the port-forward"
RUST_LOG=${RUST_LOG:-error,kube_client=off} cargo test --locked -p kura-agent --test e2e_port_forward -- \
  --ignored --test-threads=1 --nocapture "$@"

part "e2e tests: the garbage collector"
RUST_LOG=${RUST_LOG:-error,kube_client=off} cargo test --locked -p kura-agent --test e2e_garbage_collection -- \
  --ignored --test-threads=1 --nocapture "$@"
