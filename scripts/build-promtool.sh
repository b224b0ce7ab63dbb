#!/usr/bin/env bash
# Build promtool from the pinned Go module scripts/tools/promtool/ into the
# same cache as scripts/build-tools.sh, once.
#
#   scripts/build-promtool.sh [--link DIR]
#
# stdout gets one shell assignment, so callers can
#   eval "$(scripts/build-promtool.sh)"   # -> KURA_PROMTOOL=/.../promtool-v0.316.0
# --link DIR also puts a plain-named symlink DIR/promtool in DIR.
#
# Cache: ${KURA_TOOLS_CACHE:-$HOME/.cache/kura-tools}/bin/promtool-<version>,
# rebuilt when the version, the module's go.mod/go.sum or the build flags
# change (recorded in <binary>.stamp); same lock file as build-tools.sh.
# Built with -tags remove_all_sd (no service discovery plugins): enough for
# `check rules`, `test rules` and `check metrics`.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
moddir=$here/tools/promtool
[ -n "${HOME:-}" ] || { HOME=$(cd ~ && pwd); export HOME; }
cache=${KURA_TOOLS_CACHE:-$HOME/.cache/kura-tools}
bin=$cache/bin

log() { printf 'build-promtool: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

link_dir=
while [ $# -gt 0 ]; do
  case $1 in
    --link) [ $# -ge 2 ] || die "--link needs a directory"; link_dir=$2; shift 2 ;;
    --link=*) link_dir=${1#--link=}; shift ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1" ;;
  esac
done

pkg=github.com/prometheus/prometheus/cmd/promtool
version=$(awk -v m=github.com/prometheus/prometheus \
  '{ for (i = 1; i < NF; i++) if ($i == m && $(i+1) ~ /^v[0-9]/) { print $(i+1); exit } }' \
  "$moddir/go.mod")
[ -n "$version" ] || die "cannot read the prometheus version from $moddir/go.mod"
# What Prometheus' own release build stamps (promtool --version).
pv=github.com/prometheus/common/version
ldflags="-s -w -X $pv.Version=${version#v} -X $pv.Branch=HEAD -X $pv.Revision=$version"
# Only rule and metrics checks are needed: leave out every service
# discovery plugin (cloud SDKs), which is most of a full build.
tags=remove_all_sd
out=$bin/promtool-$version
stamp=$({ cat "$moddir/go.mod" "$moddir/go.sum"
           printf '%s\n' "$pkg" "$ldflags" "tags=$tags" "cgo=0 trimpath"; } | sha256sum | cut -c1-16)
is_cached() { [ -x "$out" ] && [ "$(cat "$out.stamp" 2>/dev/null)" = "$stamp" ]; }

export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0
export GOFLAGS="-mod=readonly -buildvcs=false"

if ! is_cached; then
  if ! command -v go >/dev/null; then
    [ -x /usr/local/go/bin/go ] || die "go is not on PATH (needed to build promtool)"
    PATH=/usr/local/go/bin:$PATH
  fi
  mkdir -p "$bin"
  exec 9>"$cache/.build.lock"
  flock 9
  if ! is_cached; then
    log "building promtool $version from $moddir ($(go env GOVERSION)) ..."
    t0=$(date +%s)
    tmp=$out.tmp.$$
    if ! (cd "$moddir" && go build -trimpath -tags="$tags" -ldflags="$ldflags" -o "$tmp" "$pkg"); then
      rm -f "$tmp"
      die "go build of promtool failed"
    fi
    mv -f "$tmp" "$out"
    printf '%s\n' "$stamp" > "$out.stamp"
    log "built $out in $(( $(date +%s) - t0 ))s"
  fi
fi

printf 'KURA_PROMTOOL=%s\n' "$out"
[ -z "$link_dir" ] || { mkdir -p "$link_dir"; ln -sfn "$out" "$link_dir/promtool"; }
