#!/usr/bin/env bash
# The integration recipes of docs/integrations.md, tested against real agent
# output with the libraries the integrations use (issue 13):
#   1. Argo CD: the KuraInstance health check (health.lua) on its test cases
#      (health_test.yaml, testdata/) with a Lua 5.1 interpreter
#      (scripts/argocd_health_test.py; Debian's lua5.1, installed if missing)
#   2. a real agent loop over simulated pods (agent/tests/integration_outputs.rs)
#      writes its verdict endpoint's answers and /metrics in four states
#   3. scripts/check_integrations.py: the verdict documents against their JSON
#      Schema; the Argo Rollouts recipes' web jsonPath and conditions (client-go
#      jsonpath + expr, kura-integrations), their PromQL as promtool rule tests
#      over the real scrape, the job recipe's `kura-agent check` on simulated
#      nodes (healthy: exit 0; hard stop: exit 1); Flux's healthCheckExprs
#      for KuraInstance evaluated as kustomize-controller does (cel-go)
# The recipes' --dry-run=server against the real API server with the Argo
# Rollouts CRDs, and kstatus on objects the API server stored, run in
# scripts/e2e.sh. Builds promtool and kura-integrations on first use (cached).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
t0=$(date +%s)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

py=python3
if ! "$py" -c 'import yaml, jsonschema' 2>/dev/null; then
  py=$root/.cache/venv/bin/python   # scripts/test.sh's venv (kubernetes-validate brings both)
  if ! "$py" -c 'import yaml, jsonschema' 2>/dev/null; then
    python3 -m venv "$root/.cache/venv"
    "$py" -m pip install --quiet --disable-pip-version-check "kubernetes-validate==1.37.0"
  fi
fi

echo "== Argo CD health check: health.lua on health_test.yaml (Lua 5.1)"
if ! command -v lua5.1 >/dev/null; then
  echo "installing lua5.1"
  apt-get update -qq && apt-get install -y -qq lua5.1 >/dev/null
fi
"$py" scripts/argocd_health_test.py \
  docs/integrations/argocd/resource_customizations/kura.tuist.dev/KuraInstance

echo "== tools: promtool, kura-integrations (cached)"
eval "$(scripts/build-promtool.sh)"
eval "$(scripts/build-tools.sh integrations)"

echo "== real agent output: the verdict endpoint and /metrics in every state"
KURA_INTEGRATIONS_OUT=$tmp/outputs cargo test --locked -q -p kura-agent --test integration_outputs
cargo build --locked -q -p kura-agent
agent=${CARGO_TARGET_DIR:-target}/debug/kura-agent

echo "== Argo Rollouts / Kargo recipes against it"
"$py" scripts/check_integrations.py \
  --recipes docs/integrations/argo --outputs "$tmp/outputs" \
  --integrations "$KURA_INTEGRATIONS" --promtool "$KURA_PROMTOOL" \
  --agent "$agent" --schema schemas/json/instance-verdict.schema.json \
  --scenarios testdata/sim --flux docs/integrations/flux/kustomization.yaml \
  --objects docs/integrations/argocd/resource_customizations/kura.tuist.dev/KuraInstance/testdata
echo "== integration recipes checked in $(( $(date +%s) - t0 ))s"
