#!/usr/bin/env bash
# Observability checks (issue 10): the alert rules, the dashboard, and a real
# /metrics scrape, with promtool built from its pinned Go module.
#   1. promtool check rules + test rules on charts/kura-health-agent/rules/
#      (alert tests, and tests of the dashboard's trickier queries)
#   2. a loopback scrape of the agent (agent/tests/metrics_scrape.rs) linted
#      with promtool check metrics
#   3. the Grafana dashboard: scripts/check_dashboard.py (names, labels,
#      datasource, ids, layout) and every query parsed by promtool
#   4. the chart with prometheusRule/dashboards enabled, rendered by helm:
#      the PrometheusRule carries the checked rules with the values applied,
#      and the ConfigMap carries the dashboard byte for byte
# Builds promtool (and helm, for 4) on first use; cached afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
chart=charts/kura-health-agent
rules=$chart/rules
dashboard=$chart/dashboards/kura-health-agent.json
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

py=python3
if ! "$py" -c 'import yaml' 2>/dev/null; then
  py=$PWD/.cache/venv/bin/python   # scripts/test.sh's venv has PyYAML
  "$py" -c 'import yaml'
fi

echo "== promtool (scripts/build-promtool.sh)"
eval "$(scripts/build-promtool.sh)"
"$KURA_PROMTOOL" --version 2>&1 | sed -n 1p

echo "== alert rules: promtool check rules + test rules"
"$KURA_PROMTOOL" check rules "$rules"/*.rules.yaml
(cd "$rules/tests" && "$KURA_PROMTOOL" test rules ./*.test.yaml)

echo "== /metrics of an agent run against simulated pods: promtool check metrics"
KURA_SCRAPE_OUT=$tmp/scrape.txt cargo test --locked -q -p kura-agent --test metrics_scrape
"$KURA_PROMTOOL" check metrics < "$tmp/scrape.txt"

echo "== dashboard: metric names, labels, datasource, ids, layout; PromQL parses"
"$py" scripts/check_dashboard.py "$dashboard" --scrape "$tmp/scrape.txt" \
  --promql-rules "$tmp/dashboard-queries.yaml" \
  --query-tests "$rules/tests/dashboard-queries.test.yaml"
"$KURA_PROMTOOL" check rules "$tmp/dashboard-queries.yaml"

echo "== chart: PrometheusRule and dashboard ConfigMap as helm renders them"
eval "$(scripts/build-tools.sh helm)"
"$KURA_HELM" template obs "$chart" --namespace kura-system --kube-version 1.33.0 \
  --set 'networkPolicy.apiServer.cidrs={127.0.0.1/32}' \
  --set prometheusRule.enabled=true --set prometheusRule.heldFor=2h \
  --set prometheusRule.staleAfterSeconds=300 \
  --set prometheusRule.additionalRuleLabels.team=platform \
  --set dashboards.enabled=true > "$tmp/rendered.yaml"
"$py" - "$tmp/rendered.yaml" "$rules/kura-health-agent.rules.yaml" "$dashboard" \
  "$tmp/rendered.rules.yaml" <<'EOF'
import sys, yaml
rendered, source, dashboard, out = sys.argv[1:]
docs = [d for d in yaml.safe_load_all(open(rendered)) if d]
rule = [d for d in docs if d["kind"] == "PrometheusRule"]
cm = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboards")]
assert len(rule) == 1 and len(cm) == 1, "want one PrometheusRule and one dashboard ConfigMap"
spec = rule[0]["spec"]
yaml.safe_dump(spec, open(out, "w"))
src = yaml.safe_load(open(source))
got = {r["alert"]: r for g in spec["groups"] for r in g["rules"]}
want = {r["alert"]: r for g in src["groups"] for r in g["rules"]}
assert got.keys() == want.keys(), (got.keys(), want.keys())
for name, r in got.items():
    w = want[name]
    assert r["labels"] == dict(w["labels"], team="platform"), (name, r["labels"])
    assert r["annotations"] == w["annotations"], name
    if name == "KuraInstanceHeldByGate":
        assert r["for"] == "2h", r["for"]
    else:
        assert r.get("for") == w.get("for"), name
    if name == "KuraInstanceSampleStale":
        assert r["expr"] == w["expr"].replace("> 180", "> 300"), r["expr"]
        assert "> 300" in r["expr"]
    else:
        assert r["expr"] == w["expr"], name
assert cm[0]["metadata"]["labels"].get("grafana_dashboard") == "1"
assert cm[0]["data"]["kura-health-agent.json"] == open(dashboard).read().rstrip("\n"), \
    "the ConfigMap's dashboard differs from the file"
print(f"PrometheusRule: {len(got)} alerts with the values applied; ConfigMap: dashboard intact")
EOF
"$KURA_PROMTOOL" check rules "$tmp/rendered.rules.yaml"
echo "== observability checks passed"
