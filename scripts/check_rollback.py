#!/usr/bin/env python3
"""Issue 41, "Rollback after a hard stop": one recorded sequence through every
consumer, compared with the table in docs/integrations.md (scripts/
integrations-check.sh runs it on the committed recording, scripts/e2e.sh on
the one its run has just made):

    scripts/check_rollback.py --recording testdata/rollback \
        --docs docs/integrations.md --integrations KURA_INTEGRATIONS \
        --promtool PROMTOOL [--self-check]

The recording (agent/tests/e2e_apiserver.rs,
a_rollback_after_a_hard_stop_is_recorded_for_every_consumer, on the real
API server; re-record with `KURA_E2E_ROLLBACK_RECORD=$PWD/testdata/rollback
scripts/e2e.sh a_rollback_after_a_hard_stop`) has one directory per step:
kurainstance.json (the KuraInstance as the API server returned it),
verdict.json (the agent's verdict API) and metrics.txt (the instance's
series of the agent's /metrics), the last two absent for the step recorded
while the agent was between sweeps.

The table between the markers `<!-- rollback-table:begin -->` and
`<!-- rollback-table:end -->` of --docs is the expected outcome: one row
per step (the step's directory in backticks first), one column per
consumer, in this order:

  verdict API        `verdict` and `signal` of verdict.json
  RolloutHealthy     the stored condition's status and reason ("(old
                     generation)" when its observedGeneration is below
                     metadata.generation)
  Argo CD            health.lua of docs/integrations/argocd/.../KuraInstance
                     in Argo CD's Lua VM (kura-integrations argocd-eval)
  Flux               the instance-mode Kustomization's healthCheckExprs by
                     fluxcd/pkg/runtime/cel (kura-integrations flux-cel)
  kstatus            fluxcd/cli-utils kstatus (kura-integrations kstatus)
  web 1.8, web 1.7   one measurement of docs/integrations/argo/
                     analysis-template-web.yaml and v1.7/'s: the jsonPath on
                     verdict.json, the conditions by expr (kura-integrations
                     argo-web), the soak shortened to 1 s (the recorded
                     healthy steps had been healthy for 5 s)
  Prometheus 1.8, 1.7  one measurement of analysis-template-prometheus.yaml
                     and v1.7/'s (the cluster templates must read the same):
                     the query over metrics.txt, its value checked by
                     promtool, through the conditions; "Phase (value)"

A cell is compared without its backticks and bold marks; "—" where the step
has no recording for that consumer. Any difference fails the check.

--self-check also runs the check on variants that must fail: the rollback
judged healthy too early (step 4 and 5 replaced by the healthy step's
conditions and verdict, as an agent that judged pods on B as A would
write), and the Flux expressions without the generation gate (before issue
31): each must differ from the table.
"""

import argparse
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_integrations as ci  # noqa: E402  (fill, soak_shortened, scrape_series)
from argo_rollouts_check import evaluate as promql  # noqa: E402

BEGIN = "<!-- rollback-table:begin -->"
END = "<!-- rollback-table:end -->"
COLUMNS = ("verdict", "condition", "argocd", "flux", "kstatus",
           "web-1.8", "web-1.7", "prom-1.8", "prom-1.7")
NONE = "—"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARGOCD = os.path.join(ROOT, "docs/integrations/argocd/resource_customizations/kura.tuist.dev/KuraInstance")
FLUX = os.path.join(ROOT, "docs/integrations/flux/kustomization.yaml")
ARGO = os.path.join(ROOT, "docs/integrations/argo")
WEB = {"web-1.8": "analysis-template-web.yaml", "web-1.7": "v1.7/analysis-template-web.yaml"}
PROM = {
    "prom-1.8": ("analysis-template-prometheus.yaml", "cluster-analysis-template-prometheus.yaml"),
    "prom-1.7": ("v1.7/analysis-template-prometheus.yaml", "v1.7/cluster-analysis-template-prometheus.yaml"),
}


def clean(cell):
    return re.sub(r"\s+", " ", cell.replace("`", "").replace("**", "")).strip()


def doc_table(path):
    """{step: {column: cell}} from the table between the markers."""
    text = open(path).read()
    if BEGIN not in text or END not in text:
        raise SystemExit("%s: no rollback table (%s ... %s)" % (path, BEGIN, END))
    rows = [line for line in text.split(BEGIN, 1)[1].split(END, 1)[0].splitlines()
            if line.startswith("|")]
    table = {}
    for line in rows[2:]:  # the header and its rule
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 1 + len(COLUMNS):
            raise SystemExit("%s: a rollback table row has %d cells, want %d: %s"
                             % (path, len(cells), 1 + len(COLUMNS), line))
        step = re.match(r"`([^`]+)`", cells[0])
        if not step:
            raise SystemExit("%s: a rollback row names no step: %s" % (path, line))
        table[step.group(1)] = {c: clean(v) for c, v in zip(COLUMNS, cells[1:])}
    return table


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()


def metric_of(template_file, kind):
    doc = yaml.safe_load(open(template_file))
    metrics = [m for m in doc["spec"]["metrics"] if kind in m["provider"]]
    if len(metrics) != 1:
        raise SystemExit("%s: want one %s metric, found %d" % (template_file, kind, len(metrics)))
    return doc, metrics[0]


def conditions_args(metric):
    out = []
    if metric.get("successCondition"):
        out += ["--success", metric["successCondition"]]
    if metric.get("failureCondition"):
        out += ["--failure", metric["failureCondition"]]
    return out


def rolloutHealthy(obj):
    conds = [c for c in obj.get("status", {}).get("conditions", []) if c.get("type") == "RolloutHealthy"]
    if not conds:
        return NONE
    c = conds[0]
    text = "%s %s" % (c.get("status"), c.get("reason"))
    if c.get("observedGeneration", 0) < obj["metadata"].get("generation", 0):
        text += " (old generation)"
    return text


def web_phase(tool, metric, body, soak_shortened=True):
    m = ci.soak_shortened(metric) if soak_shortened else metric
    got = run([tool, "argo-web", "--body", body, "--jsonpath", m["provider"]["web"].get("jsonPath", "{$}")]
              + conditions_args(m))
    return got.splitlines()[0] if got else got


def prom_reading(tool, promtool, doc, metric, metrics_file, ns, name, tmp, soak_shortened=True):
    """(cell, message): the query's value over the scrape (checked by promtool)
    through the conditions."""
    m = ci.soak_shortened(metric) if soak_shortened else metric
    defaults = {a["name"]: a.get("value") for a in doc["spec"].get("args", [])}
    query = ci.fill(m["provider"]["prometheus"]["query"], dict(defaults, namespace=ns, instance=name))
    scrape = open(metrics_file).read()
    value = promql(query, scrape)
    test = os.path.join(tmp, "rollback-promql.test.yaml")
    yaml.safe_dump({
        "rule_files": [], "evaluation_interval": "1m",
        "tests": [{"name": "rollback", "interval": "1m", "input_series": ci.scrape_series(scrape),
                   "promql_expr_test": [{"expr": query, "eval_time": "1m",
                                         "exp_samples": [] if value is None else
                                         [{"labels": "{}", "value": value}]}]}],
    }, open(test, "w"))
    done = subprocess.run([promtool, "test", "rules", os.path.basename(test)], cwd=tmp,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit("promtool disagrees with the query's value %s on %s:\n%s%s"
                         % (value, metrics_file, done.stdout, done.stderr))
    got = run([tool, "argo-prometheus", "--values", "" if value is None else repr(value)]
              + conditions_args(m))
    got = got.splitlines()[0] if got else got
    shown = "no sample" if value is None else ("%g" % value)
    return "%s (%s)" % (got.split(":")[0], shown), got


def status_line(line, obj_file):
    """(status, message) of a "FILE STATUS: MESSAGE" line."""
    if not line.startswith(obj_file + " "):
        raise SystemExit("unexpected output for %s: %s" % (obj_file, line))
    status, _, message = line[len(obj_file) + 1:].partition(":")
    return status.strip(), message.strip()


def flux_exprs(flux_file):
    docs = [d for d in yaml.safe_load_all(open(flux_file)) if d]
    for d in docs:
        for e in d.get("spec", {}).get("healthCheckExprs", []):
            if e.get("kind") == "KuraInstance":
                return e
    raise SystemExit("%s: no healthCheckExprs for KuraInstance" % flux_file)


def readings(a, recording, flux_entry, tmp):
    """{step: {column: reading}} and {step: {column: message}}."""
    out, notes = {}, {}
    for step in sorted(os.listdir(recording)):
        d = os.path.join(recording, step)
        if not os.path.isdir(d):
            continue
        obj_file = os.path.join(d, "kurainstance.json")
        obj = json.load(open(obj_file))
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        row, note = {}, {}
        row["condition"] = rolloutHealthy(obj)
        row["argocd"], note["argocd"] = status_line(run([a.integrations, "argocd-eval", ARGOCD, obj_file]), obj_file)
        cmd = [a.integrations, "flux-cel", "--current", flux_entry["current"]]
        if flux_entry.get("failed"):
            cmd += ["--failed", flux_entry["failed"]]
        if flux_entry.get("inProgress"):
            cmd += ["--in-progress", flux_entry["inProgress"]]
        row["flux"] = run(cmd + [obj_file]).split(" ", 1)[1].split(":")[0]
        row["kstatus"], note["kstatus"] = status_line(run([a.integrations, "kstatus", obj_file]), obj_file)
        verdict_file = os.path.join(d, "verdict.json")
        metrics_file = os.path.join(d, "metrics.txt")
        if os.path.exists(verdict_file):
            v = json.load(open(verdict_file))
            row["verdict"] = " ".join(x for x in (v["verdict"], v.get("signal")) if x)
            for col, f in WEB.items():
                _, metric = metric_of(os.path.join(ARGO, f), "web")
                got = web_phase(a.integrations, metric, verdict_file)
                row[col], note[col] = got.split(":")[0], got
        else:
            row["verdict"] = NONE
            row.update({c: NONE for c in WEB})
        if os.path.exists(metrics_file):
            for col, files in PROM.items():
                cells = set()
                for f in files:
                    doc, metric = metric_of(os.path.join(ARGO, f), "prometheus")
                    cell, msg = prom_reading(a.integrations, a.promtool, doc, metric, metrics_file, ns, name, tmp)
                    cells.add(cell)
                    note[col] = msg
                if len(cells) != 1:
                    raise SystemExit("%s: the templates %s read %s differently: %s" % (step, files, col, cells))
                row[col] = cells.pop()
        else:
            row.update({c: NONE for c in PROM})
        out[step], notes[step] = row, note
    return out, notes


def compare(table, got, notes, label):
    bad = []
    for step in sorted(set(table) | set(got)):
        if step not in got:
            bad.append("%s: the table has a step %s the recording lacks" % (label, step))
            continue
        if step not in table:
            bad.append("%s: the recording's step %s is not in the table" % (label, step))
            continue
        for col in COLUMNS:
            want, have = table[step][col], got[step][col]
            if want != have:
                bad.append("%s: %s, %s: reads %r, the table says %r (%s)"
                           % (label, step, col, have, want, notes.get(step, {}).get(col, "")))
    return bad


def healthy_too_early(recording, tmp):
    """The recording as an agent that judged the pods on B as A would have
    written it: the rollback's steps carry the healthy step's conditions
    and verdict (generation kept)."""
    out = os.path.join(tmp, "healthy-too-early")
    shutil.copytree(recording, out)
    steps = sorted(s for s in os.listdir(out) if os.path.isdir(os.path.join(out, s)))
    healthy = json.load(open(os.path.join(out, steps[-1], "kurainstance.json")))
    healthy_verdict = json.load(open(os.path.join(out, steps[-1], "verdict.json")))
    healthy_metrics = open(os.path.join(out, steps[-1], "metrics.txt")).read()
    for step in steps:
        if "pods-on-b" not in step and "rolling-back" not in step:
            continue
        f = os.path.join(out, step, "kurainstance.json")
        obj = json.load(open(f))
        obj["status"]["conditions"] = copy.deepcopy(healthy["status"]["conditions"])
        obj["status"]["rolloutGate"] = copy.deepcopy(healthy["status"]["rolloutGate"])
        json.dump(obj, open(f, "w"))
        json.dump(healthy_verdict, open(os.path.join(out, step, "verdict.json"), "w"))
        open(os.path.join(out, step, "metrics.txt"), "w").write(healthy_metrics)
    return out


def without_generation_gate(expression):
    """The `failed` expression as it was before issue 31: any hard stop,
    whichever generation it is about."""
    gate = r"\s*&&\s*c\.\?observedGeneration\.orValue\(0\)\s*==\s*metadata\.generation"
    out = re.sub(gate, "", expression)
    if out == expression:
        raise SystemExit("the Flux failed expression has no generation gate to remove: %s" % expression)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--recording", required=True)
    p.add_argument("--docs", required=True)
    p.add_argument("--integrations", required=True)
    p.add_argument("--promtool", required=True)
    p.add_argument("--self-check", action="store_true")
    a = p.parse_args()
    table = doc_table(a.docs)
    flux_entry = flux_exprs(FLUX)
    with tempfile.TemporaryDirectory() as tmp:
        got, notes = readings(a, a.recording, flux_entry, tmp)
        for step in sorted(got):
            print("%-24s %s" % (step, " | ".join("%s: %s" % (c, got[step][c]) for c in COLUMNS)))
            for col, msg in sorted(notes[step].items()):
                print("%26s%s: %s" % ("", col, msg))
        bad = compare(table, got, notes, a.recording)
        # The soak as written: the recorded healthy steps (5 s) have not met it.
        last = sorted(got)[-1]
        for col, f in WEB.items():
            _, metric = metric_of(os.path.join(ARGO, f), "web")
            phase = web_phase(a.integrations, metric, os.path.join(a.recording, last, "verdict.json"), False)
            if not phase.startswith("Error") or "healthy for less than" not in phase:
                bad.append("%s on %s with the soak as written: %s (want an Error: healthy for less than)"
                           % (f, last, phase))
        if a.self_check:
            variants = {
                "healthy too early": (healthy_too_early(a.recording, tmp), flux_entry),
                # Before issue 31 Failed was not gated on the generation.
                "Flux without the generation gate": (a.recording, dict(
                    flux_entry, failed=without_generation_gate(flux_entry["failed"]))),
            }
            for label, (recording, entry) in variants.items():
                vgot, vnotes = readings(a, recording, entry, tmp)
                diffs = compare(table, vgot, vnotes, label)
                if diffs:
                    print("self-check: %s fails as it should:" % label)
                    for d in diffs:
                        print("  " + d)
                else:
                    bad.append("self-check: %s reads as the table says: the check cannot see it" % label)
    for b in bad:
        print("FAIL " + b)
    print("%d rollback checks failed" % len(bad) if bad else "the rollback reads as docs/integrations.md says, for every consumer")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
