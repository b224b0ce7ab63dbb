#!/usr/bin/env bash
# Checks of the Helm chart charts/kura-health-agent, offline except for a real
# kube-apiserver started on loopback:
#   1. helm lint (default values and a variant with serviceMonitor and
#      networkPolicy on, namespaces set); replicaCount 2 and an empty API
#      server CIDR list must be refused, no scrapers must mean no ingress
#   2. helm template (with the CRD) for both
#   3. kubeconform -strict against JSON Schemas generated from that API
#      server's own OpenAPI (scripts/k8s-json-schemas.py): every built-in
#      kind and the KuraInstance CRD; only ServiceMonitor is skipped (no
#      Prometheus Operator CRD here, so no schema for it)
#   4. the rendered manifests applied to the API server (kubectl apply
#      --server-side; a Deployment does not run without scheduler and
#      kubelet: only acceptance is checked), and the stored objects checked
#      against the chart's promises (least-privilege role, security context,
#      probes, one replica, NetworkPolicy, PDB)
#
#   scripts/chart-check.sh
#
# Tools come from scripts/build-tools.sh (cached). Prints the time of each
# part. KURA_CHART_CHECK_KEEP=1 keeps the work directory.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
chart=$root/charts/kura-health-agent

. "$root/scripts/run-lib.sh"
run_init chart-check KURA_CHART_CHECK_KEEP k8s
fail() { echo "chart-check: FAIL: $*" >&2; exit 1; }

part "tools (cached after the first build)"
eval "$("$root/scripts/build-tools.sh" helm kubeconform kube-apiserver etcd kubectl)"
helm=$KURA_HELM

cat > "$dir/variant-values.yaml" <<'EOF'
serviceMonitor:
  enabled: true
  labels: {release: prometheus}
networkPolicy:
  enabled: true
watch:
  namespaces: [kura-a, kura-b]
  instanceSelector: tier=managed
extraArgs: ["--retention=2h"]
EOF

part "helm lint"
"$helm" lint --strict "$chart"
"$helm" lint --strict "$chart" -f "$dir/variant-values.yaml"
# Two replicas write one instance only without sharding: refused then;
# with sharding (the default) the Leases give every instance one writer.
if out=$("$helm" template x "$chart" --set replicaCount=2 --set sharding.enabled=false 2>&1); then
  fail "replicaCount=2 without sharding rendered; the chart must refuse two writers"
fi
grep -q "replicaCount must be 1 without sharding" <<<"$out" || fail "unexpected refusal of replicaCount=2: $out"
if out=$("$helm" template x "$chart" --set mode=daemonset --set sharding.enabled=false 2>&1); then
  fail "a DaemonSet without sharding rendered; the chart must refuse a writer per node"
fi
"$helm" template x "$chart" --set replicaCount=3 | grep -q -- '--sharding=true' \
  || fail "replicaCount=3 with sharding must render sharded replicas"
# An empty NetworkPolicy peer list means "everyone": never rendered.
if out=$("$helm" template x "$chart" --set networkPolicy.apiServer.cidrs=null 2>&1); then
  fail "an empty API server CIDR list rendered (egress anywhere)"
fi
"$helm" template x "$chart" --set networkPolicy.scrapeFrom=null \
  | grep -q '^  ingress: \[\]$' || fail "no scrapers must render 'ingress: []' (no ingress)"

part "helm template"
"$helm" template kura-health-agent "$chart" --namespace kura-system --include-crds \
  > "$dir/default.yaml"
"$helm" template kura-health-agent "$chart" --namespace kura-system --include-crds \
  -f "$dir/variant-values.yaml" > "$dir/variant.yaml"
grep -q '^kind: ServiceMonitor' "$dir/variant.yaml" || fail "the variant has no ServiceMonitor"
grep -q '^kind: ServiceMonitor' "$dir/default.yaml" && fail "ServiceMonitor rendered although disabled"
# The variant without the ServiceMonitor (no Prometheus Operator CRD here).
awk 'BEGIN{RS="\n---\n"; ORS="\n---\n"} !/\nkind: ServiceMonitor\n/' "$dir/variant.yaml" \
  > "$dir/variant-applicable.yaml"
cat > "$dir/kurainstance.yaml" <<'EOF'
apiVersion: kura.tuist.dev/v1alpha1
kind: KuraInstance
metadata: {name: example, namespace: kura-a}
spec: {image: "ghcr.io/tuist/kura:1.0.0", replicas: 3, accountHandle: acme, region: eu}
EOF

part "kube-apiserver + etcd up"
"$root/scripts/k8s-up.sh" "$k8s_dir"
# shellcheck disable=SC1091
. "$k8s_dir/env"

part "JSON Schemas from the API server"
kubectl apply --server-side -f "$chart/crds/"
kubectl wait --for=condition=Established --timeout=60s crd/kurainstances.kura.tuist.dev
kubectl get --raw /openapi/v2 > "$dir/openapi-v2.json"
python3 "$root/scripts/k8s-json-schemas.py" "$dir/openapi-v2.json" "$dir/schemas"

part "kubeconform -strict"
echo "chart-check: kind ServiceMonitor is skipped: no schema (no Prometheus Operator CRD in this API server)"
"$KURA_KUBECONFORM" -strict -summary -output text \
  -schema-location "$dir/schemas/{{ .ResourceKind }}{{ .KindSuffix }}.json" \
  -skip ServiceMonitor \
  "$dir/default.yaml" "$dir/variant.yaml" "$dir/kurainstance.yaml"

part "apply to the API server"
kubectl create namespace kura-system
kubectl create namespace kura-a
kubectl apply --server-side --field-manager=chart-check -f "$dir/default.yaml"
kubectl get -f "$dir/default.yaml" -o name
kubectl apply --server-side --field-manager=chart-check -f "$dir/variant-applicable.yaml"
kubectl get -f "$dir/variant-applicable.yaml" -o name
kubectl apply --server-side --field-manager=chart-check -f "$dir/kurainstance.yaml"

part "stored objects keep the chart's promises"
kubectl get -n kura-system deployment,serviceaccount,networkpolicy,poddisruptionbudget,service,role -o json \
  > "$dir/namespaced.json"
kubectl get clusterrole,clusterrolebinding -l app.kubernetes.io/name=kura-health-agent -o json \
  > "$dir/cluster.json"
python3 - "$dir/namespaced.json" "$dir/cluster.json" <<'EOF'
import json, sys
items = json.load(open(sys.argv[1]))["items"] + json.load(open(sys.argv[2]))["items"]
by_kind = {}
for o in items:
    by_kind.setdefault(o["kind"], []).append(o)
problems = []
def check(cond, what):
    if not cond:
        problems.append(what)

deps = by_kind.get("Deployment", [])
check(len(deps) == 1, f"one Deployment, got {len(deps)}")
for d in deps:
    spec = d["spec"]
    check(spec["replicas"] == 1, "replicas 1")
    # Sharded (the default): overlap is safe because every write is fenced
    # by the replica's Lease, so a rolling update never leaves a gap.
    check(spec["strategy"]["type"] == "RollingUpdate"
          and spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0,
          "sharded Deployment: RollingUpdate without unavailability")
    pod = spec["template"]["spec"]
    psc = pod.get("securityContext", {})
    check(psc.get("runAsNonRoot") is True, "pod runAsNonRoot")
    check(psc.get("seccompProfile", {}).get("type") == "RuntimeDefault", "pod seccomp RuntimeDefault")
    (c,) = pod["containers"]
    sc = c.get("securityContext", {})
    check(sc.get("runAsNonRoot") is True, "container runAsNonRoot")
    check(sc.get("readOnlyRootFilesystem") is True, "readOnlyRootFilesystem")
    check(sc.get("allowPrivilegeEscalation") is False, "no privilege escalation")
    check(sc.get("capabilities", {}).get("drop") == ["ALL"], "drop ALL capabilities")
    check(sc.get("seccompProfile", {}).get("type") == "RuntimeDefault", "container seccomp RuntimeDefault")
    check(c.get("livenessProbe", {}).get("httpGet", {}).get("path") == "/healthz", "liveness /healthz")
    check(c.get("readinessProbe", {}).get("httpGet", {}).get("path") == "/readyz", "readiness /readyz")
    check("memory" in c.get("resources", {}).get("limits", {}), "memory limit")
    check("cpu" in c.get("resources", {}).get("requests", {}), "cpu request")
    check(pod.get("serviceAccountName") == "kura-health-agent", "runs as the chart's ServiceAccount")
    check("--sharding=true" in c.get("args", []), "sharding on (the chart's default)")

(lease_role,) = by_kind.get("Role", [None])
lease_rules = sorted((g, r) for rule in lease_role["rules"] for g in rule["apiGroups"]
                     for r in rule["resources"])
check(lease_rules == [("coordination.k8s.io", "leases")],
      f"the namespaced Role grants Leases only, got {lease_rules}")

(role,) = by_kind.get("ClusterRole", [None])
rules = sorted((g, r, v) for rule in role["rules"] for g in rule["apiGroups"]
               for r in rule["resources"] for v in rule["verbs"])
want = sorted([("", "pods", v) for v in ("get", "list", "watch")]
              + [("kura.tuist.dev", "kurainstances", v) for v in ("get", "list", "watch")]
              + [("kura.tuist.dev", "kurainstances/status", "patch")]
              + [("events.k8s.io", "events", v) for v in ("create", "patch")])
check(rules == want, f"least-privilege ClusterRole, got {rules}")
(binding,) = by_kind.get("ClusterRoleBinding", [None])
check(binding["subjects"] == [{"kind": "ServiceAccount", "name": "kura-health-agent",
                               "namespace": "kura-system"}], "binding to the chart's ServiceAccount")

(np,) = by_kind.get("NetworkPolicy", [None])
check(sorted(np["spec"]["policyTypes"]) == ["Egress", "Ingress"], "NetworkPolicy covers both directions")
ingress = np["spec"]["ingress"]
check(len(ingress) == 1 and [p["port"] for p in ingress[0]["ports"]] == [8080]
      and ingress[0].get("from"), "ingress: the debug port, only from the scrapers")
egress_ports = sorted(p["port"] for e in np["spec"]["egress"] for p in e["ports"])
check(egress_ports == [443, 4000, 6443], f"egress: report port and API server, got {egress_ports}")
check(len(by_kind.get("PodDisruptionBudget", [])) == 1, "a PodDisruptionBudget")
check(len(by_kind.get("ServiceAccount", [])) == 1, "a ServiceAccount")

if problems:
    print("chart-check: the stored objects break the chart's promises:", *problems, sep="\n  ")
    sys.exit(1)
print(f"chart-check: {len(items)} stored objects keep the chart's promises")
EOF
echo "chart-check: all checks passed"
