#!/usr/bin/env bash
# The project's test command (README): every test tier that exists.
#   1. unit, property, fixture and loopback tests: cargo test --workspace
#   2. generated-artifact drift: the committed CRD and JSON Schemas
#   3. the CRD's validity against the Kubernetes 1.33 schemas (kubernetes-validate)
# Installs what it needs (a Python venv under .cache/) on a fresh machine.
# The tiers that need a real kube-apiserver have their own commands, which
# .ci/run always runs after this one: scripts/e2e.sh (the agent end to end)
# and scripts/chart-check.sh (the Helm chart).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

echo "== cargo test --workspace"
cargo test --workspace --locked

echo "== generated artifacts are current"
cargo run --quiet --locked -p kura-schemas --bin crdgen -- --check

echo "== CRD validates against Kubernetes 1.33 (kubernetes-validate)"
venv="$root/.cache/venv"
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==1.37.0"
fi
"$venv/bin/kubernetes-validate" --strict -k 1.33 charts/kura-health-agent/crds/*.yaml \
  charts/kura-health-agent/files/kurainstances.kura.tuist.dev.yaml
echo "== all test tiers passed"
