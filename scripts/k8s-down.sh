#!/usr/bin/env bash
# Stop the kube-controller-manager (--with-gc), kube-apiserver and etcd that
# scripts/k8s-up.sh DIR started:
# SIGTERM, a bounded wait (KURA_K8S_STOP_TIMEOUT, default 20 s), then SIGKILL.
#
#   scripts/k8s-down.sh DIR          # stop; keep DIR (logs, certs, etcd data)
#   scripts/k8s-down.sh DIR --purge  # stop and delete DIR
#
# Safe to run when nothing is running.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/k8s-lib.sh"

dir='' purge=''
for a in "$@"; do
  case $a in
    --purge) purge=1 ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) k8s_die "unknown option: $a" ;;
    *) [ -z "$dir" ] || k8s_die "only one DIR, please"; dir=$a ;;
  esac
done
[ -n "$dir" ] || k8s_die "usage: $0 DIR [--purge]"
[ -d "$dir" ] || { k8s_log "$dir does not exist; nothing to stop"; exit 0; }
dir=$(cd "$dir" && pwd -P)

# Clients first (the garbage collector), then kube-apiserver, so that
# neither logs a storm of connection errors.
k8s_stop "$dir" kube-controller-manager
k8s_stop "$dir" kube-apiserver
k8s_stop "$dir" etcd
if [ -n "$purge" ]; then
  rm -rf "$dir"
else
  rm -f "$dir/env"
fi
