#!/usr/bin/env bash
# The real-cluster tier of the benchmarks (issue 28): the shipped
# `kura-agent run`, default settings, against a real kube-apiserver + etcd
# (scripts/k8s-up.sh, in a temporary directory) holding N KuraInstances with
# realistic Pods (testdata/cluster-load/), stand-ins answering each Pod's
# /status/rollout on its podIP. Prints a table and one JSON line: peak and
# steady RSS, CPU share, time until every instance has a status, polls,
# status writes, Events and API requests per second (from the API server's
# audit log, for the agent's user only), at rest and with 5 % of the
# instances in a rolling update (`cargo run -p kura-benches --bin
# cluster-load -- --help` lists every option).
#
#   scripts/cluster-load.sh [cluster-load options...]
#   scripts/cluster-load.sh --instances 100 --max-peak-rss-mib 150   # the .ci/run size
#   scripts/cluster-load.sh --instances 3334                          # 10,002 pods
#   scripts/cluster-load.sh --instances 3334 --agent-bin ./kura-agent-before
#   scripts/cluster-load.sh --instances 3334 --replicas 3             # 3 sharding replicas
#   scripts/cluster-load.sh --instances 3334 --publication companion  # beside Tuist's CRD
#   scripts/cluster-load.sh --instances 3334 --publication companion --controller-stand-in
#
# --publication instance|companion (default instance, the .ci/run call):
# `instance` installs this project's KuraInstance CRD, and the agent
# applies kurainstances/status; `companion` installs Tuist's CRD
# (testdata/crds/tuist-kurainstances.yaml, no status.rolloutGate) and the
# KuraInstanceHealth CRD, and the agent creates one companion per instance
# and applies kurainstancehealths/status. The agent runs with its default
# --publication-target auto either way (the run fails if it chose the
# other target); the harness waits for, and judges the rollout on, the
# statuses where that mode puts them. --controller-stand-in (companion
# only) adds a stand-in for Kura's controller: a full status update of
# every instance (twelve-field rolloutHealth) every 30 s, spread evenly.
# Every phase reports status writes/s, bytes written/s (the agent's
# kura_agent_status_write_bytes_total), bytes per write, writes and bytes
# per instance per minute, and the API requests by kind.
#
# --replicas N (default 1) starts N `kura-agent run` sharding the instances
# (Leases in the test namespace, granted as the chart's Lease Role does) and
# adds a per-replica table and the JSON's `replicas` array: each replica's
# CPU share, RSS median/max, peak RSS, polls/s, status writes/s and owned
# instances per phase. With N > 1 the top-level CPU and rates are summed
# over the replicas, its RSS figures are the largest replica's, and
# --max-peak-rss-mib applies to every replica. --membership-change (with
# N > 1) then starts replica N and stops replica 0, reporting each change's
# LIST requests by replica (audit log, by User-Agent) and the API server's
# LIST bytes, and fails on a list of pods or instances without a selector
# (beyond the one-page publication probe) or alternating status writers.
# --shard-labelled creates the instances with their kura.tuist.dev/shard
# label (as a provisioner may); without it replicas with unit watches
# (KURA_AGENT_SHARD_POD_SELECTION=instance-label) stamp it, as on a first
# install over an existing fleet.
#
# Builds `cluster-load` and `kura-agent` (release) first; --agent-bin
# measures another binary instead of this build's (and skips its build).
# Exit status: 0, 1 when the run failed (every instance must get a status),
# 2 when a --max-* bound is missed.
# Knobs: KURA_CLUSTER_LOAD_KEEP=1 keeps the work directory (API server and
# agent logs, audit log); KURA_CLUSTER_LOAD_PROFILE=dev builds the harness
# (not the agent) in the dev profile, as .ci/run does, where the workspace's
# crates are rebuilt on every run (fine at 100 instances; measure larger
# sizes with the release harness, whose stand-ins then cost less CPU);
# CARGO_TARGET_DIR as usual.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
. "$here/run-lib.sh"
run_init cluster-load KURA_CLUSTER_LOAD_KEEP k8s

profile=${KURA_CLUSTER_LOAD_PROFILE:-release}
target=${CARGO_TARGET_DIR:-$root/target}
case $profile in dev) bin=$target/debug ;; *) bin=$target/$profile ;; esac
agent=(--agent-bin "$target/release/kura-agent")
for a in "$@"; do
  case $a in --agent-bin|--agent-bin=*) agent=() ;; esac
done
part "build ($profile): cluster-load${agent[*]:+, kura-agent (release)}"
(cd "$root" && cargo build --locked --profile "$profile" -p kura-benches --bin cluster-load)
[ ${#agent[@]} -eq 0 ] || (cd "$root" && cargo build --locked --release -p kura-agent --bin kura-agent)

part "API server with an audit log of the agent's user"
user=kura-test-user
cat > "$dir/audit-policy.yaml" <<POLICY
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: ["$user"]
- level: None
POLICY
KURA_APISERVER_EXTRA_ARGS="--audit-policy-file=$dir/audit-policy.yaml --audit-log-path=$dir/audit.log --audit-log-maxsize=0 ${KURA_APISERVER_EXTRA_ARGS:-}" \
  "$here/k8s-up.sh" "$k8s_dir"
# shellcheck disable=SC1091
. "$k8s_dir/env"

part "cluster-load $*"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
"$bin/cluster-load" \
  --kubeconfig "$KUBECONFIG" --agent-context "$user" --agent-user "$user" \
  --audit-log "$dir/audit.log" --work-dir "$dir/work" \
  "${agent[@]}" "$@"
