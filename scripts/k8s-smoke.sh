#!/usr/bin/env bash
# Smoke test of the real-API-server harness: up, readyz, a namespace, a tiny
# CRD with a status subresource (status write, schema pruning, server-side
# apply), RBAC denial, kube-apiserver stop and restart, down.
#
#   scripts/k8s-smoke.sh [DIR]   # DIR defaults to a fresh temporary directory
#
# Ends with "k8s-smoke: N passed, N failed"; exit status 0 only if all passed.
# Set KURA_K8S_KEEP=1 to leave DIR (logs) in place afterwards.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

dir=${1:-$(mktemp -d "${TMPDIR:-/tmp}/kura-k8s-smoke.XXXXXX")}
finish() {
  local rc=$?
  "$here/k8s-down.sh" "$dir" || rc=1
  if [ "${KURA_K8S_KEEP:-}" = 1 ] || [ $rc -ne 0 ]; then
    echo "k8s-smoke: logs kept in $dir" >&2
  else
    rm -rf "$dir"
  fi
  exit $rc
}
trap finish EXIT

passed=0 failed=0
check() { # check DESCRIPTION CMD...
  local desc=$1 out; shift
  if out=$("$@" 2>&1); then
    passed=$((passed + 1)); echo "ok   - $desc"
  else
    failed=$((failed + 1)); echo "FAIL - $desc"; printf '%s\n' "$out" | sed 's/^/       /'
  fi
}
# equals DESCRIPTION EXPECTED CMD...: CMD's stdout must be EXPECTED.
equals() {
  local desc=$1 want=$2 got; shift 2
  got=$("$@" 2>&1) || true
  if [ "$got" = "$want" ]; then
    passed=$((passed + 1)); echo "ok   - $desc"
  else
    failed=$((failed + 1)); echo "FAIL - $desc: want '$want', got:"; printf '%s\n' "$got" | sed 's/^/       /'
  fi
}
fails() { ! "$@"; }

t0=$(date +%s)
"$here/k8s-up.sh" "$dir"
echo "k8s-smoke: up in $(( $(date +%s) - t0 ))s"
# shellcheck disable=SC1091
. "$dir/env"

equals "GET /readyz via kubectl" ok kubectl get --raw /readyz
equals "server reports the pinned release" "$("$dir/bin/kube-apiserver" --version | awk '{print $2}')" \
  sh -c 'kubectl get --raw /version | sed -n "s/.*\"gitVersion\": *\"\([^\"]*\)\".*/\1/p"'
check "create namespace" kubectl create namespace kura-smoke

check "apply CRD with status subresource" kubectl apply -f - <<'EOF'
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.smoke.kura.test
spec:
  group: smoke.kura.test
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1}
          status:
            type: object
            properties:
              phase: {type: string, enum: [Pending, Ready]}
EOF
check "CRD becomes Established" kubectl wait --for condition=established --timeout=60s crd/widgets.smoke.kura.test

check "server-side apply a Widget" kubectl apply --server-side --field-manager=smoke -n kura-smoke -f - <<'EOF'
apiVersion: smoke.kura.test/v1
kind: Widget
metadata: {name: w1}
spec: {size: 3}
EOF
check "schema validation rejects size 0" fails kubectl apply --server-side --field-manager=smoke -n kura-smoke -f - <<'EOF'
apiVersion: smoke.kura.test/v1
kind: Widget
metadata: {name: w2}
spec: {size: 0}
EOF
check "status write through the status subresource" \
  kubectl patch widget w1 -n kura-smoke --subresource=status --type=merge \
  -p '{"status":{"phase":"Ready","unknownField":"pruned"}}'
equals "status stored, unknown field pruned" '{"phase":"Ready"}' \
  kubectl get widget w1 -n kura-smoke -o 'jsonpath={.status}'
check "status enum is validated" fails kubectl patch widget w1 -n kura-smoke \
  --subresource=status --type=merge -p '{"status":{"phase":"Exploded"}}'
equals "managedFields record the status writer" "kubectl-patch" \
  kubectl get widget w1 -n kura-smoke --show-managed-fields \
  -o 'jsonpath={.metadata.managedFields[?(@.subresource=="status")].manager}'

# shellcheck disable=SC2016 # expanded by the inner sh
check "RBAC: unprivileged user is forbidden" sh -c \
  'out=$(kubectl --context kura-test-user get widgets -n kura-smoke 2>&1); echo "$out"; echo "$out" | grep -q Forbidden'
# shellcheck disable=SC2016
check "RBAC: admin may impersonate the check" sh -c \
  'test "$(kubectl auth can-i list widgets.smoke.kura.test -n kura-smoke --as kura-test-user)" = no'

url=$KURA_APISERVER_URL
check "stop kube-apiserver only" "$here/k8s-stop-apiserver.sh" "$dir"
check "API server is gone" fails kubectl get --raw /readyz --request-timeout=2s
check "restart kube-apiserver (--apiserver-only)" "$here/k8s-up.sh" "$dir" --apiserver-only
# shellcheck disable=SC1091
. "$dir/env"
equals "same URL after restart" "$url" printf '%s' "$KURA_APISERVER_URL"
equals "objects survive the restart" Ready kubectl get widget w1 -n kura-smoke -o 'jsonpath={.status.phase}'

echo "k8s-smoke: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
