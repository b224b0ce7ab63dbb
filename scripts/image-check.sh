#!/usr/bin/env bash
# The container image tested as the chart runs it (scripts/image_check.py
# lists the tests): builds the image (scripts/image.sh), starts a real
# kube-apiserver + etcd with an audit log, applies the CRD and the chart's
# default rendering, runs the tests with podman (runc), stops everything.
#
#   scripts/image-check.sh [TEST...]        # e.g. scripts/image-check.sh sigterm
#   scripts/image-check.sh --fleet-load [FLEET-LOAD ARGS...]
#                                           # the image's build (the product, no
#                                           # tools) plus only the fleet-load side,
#                                           # beside this build in fleet-load
#                                           # (default --pods 10000)
#
# Installs podman and runc with apt when missing. Tools come from
# scripts/build-tools.sh (cached). KURA_IMAGE_CHECK_KEEP=1 keeps the work
# directory (logs, the API server's audit log, the agent's log).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

if [ "${1:-}" = --fleet-load ]; then
  shift
  [ $# -gt 0 ] || set -- --pods 10000
  # The image's binary has no `fleet-load-side` (it is a tool): build the
  # image's recipe with only that harness added, in a target directory of
  # its own (the features differ from the default build's).
  work=$(mktemp -d "${TMPDIR:-/tmp}/kura-image-fleet.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  product_target=${CARGO_TARGET_DIR:-$root/target}/product-fleet-load-side
  cargo build --locked --profile product -p kura-agent --bin kura-agent \
    --no-default-features --features fleet-load-side --target-dir "$product_target"
  cp "$product_target/product/kura-agent" "$work/kura-agent"
  echo "image-check: fleet-load with the product binary (+ fleet-load-side) beside this build"
  cargo build --locked --release -p kura-benches --bin fleet-load
  "${CARGO_TARGET_DIR:-$root/target}/release/fleet-load" --agent-bin "product=$work/kura-agent" "$@"
  exit
fi

. "$root/scripts/run-lib.sh"
run_init image-check KURA_IMAGE_CHECK_KEEP k8s

part "podman and runc"
if ! command -v podman >/dev/null || ! command -v runc >/dev/null; then
  { apt-get install -y -qq podman runc || { apt-get update -qq && apt-get install -y -qq podman runc; }; } >/dev/null
fi
podman --version

part "tools (cached after the first build)"
eval "$("$root/scripts/build-tools.sh" helm kube-apiserver etcd kubectl)"

part "image (scripts/image.sh)"
eval "$("$root/scripts/image.sh" | grep '^KURA_')"

part "kube-apiserver + etcd up, with an audit log"
mkdir -p "$dir"
cat > "$dir/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    userGroups: ["system:serviceaccounts:kura-system"]
  - level: None
EOF
KURA_APISERVER_EXTRA_ARGS="--audit-log-path=$dir/audit.log --audit-policy-file=$dir/audit-policy.yaml" \
  "$root/scripts/k8s-up.sh" "$k8s_dir"
# shellcheck disable=SC1091
. "$k8s_dir/env"

part "the chart's default rendering applied"
# The API server listens on loopback (the NetworkPolicy requires its address).
"$KURA_HELM" template kura-health-agent "$root/charts/kura-health-agent" \
  --set 'networkPolicy.apiServer.cidrs={127.0.0.1/32}' \
  --namespace kura-system --include-crds > "$dir/chart.yaml"
# The companion CRD (crds/) and the project's KuraInstance CRD (files/,
# kuraInstanceCRD.install): no Kura controller here.
kubectl apply --server-side -f "$root/charts/kura-health-agent/crds/" \
  -f "$root/charts/kura-health-agent/files/kurainstances.kura.tuist.dev.yaml" >/dev/null
kubectl wait --for=condition=Established --timeout=60s crd/kurainstances.kura.tuist.dev >/dev/null
kubectl create namespace kura-system >/dev/null
kubectl apply --server-side --field-manager=image-check -f "$dir/chart.yaml" >/dev/null

part "tests (scripts/image_check.py)"
# The stand-in pods run `kura-agent simulate`, a tool the image's binary
# does not have: a build with the tools serves them (the tests' own, once
# scripts/test.sh has run).
cargo build --locked --quiet -p kura-agent --bin kura-agent
sim_binary=${CARGO_TARGET_DIR:-$root/target}/debug/kura-agent
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
python3 "$root/scripts/image_check.py" \
  --image "$KURA_IMAGE" --binary "$KURA_IMAGE_BINARY" --sim-binary "$sim_binary" \
  --version "$version" --revision "$(git rev-parse HEAD)" \
  --kubectl "$KURA_KUBECTL" --ca "$KURA_APISERVER_CA" \
  --apiserver-port "${KURA_APISERVER_URL##*:}" --audit-log "$dir/audit.log" \
  --work "$dir" --root "$root" --dockerfile "$root/Dockerfile" \
  ${KURA_IMAGE_CHECK_KEEP:+--keep-logs} "$@"
