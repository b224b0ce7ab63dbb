#!/usr/bin/env python3
"""Runs the Argo Rollouts / Kargo recipes of docs/integrations/argo/ against
real agent output (scripts/integrations-check.sh drives it):

    scripts/check_integrations.py --recipes DIR --outputs DIR \
        --integrations KURA_INTEGRATIONS --promtool PROMTOOL \
        --agent KURA_AGENT_BINARY --schema schemas/json/instance-verdict.schema.json \
        --scenarios DIR

--outputs holds what agent/tests/integration_outputs.rs wrote from a real
agent loop: verdict-<instance>.json (the verdict endpoint's answers) and
metrics.txt (its /metrics), for the instances `healthy` (checks pass, every
pod on spec.image), `rolling` (checks pass on pods of the old image),
`held` (a pod not ready) and `stopped` (memory pressure 2).

- every template under --recipes, its v1.7/ too; a soak in a condition or
  query (duration('30s'), `>= bool 30`) is checked as written (the healthy
  instance, healthy for 2 s, has not met it: an Error saying so; 0.5 from
  the Prometheus query) and shortened to 1 s (the phases below);
- every verdict document validates against the JSON Schema;
- web provider: the recipe's jsonPath, successCondition and
  failureCondition, evaluated as Argo Rollouts does (kura-integrations
  argo-web: client-go jsonpath, expr) on each verdict: the measurement's
  phase must be the one in WEB_EXPECTED;
- Prometheus provider (every AnalysisTemplate and ClusterAnalysisTemplate
  that has one): the recipe's query, its args filled in, as a promtool rule
  unit test over the scraped series: its value per instance must be the one
  in PROMETHEUS_EXPECTED (promtool fails otherwise), and that value through
  the recipe's conditions (kura-integrations argo-prometheus) the phase;
- job provider: the pre-upgrade hook's `kura-agent baseline` (--baseline-hook,
  its ConfigMap swapped for a file), then the recipe's container args, its
  args filled in with the URLs of simulated nodes (kura-agent simulate), its
  durations shortened and its mounted baseline that file, run with the agent
  binary: exit 0 on a healthy set, 1 on a hard stop, 1 when the upgrade
  itself raised the fd timeouts (against the pre-upgrade baseline); and, as
  the check of the check, 0 there without the baseline (the bug);
- Flux: every healthCheckExprs entry of each --flux file (the instance-mode
  and the companion-mode Kustomization), evaluated by fluxcd/pkg/runtime/cel's
  StatusEvaluator, the code kustomize-controller runs (kura-integrations
  flux-cel), on every one of the Argo CD health check's test objects of its
  kind (--objects for KuraInstance, --companion-objects for
  KuraInstanceHealth; the e2e suite holds the KuraInstance objects' agent
  conditions to what the agent writes): the status in FLUX_EXPECTED; each
  file must have an entry for each kind it health-checks, and the
  KuraInstance entries of the files must be the same.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import yaml

# What each recipe must decide for each state.
# Not healthy yet (rolling, held, no sample) is a measurement Error: Argo
# Rollouts never counts an Error toward `count`, so a run can only end
# Successful on a healthy measurement (issue 31).
WEB_EXPECTED = {
    "healthy": "Successful",
    "rolling": "Error",
    "held": "Error",
    "stopped": "Failed",
}
# The Prometheus query's value per instance (None: no sample) and the phase.
PROMETHEUS_EXPECTED = {
    "healthy": (1, "Successful"),
    "rolling": (0, "Error"),
    "held": (0, "Error"),
    "stopped": (-2, "Failed"),
    "absent": (None, "Error"),
}

# Flux's reading of each test object (an expression error: Flux keeps
# waiting, as for InProgress, until the Kustomization's timeout).
FLUX_EXPECTED = {
    "no-status.yaml": "Error",
    "controller-conditions-only.yaml": "InProgress",
    "healthy.yaml": "Current",
    "new-generation-not-judged.yaml": "InProgress",
    "not-converged.yaml": "InProgress",
    "held-fd-timeouts-regressed.yaml": "InProgress",
    "hard-stopped.yaml": "Failed",
    "hard-stopped-serving-fenced.yaml": "Failed",
    # A rollback's new generation, not judged yet: kustomize-controller's
    # fail-fast wait must keep waiting, not fail on the old hard stop.
    "hard-stopped-rollback-not-judged.yaml": "InProgress",
    "terminating.yaml": "InProgress",
    # Suspended on purpose (spec.suspended, no pods): nothing to wait for,
    # as kstatus reads it with --kstatus-conditions.
    "suspended.yaml": "Current",
    # Companion mode: no agent condition here, Kura's controller's own
    # rolloutHealth (the gate's verdict is on the KuraInstanceHealth).
    "companion-mode-ready.yaml": "Current",
    "companion-mode-rolling.yaml": "InProgress",
    "companion-mode-generation-not-reconciled.yaml": "InProgress",
    "companion-mode-suspended.yaml": "Current",
}
# The same for the companion KuraInstanceHealth's test objects (no
# generation of the instance to compare with on a companion).
FLUX_COMPANION_EXPECTED = {
    "no-status.yaml": "Error",
    "healthy.yaml": "Current",
    "not-converged.yaml": "InProgress",
    "held-fd-timeouts-regressed.yaml": "InProgress",
    "hard-stopped.yaml": "Failed",
    "hard-stopped-serving-fenced.yaml": "Failed",
    "terminating.yaml": "InProgress",
    "suspended.yaml": "Current",
}

failures = []


def fail(msg):
    print("FAIL " + msg)
    failures.append(msg)


def ok(msg):
    print("ok   " + msg)


def recipes(directory):
    """Every document of every YAML file under directory (its v1.7/ too)."""
    out = []
    for base, dirs, files in os.walk(directory):
        dirs.sort()
        for name in sorted(files):
            if not name.endswith(".yaml"):
                continue
            path = os.path.join(base, name)
            for doc in yaml.safe_load_all(open(path)):
                if doc:
                    out.append((os.path.relpath(path, directory), doc))
    return out


# The healthy instance of --outputs has been healthy for 2 s or more without
# a break (agent/tests/integration_outputs.rs, HEALTHY_FOR); a recipe's soak
# (duration('30s') in a web condition, `>= bool 30` in a query) is checked
# shortened to SOAK_TEST, and as written, which the healthy instance has
# not met: then the measurement is an Error saying so.
SOAK_TEST = "1"


def soak_shortened(metric):
    m = json.loads(json.dumps(metric))
    for k in ("successCondition", "failureCondition"):
        if k in m:
            m[k] = re.sub(r"duration\('\d+[sm]'\)", "duration('%ss')" % SOAK_TEST, m[k])
    if "prometheus" in m["provider"]:
        q = m["provider"]["prometheus"]["query"]
        m["provider"]["prometheus"]["query"] = re.sub(r">= bool \d+", ">= bool " + SOAK_TEST, q)
    return m


def matches(got, want):
    """want: the phase, or PHASE|TEXT: that phase, its message holding TEXT."""
    phase, _, text = want.partition("|")
    return got.split(":")[0] == phase and text in got


def has_soak(metric):
    return soak_shortened(metric) != metric


def fill(text, args):
    def sub(m):
        key = m.group(1)
        if key not in args:
            raise KeyError("recipe arg %s not provided" % key)
        return args[key]

    return re.sub(r"\{\{\s*args\.([A-Za-z0-9_-]+)\s*\}\}", sub, text)


def check_schema(outputs, schema_path):
    import jsonschema

    schema = json.load(open(schema_path))
    for state in WEB_EXPECTED:
        doc = json.load(open(os.path.join(outputs, "verdict-%s.json" % state)))
        try:
            jsonschema.validate(doc, schema)
            ok("verdict-%s.json validates against %s" % (state, os.path.basename(schema_path)))
        except jsonschema.ValidationError as e:
            fail("verdict-%s.json: %s" % (state, e.message))


def check_web(name, metric, outputs, tool):
    if has_soak(metric):
        # As written: the healthy instance has not been healthy that long.
        check_web_states(name + " (soak as written)", metric, outputs, tool,
                         {"healthy": "Error|kura: healthy for less than"})
    check_web_states(name, soak_shortened(metric), outputs, tool, WEB_EXPECTED)


def check_web_states(name, metric, outputs, tool, expected):
    web = metric["provider"]["web"]
    for state, want in expected.items():
        body = os.path.join(outputs, "verdict-%s.json" % state)
        cmd = [tool, "argo-web", "--body", body, "--jsonpath", web.get("jsonPath", "{$}")]
        if metric.get("successCondition"):
            cmd += ["--success", metric["successCondition"]]
        if metric.get("failureCondition"):
            cmd += ["--failure", metric["failureCondition"]]
        got = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()
        label = "%s %s on %s" % (name, metric["name"], state)
        got = got.splitlines()[0] if got else got
        (ok if matches(got, want) else fail)(
            "%s: %s (want %s)" % (label, got, want))


# What a Prometheus scrape adds to every series (the target: the agent's
# pod), as with the operator's default honorLabels: false.
TARGET_LABELS = 'job="kura-health-agent",namespace="kura-system",instance="10.0.0.9:8080"'


def scrape_series(metrics_text):
    """The scraped samples as promtool input series (constant values), with
    the labels the scrape itself adds: a query that matched the target's
    namespace/instance instead of the agent's kura_namespace/kura_instance
    finds nothing."""
    series = []
    for line in metrics_text.splitlines():
        if not line or line.startswith("#"):
            continue
        spec, value = line.rsplit(" ", 1)
        if not spec.startswith("kura_instance_"):
            continue
        name, _, labels = spec.partition("{")
        labels = labels.rstrip("}")
        spec = "%s{%s%s}" % (name, TARGET_LABELS, "," + labels if labels else "")
        series.append({"series": spec, "values": "%sx10" % value})
    return series


def check_prometheus(name, template, metric, outputs, tool, promtool, tmp):
    if has_soak(metric):
        # As written: the healthy instance has not been healthy that long.
        check_prometheus_states(name + " (soak as written)", template, metric, outputs, tool, promtool, tmp,
                                {"healthy": (0.5, "Error|kura: healthy for less than")})
    check_prometheus_states(name, template, soak_shortened(metric), outputs, tool, promtool, tmp,
                            PROMETHEUS_EXPECTED)


def check_prometheus_states(name, template, metric, outputs, tool, promtool, tmp, expected):
    query_tmpl = metric["provider"]["prometheus"]["query"]
    defaults = {a["name"]: a.get("value") for a in template["spec"].get("args", [])}
    series = scrape_series(open(os.path.join(outputs, "metrics.txt")).read())
    tests = []
    for state, (value, _) in expected.items():
        instance = "nope" if state == "absent" else state
        args = dict(defaults, namespace="kura", instance=instance)
        expr = fill(query_tmpl, args)
        exp = [] if value is None else [{"labels": "{}", "value": value}]
        tests.append({"expr": expr, "eval_time": "1m", "exp_samples": exp})
    test_file = os.path.join(tmp, re.sub(r"[^A-Za-z0-9.-]+", "-", "%s-%s.test.yaml" % (name, metric["name"])))
    yaml.safe_dump(
        {
            "rule_files": [],
            "evaluation_interval": "1m",
            "tests": [
                {
                    "name": "%s %s over the agent's /metrics" % (name, metric["name"]),
                    "interval": "1m",
                    "input_series": series,
                    "promql_expr_test": tests,
                }
            ],
        },
        open(test_file, "w"),
    )
    done = subprocess.run(
        [promtool, "test", "rules", os.path.basename(test_file)],
        cwd=tmp,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        fail("%s %s: promtool test rules:\n%s%s" % (name, metric["name"], done.stdout, done.stderr))
        return
    ok("%s %s: the query's value per state, by promtool over the real scrape" % (name, metric["name"]))
    for state, (value, want) in expected.items():
        cmd = [tool, "argo-prometheus", "--values", "" if value is None else str(value)]
        if metric.get("successCondition"):
            cmd += ["--success", metric["successCondition"]]
        if metric.get("failureCondition"):
            cmd += ["--failure", metric["failureCondition"]]
        got = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()
        label = "%s %s on %s (%s)" % (name, metric["name"], state, value)
        got = got.splitlines()[0] if got else got
        (ok if matches(got, want) else fail)(
            "%s: %s (want %s)" % (label, got, want))


SHORTER = {"--soak": "2s", "--timeout": "10s"}


def simulate(agent, scenario):
    proc = subprocess.Popen(
        [agent, "simulate", scenario],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    urls = []
    deadline = time.time() + 30
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("# serving"):
            return proc, urls
        parts = line.split()
        if len(parts) >= 2 and parts[1].startswith("http://"):
            urls.append(parts[1])
    proc.kill()
    raise RuntimeError("kura-agent simulate %s did not start" % scenario)


def hook_args(hook_file):
    """The container args of the pre-upgrade baseline hook Job."""
    for doc in yaml.safe_load_all(open(hook_file)):
        if doc and doc.get("kind") == "Job":
            return doc["spec"]["template"]["spec"]["containers"][0]["args"]
    raise RuntimeError("%s has no Job" % hook_file)


def with_nodes(argv, urls):
    """argv with its --node values replaced by urls, in order."""
    out, it = [], iter(urls)
    for i, a in enumerate(argv):
        out.append(next(it) if i > 0 and argv[i - 1] == "--node" else a)
    return out


# (scenario, wait before check, take the pre-upgrade baseline, exit wanted)
JOB_CASES = (
    ("pair-healthy.json", 0, True, 0),
    ("pair-hard-stop.json", 0, True, 1),
    # The upgrade (at 3 s) costs a burst of fd timeouts: against the
    # baseline taken before it, a regression (exit 1 at the timeout)...
    ("pair-upgrade-fd-burst.json", 4, True, 1),
    # ...which a check taking its own first poll after the upgrade as the
    # baseline (the recipe before issue 31) bakes in and passes.
    ("pair-upgrade-fd-burst.json", 4, False, 0),
)


def check_job(name, template, metric, agent, scenarios, hook_file, tmp):
    container = metric["provider"]["job"]["spec"]["template"]["spec"]["containers"][0]
    args_tmpl = container["args"]
    if "--baseline" not in args_tmpl:
        fail("%s %s: the check does not take the pre-upgrade baseline (--baseline)" % (name, metric["name"]))
        return
    mount = args_tmpl[args_tmpl.index("--baseline") + 1]
    baseline_argv = hook_args(hook_file)
    node_args = sorted(a["name"] for a in template["spec"]["args"] if a["name"].startswith("node-"))
    for scenario, wait, with_baseline, want in JOB_CASES:
        proc, urls = simulate(agent, os.path.join(scenarios, scenario))
        try:
            if len(urls) < len(node_args):
                raise RuntimeError("%s serves %d pods, the recipe needs %d" % (scenario, len(urls), len(node_args)))
            started = time.time()
            base_file = os.path.join(tmp, "baseline-%s.json" % scenario)
            if with_baseline:
                # The hook's args, with its ConfigMap swapped for a file (the
                # ConfigMap itself is tested on the real API server, e2e).
                bargv = with_nodes(baseline_argv, urls[: len(node_args)])
                assert bargv[0] == "baseline", bargv
                i = bargv.index("--configmap")
                bargv[i : i + 2] = ["--out", base_file]
                if "--configmap-namespace" in bargv:
                    i = bargv.index("--configmap-namespace")
                    del bargv[i : i + 2]
                done = subprocess.run([agent] + bargv, capture_output=True, text=True, timeout=30)
                if done.returncode != 0:
                    fail("%s: the pre-upgrade baseline on %s: exit %d\n%s" % (hook_file, scenario, done.returncode, done.stderr[-2000:]))
                    continue
            time.sleep(max(0.0, wait - (time.time() - started)))
            args = {n: u for n, u in zip(node_args, urls)}
            argv = [fill(a, args) for a in args_tmpl]
            if with_baseline:
                argv[argv.index(mount)] = base_file
            else:
                i = argv.index("--baseline")
                del argv[i : i + 2]
            # The recipe's soak and timeout, shortened for the test.
            for i, a in enumerate(argv[:-1]):
                if a in SHORTER:
                    argv[i + 1] = SHORTER[a]
            argv += ["--interval", "250ms"]
            assert argv[0] == "check", argv
            t0 = time.time()
            done = subprocess.run([agent] + argv, capture_output=True, text=True, timeout=60)
            label = "%s %s on %s, %s (%s)" % (
                name, metric["name"], scenario,
                "baseline taken before the upgrade" if with_baseline else "no baseline (before issue 31)",
                " ".join(argv))
            if done.returncode == want:
                ok("%s: exit %d in %.1fs" % (label, done.returncode, time.time() - t0))
            else:
                fail("%s: exit %d, want %d\n%s%s" % (label, done.returncode, want, done.stdout[-2000:], done.stderr[-2000:]))
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def check_flux(flux_files, objects_by_kind, tool):
    """objects_by_kind: kind -> (test objects' directory, expected statuses)."""
    instance_exprs = []
    for flux_file in flux_files:
        docs = [d for d in yaml.safe_load_all(open(flux_file)) if d]
        entries = [e for d in docs for e in d.get("spec", {}).get("healthCheckExprs", [])]
        checked = {h.get("kind") for d in docs for h in d.get("spec", {}).get("healthChecks", [])}
        if any(d.get("spec", {}).get("wait") for d in docs):
            checked.add("KuraInstance")
        kinds = [e.get("kind") for e in entries]
        for kind in sorted(checked | set(kinds)):
            if kinds.count(kind) != 1:
                fail("%s: want one healthCheckExprs entry for %s, found %d" % (flux_file, kind, kinds.count(kind)))
        for e in entries:
            if e.get("kind") not in objects_by_kind:
                fail("%s: no test objects for the kind %s" % (flux_file, e.get("kind")))
                continue
            if e["kind"] == "KuraInstance":
                instance_exprs.append((flux_file, e))
            objects, expected = objects_by_kind[e["kind"]]
            cmd = [tool, "flux-cel", "--current", e["current"]]
            if e.get("failed"):
                cmd += ["--failed", e["failed"]]
            if e.get("inProgress"):
                cmd += ["--in-progress", e["inProgress"]]
            unexpected = sorted(set(f for f in os.listdir(objects) if f.endswith(".yaml")) - set(expected))
            if unexpected:
                fail("flux: no expected status for the %s test objects %s" % (e["kind"], unexpected))
            for name, want in expected.items():
                got = subprocess.run(
                    cmd + [os.path.join(objects, name)], capture_output=True, text=True, check=True
                ).stdout.strip().split(" ", 1)[1]
                (ok if got.split(":")[0] == want else fail)(
                    "%s: healthCheckExprs for %s on %s: %s (want %s)"
                    % (os.path.basename(flux_file), e["kind"], name, got, want)
                )
    if len({json.dumps(e, sort_keys=True) for _, e in instance_exprs}) > 1:
        fail("flux: the KuraInstance healthCheckExprs differ between %s" % [f for f, _ in instance_exprs])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--recipes", required=True)
    p.add_argument("--outputs", required=True)
    p.add_argument("--integrations", required=True)
    p.add_argument("--promtool", required=True)
    p.add_argument("--agent", required=True)
    p.add_argument("--schema", required=True)
    p.add_argument("--scenarios", required=True)
    p.add_argument("--flux", required=True, nargs="+")
    p.add_argument("--objects", required=True)
    p.add_argument("--companion-objects", required=True)
    p.add_argument("--baseline-hook", required=True)
    a = p.parse_args()
    check_schema(a.outputs, a.schema)
    seen = {"web": 0, "prometheus": 0, "job": 0}
    with tempfile.TemporaryDirectory() as tmp:
        for name, doc in recipes(a.recipes):
            if doc.get("kind") not in ("AnalysisTemplate", "ClusterAnalysisTemplate"):
                fail("%s: unexpected kind %s" % (name, doc.get("kind")))
                continue
            for metric in doc["spec"]["metrics"]:
                provider = metric["provider"]
                if "web" in provider:
                    seen["web"] += 1
                    check_web(name, metric, a.outputs, a.integrations)
                elif "prometheus" in provider:
                    seen["prometheus"] += 1
                    check_prometheus(name, doc, metric, a.outputs, a.integrations, a.promtool, tmp)
                elif "job" in provider:
                    seen["job"] += 1
                    check_job(name, doc, metric, a.agent, a.scenarios, a.baseline_hook, tmp)
                else:
                    fail("%s %s: no check for provider %s" % (name, metric["name"], list(provider)))
    check_flux(
        a.flux,
        {
            "KuraInstance": (a.objects, FLUX_EXPECTED),
            "KuraInstanceHealth": (a.companion_objects, FLUX_COMPANION_EXPECTED),
        },
        a.integrations,
    )
    for provider, n in seen.items():
        if n == 0:
            fail("no recipe with the %s provider was checked" % provider)
    print("%d checks failed" % len(failures) if failures else "every recipe check passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
