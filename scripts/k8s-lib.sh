# shellcheck shell=bash
# Shared by k8s-up.sh, k8s-down.sh and k8s-stop-apiserver.sh; source it.
# Layout of a harness directory DIR:
#   DIR/pki/            CA, serving cert, service-account key, tokens.csv
#   DIR/etcd-data/      etcd's data
#   DIR/bin/            symlinks: kube-apiserver, etcd, kubectl
#                       (and kube-controller-manager, with --with-gc)
#   DIR/{etcd,kube-apiserver,kube-controller-manager}.{pid,log}
#   DIR/state           ports and tokens (internal, shell syntax)
#   DIR/kubeconfig      admin kubeconfig
#   DIR/env             `. DIR/env` for KUBECONFIG, KURA_APISERVER_URL, PATH, ...

k8s_log() { printf '%s: %s\n' "${0##*/}" "$*" >&2; }
k8s_die() { k8s_log "error: $*"; exit 1; }

# k8s_abs DIR -> absolute path (DIR need not exist yet).
k8s_abs() {
  case $1 in
    /*) printf '%s\n' "$1" ;;
    *) printf '%s/%s\n' "$PWD" "$1" ;;
  esac
}

# k8s_pid DIR NAME -> pid of NAME if it runs (checked against its command
# line, so a recycled pid is not mistaken for ours); nothing otherwise.
k8s_pid() {
  local f=$1/$2.pid pid cmd
  [ -f "$f" ] || return 0
  pid=$(cat "$f" 2>/dev/null) || return 0
  case $pid in ''|*[!0-9]*) return 0 ;; esac
  kill -0 "$pid" 2>/dev/null || return 0
  # Every process the harness starts has DIR/ paths in its arguments.
  # No pipe into grep -q: under pipefail, grep leaving early can fail it.
  cmd=$(tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null) || return 0
  case $cmd in *"$1/"*) ;; *) return 0 ;; esac
  printf '%s\n' "$pid"
}

# k8s_stop DIR NAME [TIMEOUT_S] [SIGNAL]: send SIGNAL (TERM) to NAME, wait up
# to TIMEOUT_S (default ${KURA_K8S_STOP_TIMEOUT:-20}) for it to exit, then
# SIGKILL it. Removes the pid file. Returns 0 if it was not running.
k8s_stop() {
  local dir=$1 name=$2 timeout=${3:-${KURA_K8S_STOP_TIMEOUT:-20}} sig=${4:-TERM} pid i
  pid=$(k8s_pid "$dir" "$name")
  if [ -z "$pid" ]; then rm -f "$dir/$name.pid"; return 0; fi
  kill -"$sig" "$pid" 2>/dev/null || true
  for ((i = 0; i < timeout * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    k8s_log "$name (pid $pid) still running after ${timeout}s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$dir/$name.pid"
}

# k8s_tail DIR NAME: last lines of NAME's log, indented, on stderr.
k8s_tail() {
  local f=$1/$2.log
  [ -f "$f" ] || return 0
  printf '%s\n' "---- last lines of $f ----" >&2
  tail -n "${KURA_K8S_LOG_TAIL:-40}" "$f" | sed 's/^/    /' >&2
  printf '%s\n' "---- end of $f ----" >&2
}
