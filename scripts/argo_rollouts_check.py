#!/usr/bin/env python3
"""The Argo Rollouts recipes of docs/integrations/argo/ under the real Argo
Rollouts controller, one release after another, against a real
kube-apiserver and the agent's real verdict API (scripts/argo-rollouts-check.sh
drives it):

    scripts/argo_rollouts_check.py --recipes DIR --agent-url URL \
        --controller VERSION=BINARY:CRD_DIR ... --work DIR

For each controller (VERSION=BINARY:CRD_DIR, e.g. 1.7=/x/rollouts-controller:
/y/manifests/crds): that release's CRDs are applied (replacing the previous
release's), its rollouts-controller runs only its analysis controller
(`--controllers analysis`) against the API server of $KUBECONFIG, and every
web and Prometheus metric of the recipes runs as an AnalysisRun per agent
state (args filled in, as Argo Rollouts and Kargo create them from the
templates; timings shortened: no initialDelay, a 1 s interval and a
consecutiveErrorLimit of 6 instead of 40, so a hold reaches its deadline
in seconds):

  instance  state                                   must end
  healthy   every check passes, pods on spec.image  Successful
  rolling   checks pass, pods on the old image      not Successful (Error at the deadline)
            (what a rollback is judged as once its new generation is seen)
  held      a pod not ready: the gate holds         not Successful (Error at the deadline)
  stopped   memory pressure 2: a hard stop          Failed, on the first measurement

The web metric calls the agent's verdict API (--agent-url, a real agent loop
over simulated pods: agent/tests/integration_outputs.rs). The Prometheus
metric calls a loopback Prometheus HTTP API (/api/v1/query) answering each
query with the value promtool computed for it over the agent's real scrape
(scripts/check_integrations.py checks those values; the answer is refused
unless the query is the template's, args filled in): the controller's own
Prometheus client, result parsing and conditions run.

As a check of the check, the templates as they were before issue 31
(`count: 40`, `inconclusiveLimit: 40`, `consecutiveSuccessLimit: 4`,
held/rolling Inconclusive) also run, shortened the same way: on a release
that prunes consecutiveSuccessLimit (1.7) the held instance must end
Successful there (the bug), on 1.8 not.

Prints one line per run (version, recipe, instance, phase, measurements,
the field as the API server stored it) and the outcome table; exit 1 when a
run ends otherwise or does not end within its bound.
"""

import argparse
import copy
import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.parse

import yaml

NAMESPACE = "kura-argo-check"
INSTANCES = ("healthy", "rolling", "held", "stopped")
# The value of the Prometheus query per instance, as promtool computes it
# over the agent's real scrape (scripts/check_integrations.py's
# PROMETHEUS_EXPECTED holds the same and fails when promtool disagrees).
PROMQL_VALUE = {"healthy": 1, "rolling": 0, "held": 0, "stopped": -2}
TEST_INTERVAL = "1s"
TEST_ERROR_LIMIT = 6
RUN_TIMEOUT = 90

failures = []


def log(msg):
    print(msg, flush=True)


def kubectl(*args, stdin=None, check=True):
    done = subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError("kubectl %s: %s%s" % (" ".join(args), done.stdout, done.stderr))
    return done


def fill(text, args):
    return re.sub(r"\{\{\s*args\.([A-Za-z0-9_-]+)\s*\}\}", lambda m: args[m.group(1)], text)


class Prometheus(http.server.BaseHTTPRequestHandler):
    """GET /api/v1/query: the template's query, args filled in, answered with
    the value promtool computed for its instance; any other query: 400."""

    queries = {}  # filled query text -> value (None: no sample)
    seen = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        url = urllib.parse.urlparse(self.path)
        query = urllib.parse.parse_qs(url.query).get("query", [""])[0]
        if url.path != "/api/v1/query" or query not in self.queries:
            body = {"status": "error", "errorType": "bad_data", "error": "unexpected query %r" % query}
            self.answer(400, body)
            return
        self.seen.append(query)
        value = self.queries[query]
        result = [] if value is None else [{"metric": {}, "value": [time.time(), str(value)]}]
        self.answer(200, {"status": "success", "data": {"resultType": "vector", "result": result}})

    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("Content-Length", "0"))
        form = urllib.parse.parse_qs(self.rfile.read(length).decode())
        self.path = "/api/v1/query?" + urllib.parse.urlencode({"query": form.get("query", [""])[0]})
        self.do_GET()

    def answer(self, code, body):
        raw = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *_):
        pass


def recipe_metrics(directory):
    """(file, template, metric) of every web and Prometheus metric."""
    out = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".yaml"):
            continue
        for doc in yaml.safe_load_all(open(os.path.join(directory, name))):
            if not doc or doc.get("kind") not in ("AnalysisTemplate", "ClusterAnalysisTemplate"):
                continue
            for metric in doc["spec"]["metrics"]:
                if "web" in metric["provider"] or "prometheus" in metric["provider"]:
                    out.append((name, doc, metric))
    return out


def pre_issue_31(metric):
    """The metric as the templates had it before issue 31."""
    m = copy.deepcopy(metric)
    for k in ("consecutiveErrorLimit",):
        m.pop(k, None)
    m.update({"count": 40, "consecutiveSuccessLimit": 4, "failureLimit": 0, "inconclusiveLimit": 40})
    if "web" in m["provider"]:
        m["successCondition"] = "result.rolloutHealthy.status == 'True'"
        m["failureCondition"] = "result.rolloutHardStopped.status == 'True'"
    else:
        m["successCondition"] = "len(result) == 1 && result[0] == 1"
        m["failureCondition"] = "len(result) == 1 && result[0] < 0"
    return m


def shortened(metric):
    m = copy.deepcopy(metric)
    m.pop("initialDelay", None)
    m["interval"] = TEST_INTERVAL
    if "consecutiveErrorLimit" in m:
        m["consecutiveErrorLimit"] = TEST_ERROR_LIMIT
    if m.get("count") == 40:  # the pre-issue-31 variant: 40 measurements of 1 s
        m["count"] = 12
        m["inconclusiveLimit"] = 12
    return m


def analysis_run(name, template, metric, args):
    defaults = {a["name"]: a.get("value") for a in template["spec"].get("args", [])}
    merged = dict(defaults, **args)
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "AnalysisRun",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            # The controller resolves {{args.*}} itself, as in a run created
            # from the template by a Rollout or by Kargo.
            "args": [{"name": k, "value": v} for k, v in sorted(merged.items())],
            "metrics": [metric],
        },
    }


def wait_run(name):
    deadline = time.time() + RUN_TIMEOUT
    while time.time() < deadline:
        run = json.loads(kubectl("get", "analysisrun", name, "-n", NAMESPACE, "-o", "json").stdout)
        phase = run.get("status", {}).get("phase", "")
        if phase in ("Successful", "Failed", "Error", "Inconclusive"):
            return run
        time.sleep(0.5)
    return json.loads(kubectl("get", "analysisrun", name, "-n", NAMESPACE, "-o", "json").stdout)


def expect(variant, version, instance):
    """What the run must end as, or a predicate on the phase."""
    if variant == "current":
        return {
            "healthy": ("Successful",),
            "rolling": ("Error",),
            "held": ("Error",),
            "stopped": ("Failed",),
        }[instance]
    # Pre-issue-31 templates: the hold passes where the field is pruned.
    if instance == "held":
        return ("Successful",) if version == "1.7" else ("Inconclusive",)
    return None  # not asserted


def start_controller(version, binary, work):
    logf = open(os.path.join(work, "controller-%s.log" % version), "w")
    proc = subprocess.Popen(
        [binary, "--kubeconfig", os.environ["KUBECONFIG"], "--controllers", "analysis",
         "--leader-elect=false", "--metricsport", "18090", "--healthzPort", "18091",
         "--loglevel", "info"],
        stdout=logf, stderr=subprocess.STDOUT, start_new_session=True,
    )
    return proc, logf


def stop_controller(proc, logf):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    logf.close()


def apply_crds(crd_dir):
    for name in ("analysis-run-crd.yaml", "analysis-template-crd.yaml", "cluster-analysis-template-crd.yaml"):
        kubectl("apply", "--server-side", "--force-conflicts", "-f", os.path.join(crd_dir, name))
    # Polled: `kubectl wait --for=condition=Established` fails at once when
    # it reads a CRD before its first status.
    for crd in ("analysisruns.argoproj.io", "analysistemplates.argoproj.io",
                "clusteranalysistemplates.argoproj.io"):
        deadline = time.time() + 60
        while kubectl("get", "crd", crd, "-o",
                      'jsonpath={.status.conditions[?(@.type=="Established")].status}').stdout != "True":
            if time.time() > deadline:
                raise RuntimeError("CRD %s not Established after 60 s" % crd)
            time.sleep(0.5)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--recipes", required=True)
    p.add_argument("--agent-url", required=True)
    p.add_argument("--controller", action="append", required=True, help="VERSION=BINARY:CRD_DIR")
    p.add_argument("--work", required=True)
    a = p.parse_args()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Prometheus)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    prometheus_url = "http://127.0.0.1:%d" % server.server_address[1]

    metrics = recipe_metrics(a.recipes)
    kinds = {("web" if "web" in m["provider"] else "prometheus") for _, _, m in metrics}
    if kinds != {"web", "prometheus"}:
        fail("want web and Prometheus recipes, found %s" % sorted(kinds))
    for _, template, metric in metrics:
        if "prometheus" in metric["provider"]:
            for instance, value in PROMQL_VALUE.items():
                q = fill(metric["provider"]["prometheus"]["query"],
                         {"namespace": "kura", "instance": instance, "prometheus": prometheus_url})
                Prometheus.queries[q] = value

    kubectl("create", "namespace", NAMESPACE, check=False)
    table = []
    for spec in a.controller:
        version, rest = spec.split("=", 1)
        binary, crd_dir = rest.split(":", 1)
        log("== Argo Rollouts %s (%s)" % (version, binary))
        apply_crds(crd_dir)
        kubectl("delete", "analysisruns", "--all", "-n", NAMESPACE, "--wait=true")
        proc, logf = start_controller(version, binary, a.work)
        try:
            runs = []
            for variant in ("current", "pre-issue-31"):
                for file, template, metric in metrics:
                    m = metric if variant == "current" else pre_issue_31(metric)
                    m = shortened(m)
                    for instance in INSTANCES:
                        kind = "web" if "web" in m["provider"] else "prom"
                        name = "%s-%s-%s-%s" % (variant[:3], kind, file.split(".")[0][:18].strip("-"), instance)
                        name = re.sub(r"[^a-z0-9-]", "-", name.lower())[:63].strip("-")
                        args = {"namespace": "kura", "instance": instance}
                        if kind == "web":
                            args["agent"] = a.agent_url
                        else:
                            args["prometheus"] = prometheus_url
                        body = analysis_run(name, template, m, args)
                        # As a client without the 1.8 field in its schema
                        # would: unknown fields are pruned, not refused.
                        kubectl("create", "--validate=false", "-f", "-", stdin=json.dumps(body))
                        stored = json.loads(kubectl("get", "analysisrun", name, "-n", NAMESPACE, "-o", "json").stdout)
                        kept = "consecutiveSuccessLimit" in stored["spec"]["metrics"][0]
                        runs.append((variant, file, kind, instance, name, kept))
            for variant, file, kind, instance, name, kept in runs:
                run = wait_run(name)
                phase = run.get("status", {}).get("phase", "(none)")
                results = run.get("status", {}).get("metricResults", [{}])
                r = results[0] if results else {}
                counts = "count %s, successful %s, failed %s, inconclusive %s, errors %s" % (
                    r.get("count", 0), r.get("successful", 0), r.get("failed", 0),
                    r.get("inconclusive", 0), r.get("error", 0))
                want = expect(variant, version, instance)
                line = "%s %s %s/%s on %s: %s (%s; consecutiveSuccessLimit %s)" % (
                    version, variant, file, kind, instance, phase, counts,
                    "stored" if kept else "pruned")
                if want is None:
                    log("     " + line)
                elif phase in want:
                    log("ok   " + line)
                else:
                    fail("%s, want %s" % (line, " or ".join(want)))
                if variant == "current" and instance == "stopped" and phase == "Failed":
                    measured = r.get("count", 0) + r.get("error", 0)
                    if measured != 1:
                        fail("%s: a hard stop took %d measurements, want 1 (at once)" % (line, measured))
                if variant == "current":
                    table.append((version, file, kind, instance, phase, counts))
        finally:
            stop_controller(proc, logf)
    server.shutdown()
    if not Prometheus.seen:
        fail("no Prometheus query reached the loopback Prometheus")
    log("")
    log("| controller | recipe | healthy | rolling (rollback) | held | stopped |")
    log("|---|---|---|---|---|---|")
    rows = {}
    for version, file, kind, instance, phase, _ in table:
        rows.setdefault((version, file), {})[instance] = phase
    for (version, file), phases in sorted(rows.items()):
        log("| Argo Rollouts %s | %s | %s |" % (version, file, " | ".join(phases.get(i, "-") for i in INSTANCES)))
    print("%d checks failed" % len(failures) if failures else "every AnalysisRun ended as it must")
    return 1 if failures else 0


def fail(msg):
    print("FAIL " + msg, flush=True)
    failures.append(msg)


if __name__ == "__main__":
    sys.exit(main())
