#!/usr/bin/env bash
# Builds the agent's container image with no base image to pull:
#
#   scripts/image.sh [--tag REF] [--oci-archive FILE] [--push] [--no-podman]
#
# 1. the product's release binary (`run` alone: built with
#    `--no-default-features`, so without kura-agent's `tools` feature and
#    the subcommands and dependencies it owns), its dependency list embedded by
#    `cargo auditable` (section .dep-v0, read by trivy, grype, syft and
#    `cargo audit bin`); cargo-auditable is installed into the cache on
#    first use;
# 2. a distroless-style root file system assembled from Debian packages
#    fetched with `apt-get download` and unpacked with `dpkg-deb -x`: the C
#    library (libc6, the version this machine builds against), libgcc-s1,
#    the CA certificates as one bundle (/etc/ssl/certs/ca-certificates.crt),
#    os-release (base-files), /etc/passwd and /etc/group with root, nobody
#    and nonroot (65532) whose home is /home/nonroot, the packages' copyright
#    files and their dpkg records in /var/lib/dpkg/status.d/ (so image
#    scanners know what is installed). No shell, no package manager, no
#    other binary;
# 3. `podman build` of a `FROM scratch` Containerfile: that file system and
#    the binary as two layers, user 65532:65532, entrypoint
#    /usr/local/bin/kura-agent, command `run`, port 8080, the OCI labels
#    source, version, revision, licenses, title, description, created.
#
# The image is tagged REF, by default exactly what the chart deploys:
# ghcr.io/tuist/kura-health-agent:<workspace version> (= the chart's
# appVersion). Push it with `--push` (podman push; log in first with
# `podman login ghcr.io`) or save it with `--oci-archive FILE`. The
# Dockerfile at the top of the repository builds the same binary on
# gcr.io/distroless/cc-debian12:nonroot, for machines that can pull images.
#
# --no-podman stops after steps 1-2 (binary and root file system, no image).
# Cache: ${KURA_IMAGE_CACHE:-~/.cache/kura-image}: cargo-auditable, the .deb
# files, the root file system tarball (keyed by the package versions and
# this recipe), and the last three binaries, keyed by the sources they were
# built from (committed and unmodified only): a fresh clone of the same
# sources reuses the binary instead of rebuilding. Otherwise the binary is
# built in the usual target directory (CARGO_TARGET_DIR).
# Prints, last, KURA_IMAGE=<ref>, KURA_IMAGE_BINARY=<path>,
# KURA_IMAGE_ROOTFS=<tarball> (so `eval "$(scripts/image.sh | grep ^KURA_)"`
# works). KURA_IMAGE_SOURCE overrides the source label.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

log() { printf 'image: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
[ -n "$version" ] || die "no [workspace.package] version in Cargo.toml"
ref=ghcr.io/tuist/kura-health-agent:$version
archive='' push='' podman_build=1
while [ $# -gt 0 ]; do
  case $1 in
    --tag) ref=${2:?--tag needs a reference}; shift ;;
    --oci-archive) archive=${2:?--oci-archive needs a file}; shift ;;
    --push) push=1 ;;
    --no-podman) podman_build='' ;;
    -h|--help) sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1" ;;
  esac
  shift
done

cache=${KURA_IMAGE_CACHE:-$HOME/.cache/kura-image}
mkdir -p "$cache"
t0=$(date +%s)

# ---- 1. the binary -----------------------------------------------------------
auditable_version=0.7.7
auditable=$cache/cargo-auditable-$auditable_version/bin/cargo-auditable
if [ ! -x "$auditable" ]; then
  log "installing cargo-auditable $auditable_version into $cache (once)"
  cargo install --quiet --locked "cargo-auditable@$auditable_version" \
    --root "$cache/cargo-auditable-$auditable_version" >&2
fi
target_dir=${CARGO_TARGET_DIR:-$root/target}
# A binary built from exactly these sources before (same commit trees of
# the crates it is made of, kura-sim included since it is a workspace member; same
# lock file, compiler and cargo-auditable) is reused: CI clones afresh, so
# cargo would rebuild the workspace crates from unchanged sources otherwise. Only for committed, unmodified sources.
src_paths=(Cargo.toml Cargo.lock agent schemas gate sim)
binary_key=''
if git rev-parse --verify -q HEAD >/dev/null && [ -z "$(git status --porcelain -- "${src_paths[@]}")" ]; then
  binary_key=$( { for p in "${src_paths[@]}"; do git rev-parse "HEAD:$p"; done
                  rustc -V; echo "cargo-auditable $auditable_version"; } | sha256sum | cut -c1-16)
fi
binary=$cache/bin-$binary_key/kura-agent
if [ -n "$binary_key" ] && [ -x "$binary" ]; then
  log "reusing $binary (built from these sources before)"
else
  log "cargo auditable build --profile product -p kura-agent --no-default-features"
  PATH=$(dirname "$auditable"):$PATH cargo auditable build --locked --profile product \
    -p kura-agent --bin kura-agent --no-default-features >&2
  binary=$target_dir/product/kura-agent
  [ -x "$binary" ] || die "no binary at $binary"
  if [ -n "$binary_key" ]; then
    mkdir -p "$cache/bin-$binary_key"
    cp "$binary" "$cache/bin-$binary_key/kura-agent.tmp"
    mv "$cache/bin-$binary_key/kura-agent.tmp" "$cache/bin-$binary_key/kura-agent"
    binary=$cache/bin-$binary_key/kura-agent
    # Keep the three newest.
    ls -dt "$cache"/bin-*/ 2>/dev/null | tail -n +4 | xargs -r rm -rf
  fi
fi
readelf -S "$binary" | grep -qF .dep-v0 \
  || die "$binary has no .dep-v0 section: cargo auditable did not embed the dependency list"

# ---- 2. the root file system -------------------------------------------------
# apt's current versions (security updates included). The binary needs a
# C library at least as new as the one it was linked against here.
packages=(libc6 libgcc-s1 ca-certificates base-files)
recipe=3   # bump when the assembly below changes
debs=$cache/debs
mkdir -p "$debs"
resolve() { # sets pins=(pkg=version ...) from apt's candidates
  local p v
  pins=()
  for p in "${packages[@]}"; do
    v=$(apt-cache policy "$p" 2>/dev/null | sed -n 's/^ *Candidate: //p')
    [ -n "$v" ] && [ "$v" != "(none)" ] || return 1
    pins+=("$p=$v")
  done
}
deb_file() { # pkg=version -> cached .deb path (apt-get download's name)
  local p=${1%%=*} v=${1#*=}
  ls "$debs/${p}_${v//:/%3a}_"*.deb 2>/dev/null | head -n 1
}
download() { # the pins not cached yet
  local pin missing=()
  for pin in "${pins[@]}"; do [ -n "$(deb_file "$pin")" ] || missing+=("$pin"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "apt-get download ${missing[*]}"
  (cd "$debs" && apt-get download -qq -o APT::Sandbox::User=root "${missing[@]}" >&2)
}
if ! resolve || ! download; then
  log "apt-get update, then again"
  apt-get update -qq >&2
  resolve || die "apt knows no version of one of ${packages[*]}"
  download || die "apt-get download ${pins[*]} failed"
fi
linked=$(dpkg-query -W -f='${Version}' libc6 2>/dev/null || true)
libc=${pins[0]#libc6=}
if [ -n "$linked" ] && ! dpkg --compare-versions "$libc" ge "$linked"; then
  die "apt offers libc6 $libc, older than the $linked the binary was linked against"
fi
deb_paths=()
for pin in "${pins[@]}"; do
  f=$(deb_file "$pin"); [ -n "$f" ] || die "no .deb for $pin after apt-get download"
  deb_paths+=("$f")
done
key=$( { echo "recipe $recipe"; sha256sum "${deb_paths[@]}" | cut -d' ' -f1; } | sha256sum | cut -c1-16)
rootfs=$cache/rootfs-$key.tar
if [ ! -f "$rootfs" ]; then
  log "assembling the root file system from ${pins[*]}"
  stage=$(mktemp -d "$cache/stage.XXXXXX")
  trap 'rm -rf "$stage"' EXIT
  for deb in "${deb_paths[@]}"; do
    name=$(dpkg-deb -f "$deb" Package)
    dpkg-deb -x "$deb" "$stage/pkg-$name"
    { dpkg-deb -f "$deb"; } > "$stage/control-$name"
  done
  python3 - "$stage" "$rootfs.tmp" <<'EOF'
"""Assemble the distroless-style root file system as a reproducible tar:
sorted, owned by root (home by 65532), mtime 0."""
import io, os, sys, tarfile

stage, out = sys.argv[1], sys.argv[2]
entries = {}  # path -> (kind, data or target, mode, uid)

def add_dir(path, mode=0o755, uid=0):
    parts = path.strip("/").split("/")
    for i in range(1, len(parts) + 1):
        p = "/".join(parts[:i])
        if p not in entries:
            entries[p] = ("dir", None, 0o755, 0)
    entries[path.strip("/")] = ("dir", None, mode, uid)

def add_file(path, data, mode=0o644, uid=0):
    path = path.strip("/")
    add_dir(os.path.dirname(path))
    entries[path] = ("file", data, mode, uid)

def add_link(path, target):
    path = path.strip("/")
    add_dir(os.path.dirname(path))
    entries[path] = ("symlink", target, 0o777, 0)

def copy_tree(src_root, rel, keep):
    """Copy src_root/rel recursively (files, symlinks) where keep(path)."""
    base = os.path.join(src_root, rel)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        for name in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]):
            full = os.path.join(dirpath, name)
            path = os.path.relpath(full, src_root)
            if not keep(path):
                continue
            if os.path.islink(full):
                add_link(path, os.readlink(full))
            else:
                with open(full, "rb") as f:
                    add_file(path, f.read(), os.stat(full).st_mode & 0o777)

pkg = lambda name: os.path.join(stage, "pkg-" + name)
def copyright(name):
    return lambda p: p == f"usr/share/doc/{name}/copyright"

# libc6 and libgcc-s1: the libraries (and the C library's gconv modules),
# their copyright; no docs, no lintian overrides.
for name in ("libc6", "libgcc-s1"):
    copy_tree(pkg(name), "", lambda p, n=name: not p.startswith("usr/share/") or copyright(n)(p))
# ca-certificates: the Mozilla roots as the one bundle every TLS stack
# reads, as update-ca-certificates would write it (sorted by file name).
mozilla = os.path.join(pkg("ca-certificates"), "usr/share/ca-certificates/mozilla")
bundle = b""
for name in sorted(os.listdir(mozilla)):
    if name.endswith(".crt"):
        with open(os.path.join(mozilla, name), "rb") as f:
            pem = f.read()
        bundle += pem if pem.endswith(b"\n") else pem + b"\n"
if bundle.count(b"BEGIN CERTIFICATE") < 100:
    sys.exit("too few CA certificates in the ca-certificates package")
add_file("etc/ssl/certs/ca-certificates.crt", bundle)
copy_tree(pkg("ca-certificates"), "", copyright("ca-certificates"))
# base-files: only os-release (how scanners tell the distribution).
copy_tree(pkg("base-files"), "", lambda p: p in ("usr/lib/os-release",) or copyright("base-files")(p))
add_link("etc/os-release", "../usr/lib/os-release")
# dpkg records, one file per package, as distroless keeps them.
for name in ("libc6", "libgcc-s1", "ca-certificates", "base-files"):
    with open(os.path.join(stage, "control-" + name), "rb") as f:
        control = f.read().rstrip(b"\n").split(b"\n")
    control.insert(1, b"Status: install ok installed")
    add_file(f"var/lib/dpkg/status.d/{name}", b"\n".join(control) + b"\n")
# Users and groups; the agent runs as nonroot (65532).
add_file("etc/passwd", b"root:x:0:0:root:/root:/sbin/nologin\n"
         b"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
         b"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")
add_file("etc/group", b"root:x:0:\nnogroup:x:65534:\nnonroot:x:65532:\n")
add_file("etc/nsswitch.conf", b"passwd: files\ngroup: files\nhosts: files dns\n")
add_dir("root", 0o700)
add_dir("home/nonroot", 0o700, 65532)
add_dir("tmp", 0o1777)
add_dir("usr/local/bin")
for path, (kind, _, _, _) in entries.items():
    for bad in ("bin/sh", "bin/bash", "bin/dash", "bin/dpkg", "bin/apt", "bin/busybox"):
        if path.endswith(bad) and kind != "dir":
            sys.exit(f"{path} must not be in the image")

with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
    for path in sorted(entries):
        kind, data, mode, uid = entries[path]
        info = tarfile.TarInfo(path)
        info.mode, info.uid, info.gid, info.mtime = mode, uid, uid, 0
        info.uname = info.gname = ""
        if kind == "dir":
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        elif kind == "symlink":
            info.type, info.linkname = tarfile.SYMTYPE, data
            tar.addfile(info)
        else:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
EOF
  mv "$rootfs.tmp" "$rootfs"
  rm -rf "$stage"; trap - EXIT
fi
log "root file system: $rootfs ($(du -k "$rootfs" | cut -f1) KiB)"

if [ -z "$podman_build" ]; then
  printf 'KURA_IMAGE_BINARY=%s\nKURA_IMAGE_ROOTFS=%s\n' "$binary" "$rootfs"
  exit 0
fi

# ---- 3. the image ------------------------------------------------------------
if ! command -v podman >/dev/null; then
  log "installing podman and runc (apt)"
  { apt-get install -y -qq podman runc || { apt-get update -qq && apt-get install -y -qq podman runc; }; } >&2
fi
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [ "$revision" != unknown ] && [ -n "$(git status --porcelain 2>/dev/null)" ]; then
  revision=$revision-dirty
fi
created_epoch=$(git log -1 --format=%ct 2>/dev/null || echo 0)
created=$(date -u -d "@$created_epoch" +%Y-%m-%dT%H:%M:%SZ)
source=${KURA_IMAGE_SOURCE:-https://github.com/tuist/kura-health-agent}
license=$(sed -n '/^\[workspace.package\]/,/^\[/s/^license = "\(.*\)"/\1/p' Cargo.toml)
ctx=$(mktemp -d "$cache/context.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
ln "$rootfs" "$ctx/rootfs.tar" 2>/dev/null || cp "$rootfs" "$ctx/rootfs.tar"
cp "$binary" "$ctx/kura-agent"
cat > "$ctx/Containerfile" <<EOF
# Generated by scripts/image.sh: a distroless-style image from Debian
# packages, no base image. The Dockerfile builds the same on distroless/cc.
FROM scratch
ADD rootfs.tar /
COPY kura-agent /usr/local/bin/kura-agent
USER 65532:65532
WORKDIR /home/nonroot
EXPOSE 8080/tcp
ENTRYPOINT ["/usr/local/bin/kura-agent"]
CMD ["run"]
LABEL org.opencontainers.image.title="kura-health-agent" \\
      org.opencontainers.image.description="Kura rollout-health agent: polls every Kura pod's /status/rollout and publishes status.rolloutHealth and status.rolloutGate on each KuraInstance" \\
      org.opencontainers.image.source="$source" \\
      org.opencontainers.image.version="$version" \\
      org.opencontainers.image.revision="$revision" \\
      org.opencontainers.image.licenses="$license" \\
      org.opencontainers.image.created="$created" \\
      org.opencontainers.image.base.name="scratch"
EOF
log "podman build -t $ref"
podman build --quiet --layers --timestamp "$created_epoch" -t "$ref" -f "$ctx/Containerfile" "$ctx" >&2
rm -rf "$ctx"; trap - EXIT

size=$(podman image inspect --format '{{.Size}}' "$ref")
gz() { gzip -6 -c "$1" | wc -c; }
compressed=$(( $(gz "$rootfs") + $(gz "$binary") ))
log "$ref: $(awk -v b="$size" 'BEGIN{printf "%.1f MiB", b/1048576}') unpacked, about $(awk -v b="$compressed" 'BEGIN{printf "%.1f MiB", b/1048576}') compressed (gzip layers, what a registry stores); binary $(awk -v b="$(stat -c %s "$binary")" 'BEGIN{printf "%.1f MiB", b/1048576}'), root file system $(awk -v b="$(stat -c %s "$rootfs")" 'BEGIN{printf "%.1f MiB", b/1048576}'); built in $(( $(date +%s) - t0 )) s"
if [ -n "$archive" ]; then
  rm -f "$archive"
  podman save --format oci-archive -o "$archive" "$ref" >&2
  log "saved to $archive"
fi
if [ -n "$push" ]; then
  podman push "$ref" >&2
fi
printf 'KURA_IMAGE=%s\nKURA_IMAGE_BINARY=%s\nKURA_IMAGE_ROOTFS=%s\nKURA_IMAGE_SIZE=%s\nKURA_IMAGE_COMPRESSED=%s\n' \
  "$ref" "$binary" "$rootfs" "$size" "$compressed"
