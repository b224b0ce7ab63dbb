#!/usr/bin/env python3
"""The Argo Rollouts recipes of docs/integrations/argo/ under the real Argo
Rollouts controller of each supported release, against a real
kube-apiserver and the agent's real verdict API (scripts/argo-rollouts-check.sh
drives it):

    scripts/argo_rollouts_check.py --recipes DIR --docs DIR --agent-url URL \
        --controller VERSION=BINARY:CRD_DIR ... --work DIR --agent-bin KURA_AGENT \
        --baseline-hook F --stage F --job-template F --kargo-stage-crd F \
        --scenario SIM.json [--install-only]

For each controller (VERSION=BINARY:CRD_DIR, e.g. 1.7=/x/rollouts-controller:
testdata/vendor/argo-rollouts/v1.7.2), one after another:

1. Install. That release's own CRDs (kept in the repository) replace the
   previous release's, and every file under --docs holding an
   AnalysisTemplate or ClusterAnalysisTemplate is applied as a user of that
   release would: `kubectl apply -f FILE`, strict field validation (the API
   server refuses an unknown field; it does not prune it). A template says
   which releases it installs on (annotation kura.tuist.dev/argo-rollouts:
   ">=1.7"; without one, ">=1.7", what docs/integrations.md promised every
   recipe): it must install on each of them, and be refused by an older one.

2. AnalysisRuns. The release's rollouts-controller (every controller of
   it) runs, against the API server of $KUBECONFIG, an AnalysisRun per web
   and Prometheus metric of every template that release installs, per agent
   state and per failure of the way to the agent (args filled in, as Argo
   Rollouts and Kargo create them from the templates; timings shortened: no
   initialDelay, a 1 s interval, a consecutiveErrorLimit of 6 instead of
   40, a web timeout of 1 s, and the soak in the conditions scaled with the
   interval: 30 s at a 30 s interval becomes 1 s, 2 minutes 4 s):

  instance   state                                  must end
  healthy    every check passes, pods on spec.image Successful after exactly
             (healthy for 2 s or more)              consecutiveSuccessLimit healthy
                                                    measurements (1.8 files: 4), else
                                                    `count` (v1.7 files: 1); an Error
                                                    before them only while healthy for
                                                    less than the soak
  rolling    checks pass, pods on the old image     Error at the deadline, each
             (a rollback's new generation)          measurement the not-healthy message
  held       a pod not ready: the gate holds        Error at the deadline, each
                                                    measurement the not-healthy message
                                                    and (web) the verdict as its value
  stopped    memory pressure 2: a hard stop         Failed, on the first measurement
  flapping   a pod ready 0.5 s, not ready 0.5 s     never Successful, no measurement
                                                    Successful (healthy for less than
                                                    the soak, or not healthy)
  nope       no such instance: web 404,             Error at the deadline; web: no
             Prometheus no sample                   `kura:` message (Argo's own error);
                                                    Prometheus: the no-sample message
  timeout    (web) a server that never answers      Error at the deadline, no `kura:` message
  refused    a closed port                          Error at the deadline, no `kura:` message

   So a hold ends Error for the reason it should (the measurements say the
   verdict is not healthy, and carry it), and a 404, a timeout or a closed
   port, which end Error too, are told apart from it by their messages.

   The web metric calls the agent's verdict API (--agent-url, a real agent
   loop over simulated pods: agent/tests/integration_outputs.rs). The
   Prometheus metric calls a loopback Prometheus HTTP API (/api/v1/query)
   that answers the template's query (args filled in; any other query is
   refused) from the agent's live /metrics: each `max(series{labels})` is
   the scrape's value, the arithmetic is the query's. For the steady
   states its answer must be the value promtool computes over a scrape
   (PROMQL_VALUE; scripts/check_integrations.py checks promtool's).

3. The templates as a Rollout uses them. A Rollout whose canary step runs
   an analysis of the namespaced web AnalysisTemplate and of the
   ClusterAnalysisTemplate (`clusterScope: true`), both as that release
   installs them (timings shortened the same way), is updated: the
   controller must resolve both into one AnalysisRun (the cluster
   template's metric as stored), which ends Successful on the healthy
   instance; on the held one it ends Error and the Rollout aborts.

4. The job recipe (docs/integrations/kargo/, analysis-template-job.yaml)
   laid out as Argo CD and Kargo lay it out: the baseline hook's objects in
   the Kura nodes' namespace (an object naming no namespace gets it), the
   Stage and the kura-check AnalysisTemplate in the Stage's; the hook's own
   `kura-agent baseline` args (nodes: kura-agent simulate) run with a token
   of the hook's ServiceAccount; the verification's AnalysisRun as Kargo
   builds it (the Stage's namespace); the Job this release's controller
   creates from it. The ConfigMap that Job mounts must be in the Job's
   namespace and hold the document the hook wrote (a pod mounts
   ConfigMaps of its own namespace only; the Job itself does not run: no
   kubelet).

As checks of the check, on each release: a template with a misspelled
field is refused (the install validates), and so is a misspelled Stage; the templates as they were before
issue 31 (held Inconclusive, `count: 40`, shortened to 12) must let the
held instance pass on 1.7 (Successful: 1.7 prunes consecutiveSuccessLimit
when a client does not validate) and not on 1.8; the web template as it was
before issue 41 (no soak, `count: 8`) must let the flapping instance pass
on 1.7 (8 healthy measurements, not in a row). Both are created with
`--validate=false`, since 1.7 refuses them otherwise.

With --rollback-recording DIR --rollback-table DOCS (issue 41): every step
of the recorded rollback after a hard stop (testdata/rollback/, which
scripts/check_rollback.py describes) that has a verdict and a scrape runs
under every web and Prometheus template the release installs, timings
shortened as above: the web metric asks a loopback server that answers the
step's recorded verdict.json as the instance kura-rollback/<step>, the
Prometheus metric the loopback Prometheus, to whose scrape the step's
recorded series are added under that name. Each run must end in the phase
of its cell in DOCS's rollback table (the web or Prometheus column of its
file's release: v1.7/ files or the 1.8 ones).

Prints one line per run and the outcome table; exit 1 when anything ends
otherwise or does not end within its bound.
"""

import argparse
import copy
import http.server
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import yaml

NAMESPACE = "kura-argo-check"
STATES = ("healthy", "rolling", "held", "stopped", "flapping")
WEB_FAULTS = ("nope", "timeout", "refused")
PROM_FAULTS = ("nope", "refused")
# The value of the Prometheus query per steady instance (soak shortened),
# as promtool computes it over the agent's real scrape
# (scripts/check_integrations.py's PROMETHEUS_EXPECTED holds the same and
# fails when promtool disagrees).
PROMQL_VALUE = {"healthy": 1, "rolling": 0, "held": 0, "stopped": -2}
TEST_INTERVAL = 1  # s
TEST_ERROR_LIMIT = 6
TEST_WEB_TIMEOUT = 1  # s
RUN_TIMEOUT = 120
SUPPORT_KEY = "kura.tuist.dev/argo-rollouts"
HOLD_MESSAGE = "kura: not healthy yet"
SOAK_MESSAGE = "kura: healthy for less than"
NO_SAMPLE_MESSAGE = "kura: no sample"
# The web template of issue 31 (before issue 41): no soak.
ISSUE_31_WEB_SUCCESS = (
    "result.rolloutHealthy.status == 'True' || (result.rolloutHardStopped.status != 'True' "
    "&& asInt('kura: not healthy yet: RolloutHealthy ' + result.rolloutHealthy.status + ' ' "
    "+ result.rolloutHealthy.reason) == 0)")

failures = []


def log(msg):
    print(msg, flush=True)


def fail(msg):
    print("FAIL " + msg, flush=True)
    failures.append(msg)


def kubectl(*args, stdin=None, check=True):
    done = subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError("kubectl %s: %s%s" % (" ".join(args), done.stdout, done.stderr))
    return done


def get(kind, name, namespace=NAMESPACE):
    return json.loads(kubectl("get", kind, name, "-n", namespace, "-o", "json").stdout)


def fill(text, args):
    return re.sub(r"\{\{\s*args\.([A-Za-z0-9_-]+)\s*\}\}", lambda m: args[m.group(1)], text)


def seconds(text):
    m = re.fullmatch(r"(\d+)(s|m)", text)
    if not m:
        raise ValueError("duration %r" % text)
    return int(m.group(1)) * (60 if m.group(2) == "m" else 1)


# --- the loopback Prometheus -------------------------------------------------

SCRAPE_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
MAX_TERM = re.compile(r"max\(([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}\)")


def evaluate(query, metrics_text):
    """The template's query over one scrape: each max(series{labels}) is the
    largest matching sample; no sample for one of them: no sample at all
    (PromQL's vector arithmetic); the rest is the query's arithmetic."""
    samples = []
    for line in metrics_text.splitlines():
        m = SCRAPE_LINE.match(line)
        if m and not line.startswith("#"):
            samples.append((m.group(1), dict(LABEL.findall(m.group(2) or "")), float(m.group(3))))
    missing = []

    def term(m):
        want = dict(LABEL.findall(m.group(2)))
        values = [v for n, labels, v in samples
                  if n == m.group(1) and all(labels.get(k) == x for k, x in want.items())]
        if not values:
            missing.append(m.group(0))
            return "0"
        return repr(max(values))

    arithmetic = MAX_TERM.sub(term, query).replace(">= bool", ">=")
    if not re.fullmatch(r"[0-9.e\s()*+\-<>=]+", arithmetic):
        raise ValueError("not a query this stand-in evaluates: %s" % query)
    if missing:
        return None
    return float(eval(arithmetic, {"__builtins__": {}}, {}))  # noqa: S307 (digits and operators only)


class Prometheus(http.server.BaseHTTPRequestHandler):
    """GET/POST /api/v1/query: a template's query, args filled in, answered
    from the agent's live /metrics; any other query: 400."""

    queries = set()
    agent_url = ""
    seen = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        url = urllib.parse.urlparse(self.path)
        query = urllib.parse.parse_qs(url.query).get("query", [""])[0]
        if url.path != "/api/v1/query" or query not in self.queries:
            body = {"status": "error", "errorType": "bad_data", "error": "unexpected query %r" % query}
            self.answer(400, body)
            return
        self.seen.append(query)
        value = evaluate(query, scrape(self.agent_url))
        result = [] if value is None else [{"metric": {}, "value": [time.time(), repr(value)]}]
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


def scrape(agent_url):
    with urllib.request.urlopen(agent_url + "/metrics", timeout=10) as r:
        return r.read().decode() + Recorded.series


# --- issue 41's recorded rollback ----------------------------------------------

ROLLBACK_NAMESPACE = "kura-rollback"


class Recorded(http.server.BaseHTTPRequestHandler):
    """The rollback recording (testdata/rollback/<step>/, scripts/
    check_rollback.py) as the agent answered it: GET
    /api/v1/instances/kura-rollback/<step>/verdict is the step's recorded
    verdict.json; `series` holds each step's recorded /metrics series as
    the instance kura-rollback/<step>, which the loopback Prometheus adds
    to the live scrape."""

    recording = ""
    series = ""

    def do_GET(self):  # noqa: N802
        m = re.fullmatch(r"/api/v1/instances/%s/([A-Za-z0-9-]+)/verdict" % ROLLBACK_NAMESPACE, self.path)
        f = m and os.path.join(self.recording, m.group(1), "verdict.json")
        if not f or not os.path.exists(f):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        raw = open(f, "rb").read()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *_):
        pass


def recorded_steps(recording):
    """The steps of the recording that have a verdict and a scrape."""
    return sorted(s for s in os.listdir(recording)
                  if os.path.exists(os.path.join(recording, s, "verdict.json"))
                  and os.path.exists(os.path.join(recording, s, "metrics.txt")))


def recorded_series(recording):
    """Every step's recorded series, relabelled kura-rollback/<step>."""
    out = []
    for step in recorded_steps(recording):
        obj = json.load(open(os.path.join(recording, step, "kurainstance.json")))
        was = 'kura_namespace="%s",kura_instance="%s"' % (obj["metadata"]["namespace"], obj["metadata"]["name"])
        now = 'kura_namespace="%s",kura_instance="%s"' % (ROLLBACK_NAMESPACE, step)
        for line in open(os.path.join(recording, step, "metrics.txt")).read().splitlines():
            if was not in line:
                raise ValueError("%s/metrics.txt: a line of another instance: %s" % (step, line))
            out.append(line.replace(was, now))
    return "\n" + "\n".join(out) + "\n"


def rollback_column(file, metric):
    """The column of docs/integrations.md's rollback table a run of this
    template file's metric is held to."""
    return "%s-%s" % ("web" if kind_of(metric) == "web" else "prom", "1.7" if file.startswith("v1.7/") else "1.8")


class Silent(threading.Thread):
    """A port that accepts connections and never answers (a timeout)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.held = []

    def run(self):
        while True:
            conn, _ = self.sock.accept()
            self.held.append(conn)


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# --- the templates -----------------------------------------------------------

def release_tuple(text):
    return tuple(int(x) for x in text.strip().lstrip("v").split(".")[:2])


def template_files(root):
    """Every YAML file under root holding an AnalysisTemplate or a
    ClusterAnalysisTemplate, with its templates."""
    out = []
    for base, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            if not name.endswith((".yaml", ".yml")):
                continue
            path = os.path.join(base, name)
            docs = [d for d in yaml.safe_load_all(open(path))
                    if d and d.get("kind") in ("AnalysisTemplate", "ClusterAnalysisTemplate")]
            if docs:
                out.append((path, docs))
    return out


def supported_from(doc):
    """The first release a template says it installs on (annotation
    kura.tuist.dev/argo-rollouts: ">=1.7"); without one, what
    docs/integrations.md promised every recipe: 1.7."""
    claim = (doc.get("metadata", {}).get("annotations") or {}).get(SUPPORT_KEY, ">=1.7")
    if not claim.startswith(">="):
        raise ValueError("%s: %r is not of the form >=X.Y" % (SUPPORT_KEY, claim))
    return release_tuple(claim[2:])


def install_recipes(version, files, namespace):
    """`kubectl apply -f FILE` of every template file, as a user of that
    release would run it (strict field validation, kubectl's default). A
    file must install on every release its templates claim, and is expected
    to be refused by an older one. Returns the files that installed."""
    installed = []
    for path, docs in files:
        claims = sorted({supported_from(d) for d in docs})
        rel = os.path.relpath(path)
        if len(claims) != 1:
            fail("%s: its templates claim different releases %s" % (rel, claims))
            continue
        claim = ".".join(map(str, claims[0]))
        supported = release_tuple(version) >= claims[0]
        done = kubectl("apply", "--validate=strict", "-n", namespace, "-f", path, check=False)
        text = (done.stdout + done.stderr).strip().replace("\n", "; ")
        if supported and done.returncode == 0:
            log("ok   %s kubectl apply %s: %s" % (version, rel, text))
            installed.append((path, docs))
        elif supported:
            fail("%s kubectl apply %s (claims >=%s) refused: %s" % (version, rel, claim, text))
        elif done.returncode != 0:
            log("ok   %s kubectl apply %s refused, as its >=%s says: %s" % (version, rel, claim, text))
        else:
            fail("%s kubectl apply %s installs, but it claims >=%s only: widen the claim" % (version, rel, claim))
    return installed


def misspelled(version, installed):
    """A template with a misspelled field is refused: the install checks
    something."""
    for path, _ in installed:
        text = open(path).read()
        if "jsonPath:" in text:
            done = kubectl("apply", "--validate=strict", "--dry-run=server", "-n", NAMESPACE, "-f", "-",
                           stdin=text.replace("jsonPath:", "jsonpath:"), check=False)
            if done.returncode == 0:
                fail("%s: %s with jsonPath misspelled installs: the install checks nothing" % (version, path))
            else:
                log("ok   %s: %s with jsonPath misspelled is refused: %s" % (
                    version, os.path.relpath(path), done.stderr.strip().splitlines()[-1][-140:]))
            return
    fail("%s: no installed web template to misspell" % version)


def measured_metrics(files, recipes_dir):
    """(file, template, metric) of every web and Prometheus metric of the
    files under the recipes directory."""
    out = []
    for path, docs in files:
        if not os.path.abspath(path).startswith(os.path.abspath(recipes_dir) + os.sep):
            continue
        for doc in docs:
            for metric in doc["spec"]["metrics"]:
                if "web" in metric["provider"] or "prometheus" in metric["provider"]:
                    out.append((os.path.relpath(path, recipes_dir), doc, metric))
    return out


def kind_of(metric):
    return "web" if "web" in metric["provider"] else "prom"


def shortened(metric):
    """The metric with test timings: no initialDelay, a 1 s interval, a
    consecutiveErrorLimit of 6, a 1 s web timeout, and the soak of the
    conditions (duration('30s') in a web condition, `>= bool 30` in a
    query) scaled as the interval is."""
    m = copy.deepcopy(metric)
    scale = TEST_INTERVAL / seconds(m.get("interval", "%ds" % TEST_INTERVAL))
    m.pop("initialDelay", None)
    m["interval"] = "%ds" % TEST_INTERVAL
    if "consecutiveErrorLimit" in m:
        m["consecutiveErrorLimit"] = TEST_ERROR_LIMIT
    if m.get("count") == 40:  # the pre-issue-31 variant: 40 measurements of 1 s
        m["count"] = 12
        m["inconclusiveLimit"] = 12

    def soak(text):
        return "%gs" % (seconds(text) * scale)

    for k in ("successCondition", "failureCondition"):
        if k in m:
            m[k] = re.sub(r"duration\('(\d+[sm])'\)", lambda x: "duration('%s')" % soak(x.group(1)), m[k])
    if "web" in m["provider"]:
        m["provider"]["web"]["timeoutSeconds"] = TEST_WEB_TIMEOUT
    else:
        q = m["provider"]["prometheus"]["query"]
        m["provider"]["prometheus"]["query"] = re.sub(
            r">= bool (\d+)", lambda x: ">= bool %g" % (int(x.group(1)) * scale), q)
    return m


def pre_issue_31(metric):
    """The metric as the templates had it before issue 31."""
    m = copy.deepcopy(metric)
    m.pop("consecutiveErrorLimit", None)
    m.update({"count": 40, "consecutiveSuccessLimit": 4, "failureLimit": 0, "inconclusiveLimit": 40})
    if "web" in m["provider"]:
        m["successCondition"] = "result.rolloutHealthy.status == 'True'"
        m["failureCondition"] = "result.rolloutHardStopped.status == 'True'"
    else:
        m["successCondition"] = "len(result) == 1 && result[0] == 1"
        m["failureCondition"] = "len(result) == 1 && result[0] < 0"
    return m


def issue_31_web(metric):
    """The web metric as issue 31 left it: no soak, 8 measurements."""
    m = copy.deepcopy(metric)
    m.update({"count": 8, "consecutiveSuccessLimit": 4, "failureLimit": 0,
              "consecutiveErrorLimit": 40, "successCondition": ISSUE_31_WEB_SUCCESS})
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


DONE = ("Successful", "Failed", "Error", "Inconclusive")


def wait_runs(names):
    """{name: run} once every run has ended (or RUN_TIMEOUT passed): one
    list call a second, not one call per run."""
    deadline = time.time() + RUN_TIMEOUT
    runs = {}
    while True:
        items = json.loads(kubectl("get", "analysisruns", "-n", NAMESPACE, "-o", "json").stdout)["items"]
        runs = {r["metadata"]["name"]: r for r in items if r["metadata"]["name"] in names}
        if all(runs.get(n, {}).get("status", {}).get("phase") in DONE for n in names) or time.time() > deadline:
            return runs
        time.sleep(1)


def wait_run(name):
    deadline = time.time() + RUN_TIMEOUT
    while time.time() < deadline:
        run = get("analysisrun", name)
        if run.get("status", {}).get("phase", "") in DONE:
            return run
        time.sleep(0.5)
    return get("analysisrun", name)


# --- what each run must show -------------------------------------------------

def judge(version, variant, file, metric, instance, run):
    """Checks one finished run; returns its table cell."""
    status = run.get("status", {})
    phase = status.get("phase", "(none)")
    results = status.get("metricResults") or [{}]
    r = results[0]
    ms = r.get("measurements") or []
    counts = "count %s, successful %s, failed %s, inconclusive %s, errors %s" % (
        r.get("count", 0), r.get("successful", 0), r.get("failed", 0),
        r.get("inconclusive", 0), r.get("error", 0))
    kind = kind_of(metric)
    line = "%s %s %s/%s on %s: %s (%s)" % (version, variant, file, kind, instance, phase, counts)
    bad = []

    def messages():
        return [m.get("message", "") for m in ms]

    if variant == "pre-issue-31":
        want = "Successful" if version == "1.7" else "Inconclusive"
        if phase != want:
            bad.append("the pre-issue-31 template on the held instance must end %s here" % want)
    elif variant == "issue-31":
        if version == "1.7" and phase != "Successful":
            bad.append("the issue-31 web template must let the flapping instance pass on 1.7 "
                       "(8 healthy measurements, not in a row): the check cannot see a flap pass")
    elif instance == "healthy":
        want = metric.get("consecutiveSuccessLimit") or metric.get("count")
        if phase != "Successful":
            bad.append("want Successful")
        elif (r.get("successful"), r.get("count")) != (want, want):
            bad.append("want Successful after exactly %s healthy measurements" % want)
        early = [m for m in messages()[:-int(want)] if SOAK_MESSAGE not in m]
        if early or r.get("error", 0) != len(ms) - want:
            bad.append("an Error before the healthy measurements other than 'healthy for less "
                       "than the soak': %s" % early)
    elif instance in ("rolling", "held"):
        if phase != "Error" or r.get("error") != TEST_ERROR_LIMIT + 1 or r.get("count", 0) != 0:
            bad.append("want Error at the deadline: %d errors, none counted" % (TEST_ERROR_LIMIT + 1))
        sentence = HOLD_MESSAGE
        if kind == "web":
            sentence += ": RolloutHealthy " + ("False NotReady" if instance == "held" else "Unknown NotConverged")
        if not ms or any(sentence not in m for m in messages()):
            bad.append("every measurement must say %r (the verdict), not an error: %s" % (sentence, set(messages())))
        # (Argo Rollouts records no value for a measurement whose condition
        # fails to evaluate: the message is what carries the verdict.)
    elif instance == "stopped":
        if phase != "Failed" or (r.get("count", 0), r.get("failed", 0), r.get("error", 0)) != (1, 1, 0):
            bad.append("want Failed on the first measurement")
    elif instance == "flapping":
        if phase == "Successful" or r.get("successful", 0) != 0:
            bad.append("a flapping instance passed a measurement")
        if any(HOLD_MESSAGE not in m and SOAK_MESSAGE not in m for m in messages()):
            bad.append("a measurement of the flapping instance errs otherwise: %s" % set(messages()))
    else:  # nope, timeout, refused
        if phase != "Error" or r.get("error") != TEST_ERROR_LIMIT + 1 or r.get("count", 0) != 0:
            bad.append("want Error at the deadline: %d errors, none counted" % (TEST_ERROR_LIMIT + 1))
        if kind == "prom" and instance == "nope":
            if not ms or any(NO_SAMPLE_MESSAGE not in m for m in messages()):
                bad.append("want the no-sample message, told apart from a hold: %s" % set(messages()))
        elif not ms or any(not m or "kura:" in m for m in messages()):
            bad.append("want Argo Rollouts' own error, never a kura: sentence (a hold): %s" % set(messages()))
    detail = sorted(set(messages()))
    if bad:
        fail("%s: %s; messages %s" % (line, "; ".join(bad), detail))
    else:
        log("ok   %s %s" % (line, detail[0][:110] if detail else ""))
    return phase


# --- the controller ----------------------------------------------------------

def start_controller(version, binary, work):
    logf = open(os.path.join(work, "controller-%s.log" % version), "w")
    proc = subprocess.Popen(
        # Every controller (rollout, analysis, experiment, ...): the rollout
        # controller resolves the templates a Rollout names.
        [binary, "--kubeconfig", os.environ["KUBECONFIG"],
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


CRDS = {
    "analysis-run-crd.yaml": "analysisruns.argoproj.io",
    "analysis-template-crd.yaml": "analysistemplates.argoproj.io",
    "cluster-analysis-template-crd.yaml": "clusteranalysistemplates.argoproj.io",
    "rollout-crd.yaml": "rollouts.argoproj.io",
    "experiment-crd.yaml": "experiments.argoproj.io",
}


def apply_crds(crd_dir):
    for name in CRDS:
        kubectl("apply", "--server-side", "--force-conflicts", "-f", os.path.join(crd_dir, name))
    # Polled: `kubectl wait --for=condition=Established` fails at once when
    # it reads a CRD before its first status.
    for crd in CRDS.values():
        deadline = time.time() + 60
        while kubectl("get", "crd", crd, "-o",
                      'jsonpath={.status.conditions[?(@.type=="Established")].status}',
                      check=False).stdout != "True":
            if time.time() > deadline:
                raise RuntimeError("CRD %s not Established after 60 s" % crd)
            time.sleep(0.5)


# --- a Rollout resolving the templates ----------------------------------------

def pruned(value):
    """value without its empty objects, at any depth."""
    if isinstance(value, dict):
        out = {k: pruned(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v != {}}
    if isinstance(value, list):
        return [pruned(v) for v in value]
    return value


def rollout_resolves(version, metrics, args_of):
    """A Rollout's canary step names the namespaced web template and the
    ClusterAnalysisTemplate (clusterScope); the controller must resolve both
    into the AnalysisRun it creates on an update."""
    if not metrics:
        fail("%s: no web or Prometheus template installs on this release" % version)
        return
    # The templates made for this release: the newest claim it meets.
    newest = max(supported_from(t) for _, t, _ in metrics)
    metrics = [(f, t, m) for f, t, m in metrics if supported_from(t) == newest]
    web = [(f, t, m) for f, t, m in metrics if t["kind"] == "AnalysisTemplate" and kind_of(m) == "web"]
    cluster = [(f, t, m) for f, t, m in metrics if t["kind"] == "ClusterAnalysisTemplate"]
    if len(web) != 1 or len(cluster) != 1:
        fail("%s: want one web AnalysisTemplate and one ClusterAnalysisTemplate to resolve, found %d and %d"
             % (version, len(web), len(cluster)))
        return
    stored = {}
    for _, template, metric in (web[0], cluster[0]):
        t = copy.deepcopy(template)
        t["metadata"] = {"name": template["metadata"]["name"]}
        t["spec"]["metrics"] = [shortened(metric)]
        kubectl("apply", "--validate=strict", "-n", NAMESPACE, "-f", "-", stdin=json.dumps(t))
        if t["kind"] == "ClusterAnalysisTemplate":
            got = json.loads(kubectl("get", "clusteranalysistemplate", t["metadata"]["name"], "-o", "json").stdout)
        else:
            got = get("analysistemplate", t["metadata"]["name"])
        stored[t["kind"]] = got
    for instance, want in (("healthy", "Successful"), ("held", "Error")):
        name = "kura-nodes-%s" % instance
        # Both templates' args, every URL on loopback (never a template's
        # in-cluster default).
        merged = dict(args_of(instance, "web"), **args_of(instance, "prom"))
        args = [{"name": k, "value": v} for k, v in sorted(merged.items())]
        rollout = {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Rollout",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "kura", "image": "ghcr.io/tuist/kura:1.0.0"}]},
                },
                "strategy": {"canary": {"steps": [{"analysis": {
                    "templates": [
                        {"templateName": stored["AnalysisTemplate"]["metadata"]["name"]},
                        {"templateName": stored["ClusterAnalysisTemplate"]["metadata"]["name"],
                         "clusterScope": True},
                    ],
                    "args": args,
                }}]}},
            },
        }
        kubectl("delete", "rollout", name, "-n", NAMESPACE, "--ignore-not-found", "--wait=true")
        kubectl("apply", "--validate=strict", "-f", "-", stdin=json.dumps(rollout))
        # The first revision is the stable one; an update runs the steps.
        deadline = time.time() + 60
        while not get("rollout", name).get("status", {}).get("stableRS"):
            if time.time() > deadline:
                fail("%s Rollout %s: no stable ReplicaSet after 60 s" % (version, name))
                return
            time.sleep(0.5)
        kubectl("patch", "rollout", name, "-n", NAMESPACE, "--type", "merge", "-p", json.dumps(
            {"spec": {"template": {"spec": {"containers": [{"name": "kura", "image": "ghcr.io/tuist/kura:1.1.0"}]}}}}))
        run = None
        deadline = time.time() + 60
        while run is None and time.time() < deadline:
            runs = json.loads(kubectl("get", "analysisruns", "-n", NAMESPACE, "-l",
                                      "rollouts-pod-template-hash", "-o", "json").stdout)["items"]
            mine = [x for x in runs if any(o.get("name") == name for o in x["metadata"].get("ownerReferences", []))]
            run = mine[0] if mine else None
            time.sleep(0.5)
        if run is None:
            fail("%s Rollout %s: the controller created no AnalysisRun from its step" % (version, name))
            continue
        # (The controller writes the zero values of the provider's structs,
        # e.g. `authentication: {oauth2: {}, sigv4: {}}`: compared without
        # empty objects.)
        got = {m["name"]: pruned(m) for m in run["spec"]["metrics"]}
        want_metrics = {m["name"]: pruned(m) for t in stored.values() for m in t["spec"]["metrics"]}
        if got != want_metrics:
            fail("%s Rollout %s: AnalysisRun %s has metrics %s, want the templates' %s" % (
                version, name, run["metadata"]["name"], json.dumps(got, sort_keys=True),
                json.dumps(want_metrics, sort_keys=True)))
            continue
        run = wait_run(run["metadata"]["name"])
        phase = run.get("status", {}).get("phase")
        aborted = False
        if want == "Error":
            deadline = time.time() + 30
            while time.time() < deadline and not aborted:
                aborted = bool(get("rollout", name).get("status", {}).get("abort"))
                time.sleep(0.5)
        line = "%s Rollout %s: the controller resolved AnalysisTemplate %s and ClusterAnalysisTemplate %s " \
               "(clusterScope) into AnalysisRun %s: %s%s" % (
                   version, name, stored["AnalysisTemplate"]["metadata"]["name"],
                   stored["ClusterAnalysisTemplate"]["metadata"]["name"], run["metadata"]["name"], phase,
                   ", the Rollout aborted" if aborted else "")
        if phase != want or (want == "Error" and not aborted):
            fail("%s; want %s%s" % (line, want, " and the Rollout aborted" if want == "Error" else ""))
        else:
            log("ok   " + line)


# --- the job recipe's baseline ConfigMap where its Job runs ---------------------

def simulate(agent, scenario):
    """kura-agent simulate: (process, node URLs)."""
    proc = subprocess.Popen([agent, "simulate", scenario], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
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
    os.killpg(proc.pid, signal.SIGKILL)
    raise RuntimeError("kura-agent simulate %s did not start" % scenario)


def service_account_kubeconfig(namespace, name, path):
    """A kubeconfig with a token of ServiceAccount namespace/name (the
    TokenRequest API, as a pod's projected token) whose default namespace
    is namespace: what the hook Job's pod has."""
    token = kubectl("create", "token", name, "-n", namespace, "--duration", "10m").stdout.strip()
    config = json.loads(kubectl("config", "view", "--raw", "--minify", "-o", "json").stdout)
    config["users"] = [{"name": "sa", "user": {"token": token}}]
    config["contexts"][0]["context"].update(user="sa", namespace=namespace)
    with open(path, "w") as f:
        json.dump(config, f)
    return path


def job_recipe(version, a, work):
    """The job recipe as Argo CD, Kargo and Argo Rollouts lay it out: the
    baseline hook's objects applied in the Kura nodes' namespace (the Argo
    CD Application's destination, the namespace of the nodes' URLs), the
    Stage and the kura-check AnalysisTemplate in the Stage's namespace; the
    hook's `kura-agent baseline` run with its own args and its
    ServiceAccount's token; the AnalysisRun Kargo creates for the
    verification (in the Stage's namespace); the Job this release's
    controller creates from it. The ConfigMap the Job mounts must be in the
    Job's namespace, holding what the hook wrote."""
    hook = [d for d in yaml.safe_load_all(open(a.baseline_hook)) if d]
    stage = [d for d in yaml.safe_load_all(open(a.stage)) if d and d.get("kind") == "Stage"][0]
    template = [d for d in yaml.safe_load_all(open(a.job_template)) if d][0]
    job = [d for d in hook if d["kind"] == "Job"][0]
    argv = job["spec"]["template"]["spec"]["containers"][0]["args"]
    node_urls = [argv[i + 1] for i, x in enumerate(argv) if x == "--node"]
    nodes_ns = urllib.parse.urlparse(node_urls[0]).hostname.split(".")[2]
    stage_ns = stage["metadata"]["namespace"]
    for ns in (nodes_ns, stage_ns):
        kubectl("create", "namespace", ns, check=False)
    kubectl("apply", "--server-side", "--force-conflicts", "-f", a.kargo_stage_crd)
    deadline = time.time() + 60
    while kubectl("get", "crd", "stages.kargo.akuity.io", "-o",
                  'jsonpath={.status.conditions[?(@.type=="Established")].status}',
                  check=False).stdout != "True":
        if time.time() > deadline:
            raise RuntimeError("the Stage CRD is not Established after 60 s")
        time.sleep(0.5)
    # Argo CD applies the hook into the Application's namespace: an object
    # without one gets it, one that names its own keeps it (kubectl -n
    # would refuse the mix). The Stage names its own.
    rendered = os.path.join(work, "baseline-hook-rendered.yaml")
    with open(rendered, "w") as f:
        for d in hook:
            d = copy.deepcopy(d)
            d["metadata"].setdefault("namespace", nodes_ns)
            f.write("---\n" + yaml.safe_dump(d))
    for args in (("-f", rendered), ("-f", a.stage), ("-n", stage_ns, "-f", a.job_template)):
        done = kubectl("apply", "--validate=strict", *args, check=False)
        if done.returncode != 0:
            fail("%s job recipe: kubectl apply %s: %s" % (version, " ".join(args), done.stderr.strip()))
            return
    # A misspelled Stage field is refused: the Stage is really validated.
    misspelled = open(a.stage).read().replace("analysisTemplates:", "analysisTemplate:")
    if kubectl("apply", "--validate=strict", "--dry-run=server", "-f", "-", stdin=misspelled,
               check=False).returncode == 0:
        fail("%s job recipe: a Stage with a misspelled field was accepted" % version)
    proc, urls = simulate(a.agent_bin, a.scenario)
    try:
        bargv = list(argv)
        it = iter(urls)
        bargv = [next(it) if i > 0 and bargv[i - 1] == "--node" else x for i, x in enumerate(bargv)]
        env = dict(os.environ, KUBECONFIG=service_account_kubeconfig(
            nodes_ns, job["spec"]["template"]["spec"]["serviceAccountName"],
            os.path.join(work, "hook-%s.kubeconfig" % version)))
        done = subprocess.run([a.agent_bin] + bargv, env=env, capture_output=True, text=True, timeout=60)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    if done.returncode != 0:
        fail("%s job recipe: the hook's kura-agent %s as ServiceAccount %s/%s: exit %d: %s" % (
            version, " ".join(bargv), nodes_ns, job["spec"]["template"]["spec"]["serviceAccountName"],
            done.returncode, (done.stdout + done.stderr).strip()[-600:]))
        return
    log("ok   %s job recipe: the hook (ServiceAccount %s/%s): %s" % (
        version, nodes_ns, job["spec"]["template"]["spec"]["serviceAccountName"],
        done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""))
    # The verification's AnalysisRun, as Kargo builds it: the Stage's
    # namespace, the template's metrics, the Stage's args over the
    # template's defaults.
    defaults = {x["name"]: x.get("value") for x in template["spec"].get("args", [])}
    given = {x["name"]: x["value"] for x in stage["spec"]["verification"].get("args", [])}
    run_name = "kura-nodes-verification-%s" % version.replace(".", "-")
    kubectl("delete", "analysisrun", run_name, "-n", stage_ns, "--ignore-not-found", "--wait=true")
    body = {
        "apiVersion": "argoproj.io/v1alpha1", "kind": "AnalysisRun",
        "metadata": {"name": run_name, "namespace": stage_ns},
        "spec": {"metrics": template["spec"]["metrics"],
                 "args": [{"name": k, "value": v} for k, v in sorted(dict(defaults, **given).items())]},
    }
    kubectl("create", "--validate=strict", "-f", "-", stdin=json.dumps(body))
    created = None
    deadline = time.time() + 60
    while created is None and time.time() < deadline:
        jobs = json.loads(kubectl("get", "jobs", "-A", "-o", "json").stdout)["items"]
        created = next((j for j in jobs if (j["metadata"].get("annotations") or {})
                        .get("analysisrun.argoproj.io/name") == run_name), None)
        time.sleep(0.5)
    kubectl("patch", "analysisrun", run_name, "-n", stage_ns, "--type", "merge",
            "-p", '{"spec":{"terminate":true}}', check=False)
    if created is None:
        fail("%s job recipe: the controller created no Job for AnalysisRun %s/%s" % (version, stage_ns, run_name))
        return
    job_ns = created["metadata"]["namespace"]
    volumes = [v["configMap"]["name"] for v in created["spec"]["template"]["spec"].get("volumes", [])
               if "configMap" in v]
    if not volumes:
        fail("%s job recipe: the check Job mounts no ConfigMap" % version)
        return
    for name in volumes:
        where = [c["metadata"]["namespace"] for c in json.loads(kubectl(
            "get", "configmaps", "-A", "--field-selector", "metadata.name=" + name, "-o", "json").stdout)["items"]]
        if job_ns not in where:
            fail("%s job recipe: the check Job runs in %s and mounts ConfigMap %s, which the hook wrote in %s: "
                 "a pod mounts ConfigMaps of its own namespace only" % (version, job_ns, name, where or "no namespace"))
            continue
        cm = json.loads(kubectl("get", "configmap", name, "-n", job_ns, "-o", "json").stdout)
        doc = json.loads(cm.get("data", {}).get("baseline.json", "null") or "null")
        if not doc:
            fail("%s job recipe: ConfigMap %s/%s has no baseline.json" % (version, job_ns, name))
        else:
            log("ok   %s job recipe: Job %s/%s (from AnalysisRun %s/%s) mounts ConfigMap %s/%s, "
                "the baseline the hook wrote as %s/%s" % (
                    version, job_ns, created["metadata"]["name"], stage_ns, run_name, job_ns, name,
                    nodes_ns, job["spec"]["template"]["spec"]["serviceAccountName"]))


# --- main --------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser()
    p.add_argument("--recipes", required=True, help="the web and Prometheus templates' directory")
    p.add_argument("--docs", help="where every template file is looked for (default: --recipes)")
    p.add_argument("--agent-url", required=True)
    p.add_argument("--controller", action="append", required=True, help="VERSION=BINARY:CRD_DIR")
    p.add_argument("--work", required=True)
    p.add_argument("--agent-bin", required=True, help="the kura-agent binary (the job recipe's hook)")
    p.add_argument("--baseline-hook", required=True)
    p.add_argument("--stage", required=True)
    p.add_argument("--job-template", required=True)
    p.add_argument("--kargo-stage-crd", required=True)
    p.add_argument("--scenario", required=True, help="kura-agent simulate scenario for the hook's nodes")
    p.add_argument("--install-only", action="store_true",
                   help="only apply the template files on each release's CRDs")
    p.add_argument("--rollback-recording", help="issue 41's recorded rollback (testdata/rollback)")
    p.add_argument("--rollback-table", help="the docs file whose rollback table the runs are held to")
    a = p.parse_args()
    rollback = {}
    if a.rollback_recording:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import check_rollback

        rollback = check_rollback.doc_table(a.rollback_table)
        Recorded.recording = a.rollback_recording
        Recorded.series = recorded_series(a.rollback_recording)
        steps = recorded_steps(a.rollback_recording)
        recorded = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorded)
        threading.Thread(target=recorded.serve_forever, daemon=True).start()
        recorded_url = "http://127.0.0.1:%d" % recorded.server_address[1]
        for step in steps:
            if step not in rollback:
                fail("rollback: the recording's step %s is not in %s's table" % (step, a.rollback_table))

    files = template_files(a.docs or a.recipes)
    if not files:
        fail("no AnalysisTemplate under %s" % (a.docs or a.recipes))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Prometheus)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    prometheus_url = "http://127.0.0.1:%d" % server.server_address[1]
    Prometheus.agent_url = a.agent_url
    silent = Silent()
    silent.start()
    refused_url = "http://127.0.0.1:%d" % closed_port()

    def args_of(instance, kind="web"):
        args = {"namespace": "kura", "instance": instance}
        if instance == "timeout":
            args.update(instance="healthy", agent="http://127.0.0.1:%d" % silent.port)
        elif instance == "refused":
            args.update(instance="healthy", agent=refused_url, prometheus=refused_url)
        else:
            args.update(agent=a.agent_url, prometheus=prometheus_url)
        if kind == "prom":
            args.pop("agent", None)
        else:
            args.pop("prometheus", None)
        return args

    # Every query a run may send, and the stand-in's answers for the steady
    # states, which must be promtool's.
    all_metrics = measured_metrics(files, a.recipes)
    kinds = {kind_of(m) for _, _, m in all_metrics}
    if kinds != {"web", "prom"}:
        fail("want web and Prometheus recipes, found %s" % sorted(kinds))
    metrics_text = scrape(a.agent_url)
    for file, template, metric in all_metrics:
        if kind_of(metric) != "prom":
            continue
        for m in (shortened(metric), shortened(pre_issue_31(metric))):
            for instance in STATES + PROM_FAULTS:
                q = fill(m["provider"]["prometheus"]["query"],
                         dict(args_of(instance, "prom"), prometheus=prometheus_url))
                Prometheus.queries.add(q)
        if rollback:
            for step in steps:
                q = fill(shortened(metric)["provider"]["prometheus"]["query"],
                         dict(namespace=ROLLBACK_NAMESPACE, instance=step, prometheus=prometheus_url))
                Prometheus.queries.add(q)
        for instance, want in PROMQL_VALUE.items():
            q = fill(shortened(metric)["provider"]["prometheus"]["query"], args_of(instance, "prom"))
            got = evaluate(q, metrics_text)
            if got != want:
                fail("%s on %s: the loopback Prometheus answers %s, promtool %s" % (file, instance, got, want))
        if evaluate(fill(shortened(metric)["provider"]["prometheus"]["query"], args_of("nope", "prom")),
                    metrics_text) is not None:
            fail("%s: the loopback Prometheus has a sample for an unknown instance" % file)

    kubectl("create", "namespace", NAMESPACE, check=False)
    table = []
    for spec in a.controller:
        version, rest = spec.split("=", 1)
        binary, crd_dir = rest.split(":", 1)
        log("== Argo Rollouts %s (%s, CRDs %s)" % (version, binary, os.path.relpath(crd_dir)))
        apply_crds(crd_dir)
        for kind in ("rollouts", "analysisruns", "analysistemplates"):
            kubectl("delete", kind, "--all", "-n", NAMESPACE, "--wait=true")
        kubectl("delete", "clusteranalysistemplates", "--all", "--wait=true")
        t0 = time.time()
        installed = install_recipes(version, files, NAMESPACE)
        misspelled(version, installed)
        if a.install_only:
            continue
        metrics = measured_metrics(installed, a.recipes)
        proc, logf = start_controller(version, binary, a.work)
        try:
            runs = []

            def create(variant, file, template, m, instance):
                kind = kind_of(m)
                code = file.split(".yaml")[0].replace("cluster-analysis-template", "cat") \
                    .replace("analysis-template", "at").replace("v1.7/", "17-")
                name = "%s-%s-%s" % (variant, code, instance)
                name = re.sub(r"[^a-z0-9-]+", "-", name.lower())[:63].strip("-")
                body = analysis_run(name, template, m, args_of(instance, kind))
                # --validate=false only for the old templates, which 1.7
                # would refuse; the current ones go through strict validation.
                validate = "strict" if variant == "current" else "false"
                kubectl("create", "--validate=" + validate, "-f", "-", stdin=json.dumps(body))
                runs.append((variant, file, m, instance, name))

            for file, template, metric in metrics:
                m = shortened(metric)
                for instance in STATES + (WEB_FAULTS if kind_of(m) == "web" else PROM_FAULTS):
                    create("current", file, template, m, instance)
                if "consecutiveSuccessLimit" in metric:  # a 1.8 file: its predecessors
                    create("pre-issue-31", file, template, shortened(pre_issue_31(metric)), "held")
                    if kind_of(m) == "web":
                        create("issue-31", file, template, shortened(issue_31_web(metric)), "flapping")
            if rollback:
                # Issue 41: every recorded step of the rollback, each
                # template as this release installs it, the run's phase
                # held to the table's cell (a measurement's phase there).
                for file, template, metric in metrics:
                    m = shortened(metric)
                    for step in steps:
                        code = file.split(".yaml")[0].replace("cluster-analysis-template", "cat") \
                            .replace("analysis-template", "at").replace("v1.7/", "17-")
                        name = re.sub(r"[^a-z0-9-]+", "-", ("rb-%s-%s" % (code, step)).lower())[:63].strip("-")
                        args = {"namespace": ROLLBACK_NAMESPACE, "instance": step}
                        args.update({"agent": recorded_url} if kind_of(m) == "web" else {"prometheus": prometheus_url})
                        kubectl("create", "--validate=strict", "-f", "-",
                                stdin=json.dumps(analysis_run(name, template, m, args)))
                        runs.append(("rollback", file, m, step, name))
            if not any(v == "issue-31" for v, *_ in runs):
                # On 1.7 the 1.8 files do not install: take their predecessors
                # from the v1.7 web template, with the 1.8 timings.
                for file, template, metric in metrics:
                    if kind_of(metric) == "web":
                        create("issue-31", file, template, shortened(issue_31_web(metric)), "flapping")
                        create("pre-issue-31", file, template, shortened(pre_issue_31(metric)), "held")
            log("-- %s: %d AnalysisRuns created (%.0fs)" % (version, len(runs), time.time() - t0))
            ended = wait_runs({name for *_, name in runs})
            log("-- %s: every AnalysisRun ended (%.0fs)" % (version, time.time() - t0))
            for variant, file, m, instance, name in runs:
                if variant == "rollback":
                    run = ended.get(name, {})
                    phase = run.get("status", {}).get("phase", "(none)")
                    col = rollback_column(file, m)
                    want = rollback[instance][col].split(" ")[0]
                    msgs = sorted({x.get("message", "")[:90] for r in run.get("status", {}).get("metricResults") or []
                                   for x in r.get("measurements") or []})
                    line = "%s rollback %s/%s on %s: %s (table: %s) %s" % (version, file, kind_of(m), instance, phase, want, msgs)
                    if phase == want:
                        log("ok   " + line)
                    else:
                        fail(line)
                    table.append((version, file, kind_of(m), "rollback " + instance, phase))
                    continue
                phase = judge(version, variant, file, m, instance, ended.get(name, {}))
                if variant == "current":
                    table.append((version, file, kind_of(m), instance, phase))
            rollout_resolves(version, metrics, args_of)
            log("-- %s: Rollouts resolved (%.0fs)" % (version, time.time() - t0))
            job_recipe(version, a, a.work)
            log("-- %s: job recipe (%.0fs)" % (version, time.time() - t0))
        finally:
            stop_controller(proc, logf)
    server.shutdown()
    if not Prometheus.seen and not a.install_only:
        fail("no Prometheus query reached the loopback Prometheus")
    log("")
    columns = STATES + WEB_FAULTS
    log("| controller | recipe | %s |" % " | ".join(columns))
    log("|---|---|%s" % ("---|" * len(columns)))
    rows = {}
    for version, file, kind, instance, phase in table:
        rows.setdefault((version, file), {})[instance] = phase
    for (version, file), phases in sorted(rows.items()):
        log("| Argo Rollouts %s | %s | %s |" % (version, file, " | ".join(phases.get(i, "-") for i in columns)))
    print("%d checks failed" % len(failures) if failures else "every check passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
