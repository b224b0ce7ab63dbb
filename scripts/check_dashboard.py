#!/usr/bin/env python3
"""Validate a Grafana dashboard against the metrics the agent exports.

    scripts/check_dashboard.py DASHBOARD.json [--scrape FILE] [--promql-rules OUT]

Checks (each failure is printed with the panel it concerns; exit 1 if any):
  - the file is a JSON object with a title, a uid (<= 40 chars), panels and
    templating, small enough for a ConfigMap;
  - panel ids are unique (rows' nested panels included), every panel lies
    inside the 24-column grid and no two panels overlap;
  - one `datasource` variable of type datasource for prometheus, and every
    panel, target and query variable uses it (`${datasource}`);
  - every `$var` in a query is a dashboard variable or a Grafana built-in;
  - every metric name in a query is one the agent exports: the constants of
    agent/src/telemetry.rs (histograms with _bucket/_sum/_count) and the
    per-instance series of agent/src/debug/instance_metrics.rs;
  - every label matcher uses a label those series carry, and `verdict` /
    `result` values are ones the agent writes; a query on the per-instance
    series never matches or groups on `namespace`/`instance` (the scrape
    target's labels; the instance's are `kura_namespace`/`kura_instance`).
--scrape FILE (a real /metrics scrape, see agent/tests/metrics_scrape.rs)
  also checks that every kura_ family in it is in the set parsed from the
  sources, so the source parsing cannot silently miss a metric.
--promql-rules OUT writes every query (variables substituted) as a recording
  rule to OUT, for `promtool check rules` to parse the PromQL.
--query-tests FILE (a promtool rule-test file, needs PyYAML) checks that every
  promql_expr_test expr in it is a dashboard query with $namespace = .* and
  $instance = acme, so the tested queries are the ones the dashboard runs.
"""

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
METRICS_RS = ROOT / "agent/src/telemetry.rs"
INSTANCE_METRICS_RS = ROOT / "agent/src/debug/instance_metrics.rs"

BUILTIN_VARS = {
    "__rate_interval", "__interval", "__interval_ms", "__range", "__range_s",
    "__range_ms", "__dashboard", "__from", "__to", "__org", "__user", "__name",
    "__all", "timeFilter", "__timeFilter",
}
SUBSTITUTE = {
    "__rate_interval": "5m", "__interval": "1m", "__range": "1h",
    "namespace": ".*", "instance": "acme",
}
PROMQL_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and",
    "or", "unless", "bool", "offset", "atan2", "inf", "nan",
}
# Labels the agent's series carry, plus what a Prometheus scrape adds.
KNOWN_LABELS = {
    "kura_namespace", "kura_instance", "namespace", "instance", "verdict", "signal", "image", "result",
    "resource", "counter", "le", "job", "pod", "service", "endpoint",
    "container", "__name__",
}
VERDICTS = {"healthy", "unhealthy", "hard_stop"}
MAX_CONFIGMAP_BYTES = 1024 * 1024


def exported_names():
    """Metric names the agent exports, parsed from its sources."""
    names = set()
    text = METRICS_RS.read_text()
    consts = dict(re.findall(r'pub const (\w+): &str = "(kura_[a-z0-9_]+)";', text))
    if not consts:
        raise SystemExit(f"no metric constants found in {METRICS_RS}")
    # METRICS entries: `plain(NAME, Kind::Histogram, ...)` or
    # `Metric { name: NAME, kind: Kind::Histogram, ... }`.
    histograms = set(
        re.findall(r"(?:plain\(|name:)\s*(\w+),\s*(?:kind:\s*)?Kind::Histogram", text)
    )
    if not histograms:
        raise SystemExit(f"no histogram found in {METRICS_RS}")
    for const, name in consts.items():
        if const in histograms:
            names.update(name + s for s in ("_bucket", "_sum", "_count"))
        else:
            names.add(name)
    instance = re.findall(r'"(kura_instances?_[a-z0-9_]+)"', INSTANCE_METRICS_RS.read_text())
    if not instance:
        raise SystemExit(f"no series names found in {INSTANCE_METRICS_RS}")
    names.update(instance)
    return names


def result_values():
    """The `result` label values: poll results and write results."""
    text = METRICS_RS.read_text()
    polls = re.search(r"POLL_RESULTS: \[&str; \d+\] = \[(.*?)\];", text, re.S)
    writes = re.search(r"WRITE_RESULTS: \[&str; \d+\] = \[(.*?)\];", text, re.S)
    if not polls or not writes:
        raise SystemExit(f"cannot find the poll or write results in {METRICS_RS}")
    # Entries are string literals or constants of `telemetry::label`
    # (`pub const OK: &str = "ok";`).
    labels = dict(re.findall(r'pub const (\w+): &str = "(\w+)";', text))

    def values(entries):
        out = set(re.findall(r'"(\w+)"', entries))
        for name in re.findall(r"\b([A-Z][A-Z0-9_]*)\b", re.sub(r'"[^"]*"', "", entries)):
            if name not in labels:
                raise SystemExit(f"result value {name} is no string constant in {METRICS_RS}")
            out.add(labels[name])
        return out

    found = values(polls.group(1)) | values(writes.group(1))
    if "ok" not in found:
        raise SystemExit(f"the poll results of {METRICS_RS} have no 'ok': {sorted(found)}")
    return found


def walk(panels):
    for p in panels:
        yield p
        yield from walk(p.get("panels", []))


def strip_for_names(expr):
    """The expression without strings, label sets, ranges and label lists,
    leaving metric names, functions, keywords and numbers."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    return e


def metric_names(expr):
    e = strip_for_names(expr)
    out = []
    for m in re.finditer(r"(?<![\w.$])([a-zA-Z_:][a-zA-Z0-9_:]*)", e):
        word = m.group(1)
        rest = e[m.end():]
        if rest.lstrip().startswith("("):
            continue  # a function (or an aggregation)
        if word.lower() in PROMQL_KEYWORDS:
            continue
        out.append(word)
    return out


def matchers(expr):
    """(label, op, value) of every label matcher in the expression."""
    out = []
    for body in re.findall(r"\{([^}]*)\}", expr):
        for m in re.finditer(r'(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"', body):
            out.append(m.groups())
    return out


def variables(text):
    return set(re.findall(r"\$\{?(\w+)", text)) | set(re.findall(r"\[\[(\w+)\]\]", text))


def substitute(expr):
    def repl(m):
        name = m.group(1) or m.group(2)
        return SUBSTITUTE.get(name, "x")
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", repl, expr)


def check_query_tests(tests_path, queries):
    import yaml  # only needed here

    dashboard = {substitute(expr) for _, expr in queries}
    doc = yaml.safe_load(Path(tests_path).read_text())
    exprs = [t["expr"] for test in doc.get("tests", []) for t in test.get("promql_expr_test", [])]
    errors = [f"{tests_path}: not a dashboard query: {e}" for e in exprs if e not in dashboard]
    if not exprs:
        errors.append(f"{tests_path}: no promql_expr_test")
    print(f"{tests_path}: {len(exprs)} tested expressions, {len(set(exprs))} distinct")
    return errors


def check(path, scrape, promql_out, query_tests=None):
    errors = []
    raw = Path(path).read_bytes()
    if len(raw) > MAX_CONFIGMAP_BYTES:
        errors.append(f"{len(raw)} bytes: too large for a ConfigMap")
    try:
        dash = json.loads(raw)
    except json.JSONDecodeError as e:
        return [f"not valid JSON: {e}"]
    if not isinstance(dash, dict):
        return ["not a JSON object"]
    for key in ("title", "uid", "panels", "templating", "schemaVersion"):
        if key not in dash:
            errors.append(f"missing top-level {key!r}")
    if len(str(dash.get("uid", ""))) > 40:
        errors.append("uid longer than 40 characters")

    names = exported_names()
    results = result_values()
    templ = dash.get("templating", {}).get("list", [])
    var_names = {v.get("name") for v in templ}
    ds_vars = [v for v in templ if v.get("type") == "datasource"]
    if len(ds_vars) != 1 or ds_vars[0].get("query") != "prometheus":
        errors.append("want exactly one datasource variable with query 'prometheus'")
        ds_ref = None
    else:
        ds_ref = "${%s}" % ds_vars[0]["name"]

    def uses_ds(obj, where):
        ds = obj.get("datasource")
        if not isinstance(ds, dict) or ds.get("uid") != ds_ref or ds.get("type") != "prometheus":
            errors.append(f"{where}: datasource is {ds!r}, want uid {ds_ref}")

    queries = []  # (where, expr)
    for v in templ:
        if v.get("type") == "query":
            uses_ds(v, f"variable {v.get('name')}")
            q = v.get("query")
            q = q.get("query", "") if isinstance(q, dict) else (q or "")
            m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", q)
            if not m:
                errors.append(f"variable {v.get('name')}: not a label_values(selector, label) query: {q!r}")
            else:
                queries.append((f"variable {v.get('name')}", m.group(1)))

    seen_ids = {}
    boxes = []
    for p in walk(dash.get("panels", [])):
        pid = p.get("id")
        where = f"panel {pid} {p.get('title')!r}"
        if not isinstance(pid, int):
            errors.append(f"{where}: id is not an integer")
        elif pid in seen_ids:
            errors.append(f"{where}: id also used by {seen_ids[pid]!r}")
        else:
            seen_ids[pid] = p.get("title")
        g = p.get("gridPos") or {}
        if not all(isinstance(g.get(k), int) for k in ("x", "y", "w", "h")):
            errors.append(f"{where}: gridPos incomplete: {g}")
        else:
            if g["x"] < 0 or g["w"] <= 0 or g["h"] <= 0 or g["x"] + g["w"] > 24:
                errors.append(f"{where}: gridPos outside the 24-column grid: {g}")
            for other, og in boxes:
                if (g["x"] < og["x"] + og["w"] and og["x"] < g["x"] + g["w"]
                        and g["y"] < og["y"] + og["h"] and og["y"] < g["y"] + g["h"]):
                    errors.append(f"{where}: overlaps {other}")
            boxes.append((where, g))
        if p.get("type") == "row":
            continue
        uses_ds(p, where)
        targets = p.get("targets") or []
        if not targets:
            errors.append(f"{where}: no query")
        refs = [t.get("refId") for t in targets]
        if len(set(refs)) != len(refs):
            errors.append(f"{where}: duplicate refIds {refs}")
        for t in targets:
            uses_ds(t, f"{where} query {t.get('refId')}")
            expr = t.get("expr", "")
            if not expr.strip():
                errors.append(f"{where} query {t.get('refId')}: empty expr")
            queries.append((f"{where} query {t.get('refId')}", expr))
        for text in (p.get("title", ""), p.get("description", "")):
            for var in variables(text) - var_names - BUILTIN_VARS:
                errors.append(f"{where}: unknown variable ${var} in title/description")
    for row_title in (p.get("title", "") for p in walk(dash.get("panels", [])) if p.get("type") == "row"):
        for var in variables(row_title) - var_names - BUILTIN_VARS:
            errors.append(f"row {row_title!r}: unknown variable ${var}")

    used = set()
    for where, expr in queries:
        for var in variables(expr) - var_names - BUILTIN_VARS:
            errors.append(f"{where}: unknown variable ${var}")
        found = metric_names(expr)
        if not any(n.startswith("kura_") for n in found):
            errors.append(f"{where}: no kura_ metric in {expr!r}")
        for n in found:
            used.add(n)
            if n not in names:
                errors.append(f"{where}: {n} is not exported by the agent")
        # The per-instance series name their instance with kura_namespace /
        # kura_instance; namespace and instance are the scrape target's
        # (the agent's pod): matching or grouping on those finds nothing.
        if any(n.startswith("kura_instance_") for n in found):
            grouped = [l.strip() for g in re.findall(r"\b(?:by|on|without|ignoring)\s*\(([^)]*)\)", expr)
                       for l in g.split(",")]
            for label in [m[0] for m in matchers(expr)] + grouped:
                if label in ("namespace", "instance"):
                    errors.append(f"{where}: per-instance series matched or grouped on the scrape's "
                                  f"{label!r} (use kura_{label})")
        for label, op, value in matchers(expr):
            if label not in KNOWN_LABELS:
                errors.append(f"{where}: unknown label {label!r}")
            if op in ("=", "!=") and "$" not in value:
                if label == "verdict" and value not in VERDICTS:
                    errors.append(f"{where}: verdict {value!r} does not exist")
                if label == "result" and value not in results:
                    errors.append(f"{where}: result {value!r} does not exist")

    if scrape:
        families = set()
        for line in Path(scrape).read_text().splitlines():
            m = re.match(r"# TYPE (\S+) ", line) or re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", line)
            if m and m.group(1).startswith("kura_"):
                families.add(m.group(1))
        if not families:
            errors.append(f"{scrape}: no kura_ series")
        for f in sorted(families):
            hist = {f + s for s in ("_bucket", "_sum", "_count")}
            if f not in names and not hist <= names:
                errors.append(f"{scrape}: {f} is exported but not found by parsing the sources")

    if query_tests:
        errors.extend(check_query_tests(query_tests, queries))

    if promql_out:
        with open(promql_out, "w") as out:
            out.write("# Generated by scripts/check_dashboard.py: the dashboard's queries.\n")
            out.write("groups:\n  - name: dashboard-queries\n    rules:\n")
            for i, (where, expr) in enumerate(queries):
                out.write(f"      - record: dashboard:query_{i}\n")
                out.write(f"        expr: {json.dumps(substitute(expr))}\n")
    print(f"{path}: {sum(1 for _ in walk(dash.get('panels', [])))} panels, "
          f"{len(queries)} queries, {len(used)} metric names used")
    return errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dashboard")
    ap.add_argument("--scrape")
    ap.add_argument("--promql-rules")
    ap.add_argument("--query-tests")
    args = ap.parse_args()
    errors = check(args.dashboard, args.scrape, args.promql_rules, args.query_tests)
    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
