#!/usr/bin/env bash
# Stop only the kube-apiserver of a harness started by scripts/k8s-up.sh DIR,
# leaving etcd (and so all objects) running; bring it back, on the same URL
# and with the same certs and tokens, with:  scripts/k8s-up.sh DIR --apiserver-only
#
#   scripts/k8s-stop-apiserver.sh DIR          # SIGTERM, bounded wait, SIGKILL
#   scripts/k8s-stop-apiserver.sh DIR --kill   # SIGKILL at once (a crash)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/k8s-lib.sh"

dir='' sig=TERM
for a in "$@"; do
  case $a in
    --kill) sig=KILL ;;
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) k8s_die "unknown option: $a" ;;
    *) [ -z "$dir" ] || k8s_die "only one DIR, please"; dir=$a ;;
  esac
done
[ -n "$dir" ] || k8s_die "usage: $0 DIR [--kill]"
[ -d "$dir" ] || k8s_die "$dir does not exist"
dir=$(cd "$dir" && pwd -P)
k8s_stop "$dir" kube-apiserver "${KURA_K8S_STOP_TIMEOUT:-20}" "$sig"
