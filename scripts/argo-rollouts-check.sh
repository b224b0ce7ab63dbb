#!/usr/bin/env bash
# The recipes of docs/integrations/ under the real Argo Rollouts controller
# of each supported release (scripts/tools/argo-rollouts/versions: v1.7.2
# and v1.8.5), against a real kube-apiserver and the agent's real verdict
# API (issues 31 and 41; scripts/argo_rollouts_check.py says what each step
# asserts):
#   1. a real agent loop over simulated pods with an instance in each state
#      (agent/tests/integration_outputs.rs, KURA_INTEGRATIONS_SERVE) serves
#      its verdict API and /metrics on loopback
#   2. two kube-apiservers + etcds (scripts/k8s-up.sh), one per release
#   3. per release, side by side, each on its own API server (their CRDs share names): its own CRDs, kept in the
#      repository (testdata/vendor/argo-rollouts/<version>, checked against
#      the release's module); every AnalysisTemplate and
#      ClusterAnalysisTemplate under docs/ applied with `kubectl apply`
#      (strict field validation), each on the releases it claims; its
#      rollouts-controller (every controller) running an AnalysisRun per
#      web and Prometheus template, agent state and broken path (healthy,
#      rolling, held, stopped, flapping; a 404, a timeout, a closed port):
#      the number of healthy measurements before Successful, the reason
#      each Error gives, a flap never passing; a Rollout whose step names the
#      namespaced and the cluster template, resolved by the controller; the
#      job recipe laid out as Argo CD and Kargo do (the hook in the nodes'
#      namespace, the Stage's AnalysisRun and the Job the controller makes
#      from it): the Job's ConfigMap must be in its namespace; and, as
#      checks of the check, the templates before issues 31 and 41 must let
#      a hold and a flap pass on 1.7; and issue 41's rollback after a hard
#      stop, each recorded step (testdata/rollback/: its verdict API answer
#      served as recorded, its /metrics series through the loopback
#      Prometheus) under every web and Prometheus template the release
#      installs, each run's phase held to the table in docs/integrations.md
#
#   scripts/argo-rollouts-check.sh [--install-only]
#
# Builds the controllers on first use (scripts/build-tools.sh
# argo-rollouts-1.7 argo-rollouts-1.8: ~4-6 min each on 2 cores, cached in
# ~/.cache/kura-tools). KURA_ARGO_CHECK_KEEP=1 keeps the work directory
# (controller logs, the agent's log); KURA_ARGO_CHECK_DOCS=DIR checks the
# recipes of another docs/ (e.g. an older commit's, to see what it fails).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

. "$root/scripts/run-lib.sh"
run_init argo-rollouts-check KURA_ARGO_CHECK_KEEP k8s
agent_pid=
stop_agent() {
  rm -f "$dir/agent-url"
  if [ -n "$agent_pid" ]; then wait "$agent_pid" 2>/dev/null || true; fi
}
# run_finish exits with the status it finds in $?: the script's, not
# stop_agent's (a failed check must fail the script).
# Each release runs on its own API server, side by side (their CRDs share
# names): the second one is stopped here, the first by run_finish.
k8s_dir_18=$dir/k8s-1.8
trap 'rc=$?; stop_agent; set +e; "$root/scripts/k8s-down.sh" "$k8s_dir_18" >/dev/null 2>&1; (exit "$rc"); run_finish' EXIT

py=python3
if ! "$py" -c 'import yaml' 2>/dev/null; then
  py=$root/.cache/venv/bin/python   # scripts/test.sh's venv has PyYAML
  "$py" -c 'import yaml'
fi

part "tools (cached after the first build)"
eval "$("$root/scripts/build-tools.sh" kube-apiserver etcd kubectl argo-rollouts-1.7 argo-rollouts-1.8)"
# Each release's own CRDs, kept in the repository (testdata/vendor/argo-rollouts/,
# copied from the release's module by scripts/vendor-argo-rollouts-crds.sh);
# the copies must still be the module's (the module is the one the
# controller was built from: in the Go module cache after build-tools.sh).
crds() { # TOOL: that release's vendored CRDs
  echo "$root/testdata/vendor/argo-rollouts/$(awk -v t="$1" '$1 == t { print $2 }' "$root/scripts/tools/argo-rollouts/versions")"
}
crds_17=$(crds argo-rollouts-1.7)
crds_18=$(crds argo-rollouts-1.8)
"$root/scripts/vendor-argo-rollouts-crds.sh" --check

part "the agent's verdict API: a real agent loop over simulated pods"
cargo test --locked -q -p kura-agent --test integration_outputs --no-run
# The job recipe's hook runs the agent binary's `baseline`.
cargo build --locked -q -p kura-agent --bin kura-agent
agent_bin=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')/debug/kura-agent
KURA_INTEGRATIONS_SERVE=$dir/agent-url cargo test --locked -q -p kura-agent --test integration_outputs \
  -- --nocapture > "$dir/agent.log" 2>&1 &
agent_pid=$!
for _ in $(seq 1 300); do
  [ -s "$dir/agent-url" ] && break
  kill -0 "$agent_pid" 2>/dev/null || { cat "$dir/agent.log" >&2; echo "argo-rollouts-check: the agent test exited" >&2; exit 1; }
  sleep 0.2
done
[ -s "$dir/agent-url" ] || { echo "argo-rollouts-check: no verdict API after 60 s" >&2; exit 1; }
agent_url=$(cat "$dir/agent-url")
echo "verdict API at $agent_url"

part "kube-apiserver + etcd up, one per release"
"$root/scripts/k8s-up.sh" "$k8s_dir"
"$root/scripts/k8s-up.sh" "$k8s_dir_18"

part "AnalysisRuns under Argo Rollouts v1.7.2 and v1.8.5, side by side"
docs=${KURA_ARGO_CHECK_DOCS:-$root/docs}
check_release() { # VERSION CONTROLLER CRDS K8S_DIR [ARGS...]: one release's checks, logged to $dir/check-VERSION.log
  local version=$1 controller=$2 crds=$3 k8s=$4
  shift 4
  mkdir -p "$dir/work-$version"
  (
    # shellcheck disable=SC1091
    . "$k8s/env"
    "$py" "$root/scripts/argo_rollouts_check.py" --recipes "$docs/integrations/argo" \
      --docs "$docs" \
      --agent-url "$agent_url" --work "$dir/work-$version" \
      --agent-bin "$agent_bin" --scenario "$root/testdata/sim/pair-healthy.json" \
      --baseline-hook "$docs/integrations/kargo/baseline-hook.yaml" --stage "$docs/integrations/kargo/stage.yaml" \
      --job-template "$docs/integrations/argo/analysis-template-job.yaml" \
      --kargo-stage-crd "$root/testdata/vendor/kargo/kargo.akuity.io_stages.yaml" \
      --controller "$version=$controller:$crds" \
      --rollback-recording "$root/testdata/rollback" --rollback-table "$docs/integrations.md" "$@"
  ) > "$dir/check-$version.log" 2>&1
}
check_release 1.7 "$KURA_ARGO_ROLLOUTS_1_7" "$crds_17" "$k8s_dir" "$@" &
pid_17=$!
check_release 1.8 "$KURA_ARGO_ROLLOUTS_1_8" "$crds_18" "$k8s_dir_18" "$@" &
pid_18=$!
status=0
wait "$pid_17" || status=1
wait "$pid_18" || status=1
for version in 1.7 1.8; do
  echo "---- Argo Rollouts $version"
  cat "$dir/check-$version.log"
done
exit "$status"
