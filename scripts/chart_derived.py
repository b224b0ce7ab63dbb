#!/usr/bin/env python3
"""Checks that a rendered kura-health-agent chart lets the agent reach what it
polls, and reads it with the RBAC it needs, from the agent's own arguments.

  chart_derived.py RENDERED.yaml [EXPECTED-API-CIDR...]

Reads the Deployment's (or DaemonSet's) `kura-agent run` arguments
(--namespace, --pod-selector, --port, --port-name, --publication-target, or
else the container's KURA_AGENT_PUBLICATION_TARGET, else auto), derives from
them, with
a label-selector parser of its own, the NetworkPolicy egress rule and the
RBAC the chart must render, and compares:

- NetworkPolicy egress[0]: namespaceSelector = the watched namespaces (all
  when none), podSelector = the parsed --pod-selector, port = --port-name or
  --port;
- egress[1]: exactly the expected API server CIDRs, none of them a /0;
- RBAC: a ClusterRole + ClusterRoleBinding when no namespace is watched,
  else a Role + RoleBinding in each watched namespace and no other
  ClusterRole than the CRD read's; `get` and `create` on pods/portforward
  exactly when --port-forward-streams is given (node-local instances); the
  writes of the publication target and nothing else: patch on
  kurainstances/status (instance), get/list/watch/create/patch on
  kurainstancehealths and patch on kurainstancehealths/status (companion),
  both (auto); with auto, and only then, a ClusterRole (+ binding to the
  agent's ServiceAccount) granting exactly `get` on the CRD
  kurainstances.kura.tuist.dev by name, with or without namespaces; `patch`
  on kurainstances exactly when the agent stamps shard labels (sharding by
  unit with --stamp-shard-labels).

Exit 1 with every difference listed.
"""
import re
import sys

import yaml

KEY = r"[A-Za-z0-9](?:[-A-Za-z0-9_./]*[A-Za-z0-9])?"
VALUE = r"[-A-Za-z0-9_.]*"
WATCH_RULES = sorted(
    [("", "pods", v) for v in ("get", "list", "watch")]
    + [("kura.tuist.dev", "kurainstances", v) for v in ("get", "list", "watch")]
    # Events about the instances, in the instances' namespaces.
    + [("events.k8s.io", "events", v) for v in ("create", "patch")]
)
# The writes of each publication target (rollout-health.md, "Where the agent
# publishes"): the KuraInstance's status, or the agent's own companions (a
# server-side apply creates them), or both for auto.
INSTANCE_RULES = [("kura.tuist.dev", "kurainstances/status", "patch")]
COMPANION_RULES = (
    [("health.kura.tuist.dev", "kurainstancehealths", v)
     for v in ("get", "list", "watch", "create", "patch")]
    + [("health.kura.tuist.dev", "kurainstancehealths/status", "patch")]
)
TARGET_RULES = {
    "instance": INSTANCE_RULES,
    "companion": COMPANION_RULES,
    "auto": INSTANCE_RULES + COMPANION_RULES,
}
# auto only: the installed KuraInstance CRD, read at start, by name.
CRD_READ_RULES = [("apiextensions.k8s.io", "customresourcedefinitions", "get",
                   ("kurainstances.kura.tuist.dev",))]
# Node-local instances' pods, polled through their port-forward: granted
# exactly when the agent is given --port-forward-streams (nodeLocal.enabled).
PORT_FORWARD_RULES = [("", "pods/portforward", v) for v in ("create", "get")]
# Sharding by unit with stamping: the shard label on KuraInstances that lack
# it, granted exactly when --sharding=true, --shard-pod-selection is not all
# and --stamp-shard-labels is not false (both default on).
STAMP_RULES = [("kura.tuist.dev", "kurainstances", "patch")]


def split_requirements(selector):
    """Splits on commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p.strip() for p in parts]


def label_selector(selector):
    """kubectl selector syntax -> a set of normalised requirements."""
    reqs = set()
    if not selector.strip():
        return reqs
    for r in split_requirements(selector.strip()):
        if m := re.fullmatch(rf"({KEY})\s*==?\s*({VALUE})", r):
            reqs.add((m[1], "In", (m[2],)))
        elif m := re.fullmatch(rf"({KEY})\s*!=\s*({VALUE})", r):
            reqs.add((m[1], "NotIn", (m[2],)))
        elif m := re.fullmatch(rf"({KEY})\s+(in|notin)\s*\(([^)]*)\)", r):
            values = tuple(sorted(v.strip() for v in m[3].split(",") if v.strip()))
            reqs.add((m[1], "In" if m[2] == "in" else "NotIn", values))
        elif m := re.fullmatch(rf"!\s*({KEY})", r):
            reqs.add((m[1], "DoesNotExist", ()))
        elif re.fullmatch(KEY, r):
            reqs.add((r, "Exists", ()))
        else:
            raise ValueError(f"cannot parse requirement {r!r}")
    return reqs


def from_k8s(sel):
    """A Kubernetes LabelSelector -> the same normalised requirements."""
    reqs = set()
    for k, v in (sel.get("matchLabels") or {}).items():
        reqs.add((k, "In", (str(v),)))
    for e in sel.get("matchExpressions") or []:
        reqs.add((e["key"], e["operator"], tuple(sorted(e.get("values") or []))))
    return reqs


def rules_of(role):
    """(group, resource, verb), with the resourceNames appended when a rule
    has any (so a rule restricted by name never passes for an open one)."""
    return sorted((g, r, v) + ((tuple(rule["resourceNames"]),) if rule.get("resourceNames") else ())
                  for rule in role["rules"] for g in rule["apiGroups"]
                  for r in rule["resources"] for v in rule["verbs"])


def main():
    rendered, cidrs = sys.argv[1], sys.argv[2:]
    docs = [d for d in yaml.safe_load_all(open(rendered)) if d]
    problems = []

    def check(cond, what):
        if not cond:
            problems.append(what)

    (workload,) = [d for d in docs if d["kind"] in ("Deployment", "DaemonSet")]
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    flag = lambda name: [a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")]
    namespaces = flag("namespace")
    selector = (flag("pod-selector") or [""])[0]
    port = (flag("port-name") or flag("port"))[0]
    port = int(port) if port.isdigit() else port
    env = {e["name"]: e.get("value") for e in container.get("env") or []}
    target = (flag("publication-target") or [env.get("KURA_AGENT_PUBLICATION_TARGET") or "auto"])[0]
    check(target in TARGET_RULES, f"publication target {target!r} is none of {sorted(TARGET_RULES)}")
    stamps = ((flag("sharding") or ["false"])[0] == "true"
              and (flag("shard-pod-selection") or ["all"])[0] != "all"
              and (flag("stamp-shard-labels") or ["true"])[0] != "false")
    want_rules = sorted(WATCH_RULES + TARGET_RULES.get(target, [])
                        + (PORT_FORWARD_RULES if flag("port-forward-streams") else [])
                        + (STAMP_RULES if stamps else []))
    release_ns = workload["metadata"].get("namespace")
    sa = workload["spec"]["template"]["spec"].get("serviceAccountName")

    nps = [d for d in docs if d["kind"] == "NetworkPolicy"]
    check(len(nps) == 1, f"one NetworkPolicy, got {len(nps)}")
    if nps:
        egress = nps[0]["spec"]["egress"]
        (peer,) = egress[0]["to"]
        want_ns = ({("kubernetes.io/metadata.name", "In", tuple(sorted(namespaces)))}
                   if namespaces else set())
        check(from_k8s(peer["namespaceSelector"]) == want_ns,
              f"egress namespaces {peer['namespaceSelector']} != watched {namespaces}")
        check(from_k8s(peer["podSelector"]) == label_selector(selector),
              f"egress podSelector {peer['podSelector']} != --pod-selector {selector!r}")
        check([p["port"] for p in egress[0]["ports"]] == [port],
              f"egress port {egress[0]['ports']} != polled port {port!r}")
        api = [b["ipBlock"]["cidr"] for b in egress[1]["to"]]
        check(api == cidrs, f"API server CIDRs {api} != {cidrs}")
        check(not any(c.endswith("/0") for c in api), f"a /0 in {api}")
        check(len(egress) == 2, f"two egress rules, got {len(egress)}")

    crd_roles = [d for d in docs if d["kind"] == "ClusterRole"
                 and d["metadata"]["name"].endswith("-crd-read")]
    crd_bindings = [d for d in docs if d["kind"] == "ClusterRoleBinding"
                    and d["metadata"]["name"].endswith("-crd-read")]
    if target == "auto":
        check(len(crd_roles) == 1 and len(crd_bindings) == 1,
              "auto: one CRD-read ClusterRole and its binding")
        for r in crd_roles:
            check(rules_of(r) == CRD_READ_RULES, f"CRD-read ClusterRole: {rules_of(r)}")
        for b in crd_bindings:
            check(b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                   "name": b["metadata"]["name"]}, f"CRD-read binding ref {b['roleRef']}")
            check(b["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": release_ns}],
                  f"CRD-read binding subjects {b['subjects']}")
    else:
        check(not crd_roles and not crd_bindings, f"{target}: yet a CRD-read ClusterRole")
    cluster_roles = [d for d in docs if d["kind"] == "ClusterRole" and d not in crd_roles]
    cluster_bindings = [d for d in docs if d["kind"] == "ClusterRoleBinding" and d not in crd_bindings]
    watch_roles = [d for d in docs if d["kind"] == "Role"
                   and d["metadata"]["name"].endswith("-watch")]
    watch_bindings = [d for d in docs if d["kind"] == "RoleBinding"
                      and d["metadata"]["name"].endswith("-watch")]
    if namespaces:
        check(not cluster_roles and not cluster_bindings,
              "namespaces watched, yet a ClusterRole/ClusterRoleBinding")
        check(sorted(r["metadata"]["namespace"] for r in watch_roles) == sorted(namespaces),
              f"a watch Role per namespace {namespaces}")
        check(sorted(b["metadata"]["namespace"] for b in watch_bindings) == sorted(namespaces),
              f"a watch RoleBinding per namespace {namespaces}")
        for r in watch_roles:
            check(rules_of(r) == want_rules, f"Role in {r['metadata']['namespace']}: {rules_of(r)}")
        for b in watch_bindings:
            check(b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                   "name": b["metadata"]["name"]}, f"RoleBinding ref {b['roleRef']}")
    else:
        check(len(cluster_roles) == 1 and len(cluster_bindings) == 1,
              "all namespaces: one ClusterRole and its binding")
        for r in cluster_roles:
            check(rules_of(r) == want_rules, f"ClusterRole: {rules_of(r)}")
        check(not watch_roles, "all namespaces, yet watch Roles")

    if problems:
        print(f"chart_derived: {rendered}:", *problems, sep="\n  ")
        sys.exit(1)
    print(f"chart_derived: ok: namespaces={namespaces or 'all'} selector={selector!r} port={port!r}"
          f" port-forward={bool(flag('port-forward-streams'))} publication-target={target}")


if __name__ == "__main__":
    main()
