#!/usr/bin/env bash
# Start a real kube-apiserver + etcd on 127.0.0.1 for tests.
#
#   scripts/k8s-up.sh DIR                   # start etcd + kube-apiserver
#   scripts/k8s-up.sh DIR --apiserver-only  # (re)start kube-apiserver only,
#                                           # same certs, etcd, port and URL
#   scripts/k8s-up.sh DIR --with-gc         # also kube-controller-manager
#                                           # running only the garbage collector
#
# Everything lives in DIR (created if needed): certs, etcd data, logs
# (DIR/etcd.log, DIR/kube-apiserver.log), DIR/kubeconfig (admin token) and
# DIR/env, to be sourced:  . DIR/env   (KUBECONFIG, KURA_APISERVER_URL, PATH
# with DIR/bin holding kubectl, pids, tokens).
# Waits until /readyz is ok; on failure prints the log tail, stops what it
# started and exits non-zero. Running `up` again on a running DIR is a no-op
# (it restarts kube-apiserver if only that was stopped).
# Stop with scripts/k8s-down.sh DIR; scripts/k8s-stop-apiserver.sh DIR stops
# kube-apiserver alone.
# --with-gc (also on a running DIR, to add it) starts kube-controller-manager
# with --controllers=garbagecollector on a free 127.0.0.1 port, waits for its
# /healthz, and makes DIR/env export KURA_GC=1: objects whose owners are
# gone get deleted, as in a real cluster. It rereads discovery every 30 s (a
# constant, no flag), so it handles a CRD's objects at most ~30 s after the
# CRD is created. Log: DIR/kube-controller-manager.log.
#
# Binaries come from scripts/build-tools.sh (built on first use, ~15 min).
# Knobs: KURA_K8S_READY_TIMEOUT (s, default 120), KURA_K8S_STOP_TIMEOUT (s,
# default 20), KURA_APISERVER_EXTRA_ARGS (word-split, appended).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/k8s-lib.sh"

dir='' apiserver_only='' with_gc=''
for a in "$@"; do
  case $a in
    --apiserver-only) apiserver_only=1 ;;
    --with-gc) with_gc=1 ;;
    -h|--help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) k8s_die "unknown option: $a" ;;
    *) [ -z "$dir" ] || k8s_die "only one DIR, please"; dir=$a ;;
  esac
done
[ -n "$dir" ] || k8s_die "usage: $0 DIR [--apiserver-only | --with-gc]"
[ -z "$apiserver_only" ] || [ -z "$with_gc" ] || k8s_die "--apiserver-only and --with-gc do not go together"
dir=$(k8s_abs "$dir")
if [ -n "$apiserver_only" ] && { [ ! -f "$dir/state" ] || [ -z "$(k8s_pid "$(cd "$dir" && pwd -P)" etcd)" ]; }; then
  k8s_die "etcd is not running in $dir: start everything with $0 $dir"
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd -P)
ready_timeout=${KURA_K8S_READY_TIMEOUT:-120}
for c in openssl curl base64 setsid; do
  command -v "$c" >/dev/null || k8s_die "'$c' is required (apt-get install openssl curl coreutils util-linux)"
done

# ---- binaries ---------------------------------------------------------------
eval "$("$here/build-tools.sh" --link "$dir/bin" kube-apiserver etcd kubectl)"
if [ -n "$with_gc" ]; then
  eval "$("$here/build-tools.sh" --link "$dir/bin" kube-controller-manager)"
fi

# ---- certificates and tokens (made once per DIR) ----------------------------
pki=$dir/pki
make_pki() {
  local t=$pki.tmp.$$
  rm -rf "$t"; mkdir -p "$t"; chmod 700 "$t"
  cat > "$t/openssl.cnf" <<'EOF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = kura-test
[ca_ext]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
EOF
  (
    cd "$t"
    gen() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
    gen ca.key && gen server.key && gen sa.key
    openssl req -x509 -new -config openssl.cnf -extensions ca_ext -key ca.key \
      -subj /CN=kura-test-ca -days 3650 -sha256 -out ca.crt
    openssl req -new -config openssl.cnf -key server.key -subj /CN=kube-apiserver -out server.csr
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -set_serial "0x$(openssl rand -hex 12)" \
      -days 3650 -sha256 -extfile openssl.cnf -extensions server_ext -out server.crt 2>/dev/null
    openssl pkey -in sa.key -pubout -out sa.pub
    admin_token=$(openssl rand -hex 24)
    user_token=$(openssl rand -hex 24)
    # token,user,uid,"groups"
    printf '%s,admin,admin,"system:masters"\n%s,kura-test-user,kura-test-user\n' \
      "$admin_token" "$user_token" > tokens.csv
    printf 'ADMIN_TOKEN=%s\nUSER_TOKEN=%s\n' "$admin_token" "$user_token" > tokens.env
    rm -f server.csr
  ) || { rm -rf "$t"; k8s_die "certificate generation failed"; }
  rm -rf "$pki"; mv "$t" "$pki"
}
[ -f "$pki/tokens.env" ] || make_pki
ADMIN_TOKEN='' USER_TOKEN=''
# shellcheck disable=SC1091
. "$pki/tokens.env"

# ---- ports ------------------------------------------------------------------
free_ports() { # N distinct free TCP ports on 127.0.0.1
  if command -v python3 >/dev/null; then
    python3 - "$1" <<'EOF'
import socket, sys
ss = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); ss.append(s)
print(" ".join(str(s.getsockname()[1]) for s in ss))
EOF
  else
    local out=() p
    while [ ${#out[@]} -lt "$1" ]; do
      p=$((20000 + RANDOM % 30000))
      (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
      case " ${out[*]} " in *" $p "*) continue ;; esac
      out+=("$p")
    done
    echo "${out[*]}"
  fi
}

ETCD_PORT='' ETCD_PEER_PORT='' APISERVER_PORT='' GC_PORT=''
# shellcheck disable=SC1091
[ -f "$dir/state" ] && . "$dir/state"
save_state() {
  printf 'ETCD_PORT=%s\nETCD_PEER_PORT=%s\nAPISERVER_PORT=%s\nGC_PORT=%s\n' \
    "$ETCD_PORT" "$ETCD_PEER_PORT" "$APISERVER_PORT" "$GC_PORT" > "$dir/state.tmp"
  mv "$dir/state.tmp" "$dir/state"
}

# ---- process helpers --------------------------------------------------------
started=()
cleanup_on_error() { # newest first: kube-controller-manager, kube-apiserver, etcd
  local i
  for ((i = ${#started[@]} - 1; i >= 0; i--)); do k8s_stop "$dir" "${started[i]}"; done
}
trap 'rc=$?; [ $rc -eq 0 ] || cleanup_on_error; exit $rc' EXIT

# launch NAME BINARY ARGS...: in its own session, stdin closed, log to DIR.
launch() {
  local name=$1; shift
  { printf '==== %s: starting %s\n' "$(date -u +%FT%TZ)" "$*"; } >> "$dir/$name.log"
  setsid "$@" >> "$dir/$name.log" 2>&1 < /dev/null &
  local pid=$! i
  echo "$pid" > "$dir/$name.pid"
  disown "$pid"   # no "Killed" job reports from this shell
  started+=("$name")
  # Until the forked shell has exec'd setsid and setsid has exec'd the
  # binary, the command line is this script's, then setsid's, and for a
  # moment inside each execve empty: wait until it is the binary's own (up
  # to 20 s: a loaded machine can take seconds). Once in CI, k8s_pid read
  # it mid-exec, called a starting etcd dead, and a second etcd was started
  # on the first one's locked data directory.
  local first
  for ((i = 0; i < 400; i++)); do
    first=
    IFS= read -r -d '' first < "/proc/$pid/cmdline" 2>/dev/null || true
    [ "$first" = "$1" ] && return 0
    kill -0 "$pid" 2>/dev/null || return 0   # died already: wait_ready says so
    sleep 0.05
  done
}

# gone NAME: NAME's process is not running, seen twice 0.3 s apart (one
# look can fall inside an execve, when /proc shows no command line).
gone() {
  [ -z "$(k8s_pid "$dir" "$1")" ] || return 1
  sleep 0.3
  [ -z "$(k8s_pid "$dir" "$1")" ]
}

# wait_ready NAME URL [CURL_ARGS...]: until URL answers "ok"-ish, NAME dies,
# or the timeout.
wait_ready() {
  local name=$1 url=$2 deadline body; shift 2
  deadline=$(( $(date +%s) + ready_timeout ))
  while :; do
    if gone "$name"; then
      k8s_log "$name exited during startup"
      k8s_tail "$dir" "$name"
      return 2
    fi
    body=$(curl -fsS --max-time 3 "$@" "$url" 2>/dev/null) && {
      case $body in ok|*'"health":"true"'*) return 0 ;; esac
    }
    if [ "$(date +%s)" -ge "$deadline" ]; then
      k8s_log "$name not ready at $url after ${ready_timeout}s"
      if [ "$name" = kube-apiserver ]; then
        curl -sS --max-time 3 "$@" "$url?verbose" 2>&1 | grep -v '\[+\]' | sed 's/^/    /' >&2 || true
      fi
      k8s_tail "$dir" "$name"
      return 1
    fi
    sleep 0.3
  done
}

port_clash() { tail -n 30 "$dir/$1.log" 2>/dev/null | grep -q 'address already in use'; }
# NAME died before writing a line of its own (once in CI, etcd on a loaded
# machine: killed before its first log line, its data directory untouched).
died_silently() { tail -n 1 "$dir/$1.log" 2>/dev/null | grep -q '^==== .*: starting '; }

start_etcd() {
  mkdir -p "$dir/etcd-data"; chmod 700 "$dir/etcd-data"
  launch etcd "$KURA_ETCD" \
    --name=kura-test \
    --data-dir="$dir/etcd-data" \
    --listen-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="kura-test=http://127.0.0.1:$ETCD_PEER_PORT" \
    --unsafe-no-fsync=true \
    --quota-backend-bytes=$((2 * 1024 * 1024 * 1024))
  wait_ready etcd "http://127.0.0.1:$ETCD_PORT/health"
}

start_apiserver() {
  local extra=()
  # shellcheck disable=SC2206 # word splitting is the point
  [ -z "${KURA_APISERVER_EXTRA_ARGS:-}" ] || extra=($KURA_APISERVER_EXTRA_ARGS)
  launch kube-apiserver "$KURA_KUBE_APISERVER" \
    --bind-address=127.0.0.1 \
    --advertise-address=127.0.0.1 \
    --secure-port="$APISERVER_PORT" \
    --cert-dir="$pki" \
    --tls-cert-file="$pki/server.crt" \
    --tls-private-key-file="$pki/server.key" \
    --client-ca-file="$pki/ca.crt" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --token-auth-file="$pki/tokens.csv" \
    --authorization-mode=RBAC \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$pki/sa.pub" \
    --service-account-signing-key-file="$pki/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 \
    --disable-admission-plugins=ServiceAccount \
    --endpoint-reconciler-type=none \
    --kubelet-preferred-address-types=InternalIP \
    --profiling=false \
    --v=1 \
    "${extra[@]}"
  wait_ready kube-apiserver "https://127.0.0.1:$APISERVER_PORT/readyz" \
    --cacert "$pki/ca.crt" -H "Authorization: Bearer $ADMIN_TOKEN"
}

# kube-controller-manager running the garbage collector alone, as the admin
# (DIR/kubeconfig), serving /healthz on 127.0.0.1 with the API server's
# certificate (its SANs cover 127.0.0.1).
start_gc() {
  launch kube-controller-manager "$KURA_KUBE_CONTROLLER_MANAGER" \
    --kubeconfig="$dir/kubeconfig" \
    --controllers=garbagecollector \
    --leader-elect=false \
    --use-service-account-credentials=false \
    --bind-address=127.0.0.1 \
    --secure-port="$GC_PORT" \
    --tls-cert-file="$pki/server.crt" \
    --tls-private-key-file="$pki/server.key" \
    --profiling=false \
    --v=2
  wait_ready kube-controller-manager "https://127.0.0.1:$GC_PORT/healthz" --cacert "$pki/ca.crt"
}

# ---- start ------------------------------------------------------------------
etcd_pid=$(k8s_pid "$dir" etcd)
api_pid=$(k8s_pid "$dir" kube-apiserver)

if [ -n "$apiserver_only" ]; then
  if [ -z "$etcd_pid" ] || [ -z "$APISERVER_PORT" ]; then
    k8s_die "etcd is not running in $dir: start everything with $0 $dir"
  fi
  if [ -n "$api_pid" ]; then
    k8s_log "stopping the running kube-apiserver (pid $api_pid) first"
    k8s_stop "$dir" kube-apiserver
    api_pid=
  fi
fi

if [ -z "$etcd_pid" ]; then
  # A stale kube-apiserver would point at the old etcd port.
  [ -z "$api_pid" ] || { k8s_stop "$dir" kube-apiserver; api_pid=; }
  for attempt in 1 2 3; do
    read -r ETCD_PORT ETCD_PEER_PORT APISERVER_PORT <<< "$(free_ports 3)"
    save_state
    rc=0; start_etcd || rc=$?
    [ $rc -eq 0 ] && break
    if [ $rc -eq 2 ] && port_clash etcd && [ $attempt -lt 3 ]; then
      k8s_log "port clash; retrying with other ports"; started=(); continue
    fi
    if [ $rc -eq 2 ] && died_silently etcd && [ $attempt -lt 3 ]; then
      k8s_log "etcd exited before its first log line; starting it again"; started=(); continue
    fi
    exit 1
  done
fi

if [ -n "$api_pid" ]; then
  # Already running: just make sure it is ready.
  wait_ready kube-apiserver "https://127.0.0.1:$APISERVER_PORT/readyz" \
    --cacert "$pki/ca.crt" -H "Authorization: Bearer $ADMIN_TOKEN" || exit 1
else
  rc=0; start_apiserver || rc=$?
  if [ $rc -eq 2 ] && port_clash kube-apiserver && [ -z "$apiserver_only" ] && [[ " ${started[*]} " == *" etcd "* ]]; then
    # Fresh ports were ours to choose: choose again.
    APISERVER_PORT=$(free_ports 1); save_state
    k8s_log "port clash; retrying kube-apiserver on port $APISERVER_PORT"
    start_apiserver || exit 1
  elif [ $rc -ne 0 ]; then
    exit 1
  fi
fi

# ---- kubeconfig and env -----------------------------------------------------
url=https://127.0.0.1:$APISERVER_PORT
ca_data=$(base64 -w0 < "$pki/ca.crt")
cat > "$dir/kubeconfig.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kura-test
  cluster:
    server: $url
    certificate-authority-data: $ca_data
users:
- name: admin
  user:
    token: $ADMIN_TOKEN
- name: kura-test-user
  user:
    token: $USER_TOKEN
contexts:
- name: kura-test
  context:
    cluster: kura-test
    user: admin
- name: kura-test-user
  context:
    cluster: kura-test
    user: kura-test-user
current-context: kura-test
EOF
chmod 600 "$dir/kubeconfig.tmp"
mv "$dir/kubeconfig.tmp" "$dir/kubeconfig"

gc_pid=$(k8s_pid "$dir" kube-controller-manager)
if [ -n "$with_gc" ] && [ -z "$gc_pid" ]; then
  for attempt in 1 2 3; do
    GC_PORT=$(free_ports 1); save_state
    rc=0; start_gc || rc=$?
    [ $rc -eq 0 ] && break
    if [ $rc -eq 2 ] && port_clash kube-controller-manager && [ $attempt -lt 3 ]; then
      k8s_log "port clash; retrying kube-controller-manager with another port"; continue
    fi
    exit 1
  done
  gc_pid=$(k8s_pid "$dir" kube-controller-manager)
fi
if [ -n "$gc_pid" ]; then
  gc_env="export KURA_GC=1
export KURA_GC_PID='$gc_pid'"
else
  gc_env="unset KURA_GC KURA_GC_PID"
fi

cat > "$dir/env.tmp" <<EOF
# Written by scripts/k8s-up.sh; source it: . $dir/env
export KURA_K8S_DIR='$dir'
export KUBECONFIG='$dir/kubeconfig'
export KURA_APISERVER_URL='$url'
export KURA_APISERVER_CA='$pki/ca.crt'
export KURA_APISERVER_TOKEN='$ADMIN_TOKEN'
export KURA_APISERVER_USER_TOKEN='$USER_TOKEN'
export KURA_ETCD_URL='http://127.0.0.1:$ETCD_PORT'
export KURA_ETCD_PID='$(cat "$dir/etcd.pid")'
export KURA_APISERVER_PID='$(cat "$dir/kube-apiserver.pid")'
export KURA_KUBECTL='$KURA_KUBECTL'
# The garbage collector (kube-controller-manager; k8s-up.sh --with-gc).
$gc_env
# kubectl's discovery/HTTP cache: per cluster, and never ./.kube when HOME is unset.
export KUBECACHEDIR='$dir/kube-cache'
export PATH='$dir/bin':"\$PATH"
EOF
mv "$dir/env.tmp" "$dir/env"

started=()   # success: nothing to clean up
k8s_log "kube-apiserver ready at $url (pid $(cat "$dir/kube-apiserver.pid"), etcd pid $(cat "$dir/etcd.pid")${gc_pid:+, garbage collector pid $gc_pid}); . $dir/env"
