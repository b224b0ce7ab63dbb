#!/usr/bin/env python3
"""Who may reach the agent's debug port (/metrics and the verdict API) under
the NetworkPolicy a chart rendering holds, by the Kubernetes NetworkPolicy
rules (a peer's namespaceSelector and podSelector both must match; no
ingress rule admits nobody; an ingress rule without `from` admits
everybody; a rule without `ports` admits every port):

  chart_ingress.py RENDERED.yaml PORT CASE...

CASE is `NAMESPACE[/k=v,...]=allow|deny`: a client pod in NAMESPACE (whose
labels are kubernetes.io/metadata.name=NAMESPACE, as the API server sets
them) with the given pod labels, and whether the policy must admit it to
PORT. Exit 1 with every case that came out otherwise.
"""
import sys

import yaml


def selects(selector, labels):
    """A LabelSelector (matchLabels, matchExpressions) against labels; an
    empty selector selects everything."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def peer_admits(peer, ns_labels, pod_labels):
    if "ipBlock" in peer:
        return False  # pod-to-pod traffic is judged on the selectors here
    ns_ok = selects(peer["namespaceSelector"], ns_labels) if "namespaceSelector" in peer else None
    pod_ok = selects(peer["podSelector"], pod_labels) if "podSelector" in peer else None
    if ns_ok is None and pod_ok is None:
        return False
    if ns_ok is None:
        # podSelector alone: pods of the policy's own namespace only.
        return pod_ok and ns_labels.get("kubernetes.io/metadata.name") == OWN_NAMESPACE
    return ns_ok and (pod_ok is None or pod_ok)


def admits(policy, port, ns, pod_labels):
    spec = policy["spec"]
    if "Ingress" not in spec.get("policyTypes", ["Ingress"]):
        return True
    ns_labels = {"kubernetes.io/metadata.name": ns}
    for rule in spec.get("ingress") or []:
        ports = rule.get("ports")
        if ports and not any(p.get("port") == port for p in ports):
            continue
        peers = rule.get("from")
        if not peers or any(peer_admits(p, ns_labels, pod_labels) for p in peers):
            return True
    return False


def main():
    global OWN_NAMESPACE
    rendered, port, cases = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    policies = [d for d in yaml.safe_load_all(open(rendered)) if d and d.get("kind") == "NetworkPolicy"]
    if len(policies) != 1:
        print("chart_ingress: want one NetworkPolicy, found %d" % len(policies))
        return 1
    (policy,) = policies
    OWN_NAMESPACE = policy["metadata"].get("namespace", "default")
    bad = 0
    for case in cases:
        who, want = case.rsplit("=", 1)
        ns, _, labels = who.partition("/")
        pod_labels = dict(kv.split("=", 1) for kv in labels.split(",") if kv)
        got = "allow" if admits(policy, port, ns, pod_labels) else "deny"
        print("%s %s: port %d from %s%s: %s" % ("ok  " if got == want else "FAIL", rendered.rsplit("/", 1)[-1],
                                              port, ns, " " + labels if labels else "", got))
        bad += got != want
    return 1 if bad else 0


OWN_NAMESPACE = "default"
if __name__ == "__main__":
    sys.exit(main())
