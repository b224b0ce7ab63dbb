#!/usr/bin/env bash
# Checks of the Helm chart charts/kura-health-agent, offline except for a real
# kube-apiserver started on loopback:
#   1. helm lint (default values and a variant with serviceMonitor,
#      namespaces, a set-based pod selector, a named port and gate
#      thresholds); refused renderings must fail saying why: replicaCount 2
#      without sharding, no or a /0 API server CIDR, kube-system, extraArgs
#      overriding a flag the policy is derived from, an unreadable pod
#      selector; no scrapers and no verdict consumers must mean no ingress;
#      the rendered policy admits the scrapers (monitoring) and the Argo
#      Rollouts controller (argo-rollouts) to the debug port and nobody else
#      (scripts/chart_ingress.py); values.schema.json must
#      refuse unknown values and gate values the agent refuses (a band
#      percent over 1000, a sample age of 0, an empty soak list, an unknown
#      gate key, a wrong type) or an unknown publication.target;
#      publication.target reaches the agent (KURA_AGENT_PUBLICATION_TARGET)
#      in the Deployment and the DaemonSet; NOTES.txt names it and where to
#      read the verdict; the project's KuraInstance CRD is rendered only with
#      kuraInstanceCRD.install (crds/ holds the companion CRD only)
#   2. for a matrix of namespaces / pod selectors / ports / publication
#      targets, the NetworkPolicy and RBAC follow the agent's own arguments
#      (scripts/chart_derived.py)
#   3. helm template (with crds/) for the default, the variant and a
#      companion-target release
#   4. kubeconform -strict against JSON Schemas generated from that API
#      server's own OpenAPI (scripts/k8s-json-schemas.py): every built-in
#      kind and both CRDs; only ServiceMonitor is skipped (no
#      Prometheus Operator CRD here, so no schema for it)
#   5. the rendered manifests applied to the API server (kubectl apply
#      --server-side; a Deployment does not run without scheduler and
#      kubelet: only acceptance is checked), and the stored objects checked
#      against the chart's promises (least-privilege roles, security context,
#      probes, one replica, NetworkPolicy, PDB); the variant's ServiceAccount
#      may read pods in its namespaces only, auto may get the one KuraInstance
#      CRD, companion may never write KuraInstances (kubectl auth can-i)
#   6. the CRD stores a count of 2^63-1 (kura_schemas::api_int::API_INT_MAX)
#      and the API server refuses 2^63 and 2^64-1
#   7. the chart README's instance -> companion clean-up removes exactly the
#      agent's status fields, and keeps Kura's controller's
#   8. the CRD upgrade path of NOTES.txt (helm show crds | kubectl apply
#      --server-side) over an older companion CRD: the category (kubectl get
#      tuist) and the RolloutHealthy printer column are served afterwards;
#      helm show crds never holds the KuraInstance CRD
#   8b. mode daemonset refused by helm install --dry-run=server on more
#      Nodes (matching nodeSelector) than daemonset.maxNodes, with the
#      Deployment alternative in the message; installed within it
#   9. helm install, upgrades and uninstall in a cluster with Tuist's
#      KuraInstance CRD (testdata/crds/tuist-kurainstances.yaml) leave it
#      exactly as it was (spec, resourceVersion, generation) and install the
#      companion CRD; kuraInstanceCRD.install=true there is refused
#  10. kuraInstanceCRD.install=true without Kura's CRD: installed, upgraded,
#      kept on uninstall
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
py=python3
if ! "$py" -c 'import yaml' 2>/dev/null; then
  py=$root/.cache/venv/bin/python   # scripts/test.sh's venv has PyYAML
  "$py" -c 'import yaml'
fi
# The loopback API server's address: the NetworkPolicy requires one.
api_cidr=127.0.0.1/32
api=(--set "networkPolicy.apiServer.cidrs={$api_cidr}")

cat > "$dir/variant-values.yaml" <<EOF
serviceMonitor:
  enabled: true
  labels: {release: prometheus}
networkPolicy:
  enabled: true
  apiServer:
    cidrs: ["$api_cidr"]
watch:
  namespaces: [kura-a, kura-b]
  instanceSelector: tier=managed
  podSelector: "app.kubernetes.io/name=kura,tier!=canary,track in (stable, next),!legacy"
poll:
  portName: http
extraArgs: ["--retention=2h"]
gate:
  fdTimeoutBand: 2
  soakSeconds: [600, 120]
  maxSampleAgeSeconds: 120
  shadow:
    fdTimeoutBand: 500
EOF

part "helm lint"
"$helm" lint --strict "$chart" "${api[@]}"
"$helm" lint --strict "$chart" -f "$dir/variant-values.yaml"

part "refused renderings say why"
# refused DESCRIPTION EXPECTED-MESSAGE HELM-ARGS...: rendering must fail and
# say EXPECTED-MESSAGE.
refused() {
  local desc=$1 want=$2 out; shift 2
  if out=$("$helm" template x "$chart" --namespace kura-system "$@" 2>&1); then
    fail "$desc rendered; the chart must refuse it"
  fi
  grep -qF -- "$want" <<<"$out" || fail "$desc: refused without saying \"$want\": $out"
  echo "chart-check: refused as expected: $desc"
}
# Two replicas write one instance only without sharding: refused then;
# with sharding (the default) the Leases give every instance one writer.
refused "replicaCount=2 without sharding" "replicaCount must be 1 without sharding" \
  "${api[@]}" --set replicaCount=2 --set sharding.enabled=false
refused "a DaemonSet without sharding" "mode daemonset needs sharding.enabled=true" \
  "${api[@]}" --set mode=daemonset --set sharding.enabled=false
"$helm" template x "$chart" "${api[@]}" --set replicaCount=3 | grep -q -- '--sharding=true' \
  || fail "replicaCount=3 with sharding must render sharded replicas"
# sharding.podSelection auto: unit watches (with stamping, its RBAC and
# policy) when more than one agent runs; one replica watches all.
pod_selection() { "$helm" template x "$chart" "${api[@]}" "$@" | sed -n 's/^ *- --shard-pod-selection=//p'; }
[ "$(pod_selection)" = all ] || fail "one replica (podSelection auto) must watch all, not $(pod_selection)"
for many in "replicaCount=3" "mode=daemonset"; do
  [ "$(pod_selection --set "$many")" = instance-label ] \
    || fail "$many (podSelection auto) must watch its units by instance name, not $(pod_selection --set "$many")"
  "$helm" template x "$chart" "${api[@]}" --set "$many" | grep -q '^kind: ValidatingAdmissionPolicy$' \
    || fail "$many (podSelection auto, stamping) renders no shard-label policy"
done
[ "$(pod_selection --set replicaCount=3 --set sharding.podSelection=all)" = all ] \
  || fail "an explicit podSelection all is not kept with replicaCount=3"
# No broad egress: the API server's address is required, never a /0 (an
# empty NetworkPolicy peer list would mean "everyone").
refused "the NetworkPolicy without API server CIDRs (default values)" \
  "networkPolicy.apiServer.cidrs is required while networkPolicy.enabled is true"
refused "a null API server CIDR list" "networkPolicy.apiServer.cidrs is required" \
  --set networkPolicy.apiServer.cidrs=null
refused "egress to 0.0.0.0/0" "allows egress to every address" \
  --set 'networkPolicy.apiServer.cidrs={10.0.0.10/32,0.0.0.0/0}'
refused "egress to ::/0" "allows egress to every address" --set 'networkPolicy.apiServer.cidrs={::/0}'
refused "an API server address without a prefix" "is not a CIDR" \
  --set 'networkPolicy.apiServer.cidrs={10.0.0.10}'
if "$helm" template x "$chart" --set networkPolicy.enabled=false | grep -q '^kind: NetworkPolicy'; then
  fail "networkPolicy.enabled=false rendered a NetworkPolicy"
fi
# Never kube-system: the Lease Role would grant update/delete on the control
# plane's leader-election Leases.
if out=$("$helm" template x "$chart" --namespace kube-system "${api[@]}" 2>&1); then
  fail "a release in kube-system rendered"
fi
grep -qF "refusing to install into kube-system" <<<"$out" || fail "kube-system refused without saying why: $out"
echo "chart-check: refused as expected: a release in kube-system"
# What the NetworkPolicy and RBAC derive from cannot be overridden behind
# their back.
for arg in --port=5000 --port-name=grpc --pod-selector=app=x --namespace=other --debug-listen=0.0.0.0:9000 \
    --publication-target=instance; do
  refused "extraArgs $arg" "set it through the chart's values" "${api[@]}" --set "extraArgs={$arg}"
done
# Removed values (the policy follows watch.podSelector and watch.namespaces
# now) are refused by values.schema.json, naming them.
refused "the removed networkPolicy.kuraPodSelector" "additional properties 'kuraPodSelector' not allowed" \
  "${api[@]}" --set networkPolicy.kuraPodSelector.matchLabels.app=kura
refused "a pod selector with an operator NetworkPolicies lack" 'cannot read "a>5"' \
  "${api[@]}" --set-string 'watch.podSelector=a>5'
refused "a pod selector with an empty set" "lists no values" \
  "${api[@]}" --set-string 'watch.podSelector=a in ()'
refused "an unbalanced pod selector" "cannot be read" \
  "${api[@]}" --set-string 'watch.podSelector=a in (x'
"$helm" template x "$chart" "${api[@]}" --set networkPolicy.scrapeFrom=null --set networkPolicy.verdictFrom=null \
  | grep -q '^  ingress: \[\]$' || fail "no scrapers and no verdict consumers must render 'ingress: []' (no ingress)"
# Who reaches the debug port (/metrics, the verdict API) under the rendered
# policy: by default the scrapers (monitoring) and the Argo Rollouts
# controller (argo-rollouts, the web recipe's and Kargo's verifications);
# nobody else; each list on its own; the port follows debug.port.
ingress_case() { # NAME PORT HELM-ARGS... -- CASES...
  local name=$1 port=$2 args=() ; shift 2
  while [ "$1" != -- ]; do args+=("$1"); shift; done; shift
  "$helm" template x "$chart" --namespace kura-system "${api[@]}" "${args[@]}" > "$dir/ingress-$name.yaml"
  "$py" "$root/scripts/chart_ingress.py" "$dir/ingress-$name.yaml" "$port" "$@" \
    || fail "the NetworkPolicy's ingress ($name) is not what the recipes need"
}
ingress_case default 8080 -- \
  argo-rollouts/app.kubernetes.io/name=argo-rollouts=allow monitoring/app=prometheus=allow \
  kura-system=deny default=deny kargo=deny kura=deny
ingress_case default-other-port 8081 -- argo-rollouts=deny monitoring=deny
ingress_case port 9090 --set debug.port=9090 -- argo-rollouts=allow monitoring=allow default=deny
ingress_case no-verdict 8080 --set networkPolicy.verdictFrom=null -- argo-rollouts=deny monitoring=allow
ingress_case no-scrape 8080 --set networkPolicy.scrapeFrom=null -- argo-rollouts=allow monitoring=deny
ingress_case kargo 8080 --set-json 'networkPolicy.verdictFrom=[{"namespaceSelector":{"matchExpressions":[{"key":"kubernetes.io/metadata.name","operator":"In","values":["argo-rollouts","kargo"]}]}}]' -- \
  argo-rollouts=allow kargo=allow monitoring=allow default=deny
# kubeVersion: the oldest release with what the chart uses (Chart.yaml).
"$helm" template x "$chart" "${api[@]}" --kube-version 1.22.0 >/dev/null \
  || fail "Kubernetes 1.22 must be accepted (the chart's minimum)"
refused "Kubernetes 1.21" "incompatible with Kubernetes" "${api[@]}" --kube-version 1.21.14
# The chart as a subchart: values.schema.json admits Helm's `global`.
"$helm" lint --strict "$chart" "${api[@]}" --set global.imageRegistry=registry.example.com >/dev/null \
  || fail "values with global set were refused: the chart cannot be a subchart"
# ...and the usual subchart switch, `enabled` (a parent's dependency
# condition): accepted by the schema, and it switches the agent on and off.
"$helm" lint --strict "$chart" "${api[@]}" --set enabled=true >/dev/null \
  || fail "values with enabled set were refused: a parent's condition kura-health-agent.enabled cannot be used"
mkdir -p "$dir/parent/charts"
cp -r "$chart" "$dir/parent/charts/kura-health-agent"
cat > "$dir/parent/Chart.yaml" <<'PARENT'
apiVersion: v2
name: parent
version: 0.1.0
dependencies:
  - name: kura-health-agent
    version: ">=0.0.0-0"
    condition: kura-health-agent.enabled
PARENT
for on in true false; do
  kinds=$("$helm" template p "$dir/parent" --namespace kura-system \
    --set "kura-health-agent.networkPolicy.apiServer.cidrs={$api_cidr}" \
    --set "kura-health-agent.enabled=$on" | grep -c '^kind: Deployment' || true)
  want=1; [ $on = true ] || want=0
  [ "$kinds" = $want ] || fail "as a subchart with kura-health-agent.enabled=$on: $kinds Deployments, want $want"
done
# The README's CiliumNetworkPolicy for the API server selects the chart's
# pods (release kura-health-agent) on the chart's apiServer.ports.
"$helm" template kura-health-agent "$chart" --namespace kura-system "${api[@]}" > "$dir/cilium-release.yaml"
"$py" - "$chart/README.md" "$dir/cilium-release.yaml" "$chart/values.yaml" <<'CILIUM' || fail "the README's CiliumNetworkPolicy does not fit the chart"
import re, sys, yaml
readme, rendered, values = sys.argv[1:]
text = open(readme).read()
m = re.search(r"<!-- cilium-apiserver-policy:.*?-->\n```yaml\n(.*?)```", text, re.S)
assert m, "no cilium-apiserver-policy block in the README"
policy = yaml.safe_load(m.group(1))
assert policy["kind"] == "CiliumNetworkPolicy", policy["kind"]
deploy = [d for d in yaml.safe_load_all(open(rendered)) if d and d["kind"] == "Deployment"][0]
labels = deploy["spec"]["template"]["metadata"]["labels"]
selector = policy["spec"]["endpointSelector"]["matchLabels"]
assert all(labels.get(k) == v for k, v in selector.items()), (selector, labels)
assert policy["metadata"]["namespace"] == deploy["metadata"]["namespace"], policy["metadata"]
(rule,) = policy["spec"]["egress"]
assert rule["toEntities"] == ["kube-apiserver"], rule
ports = sorted(int(p["port"]) for p in rule["toPorts"][0]["ports"])
want = sorted(yaml.safe_load(open(values))["networkPolicy"]["apiServer"]["ports"])
assert ports == want, (ports, want)
print("the README's CiliumNetworkPolicy selects the chart's pods on ports %s" % ports)
CILIUM
# NOTES.txt says who reaches the verdict API and how to upgrade the CRD.
notes=$("$helm" install x "$chart" --dry-run=client --namespace kura-system "${api[@]}" 2>&1 | sed -n '/^NOTES:/,$p')
for want in "networkPolicy.verdictFrom" "kubernetes.io/metadata.name: argo-rollouts" \
    "/api/v1/instances/NAMESPACE/NAME/verdict" "kubectl apply --server-side --force-conflicts"; do
  grep -qF -- "$want" <<<"$notes" || fail "NOTES.txt does not say \"$want\": $notes"
done
notes=$("$helm" install x "$chart" --dry-run=client --namespace kura-system "${api[@]}" \
  --set networkPolicy.verdictFrom=null 2>&1 | sed -n '/^NOTES:/,$p')
grep -qF "a web" <<<"$notes" || fail "NOTES.txt does not warn that no verdict consumer is admitted: $notes"
# The evaluator itself can say deny: a policy that admits everybody on the
# port (an empty `from`) fails it.
sed 's/^    - from:$/    - ports: [{port: 8080}]\n      x-from:/' "$dir/ingress-default.yaml" > "$dir/ingress-open.yaml"
if "$py" "$root/scripts/chart_ingress.py" "$dir/ingress-open.yaml" 8080 default=deny >/dev/null; then
  fail "chart_ingress.py admitted nobody extra under a policy open to everybody"
fi
# values.schema.json: what the agent would refuse at start-up is refused at
# install time, naming the value.
schema_refused() { # WANT ARGS...: helm lint must fail and say WANT
  local want=$1; shift
  if out=$("$helm" lint --strict "$chart" "${api[@]}" "$@" 2>&1); then
    fail "values $* passed the schema; they must be refused"
  fi
  grep -qF -- "$want" <<<"$out" || fail "values $*: refused without naming $want: $out"
}
schema_refused "/gate/outboxBandPercent" --set gate.outboxBandPercent=5000
schema_refused "/gate/peerFailureBandPercent" --set gate.peerFailureBandPercent=1001
schema_refused "/gate/maxSampleAgeSeconds" --set gate.maxSampleAgeSeconds=0
schema_refused "/gate/fdTimeoutBand" --set gate.fdTimeoutBand=-1
schema_refused "/gate/fdTimeoutBand" --set-string gate.fdTimeoutBand=two
schema_refused "additional properties 'fdTimeoutBands' not allowed" --set gate.fdTimeoutBands=2
schema_refused "/gate/shadow/outboxBandPercent" --set gate.shadow.outboxBandPercent=5000
schema_refused "additional properties 'fdTimeoutBands' not allowed" --set gate.shadow.fdTimeoutBands=2
schema_refused "additional properties 'pol' not allowed" --set pol.port=4000
schema_refused "/poll/port" --set poll.port=70000
schema_refused "/poll/interval" --set poll.interval=10
schema_refused "/poll/steadyInterval" --set poll.steadyInterval=30
schema_refused "/poll/portName" --set poll.portName=Not_A_Port
schema_refused "/logFormat" --set logFormat=xml
schema_refused "/publication/target" --set publication.target=both
schema_refused "/kuraInstanceCRD/install" --set-string kuraInstanceCRD.install=yes
# publication.target reaches the agent (KURA_AGENT_PUBLICATION_TARGET) in
# both workloads; auto by default.
for mode in deployment daemonset; do
  for target in auto instance companion; do
    set_target=(--set "publication.target=$target")
    [ "$target" = auto ] && set_target=()
    got=$("$helm" template x "$chart" "${api[@]}" --set mode=$mode "${set_target[@]}" \
      | "$py" -c 'import sys,yaml
(w,) = [d for d in yaml.safe_load_all(sys.stdin) if d and d["kind"] in ("Deployment", "DaemonSet")]
(c,) = w["spec"]["template"]["spec"]["containers"]
print(w["kind"], *[e["value"] for e in c["env"] if e["name"] == "KURA_AGENT_PUBLICATION_TARGET"])')
    want="$([ $mode = deployment ] && echo Deployment || echo DaemonSet) $target"
    [ "$got" = "$want" ] || fail "publication.target=$target, mode $mode: the agent is given '$got', want '$want'"
  done
done
echo "chart-check: publication.target reaches the Deployment's and the DaemonSet's agent"
# The project's KuraInstance CRD: not rendered (nor in crds/) by default;
# with kuraInstanceCRD.install the generated file, kept on uninstall.
"$helm" template x "$chart" "${api[@]}" --include-crds | grep -q 'name: kurainstances.kura.tuist.dev$' \
  && fail "the default rendering (with crds/) holds the KuraInstance CRD: the chart must not ship Kura's CRD"
[ "$(ls "$chart/crds")" = kurainstancehealths.health.kura.tuist.dev.yaml ] \
  || fail "crds/ must hold the companion CRD only: $(ls "$chart/crds")"
"$helm" template x "$chart" "${api[@]}" --set kuraInstanceCRD.install=true \
  --show-only templates/kurainstance-crd.yaml > "$dir/kurainstance-crd.yaml"
"$py" - "$dir/kurainstance-crd.yaml" "$chart/files/kurainstances.kura.tuist.dev.yaml" <<'PY' \
  || fail "kuraInstanceCRD.install=true does not render the generated CRD with resource-policy keep"
import sys, yaml
rendered, generated = (yaml.safe_load(open(p)) for p in sys.argv[1:])
assert rendered["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}, rendered["metadata"]
assert rendered["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
for key in ("annotations", "labels"):
    rendered["metadata"].pop(key)
assert rendered == generated, "the rendered CRD differs from files/"
PY
# NOTES.txt says the target, and with auto where to see the choice and
# which objects to read.
for target in auto instance companion; do
  notes=$("$helm" install x "$chart" --dry-run=client --namespace kura-system "${api[@]}" \
    --set publication.target=$target 2>&1 | sed -n '/^NOTES:/,$p')
  want=("Publication target: $target")
  case $target in
    auto) want+=("publication target" "kura_agent_publication_target{target=" "port-forward"
                 "kubectl get kurahealth -A" "kubectl get kura -A") ;;
    instance) want+=("kubectl get kura -A") ;;
    companion) want+=("kubectl get kurahealth -A") ;;
  esac
  for w in "${want[@]}"; do
    grep -qF -- "$w" <<<"$notes" || fail "NOTES.txt ($target) does not say \"$w\": $notes"
  done
  [ $target = companion ] && grep -qF "kubectl get kura -A" <<<"$notes" \
    && fail "NOTES.txt (companion) sends the reader to the KuraInstances: $notes"
  [ $target = instance ] && grep -qF "kurahealth" <<<"$notes" \
    && fail "NOTES.txt (instance) sends the reader to the companions: $notes"
done
echo "chart-check: NOTES.txt names the publication target and where to read the verdict"
printf 'gate:\n  soakSeconds: []\n' > "$dir/empty-soak.yaml"
schema_refused "/gate/soakSeconds" -f "$dir/empty-soak.yaml"
# The gate values reach the agent: a ConfigMap of them, mounted and passed
# with --gate-config, and a checksum that rolls the pods when they change.
# configmap_key KEY VALUES-ARGS...: the JSON document under data.KEY of the
# gate ConfigMap (empty when there is no such key).
configmap_key() {
  local key=$1; shift
  "$helm" template x "$chart" "$@" --show-only templates/gate-configmap.yaml \
    | "$py" -c 'import json,sys,yaml; d=yaml.safe_load(sys.stdin)["data"]; print(json.dumps(json.loads(d[sys.argv[1]]), separators=(",", ":")) if sys.argv[1] in d else "")' "$key"
}
gate_json=$(configmap_key gate.json -f "$dir/variant-values.yaml")
[ "$gate_json" = '{"fdTimeoutBand":2,"maxSampleAgeSeconds":120,"soakSeconds":[600,120]}' ] \
  || fail "the gate ConfigMap holds $gate_json"
# values gate.shadow: its own document and --shadow-gate-config; never
# mixed into gate.json; nothing of it without the value.
shadow_json=$(configmap_key shadow-gate.json -f "$dir/variant-values.yaml")
[ "$shadow_json" = '{"fdTimeoutBand":500}' ] || fail "the shadow document is $shadow_json"
"$helm" template x "$chart" -f "$dir/variant-values.yaml" | grep -qF -- '--shadow-gate-config=/etc/kura-health-agent/shadow-gate.json' \
  || fail "gate.shadow set, but the agent is not given --shadow-gate-config"
[ -z "$(configmap_key shadow-gate.json "${api[@]}")" ] || fail "a shadow document without gate.shadow"
if "$helm" template x "$chart" "${api[@]}" | grep -q -- 'shadow-gate'; then
  fail "the default rendering mentions a shadow configuration"
fi
sum_default=$("$helm" template x "$chart" "${api[@]}" | grep 'checksum/gate-config' | sort -u)
sum_variant=$("$helm" template x "$chart" -f "$dir/variant-values.yaml" | grep 'checksum/gate-config' | sort -u)
[ -n "$sum_default" ] && [ "$sum_default" != "$sum_variant" ] \
  || fail "the pod template's checksum/gate-config must change with the gate values"

part "NetworkPolicy and RBAC follow the agent's arguments (scripts/chart_derived.py)"
# The policy must allow exactly what the agent polls with the arguments it
# is given, and the RBAC must match the namespaces it watches.
derived_case=0
derived() {
  derived_case=$((derived_case + 1))
  "$helm" template x "$chart" --namespace kura-system "$@" > "$dir/derived-$derived_case.yaml"
  "$py" "$root/scripts/chart_derived.py" "$dir/derived-$derived_case.yaml" "$api_cidr"
}
derived "${api[@]}"
derived "${api[@]}" --set poll.port=4100
derived "${api[@]}" --set poll.portName=http
derived "${api[@]}" --set-string watch.podSelector=
derived "${api[@]}" --set-string 'watch.podSelector=app=kura\,a=1\,a=2\,example.com/role==cache'
derived "${api[@]}" --set-string 'watch.podSelector=!legacy\,present\,t notin (x\, y)'
derived "${api[@]}" --set 'watch.namespaces={kura-a}'
derived "${api[@]}" --set mode=daemonset --set 'watch.namespaces={kura-a,kura-b,kura-c}'
# Unit watches (podSelection auto with 3 replicas): patch on kurainstances
# for the stamps, and none without stamping.
derived "${api[@]}" --set replicaCount=3
derived "${api[@]}" --set replicaCount=3 --set sharding.stampLabels=false --set 'watch.namespaces={kura-a}'
derived -f "$dir/variant-values.yaml"
# The publication target's writes and nothing else; the CRD read (auto
# only) is cluster-wide even with namespaces.
for target in instance companion auto; do
  derived "${api[@]}" --set publication.target=$target
  derived "${api[@]}" --set publication.target=$target --set 'watch.namespaces={kura-a,kura-b}'
  derived "${api[@]}" --set publication.target=$target --set mode=daemonset --set nodeLocal.enabled=true
done
grep -q 'kurainstances/status' "$dir/derived-$((derived_case - 1)).yaml" \
  || fail "auto (namespaces) does not grant kurainstances/status"
# Node-local instances: pods/portforward granted with --port-forward-streams.
derived "${api[@]}" --set nodeLocal.enabled=true --set nodeLocal.portForwardStreams=3
derived "${api[@]}" --set nodeLocal.enabled=true --set 'watch.namespaces={kura-a,kura-b}'
grep -q -- '--port-forward-streams=3' "$dir/derived-$((derived_case - 1)).yaml" \
  || fail "nodeLocal.portForwardStreams is not passed to the agent"
grep -q 'pods/portforward' "$dir/derived-1.yaml" \
  && fail "pods/portforward granted although nodeLocal.enabled is false"
sed 's#pods/portforward#pods/exec#' "$dir/derived-$((derived_case - 1)).yaml" > "$dir/drifted-pf.yaml"
if "$py" "$root/scripts/chart_derived.py" "$dir/drifted-pf.yaml" "$api_cidr" >/dev/null; then
  fail "chart_derived.py accepted another grant than pods/portforward"
fi
"$helm" template x "$chart" --namespace kura-system \
  --set 'networkPolicy.apiServer.cidrs={10.0.0.10/32,fd00::10/128}' > "$dir/two-cidrs.yaml"
"$py" "$root/scripts/chart_derived.py" "$dir/two-cidrs.yaml" 10.0.0.10/32 fd00::10/128
# The checker itself catches RBAC that no longer follows the target.
"$helm" template x "$chart" --namespace kura-system "${api[@]}" --set publication.target=companion \
  | sed 's#resources: \["kurainstancehealths/status"\]#resources: ["kurainstancehealths/status", "kurainstances/status"]#' \
  > "$dir/drifted-companion.yaml"
grep -q '"kurainstances/status"' "$dir/drifted-companion.yaml" || fail "the drifted companion rendering is not drifted"
if "$py" "$root/scripts/chart_derived.py" "$dir/drifted-companion.yaml" "$api_cidr" >/dev/null; then
  fail "chart_derived.py accepted kurainstances/status for the companion target"
fi
grep -v 'resourceNames: \["kurainstances.kura.tuist.dev"\]' "$dir/derived-1.yaml" > "$dir/drifted-crd.yaml"
if "$py" "$root/scripts/chart_derived.py" "$dir/drifted-crd.yaml" "$api_cidr" >/dev/null; then
  fail "chart_derived.py accepted a CRD read not restricted to kurainstances.kura.tuist.dev"
fi
"$helm" template x "$chart" --namespace kura-system "${api[@]}" --set publication.target=companion \
  | sed 's#value: "companion"#value: "instance"#' > "$dir/drifted-target.yaml"
if "$py" "$root/scripts/chart_derived.py" "$dir/drifted-target.yaml" "$api_cidr" >/dev/null; then
  fail "chart_derived.py did not read the target from KURA_AGENT_PUBLICATION_TARGET"
fi
# The checker itself catches a policy that no longer follows the agent.
sed 's/- port: 4000$/- port: 4001/' "$dir/derived-1.yaml" > "$dir/drifted.yaml"
if "$py" "$root/scripts/chart_derived.py" "$dir/drifted.yaml" "$api_cidr" >/dev/null; then
  fail "chart_derived.py accepted a NetworkPolicy on another port than the agent polls"
fi

part "helm template"
"$helm" template kura-health-agent "$chart" --namespace kura-system --include-crds \
  "${api[@]}" > "$dir/default.yaml"
# The variant as a release of its own in a namespace of its own, so that its
# namespaced RBAC is checked apart from the default's ClusterRole.
"$helm" template kura-variant "$chart" --namespace kura-variant --include-crds \
  -f "$dir/variant-values.yaml" > "$dir/variant.yaml"
# The companion target, watching one namespace: its least privilege is
# checked against the API server too.
"$helm" template kura-companion "$chart" --namespace kura-companion "${api[@]}" \
  --set publication.target=companion --set 'watch.namespaces={kura-c}' > "$dir/companion.yaml"
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
cat > "$dir/kurainstancehealth.yaml" <<'EOF'
apiVersion: health.kura.tuist.dev/v1alpha1
kind: KuraInstanceHealth
metadata: {name: example, namespace: kura-a}
spec: {}
EOF

part "kube-apiserver + etcd up"
"$root/scripts/k8s-up.sh" "$k8s_dir"
# shellcheck disable=SC1091
. "$k8s_dir/env"

part "JSON Schemas from the API server"
# The companion CRD (crds/) and the project's KuraInstance CRD (files/,
# kuraInstanceCRD.install): the latter stands in for Kura's here.
# Polled, not `kubectl wait --for=condition=Established`: that fails at once
# ("accessor error: <nil>") when it reads a CRD before its first status.
crd_established() { # CRD...: each Established within 60 s
  local crd i
  for crd in "$@"; do
    for i in $(seq 1 120); do
      [ "$(kubectl get crd "$crd" -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" = True ] && break
      [ "$i" -lt 120 ] || return 1
      sleep 0.5
    done
  done
}
kubectl apply --server-side -f "$chart/crds/" -f "$chart/files/kurainstances.kura.tuist.dev.yaml"
crd_established kurainstances.kura.tuist.dev kurainstancehealths.health.kura.tuist.dev
kubectl get --raw /openapi/v2 > "$dir/openapi-v2.json"
python3 "$root/scripts/k8s-json-schemas.py" "$dir/openapi-v2.json" "$dir/schemas"

part "kubeconform -strict"
echo "chart-check: kind ServiceMonitor is skipped: no schema (no Prometheus Operator CRD in this API server)"
"$KURA_KUBECONFORM" -strict -summary -output text \
  -schema-location "$dir/schemas/{{ .ResourceKind }}{{ .KindSuffix }}.json" \
  -skip ServiceMonitor \
  "$dir/default.yaml" "$dir/variant.yaml" "$dir/companion.yaml" "$dir/kurainstance.yaml" \
  "$dir/kurainstancehealth.yaml" "$dir/kurainstance-crd.yaml"

part "apply to the API server"
for ns in kura-system kura-variant kura-companion kura-a kura-b kura-c; do kubectl create namespace "$ns"; done
kubectl apply --server-side --field-manager=chart-check -f "$dir/default.yaml"
kubectl get -f "$dir/default.yaml" -o name
kubectl apply --server-side --field-manager=chart-check -f "$dir/variant-applicable.yaml"
kubectl get -f "$dir/variant-applicable.yaml" -o name
kubectl apply --server-side --field-manager=chart-check -f "$dir/companion.yaml"
kubectl apply --server-side --field-manager=chart-check -f "$dir/kurainstance.yaml"
kubectl apply --server-side --field-manager=chart-check -f "$dir/kurainstancehealth.yaml"

part "stored objects keep the chart's promises"
kubectl get -n kura-system deployment,serviceaccount,networkpolicy,poddisruptionbudget,service,role,configmap -o json \
  > "$dir/namespaced.json"
kubectl get clusterrole,clusterrolebinding -l app.kubernetes.io/instance=kura-health-agent -o json \
  > "$dir/cluster.json"
kubectl get -n kura-variant configmap kura-variant-kura-health-agent-gate -o json \
  > "$dir/variant-gate.json"
python3 - "$dir/namespaced.json" "$dir/cluster.json" "$dir/variant-gate.json" <<'EOF'
import json, sys
items = json.load(open(sys.argv[1]))["items"] + json.load(open(sys.argv[2]))["items"]
variant_gate = json.load(open(sys.argv[3]))
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
    check("--gate-config=/etc/kura-health-agent/gate.json" in c.get("args", []),
          "the agent reads the gate ConfigMap (--gate-config)")
    mounts = {m["name"]: m for m in c.get("volumeMounts", [])}
    check(mounts.get("gate-config", {}).get("mountPath") == "/etc/kura-health-agent"
          and mounts["gate-config"].get("readOnly") is True, "gate config mounted read-only")
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    check(vols.get("gate-config", {}).get("configMap", {}).get("name") == "kura-health-agent-gate",
          "the gate-config volume is the gate ConfigMap")

(lease_role,) = by_kind.get("Role", [None])
lease_rules = sorted((g, r) for rule in lease_role["rules"] for g in rule["apiGroups"]
                     for r in rule["resources"])
check(lease_rules == [("coordination.k8s.io", "leases")],
      f"the namespaced Role grants Leases only, got {lease_rules}")

def rules_of(role):
    return sorted((g, r, v, tuple(rule.get("resourceNames") or ())) for rule in role["rules"]
                  for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"])
roles = {r["metadata"]["name"]: r for r in by_kind.get("ClusterRole", [])}
check(sorted(roles) == ["kura-health-agent", "kura-health-agent-crd-read"],
      f"two ClusterRoles (the watch rules, the CRD read of auto), got {sorted(roles)}")
# publication.target auto (the default): both targets' writes.
want = sorted([("", "pods", v, ()) for v in ("get", "list", "watch")]
              + [("kura.tuist.dev", "kurainstances", v, ()) for v in ("get", "list", "watch")]
              + [("kura.tuist.dev", "kurainstances/status", "patch", ())]
              + [("health.kura.tuist.dev", "kurainstancehealths", v, ())
                 for v in ("get", "list", "watch", "create", "patch")]
              + [("health.kura.tuist.dev", "kurainstancehealths/status", "patch", ())]
              + [("events.k8s.io", "events", v, ()) for v in ("create", "patch")])
got = rules_of(roles.get("kura-health-agent", {"rules": []}))
check(got == want, f"least-privilege ClusterRole, got {got}")
crd_read = [("apiextensions.k8s.io", "customresourcedefinitions", "get", ("kurainstances.kura.tuist.dev",))]
check(rules_of(roles.get("kura-health-agent-crd-read", {"rules": []})) == crd_read,
      "the CRD-read ClusterRole: get on kurainstances.kura.tuist.dev only")
bindings = by_kind.get("ClusterRoleBinding", [])
check(len(bindings) == 2, f"two ClusterRoleBindings, got {len(bindings)}")
for binding in bindings:
    check(binding["subjects"] == [{"kind": "ServiceAccount", "name": "kura-health-agent",
                                   "namespace": "kura-system"}], "binding to the chart's ServiceAccount")

(np,) = by_kind.get("NetworkPolicy", [None])
check(sorted(np["spec"]["policyTypes"]) == ["Egress", "Ingress"], "NetworkPolicy covers both directions")
ingress = np["spec"]["ingress"]
check(len(ingress) == 2 and all([p["port"] for p in r["ports"]] == [8080] and r.get("from") for r in ingress),
      "ingress: the debug port, only from the scrapers and the verdict API's consumers")
egress_ports = sorted(p["port"] for e in np["spec"]["egress"] for p in e["ports"])
check(egress_ports == [443, 4000, 6443], f"egress: report port and API server, got {egress_ports}")
check(len(by_kind.get("PodDisruptionBudget", [])) == 1, "a PodDisruptionBudget")
gate_maps = [c for c in by_kind.get("ConfigMap", []) if c["metadata"]["name"] == "kura-health-agent-gate"]
# The default release sets no threshold (the agent's defaults apply); the
# variant (its own release and namespace) sets three.
check(len(gate_maps) == 1 and json.loads(gate_maps[0]["data"]["gate.json"]) == {},
      "the default gate ConfigMap is empty (the agent's defaults)")
check(json.loads(variant_gate["data"]["gate.json"])
      == {"fdTimeoutBand": 2, "maxSampleAgeSeconds": 120, "soakSeconds": [600, 120]},
      "the variant's gate ConfigMap holds its gate values")
check(json.loads(variant_gate["data"].get("shadow-gate.json", "null")) == {"fdTimeoutBand": 500},
      "the variant's gate ConfigMap holds its shadow gate values apart")
check(len(by_kind.get("ServiceAccount", [])) == 1, "a ServiceAccount")

if problems:
    print("chart-check: the stored objects break the chart's promises:", *problems, sep="\n  ")
    sys.exit(1)
print(f"chart-check: {len(items)} stored objects keep the chart's promises")
EOF
part "RBAC: the variant reads only its namespaces"
can() { kubectl auth can-i --as="system:serviceaccount:$1" "${@:2}" 2>/dev/null || true; }
variant_sa=kura-variant:kura-variant-kura-health-agent
default_sa=kura-system:kura-health-agent
expect_can() { # yes|no SA VERB RESOURCE [ARGS...]
  local want=$1 got; shift
  got=$(can "$@")
  [ "$got" = "$want" ] || fail "can-i $* answered '$got', want '$want'"
  echo "chart-check: rbac: can-i $* -> $want"
}
for ns in kura-a kura-b; do
  for verb in get list watch; do
    expect_can yes "$variant_sa" "$verb" pods -n "$ns"
    expect_can yes "$variant_sa" "$verb" kurainstances.kura.tuist.dev -n "$ns"
  done
  expect_can yes "$variant_sa" patch kurainstances.kura.tuist.dev --subresource=status -n "$ns"
  expect_can no "$variant_sa" patch kurainstances.kura.tuist.dev -n "$ns"
  # auto: the companions too (a server-side apply creates them).
  for verb in get list watch create patch; do
    expect_can yes "$variant_sa" "$verb" kurainstancehealths.health.kura.tuist.dev -n "$ns"
  done
  expect_can yes "$variant_sa" patch kurainstancehealths.health.kura.tuist.dev --subresource=status -n "$ns"
  expect_can no "$variant_sa" delete kurainstancehealths.health.kura.tuist.dev -n "$ns"
  expect_can no "$variant_sa" get secrets -n "$ns"
done
expect_can no "$variant_sa" list pods -n kura-c
expect_can no "$variant_sa" list pods --all-namespaces
expect_can no "$variant_sa" list kurainstances.kura.tuist.dev --all-namespaces
expect_can yes "$default_sa" list pods --all-namespaces
# auto reads the one KuraInstance CRD, even with namespaces: nothing else
# cluster-wide.
for sa in "$variant_sa" "$default_sa"; do
  expect_can yes "$sa" get customresourcedefinitions.apiextensions.k8s.io/kurainstances.kura.tuist.dev
  expect_can no "$sa" get customresourcedefinitions.apiextensions.k8s.io/kurainstancehealths.health.kura.tuist.dev
  expect_can no "$sa" list customresourcedefinitions.apiextensions.k8s.io
  expect_can no "$sa" patch customresourcedefinitions.apiextensions.k8s.io/kurainstances.kura.tuist.dev
done
cluster_wide=$(kubectl get clusterrole,clusterrolebinding -l app.kubernetes.io/instance=kura-variant -o name | sort | tr '\n' ' ')
[ "$cluster_wide" = "clusterrole.rbac.authorization.k8s.io/kura-variant-kura-health-agent-crd-read clusterrolebinding.rbac.authorization.k8s.io/kura-variant-kura-health-agent-crd-read " ] \
  || fail "the variant (namespaces set) stored other cluster-wide RBAC than the CRD read: $cluster_wide"

part "RBAC: the companion target never writes KuraInstances"
companion_sa=kura-companion:kura-companion-kura-health-agent
for verb in get list watch create patch; do
  expect_can yes "$companion_sa" "$verb" kurainstancehealths.health.kura.tuist.dev -n kura-c
done
expect_can yes "$companion_sa" patch kurainstancehealths.health.kura.tuist.dev --subresource=status -n kura-c
expect_can yes "$companion_sa" get kurainstances.kura.tuist.dev -n kura-c
expect_can no "$companion_sa" patch kurainstances.kura.tuist.dev --subresource=status -n kura-c
expect_can no "$companion_sa" patch kurainstances.kura.tuist.dev -n kura-c
expect_can no "$companion_sa" update kurainstances.kura.tuist.dev --subresource=status -n kura-c
expect_can no "$companion_sa" create kurainstancehealths.health.kura.tuist.dev -n kura-a
expect_can no "$companion_sa" get customresourcedefinitions.apiextensions.k8s.io/kurainstances.kura.tuist.dev
kubectl get clusterrole,clusterrolebinding -l app.kubernetes.io/instance=kura-companion -o name \
  | grep . && fail "the companion release (namespaces set, no auto) stored cluster-wide RBAC"

part "shard-label policy: the agent's ServiceAccount may add kura.tuist.dev/shard to a KuraInstance, nothing else"
# Unit watches with stamping: `patch` on kurainstances (RBAC cannot narrow
# it to one label) and the ValidatingAdmissionPolicy that does.
"$helm" template kura-units "$chart" --namespace kura-units "${api[@]}" \
  --set sharding.podSelection=instance-label --set 'watch.namespaces={kura-u}' > "$dir/units.yaml"
grep -q '^kind: ValidatingAdmissionPolicy$' "$dir/units.yaml" || fail "no ValidatingAdmissionPolicy with stamping"
grep -q '^kind: ValidatingAdmissionPolicy' "$dir/default.yaml" && fail "a ValidatingAdmissionPolicy without stamping (one replica: podSelection auto is all)"
"$helm" template kura-units "$chart" --namespace kura-units "${api[@]}" --set sharding.podSelection=instance-label \
  --set sharding.stampPolicy=false | grep -q '^kind: ValidatingAdmissionPolicy' && fail "stampPolicy=false still renders the policy"
for ns in kura-units kura-u; do kubectl create namespace "$ns"; done
kubectl apply --server-side --field-manager=chart-check -f "$dir/units.yaml"
units_sa=system:serviceaccount:kura-units:kura-units-kura-health-agent
cat > "$dir/unit-instance.yaml" <<'EOF'
apiVersion: kura.tuist.dev/v1alpha1
kind: KuraInstance
metadata: {name: stamped, namespace: kura-u, labels: {tier: managed}}
spec: {image: "ghcr.io/tuist/kura:1.0.0", replicas: 3, accountHandle: acme, region: eu}
EOF
kubectl apply --server-side --field-manager=chart-check -f "$dir/unit-instance.yaml"
as_agent() { kubectl --as="$units_sa" -n kura-u "$@"; }
refused() { # WHAT COMMAND...: the API server must refuse it, naming the policy
  local what=$1 out; shift
  if out=$("$@" 2>&1); then fail "policy: $what was allowed: $out"; fi
  case $out in *kura-units-kura-health-agent-shard-label-only*) ;; *) fail "policy: $what refused for another reason: $out" ;; esac
  echo "chart-check: policy: $what -> refused"
}
# The policy is enforced once the API server has loaded it (a moment).
for _ in $(seq 1 50); do
  as_agent patch kurainstance stamped --type=merge -p '{"spec":{"replicas":4}}' --dry-run=server >/dev/null 2>&1 || break
  sleep 0.2
done
refused "a change of the spec" as_agent patch kurainstance stamped --type=merge -p '{"spec":{"replicas":4}}'
refused "a change of another label" as_agent label kurainstance stamped tier=free --overwrite
refused "a new label other than the shard's" as_agent label kurainstance stamped extra=1
refused "an annotation" as_agent annotate kurainstance stamped note=x
refused "a shard label that is no bucket" as_agent label kurainstance stamped kura.tuist.dev/shard=zz
# What the agent does: a server-side apply of the one label, own manager.
echo '{"apiVersion":"kura.tuist.dev/v1alpha1","kind":"KuraInstance","metadata":{"name":"stamped","namespace":"kura-u","labels":{"kura.tuist.dev/shard":"6f"}}}' \
  | as_agent apply --server-side --field-manager=kura-health-agent-shard-label -f - >/dev/null \
  || fail "policy: the agent's stamp was refused"
echo "chart-check: policy: the agent's stamp (server-side apply of kura.tuist.dev/shard) -> allowed"
refused "a change of a shard label already set" as_agent label kurainstance stamped kura.tuist.dev/shard=70 --overwrite
refused "removing the shard label" as_agent label kurainstance stamped kura.tuist.dev/shard-
labels=$(kubectl get kurainstance stamped -n kura-u -o jsonpath='{.metadata.labels}')
[ "$labels" = '{"kura.tuist.dev/shard":"6f","tier":"managed"}' ] || fail "policy: the instance's labels changed: $labels"
# Its status writes are the status subresource, which the policy leaves alone.
echo '{"apiVersion":"kura.tuist.dev/v1alpha1","kind":"KuraInstance","metadata":{"name":"stamped","namespace":"kura-u"},"status":{"rolloutGate":{"evaluatedAt":"2026-12-07T00:00:00Z","targetImage":"ghcr.io/tuist/kura:1.0.0","verdict":"unhealthy"}}}' \
  | as_agent apply --server-side --subresource=status --field-manager=kura-health-agent -f - >/dev/null \
  || fail "policy: a status write was refused"
echo "chart-check: policy: a status write -> allowed"
# Anyone else is not matched.
kubectl -n kura-u patch kurainstance stamped --type=merge -p '{"spec":{"replicas":4}}' >/dev/null \
  || fail "policy: an administrator's spec change was refused"
echo "chart-check: policy: an administrator's spec change -> allowed"

part "the CRD holds counts up to 2^63-1, as kura-schemas assumes"
# The status of a real KuraInstance: fdTimeoutCount at the ceiling is
# stored; one above it (and 2^64-1) is refused by the API server, which is
# why the parser refuses such counts and totals saturate there.
health() { # FD_TIMEOUT_COUNT
  printf '{"status":{"rolloutHealth":{"schemaVersion":1,"observedAt":"2026-12-01T10:00:00Z",'
  printf '"observedGeneration":1,"expectedPods":3,"sampledPods":3,"ready":true,"serving":true,'
  printf '"writerLockOwned":true,"initialDiscoveryCompleted":true,"generationConsistent":true,'
  printf '"ringConsistent":true,"ringMembers":3,"bootstrapInflightPeers":null,'
  printf '"backfillInitialCycle":"","backfillingPeers":null,"backfillDegraded":false,'
  printf '"backfillBudgetExhaustedPeers":null,"outboxMessages":null,"fdTimeoutCount":%s,' "$1"
  printf '"peerConnectionFailures":null,"memoryPressureState":0,"inflightRequests":0,'
  printf '"counterResets":0}}}'
}
kubectl patch kurainstance example -n kura-a --subresource=status --type=merge \
  -p "$(health 9223372036854775807)" >/dev/null
stored=$(kubectl get kurainstance example -n kura-a -o jsonpath='{.status.rolloutHealth.fdTimeoutCount}')
[ "$stored" = 9223372036854775807 ] || fail "2^63-1 stored as '$stored'"
echo "chart-check: the API server stores fdTimeoutCount 9223372036854775807"
for too_big in 9223372036854775808 18446744073709551615; do
  if out=$(kubectl patch kurainstance example -n kura-a --subresource=status --type=merge \
      -p "$(health "$too_big")" 2>&1); then
    fail "the API server stored fdTimeoutCount $too_big; kura_schemas::api_int::API_INT_MAX is wrong"
  fi
  echo "chart-check: the API server refuses fdTimeoutCount $too_big: $(tail -n1 <<<"$out" | cut -c1-160)"
done

part "moving instance -> companion: the chart README's clean-up of the agent's fields"
# An instance the agent wrote in instance mode (its field manager, server-side
# apply on the status) beside fields of Kura's controller (another manager);
# the README's commands remove exactly the agent's fields.
kubectl apply --server-side --field-manager=chart-check -f - >/dev/null <<'EOF'
apiVersion: kura.tuist.dev/v1alpha1
kind: KuraInstance
metadata: {name: moved, namespace: kura-b}
spec: {image: "ghcr.io/tuist/kura:1.0.0", replicas: 3}
EOF
kubectl patch kurainstance moved -n kura-b --subresource=status --type=merge --field-manager=kura-controller \
  -p '{"status":{"phase":"Running","observedImage":"ghcr.io/tuist/kura:1.0.0","readyReplicas":3}}' >/dev/null
"$py" - "$(health 42)" > "$dir/agent-status.yaml" <<'PY'
import json, sys, yaml
status = json.loads(sys.argv[1])["status"]
status["rolloutGate"] = {"verdict": "healthy", "targetImage": "ghcr.io/tuist/kura:1.0.0",
                         "evaluatedAt": "2026-12-01T10:00:00Z"}
status["conditions"] = [{"type": "RolloutHealthy", "status": "True", "reason": "Healthy", "message": "m",
                         "lastTransitionTime": "2026-12-01T10:00:00Z", "observedGeneration": 1}]
print(yaml.safe_dump({"apiVersion": "kura.tuist.dev/v1alpha1", "kind": "KuraInstance",
                      "metadata": {"name": "moved", "namespace": "kura-b"}, "status": status}))
PY
kubectl apply --server-side --force-conflicts --field-manager=kura-health-agent --subresource=status \
  -f "$dir/agent-status.yaml" >/dev/null
before=$(kubectl get kurainstance moved -n kura-b -o json)
# The first ```sh block after "**instance → companion**" in the chart README.
awk '/^\*\*instance → companion\*\*/ { found = 1 } found && /^```sh$/ { on = 1; next }
     on && /^```$/ { exit } on' "$chart/README.md" > "$dir/move-to-companion.sh"
grep -q 'field-manager=kura-health-agent' "$dir/move-to-companion.sh" \
  || fail "the chart README's instance -> companion commands were not found: $(cat "$dir/move-to-companion.sh")"
bash -euo pipefail "$dir/move-to-companion.sh" >/dev/null
after=$(kubectl get kurainstance moved -n kura-b -o json)
"$py" - "$before" "$after" <<'PY' || fail "the README's clean-up did not remove exactly the agent's fields"
import json, sys
before, after = (json.loads(a) for a in sys.argv[1:])
b, a = before["status"], after["status"]
assert {"rolloutHealth", "rolloutGate", "conditions"} <= set(b), sorted(b)
assert not {"rolloutHealth", "rolloutGate", "conditions"} & set(a), f"left: {sorted(a)}"
kept = {k: b[k] for k in ("phase", "observedImage", "readyReplicas")}
assert {k: a.get(k) for k in kept} == kept, f"Kura's controller's fields changed: {a}"
assert after["spec"] == before["spec"], "the spec changed"
print("chart-check: the README's clean-up removed rolloutHealth, rolloutGate and conditions, "
      "kept phase, observedImage, readyReplicas")
PY

part "CRD upgrade path: helm show crds | kubectl apply --server-side (NOTES.txt)"
# helm show crds holds the companion CRD only, never Kura's KuraInstance CRD.
"$helm" show crds "$chart" > "$dir/shown-crds.yaml"
[ "$(grep -c '^kind: CustomResourceDefinition' "$dir/shown-crds.yaml")" = 1 ] \
  && grep -q 'name: kurainstancehealths.health.kura.tuist.dev$' "$dir/shown-crds.yaml" \
  && ! grep -q 'name: kurainstances.kura.tuist.dev$' "$dir/shown-crds.yaml" \
  || fail "helm show crds must show the companion CRD only"
# An older companion CRD (no RolloutHealthy column, no category) in the
# cluster, as Helm leaves it on upgrade (it never upgrades crds/); the
# documented command brings the shipped one; the printer column and the
# category are then served.
"$py" - "$chart/crds/kurainstancehealths.health.kura.tuist.dev.yaml" > "$dir/old-crd.yaml" <<'PY'
import sys, yaml
crd = yaml.safe_load(open(sys.argv[1]))
crd["spec"]["names"].pop("categories")
v = crd["spec"]["versions"][0]
v["additionalPrinterColumns"] = [c for c in v["additionalPrinterColumns"] if c["name"] != "RolloutHealthy"]
print(yaml.safe_dump(crd))
PY
# Discovery (categories) with a fresh cache each time: kubectl caches it.
fresh() { kubectl --cache-dir "$(mktemp -d "$dir/kube-cache.XXXXXX")" "$@"; }
in_category() { fresh api-resources --categories=tuist -o name 2>/dev/null | grep -qx kurainstancehealths.health.kura.tuist.dev; }
# replace, not apply: the whole spec becomes the old one, whoever owned the
# newer fields (Helm creates crds/ with a plain create).
kubectl replace -f "$dir/old-crd.yaml" >/dev/null
served=1
for _ in $(seq 1 50); do
  if ! in_category; then served=; break; fi
  sleep 0.2
done
[ -z "$served" ] || fail "the old CRD still serves the category after 10 s: the upgrade check would prove nothing"
kubectl apply --server-side --force-conflicts -f "$dir/shown-crds.yaml" >/dev/null
kubectl patch kurainstancehealth example -n kura-a --subresource=status --type=merge -p \
  '{"status":{"conditions":[{"type":"RolloutHealthy","status":"False","reason":"NotReady","message":"m","lastTransitionTime":"2026-12-01T10:00:00Z","observedGeneration":1}]}}' >/dev/null
got=""
for _ in $(seq 1 50); do
  got=$(fresh get tuist -n kura-a -o name 2>/dev/null | grep kurainstancehealth || true)
  [ "$got" = kurainstancehealth.health.kura.tuist.dev/example ] && break
  sleep 0.2
done
[ "$got" = kurainstancehealth.health.kura.tuist.dev/example ] \
  || fail "kubectl get tuist does not list the KuraInstanceHealth after the upgrade: '$got'"
table=$(kubectl get kurahealth example -n kura-a)
header=$(sed -n 1p <<<"$table")
row=$(sed -n 2p <<<"$table")
grep -qw ROLLOUTHEALTHY <<<"$header" || fail "no RolloutHealthy printer column: $header"
# The other columns are empty here: the value under the header's offset.
prefix=${header%%ROLLOUTHEALTHY*}
cell=${row:${#prefix}}
[ "${cell%% *}" = False ] \
  || fail "the RolloutHealthy column does not show the condition: $header / $row"
echo "chart-check: after helm show crds | kubectl apply --server-side: kubectl get tuist lists the companion; RolloutHealthy column: False"

part "mode daemonset is refused on more nodes than daemonset.maxNodes (helm install --dry-run=server reads the Nodes)"
# Three Nodes (this API server has no kubelets: objects only), two of them
# in the pool a nodeSelector picks.
for i in 1 2 3; do
  pool=kura; [ "$i" = 3 ] && pool=other
  printf '{"apiVersion":"v1","kind":"Node","metadata":{"name":"chart-check-node-%s","labels":{"pool":"%s"}}}' "$i" "$pool" \
    | kubectl create -f - >/dev/null
done
nodes=$(kubectl get nodes -o name | wc -l)
ds=(kura-ds "$chart" --namespace kura-ds --create-namespace --dry-run=server "${api[@]}" --set mode=daemonset)
if out=$("$helm" install "${ds[@]}" --set daemonset.maxNodes=$((nodes - 1)) 2>&1); then
  fail "mode daemonset on $nodes nodes with daemonset.maxNodes=$((nodes - 1)) installed; the chart must refuse it"
fi
grep -qF "mode daemonset on $nodes nodes (daemonset.maxNodes is $((nodes - 1)))" <<<"$out" \
  || fail "mode daemonset refused without naming the node count: $out"
grep -qF "Use mode: deployment" <<<"$out" || fail "the refusal does not name the Deployment alternative: $out"
echo "chart-check: mode daemonset on $nodes nodes refused at daemonset.maxNodes=$((nodes - 1)): ${out##*Error: }" | cut -c1-240
"$helm" install "${ds[@]}" --set daemonset.maxNodes="$nodes" >/dev/null \
  || fail "mode daemonset on $nodes nodes refused at daemonset.maxNodes=$nodes"
"$helm" install "${ds[@]}" --set daemonset.maxNodes=2 --set nodeSelector.pool=kura >/dev/null \
  || fail "mode daemonset on the 2 nodes of nodeSelector pool=kura refused at daemonset.maxNodes=2"
echo "chart-check: mode daemonset installs within daemonset.maxNodes ($nodes nodes; 2 with nodeSelector pool=kura)"
kubectl delete node chart-check-node-1 chart-check-node-2 chart-check-node-3 --wait=true >/dev/null

part "helm install and upgrade beside Tuist's KuraInstance CRD leave it exactly as it was"
# A cluster as Tuist deploys Kura: its KuraInstance CRD (twelve-field
# rolloutHealth, no rolloutGate, no conditions; testdata/crds), and no
# companion CRD yet. The chart, installed and upgraded with helm itself,
# must not touch the former and must install the latter.
kubectl delete crd kurainstances.kura.tuist.dev kurainstancehealths.health.kura.tuist.dev --wait=true --timeout=120s >/dev/null
kubectl create -f "$root/testdata/crds/tuist-kurainstances.yaml" >/dev/null
crd_established kurainstances.kura.tuist.dev
kubectl get crd kurainstances.kura.tuist.dev -o json > "$dir/tuist-crd-before.json"
same_tuist_crd() { # WHEN
  kubectl get crd kurainstances.kura.tuist.dev -o json > "$dir/tuist-crd-after.json"
  "$py" - "$dir/tuist-crd-before.json" "$dir/tuist-crd-after.json" "$1" <<'PY' \
    || fail "Tuist's KuraInstance CRD changed ($1)"
import json, sys
before, after = (json.load(open(p)) for p in sys.argv[1:3])
diffs = [k for k in ("spec",) if before[k] != after[k]]
diffs += [f"metadata.{k}" for k in ("resourceVersion", "generation", "uid", "labels", "annotations",
                                    "managedFields", "finalizers")
          if before["metadata"].get(k) != after["metadata"].get(k)]
assert not diffs, f"changed: {diffs}"
print(f"chart-check: {sys.argv[3]}: Tuist's KuraInstance CRD unchanged (resourceVersion "
      f"{after['metadata']['resourceVersion']}, generation {after['metadata']['generation']}, same spec)")
PY
}
release=(kura-helm "$chart" --namespace kura-helm "${api[@]}")
"$helm" install "${release[@]}" --create-namespace >/dev/null
crd_established kurainstancehealths.health.kura.tuist.dev \
  || fail "helm install did not install the companion CRD"
echo "chart-check: helm install created the companion CRD kurainstancehealths.health.kura.tuist.dev"
same_tuist_crd "after helm install"
expect_can yes kura-helm:kura-helm-kura-health-agent get customresourcedefinitions.apiextensions.k8s.io/kurainstances.kura.tuist.dev
"$helm" upgrade "${release[@]}" --set publication.target=companion >/dev/null
same_tuist_crd "after helm upgrade to companion"
kubectl get clusterrole kura-helm-kura-health-agent-crd-read >/dev/null 2>&1 \
  && fail "the upgrade to companion left the CRD-read ClusterRole"
expect_can no kura-helm:kura-helm-kura-health-agent patch kurainstances.kura.tuist.dev --subresource=status -n kura-a
expect_can yes kura-helm:kura-helm-kura-health-agent patch kurainstancehealths.health.kura.tuist.dev --subresource=status -n kura-a
"$helm" upgrade "${release[@]}" --set publication.target=auto >/dev/null
same_tuist_crd "after helm upgrade back to auto"
# Asking the release for the project's KuraInstance CRD where one exists
# that is not the release's: Helm refuses, and leaves it as it was.
if out=$("$helm" upgrade "${release[@]}" --set kuraInstanceCRD.install=true 2>&1); then
  fail "helm upgrade with kuraInstanceCRD.install=true took over Tuist's KuraInstance CRD: $out"
fi
echo "chart-check: kuraInstanceCRD.install=true beside Tuist's CRD refused: $(tail -n1 <<<"$out" | cut -c1-200)"
same_tuist_crd "after the refused kuraInstanceCRD.install=true upgrade"
"$helm" uninstall kura-helm --namespace kura-helm >/dev/null
same_tuist_crd "after helm uninstall"
kubectl get crd kurainstancehealths.health.kura.tuist.dev >/dev/null \
  || fail "helm uninstall removed the companion CRD (crds/ are kept)"

part "kuraInstanceCRD.install=true in a cluster without Kura's controller"
# Standalone: the release installs the project's KuraInstance CRD, upgrades
# it, and keeps it on uninstall (deleting it would delete every instance).
kubectl delete crd kurainstances.kura.tuist.dev --wait=true --timeout=120s >/dev/null
standalone=(kura-standalone "$chart" --namespace kura-standalone "${api[@]}" --set kuraInstanceCRD.install=true)
"$helm" install "${standalone[@]}" --create-namespace >/dev/null
crd_established kurainstances.kura.tuist.dev
kubectl get crd kurainstances.kura.tuist.dev -o jsonpath='{.spec.versions[0].schema.openAPIV3Schema.properties.status.properties.rolloutGate.type}' \
  | grep -qx object || fail "the installed KuraInstance CRD does not declare status.rolloutGate"
"$helm" upgrade "${standalone[@]}" --set publication.target=instance >/dev/null
"$helm" uninstall kura-standalone --namespace kura-standalone >/dev/null
kubectl get crd kurainstances.kura.tuist.dev >/dev/null \
  || fail "helm uninstall deleted the KuraInstance CRD despite helm.sh/resource-policy: keep"
echo "chart-check: kuraInstanceCRD.install=true: installed, upgraded, kept on uninstall"

echo "chart-check: all checks passed"
