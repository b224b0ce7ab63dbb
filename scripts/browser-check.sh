#!/usr/bin/env bash
# The agent's fleet and instance pages in a real browser (issue 18):
# headless Chromium (Debian package `chromium`, installed when missing)
# against a simulated fleet with a hard stop served by the real agent loop
# and debug server (the kura-agent example `page_fixture`).
#
#   scripts/browser-check.sh
#
# scripts/browser_check.py asserts from the rendered DOM (--dump-dom) that
# the hard-stopped instance is listed first with its signal and evidence,
# that the chart has a band line and points, that every table has header
# cells and every verdict colour its word; and, through the DevTools
# protocol, that the pages request nothing outside the agent and log
# nothing to the console (no error, no CSP violation), that auto-refresh
# runs and pauses, that filter and sort act in place, and that a window of
# the fleet (?limit=2) is left to the server and kept by the refresh.
# Screenshots and the dumped DOMs go to
# ${KURA_BROWSER_OUT:-target/browser-check} (in the CI clone). Time-bounded: the install 10 min, the fixture 2 min to get
# ready, the browser checks 5 min; warm it takes about 45 s (20 s of it the
# fixture's simulated 20 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${KURA_BROWSER_OUT:-$root/target/browser-check}
mkdir -p "$out"
t0=$(date +%s)
say() { echo "[browser +$(($(date +%s) - t0))s] $*"; }

if ! command -v chromium >/dev/null; then
  say "installing chromium (Debian package)"
  timeout 300 apt-get update -qq
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq chromium >/dev/null
fi
chromium --version 2>/dev/null | grep -v '^\s*$' | head -1

say "build the fixture (cargo build --example page_fixture)"
cargo build --locked -q -p kura-agent --example page_fixture
bin=$(cargo build --locked -q -p kura-agent --example page_fixture --message-format=json \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "page_fixture" and m.get("executable"):
        print(m["executable"])')

say "start the simulated fleet and the agent"
log=$out/fixture.log
"$bin" --listen 127.0.0.1:0 --time-scale 60 --serve-for 300 >"$log" 2>&1 &
fixture=$!
trap 'kill "$fixture" 2>/dev/null || true; wait "$fixture" 2>/dev/null || true' EXIT
url=''
for _ in $(seq 1 240); do
  url=$(sed -n 's/^ready: //p' "$log")
  [ -n "$url" ] && break
  kill -0 "$fixture" 2>/dev/null || { cat "$log"; echo "the fixture died" >&2; exit 1; }
  sleep 0.5
done
[ -n "$url" ] || { cat "$log"; echo "the fixture did not get ready within 120 s" >&2; exit 1; }
say "fleet ready at $url"

say "chromium: DOM, console, network, screenshots"
timeout 300 python3 "$root/scripts/browser_check.py" "$url" "$out"
say "done; screenshots in $out (fleet.png, instance.png)"
