#!/usr/bin/env bash
# The Argo Rollouts recipes of docs/integrations/argo/ (web and Prometheus)
# under the real Argo Rollouts controller of each supported release
# (scripts/tools/argo-rollouts/versions: v1.7.2 and v1.8.5), against a real
# kube-apiserver and the agent's real verdict API (issue 31 item 2):
#   1. a real agent loop over simulated pods with an instance in each state
#      (agent/tests/integration_outputs.rs, KURA_INTEGRATIONS_SERVE) serves
#      its verdict API on loopback
#   2. kube-apiserver + etcd (scripts/k8s-up.sh)
#   3. per release: its CRDs, its rollouts-controller (analysis controller
#      only), one AnalysisRun per recipe and state; healthy must end
#      Successful, held and rolling must not (Error at the deadline), a hard
#      stop Failed on the first measurement (scripts/argo_rollouts_check.py);
#      the pre-issue-31 templates run too: their hold ends Successful on 1.7
#
#   scripts/argo-rollouts-check.sh
#
# Builds the controllers on first use (scripts/build-tools.sh
# argo-rollouts-1.7 argo-rollouts-1.8: ~4-6 min each on 2 cores, cached in
# ~/.cache/kura-tools). KURA_ARGO_CHECK_KEEP=1 keeps the work directory
# (controller logs, the agent's log).
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
trap 'rc=$?; stop_agent; set +e; (exit "$rc"); run_finish' EXIT

py=python3
if ! "$py" -c 'import yaml' 2>/dev/null; then
  py=$root/.cache/venv/bin/python   # scripts/test.sh's venv has PyYAML
  "$py" -c 'import yaml'
fi

part "tools (cached after the first build)"
eval "$("$root/scripts/build-tools.sh" kube-apiserver etcd kubectl argo-rollouts-1.7 argo-rollouts-1.8)"
command -v go >/dev/null || PATH=/usr/local/go/bin:$PATH   # as build-tools.sh does
crds() { # TOOL: the CRDs of that release's module
  local version
  version=$(awk -v t="$1" '$1 == t { print $2 }' "$root/scripts/tools/argo-rollouts/versions")
  GOFLAGS=-mod=mod GOTOOLCHAIN=local go mod download -json "github.com/argoproj/argo-rollouts@$version" \
    | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p' | sed 's|$|/manifests/crds|'
}
crds_17=$(crds argo-rollouts-1.7)
crds_18=$(crds argo-rollouts-1.8)

part "the agent's verdict API: a real agent loop over simulated pods"
cargo test --locked -q -p kura-agent --test integration_outputs --no-run
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

part "kube-apiserver + etcd up"
"$root/scripts/k8s-up.sh" "$k8s_dir"
# shellcheck disable=SC1091
. "$k8s_dir/env"

part "AnalysisRuns under Argo Rollouts v1.7.2 and v1.8.5"
"$py" "$root/scripts/argo_rollouts_check.py" --recipes "$root/docs/integrations/argo" \
  --agent-url "$agent_url" --work "$dir" \
  --controller "1.7=$KURA_ARGO_ROLLOUTS_1_7:$crds_17" \
  --controller "1.8=$KURA_ARGO_ROLLOUTS_1_8:$crds_18"
