#!/usr/bin/env bash
# Build the test-harness binaries from the pinned Go modules under
# scripts/tools/ into a cache outside the repository, once.
#
#   scripts/build-tools.sh [--link DIR] [TOOL...]
#
# TOOL is any of: kube-apiserver kubectl etcd helm kubeconform integrations
# kubelet-standin kube-controller-manager argo-rollouts-1.7 argo-rollouts-1.8
# (default: all but integrations, kubelet-standin, kube-controller-manager and
# the argo-rollouts ones; kube-controller-manager comes from the same
# k8s.io/kubernetes module as kube-apiserver, for its garbage collector
# (scripts/k8s-up.sh --with-gc);
# kubelet-standin is the kubelet's port-forward endpoint of
# scripts/tools/kubelet-standin, for agent/tests/e2e_port_forward.rs;
# integrations is kura-integrations, the recipe
# evaluator of scripts/tools/integrations: Argo Rollouts' jsonPath and
# condition evaluation, kstatus, Flux's CEL, Argo CD's Lua VM;
# argo-rollouts-X.Y is Argo Rollouts' rollouts-controller of the release in
# scripts/tools/argo-rollouts/versions, built from its own module).
# Missing binaries are built (progress on stderr); cached ones are not touched.
# stdout gets one shell assignment per tool, so callers can
#   eval "$(scripts/build-tools.sh helm)"   # -> KURA_HELM=/.../helm-v4.3.2
# --link DIR also puts plain-named symlinks (DIR/kubectl, ...) in DIR.
#
# Cache: ${KURA_TOOLS_CACHE:-$HOME/.cache/kura-tools}/bin/<tool>-<version>.
# A binary is rebuilt when its version, its module's go.mod/go.sum or its
# build flags change (recorded in <binary>.stamp). Go's own module and build
# caches are the usual ones (GOMODCACHE, GOCACHE).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tools_dir=$here/tools
# Go needs HOME for its caches; a bare `env -i` shell has none.
[ -n "${HOME:-}" ] || { HOME=$(cd ~ && pwd); export HOME; }
cache=${KURA_TOOLS_CACHE:-$HOME/.cache/kura-tools}
bin=$cache/bin

log() { printf 'build-tools: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

link_dir=
want=()
while [ $# -gt 0 ]; do
  case $1 in
    --link) [ $# -ge 2 ] || die "--link needs a directory"; link_dir=$2; shift 2 ;;
    --link=*) link_dir=${1#--link=}; shift ;;
    -h|--help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    kube-apiserver|kubectl|etcd|helm|kubeconform|integrations|kubelet-standin|kube-controller-manager|argo-rollouts-1.7|argo-rollouts-1.8) want+=("$1"); shift ;;
    *) die "unknown argument: $1 (tools: kube-apiserver kubectl etcd helm kubeconform integrations kubelet-standin kube-controller-manager argo-rollouts-1.7 argo-rollouts-1.8)" ;;
  esac
done
[ ${#want[@]} -gt 0 ] || want=(kube-apiserver kubectl etcd helm kubeconform)

# Version of module $2 as required in $1/go.mod.
modver() {
  awk -v m="$2" '{ for (i = 1; i < NF; i++) if ($i == m && $(i+1) ~ /^v[0-9]/) { print $(i+1); exit } }' "$1/go.mod"
}

# Per tool: module dir, package, version, extra -X flags.
recipe() {
  local k8s_x v
  case $1 in
    kube-apiserver|kubectl|kube-controller-manager)
      moddir=$tools_dir
      pkg=k8s.io/kubernetes/cmd/$1
      version=$(modver "$moddir" k8s.io/kubernetes)
      v=${version#v}
      # What kubernetes' hack/lib/version.sh stamps: /version and kubectl
      # version report the real release instead of v0.0.0-master.
      k8s_x=
      for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        k8s_x+=" -X $p.gitVersion=$version -X $p.gitMajor=${v%%.*}"
        v2=${v#*.}; k8s_x+=" -X $p.gitMinor=${v2%%.*} -X $p.gitTreeState=clean"
      done
      xflags=$k8s_x ;;
    etcd)
      moddir=$tools_dir/etcd
      pkg=kura.local/scripts/tools/etcd
      version=$(modver "$moddir" go.etcd.io/etcd/server/v3)
      xflags= ;;
    helm)
      moddir=$tools_dir/helm
      pkg=helm.sh/helm/v4/cmd/helm
      version=$(modver "$moddir" helm.sh/helm/v4)
      xflags=" -X helm.sh/helm/v4/internal/version.version=$version -X helm.sh/helm/v4/internal/version.gitTreeState=clean" ;;
    integrations)
      moddir=$tools_dir/integrations
      pkg=kura.local/scripts/tools/integrations
      # Our own program: its version is its sources (in the stamp below).
      version=v1
      xflags= ;;
    kubelet-standin)
      moddir=$tools_dir/kubelet-standin
      pkg=kura.local/scripts/tools/kubelet-standin
      # Our own program on the kubelet's module: its sources and go.sum are
      # in the stamp below.
      version=$(modver "$moddir" k8s.io/kubelet)
      xflags= ;;
    argo-rollouts-*)
      # Built inside the downloaded module, so that its own go.mod, go.sum
      # and replace directives apply (a depending module would drop them).
      moddir=
      pkg=./cmd/rollouts-controller
      read -r _ version modsum < <(awk -v t="$1" '$1 == t { print $1, $2, $3 }' "$tools_dir/argo-rollouts/versions")
      xflags=" -X github.com/argoproj/argo-rollouts/utils/version.version=${version#v} -X github.com/argoproj/argo-rollouts/utils/version.gitTreeState=clean" ;;
    kubeconform)
      moddir=$tools_dir/kubeconform
      pkg=github.com/yannh/kubeconform/cmd/kubeconform
      version=$(modver "$moddir" github.com/yannh/kubeconform)
      xflags=" -X main.version=$version" ;;
  esac
  [ -n "$version" ] || die "cannot read the $1 version from $moddir/go.mod"
  ldflags="-s -w$xflags"
  out=$bin/$1-$version
  if [ -z "$moddir" ]; then
    stamp=$(printf '%s\n' "$version" "$modsum" "$pkg" "$ldflags" "cgo=0 trimpath" | sha256sum | cut -c1-16)
  else
    stamp=$({ cat "$moddir/go.mod" "$moddir/go.sum"
               find "$moddir" -maxdepth 1 -name '*.go' -exec cat {} +
               printf '%s\n' "$pkg" "$ldflags" "cgo=0 trimpath"; } | sha256sum | cut -c1-16)
  fi
}

is_cached() { [ -x "$out" ] && [ "$(cat "$out.stamp" 2>/dev/null)" = "$stamp" ]; }

export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0
# go.mod/go.sum are committed and complete: -mod=readonly builds exactly
# them (-mod=mod could quietly resolve newer modules, even ones needing a
# newer Go). After editing a go.mod, run `go mod tidy` in its directory.
export GOFLAGS="-mod=readonly -buildvcs=false"

locked=
build() {
  local tool=$1 t0 tmp
  if ! command -v go >/dev/null; then
    [ -x /usr/local/go/bin/go ] || die "go is not on PATH (needed to build $tool)"
    PATH=/usr/local/go/bin:$PATH
  fi
  if [ -z "$locked" ]; then
    mkdir -p "$bin"
    exec 9>"$cache/.build.lock"
    flock 9          # another build-tools.sh may be building the same thing
    locked=1
    if is_cached; then return 0; fi
  fi
  log "building $tool $version from ${moddir:-its module} ($(go env GOVERSION)) ..."
  case $tool in kube-apiserver|kube-controller-manager) log "  (a cold $tool build takes ~4-10 min on 2 cores; cached afterwards)" ;; esac
  case $tool in argo-rollouts-*) log "  (a cold rollouts-controller build takes ~4-6 min on 2 cores; cached afterwards)" ;; esac
  t0=$(date +%s)
  tmp=$out.tmp.$$
  if [ -z "$moddir" ]; then
    # github.com/argoproj/argo-rollouts@version, from the module proxy
    # (checked against the Go checksum database and the pinned hash).
    local info sum
    info=$(GOFLAGS=-mod=mod go mod download -json "github.com/argoproj/argo-rollouts@$version") \
      || die "go mod download github.com/argoproj/argo-rollouts@$version failed"
    moddir=$(sed -n 's/^\t"Dir": "\(.*\)",$/\1/p' <<<"$info")
    sum=$(sed -n 's/^\t"Sum": "\(.*\)",$/\1/p' <<<"$info")
    [ "$sum" = "$modsum" ] || die "argo-rollouts $version: module hash $sum, pinned $modsum"
    [ -d "$moddir" ] || die "argo-rollouts $version: no module directory in: $info"
  fi
  if ! (cd "$moddir" && go build -trimpath -ldflags="$ldflags" -o "$tmp" "$pkg"); then
    rm -f "$tmp"
    die "go build of $tool failed"
  fi
  mv -f "$tmp" "$out"
  printf '%s\n' "$stamp" > "$out.stamp"
  log "built $out in $(( $(date +%s) - t0 ))s"
}

[ -z "$link_dir" ] || mkdir -p "$link_dir"
for tool in "${want[@]}"; do
  recipe "$tool"
  is_cached || build "$tool"
  var=KURA_$(printf '%s' "$tool" | tr 'a-z.-' 'A-Z__')
  printf '%s=%s\n' "$var" "$out"
  [ -z "$link_dir" ] || ln -sfn "$out" "$link_dir/$tool"
done
