#!/usr/bin/env bash
# The integration recipes of docs/integrations.md, tested against real agent
# output with the libraries the integrations use (issue 13):
#   1. Argo CD: every health check under
#      docs/integrations/argocd/resource_customizations/ (KuraInstance, and
#      the companion KuraInstanceHealth) on its test cases (health_test.yaml,
#      testdata/) in Argo CD's Lua VM: gopher-lua with only the package, base
#      and table libraries (kura-integrations argocd-health), and a variant
#      using string.format must fail there
#   2. a real agent loop over simulated pods (agent/tests/integration_outputs.rs)
#      writes its verdict endpoint's answers and /metrics in four states
#   3. scripts/check_integrations.py: the verdict documents against their JSON
#      Schema; the Argo Rollouts recipes' web jsonPath and conditions (client-go
#      jsonpath + expr, kura-integrations), their PromQL as promtool rule tests
#      over the real scrape, the job recipe's `kura-agent check` on simulated
#      nodes (healthy: exit 0; hard stop: exit 1); Flux's healthCheckExprs
#      for KuraInstance and KuraInstanceHealth (both Kustomizations of
#      docs/integrations/flux/) evaluated by fluxcd/pkg/runtime/cel's
#      StatusEvaluator
#   4. scripts/check_rollback.py: issue 41's rollback after a hard stop, one
#      sequence recorded on the real API server (testdata/rollback/), through
#      Argo CD's health check, Flux's CEL, kstatus and every web and
#      Prometheus AnalysisTemplate, against the table in docs/integrations.md
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

echo "== tools: promtool, kura-integrations (cached)"
eval "$(scripts/build-promtool.sh)"
eval "$(scripts/build-tools.sh integrations)"

echo "== Argo CD health checks: health.lua on health_test.yaml (gopher-lua; package, base, table)"
customizations=docs/integrations/argocd/resource_customizations
argocd_dir=$customizations/kura.tuist.dev/KuraInstance
companion_dir=$customizations/health.kura.tuist.dev/KuraInstanceHealth
# Every GROUP/KIND directory there, so that a check added later runs too;
# the two this project ships must be among them.
checks=$(find "$customizations" -mindepth 3 -maxdepth 3 -name health.lua -printf '%h\n' | sort)
for want in "$argocd_dir" "$companion_dir"; do
  grep -qxF "$want" <<<"$checks" || { echo "integrations-check: no health check in $want" >&2; exit 1; }
done
for dir in $checks; do
  echo "-- ${dir#"$customizations"/}"
  "$KURA_INTEGRATIONS" argocd-health "$dir"
done
# The VM really lacks what an argocd-cm check does not get: the same check
# calling string.format must fail there.
mkdir -p "$tmp/argocd-strings"
cp -r "$argocd_dir"/. "$tmp/argocd-strings/"
sed -i 's/^local hs = {}$/local hs = {}\nlocal _ = string.format("%d", 1)/' "$tmp/argocd-strings/health.lua"
if "$KURA_INTEGRATIONS" argocd-health "$tmp/argocd-strings" >/dev/null 2>&1; then
  echo "integrations-check: a health check calling string.format passed: the Lua VM opens more than Argo CD's" >&2
  exit 1
fi
echo "a health check calling string.format fails in that VM, as in Argo CD"

echo "== real agent output: the verdict endpoint and /metrics in every state"
KURA_INTEGRATIONS_OUT=$tmp/outputs cargo test --locked -q -p kura-agent --test integration_outputs
cargo build --locked -q -p kura-agent
agent=${CARGO_TARGET_DIR:-target}/debug/kura-agent

echo "== Argo Rollouts / Kargo recipes against it"
"$py" scripts/check_integrations.py \
  --recipes docs/integrations/argo --outputs "$tmp/outputs" \
  --integrations "$KURA_INTEGRATIONS" --promtool "$KURA_PROMTOOL" \
  --agent "$agent" --schema schemas/json/instance-verdict.schema.json \
  --scenarios testdata/sim \
  --flux docs/integrations/flux/kustomization.yaml docs/integrations/flux/kustomization-companion.yaml \
  --objects "$argocd_dir/testdata" --companion-objects "$companion_dir/testdata" \
  --baseline-hook docs/integrations/kargo/baseline-hook.yaml
echo "== a rollback after a hard stop, step by step, through every consumer (issue 41)"
# The recording of agent/tests/e2e_apiserver.rs (real API server, real
# agent) against the table in docs/integrations.md; --self-check: the
# rollback judged healthy too early and Flux's pre-issue-31 expressions must
# each fail it.
t1=$(date +%s)
"$py" scripts/check_rollback.py --recording testdata/rollback --docs docs/integrations.md \
  --integrations "$KURA_INTEGRATIONS" --promtool "$KURA_PROMTOOL" --self-check
echo "== rollback checked in $(( $(date +%s) - t1 ))s"
echo "== integration recipes checked in $(( $(date +%s) - t0 ))s"
