#!/usr/bin/env bash
# Supply chain: `cargo deny check` (advisories, bans, licenses, sources) with
# the committed deny.toml, offline, against the RustSec advisory database
# snapshot the machines carry (they reach no advisory feed).
#
#   scripts/deny-check.sh [CHECK...]     # default: all four checks
#
# - The snapshot: $KURA_ADVISORY_DB, default ../shared/advisory-db next to
#   the repository (or next to the main checkout, from a git worktree): a
#   plain copy of rustsec/advisory-db, see its SNAPSHOT.txt. Missing: this
#   fails and says where it looked.
# - cargo-deny $deny_version is installed from crates.io once (cargo install
#   --locked) into ~/.cache/kura-tools/cargo and reused.
# - cargo-deny opens its database as a git repository named after the URL's
#   hash; the snapshot is copied into ~/.cache/kura-tools/advisory-dbs as
#   one commit dated like the snapshot, rebuilt only when the snapshot
#   changes.
# - `cargo fetch` first (crates of every platform, so metadata resolves),
#   then `cargo deny --offline check`: no database fetch, no download.
#
# Fails on a known vulnerability, an unmaintained or unsound crate anywhere in
# the tree, a yanked crate, a license outside deny.toml's list, a crate from
# anywhere but crates.io, or a banned crate. Exceptions live in deny.toml,
# each with its reason.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
deny_version=0.20.2
cache=${KURA_TOOLS_CACHE:-$HOME/.cache/kura-tools}
log() { printf 'deny-check: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
snapshot=${KURA_ADVISORY_DB:-$root/../shared/advisory-db}
if [ -z "${KURA_ADVISORY_DB:-}" ] && [ ! -d "$snapshot" ]; then
  # A git worktree elsewhere: next to the main checkout instead.
  common=$(git rev-parse --path-format=absolute --git-common-dir 2>/dev/null || true)
  [ -z "$common" ] || [ ! -d "$common/../../shared/advisory-db" ] || snapshot=$common/../../shared/advisory-db
fi
if [ -z "${KURA_ADVISORY_DB:-}" ] && [ ! -d "$snapshot" ]; then
  # A clone of a local checkout (CI clones main afresh): next to the
  # checkout it was cloned from.
  origin=$(git remote get-url origin 2>/dev/null || true)
  [ -z "$origin" ] || [ ! -d "$origin/../shared/advisory-db" ] || snapshot=$origin/../shared/advisory-db
fi

[ -f "$snapshot/SNAPSHOT.txt" ] && [ -d "$snapshot/crates" ] \
  || die "no RustSec advisory database snapshot at $snapshot (set KURA_ADVISORY_DB to a plain copy of rustsec/advisory-db with its SNAPSHOT.txt)"
snapshot=$(cd "$snapshot" && pwd)

mkdir -p "$cache"
exec 9>"$cache/.deny-check.lock"
flock 9

# cargo-deny, pinned and cached.
deny=$cache/cargo/bin/cargo-deny
if ! { [ -x "$deny" ] && "$deny" --version 2>/dev/null | grep -qx "cargo-deny $deny_version"; }; then
  log "installing cargo-deny $deny_version from crates.io into $cache/cargo (once)"
  # Its own target directory, so the workspace's is not disturbed.
  CARGO_TARGET_DIR=$cache/cargo-deny-build cargo install --locked --quiet \
    "cargo-deny@$deny_version" --root "$cache/cargo"
  rm -rf "$cache/cargo-deny-build"
fi
log "$("$deny" --version)"

# The advisory database as cargo-deny opens it: a git repository named
# advisory-db-<hash of the default URL>, holding the files as one commit
# dated like the snapshot (so the database's age is reported honestly).
date=$(grep -oE '[0-9]{4}-[0-9]{2}-[0-9]{2}' "$snapshot/SNAPSHOT.txt" | head -n1)
[ -n "$date" ] || die "no date in $snapshot/SNAPSHOT.txt"
make_db() { # SOURCE-DIR DBS-DIR
  local db=$2/advisory-db-3157b0e258782691
  rm -rf "$db"
  mkdir -p "$db"
  cp -R "$1"/. "$db"/
  git -C "$db" init --quiet
  git -C "$db" add -A
  GIT_AUTHOR_DATE="${date}T00:00:00Z" GIT_COMMITTER_DATE="${date}T00:00:00Z" \
    git -C "$db" -c user.name=kura-ci -c user.email=kura-ci@localhost \
      -c commit.gpgsign=false commit --quiet -m "rustsec/advisory-db snapshot $date"
}
dbs=$cache/advisory-dbs
stamp=$(cat "$snapshot/SNAPSHOT.txt")
if [ ! -d "$dbs/advisory-db-3157b0e258782691/.git" ] || [ "$(cat "$dbs/.snapshot" 2>/dev/null)" != "$stamp" ]; then
  log "preparing the advisory database from $snapshot"
  rm -f "$dbs/.snapshot"
  make_db "$snapshot" "$dbs"
  printf '%s' "$stamp" > "$dbs/.snapshot"
fi
log "advisory database: $(head -n1 "$snapshot/SNAPSHOT.txt")"

cargo fetch --locked --quiet
deny_check() { "$deny" --offline --locked --all-features check --hide-inclusion-graph "$@"; }

# The check must be able to fail: a copy of the snapshot with a made-up
# vulnerability in `itoa` and a made-up unmaintained notice on `ryu` (both in
# the tree, via serde_json) must fail it, naming both.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -R "$snapshot" "$tmp/poisoned"
advisory() { # ID CRATE EXTRA-LINE
  mkdir -p "$tmp/poisoned/crates/$2"
  printf '```toml\n[advisory]\nid = "%s"\npackage = "%s"\ndate = "%s"\n%s\n\n[versions]\npatched = []\n```\n\n# deny-check self-test\n\nNot a real advisory.\n' \
    "$1" "$2" "$date" "$3" > "$tmp/poisoned/crates/$2/$1.md"
}
advisory RUSTSEC-2000-9901 itoa 'categories = ["memory-corruption"]'
advisory RUSTSEC-2000-9902 ryu 'informational = "unmaintained"'
make_db "$tmp/poisoned" "$tmp/dbs"
if out=$(KURA_ADVISORY_DBS=$tmp/dbs deny_check advisories 2>&1); then
  die "self-test: the check passed with a known vulnerability and an unmaintained crate in the tree"
fi
grep -q RUSTSEC-2000-9901 <<<"$out" && grep -q RUSTSEC-2000-9902 <<<"$out" \
  || die "self-test: the check failed without naming the planted advisories: $out"
log "self-test: a planted vulnerability and an unmaintained crate fail the check"

KURA_ADVISORY_DBS=$dbs deny_check --show-stats "$@"
