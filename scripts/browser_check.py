#!/usr/bin/env python3
"""The agent's fleet and instance pages in headless Chromium (issue 18).

    browser_check.py BASE_URL OUT_DIR

BASE_URL serves a simulated fleet with a hard stop (the page_fixture
example; scripts/browser-check.sh starts it). Checks:

1. The rendered DOM (chromium --dump-dom, script on): the hard-stopped
   instance is listed first with its signal and evidence; every table has
   header cells; every verdict colour comes with its word; the hostile
   instance name is text, not markup; the instance page's chart has a band
   line, points and a verdict strip.
2. A DevTools session (over --remote-debugging-pipe, no extra packages):
   every request the pages make goes to BASE_URL's origin, nothing is
   logged to the console (no error, no CSP violation, no exception), the
   auto-refresh fetches the page and stops when paused, the filter and the
   sort act in place; a window of the fleet (?limit=2) is left to the
   server (Apply shows, the refresh keeps the window, the next link goes
   to the next window); with script off the fleet page is the plain table
   with its filter form; screenshots of both pages go to OUT_DIR.

Exit 0 when every check passes, 1 otherwise (each failure printed).
"""

import base64
import html.parser
import json
import os
import select
import subprocess
import sys
import tempfile
import time
import urllib.parse

CHROMIUM = os.environ.get("KURA_CHROMIUM", "chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1500,1000",
]
HARD_STOP = "kura/umbrella-us-east"
FAILURES = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        FAILURES.append(what)


# --- a small DOM from the dumped HTML ------------------------------------


class Node:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent = tag, dict(attrs), parent
        self.children = []

    def text(self):
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def walk(self):
        for c in self.children:
            if isinstance(c, Node):
                yield c
                yield from c.walk()

    def find_all(self, tag=None, cls=None):
        for n in self.walk():
            if (tag is None or n.tag == tag) and (cls is None or cls in n.attrs.get("class", "").split()):
                yield n

    def find(self, tag=None, cls=None, id=None):
        for n in self.walk():
            if (tag is None or n.tag == tag) and (cls is None or cls in n.attrs.get("class", "").split()) and (
                id is None or n.attrs.get("id") == id
            ):
                return n
        return None


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Builder(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", [], None)
        self.cur = self.root

    def handle_starttag(self, tag, attrs):
        n = Node(tag, [(k, v or "") for k, v in attrs], self.cur)
        self.cur.children.append(n)
        if tag not in VOID:
            self.cur = n

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(Node(tag, [(k, v or "") for k, v in attrs], self.cur))

    def handle_endtag(self, tag):
        n = self.cur
        while n is not self.root and n.tag != tag:
            n = n.parent
        if n is not self.root:
            self.cur = n.parent

    def handle_data(self, data):
        self.cur.children.append(data)


def parse(text):
    b = Builder()
    b.feed(text)
    return b.root


def dump_dom(url):
    with tempfile.TemporaryDirectory() as profile:
        args = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", url]
        out = subprocess.run(args, capture_output=True, text=True, timeout=90)
    if out.returncode != 0:
        raise SystemExit(f"chromium --dump-dom {url} failed: {out.stderr[-2000:]}")
    return out.stdout


# --- DOM checks ----------------------------------------------------------


def same_origin(base, ref):
    if ref.startswith(("#", "data:,")) or ref == "":
        return True
    u = urllib.parse.urljoin(base, ref)
    return urllib.parse.urlsplit(u)[:2] == urllib.parse.urlsplit(base)[:2]


def common_dom_checks(dom, base, page):
    tables = list(dom.find_all("table"))
    check(len(tables) > 0, f"{page}: has tables")
    for t in tables:
        check(any(True for _ in t.find_all("th")), f"{page}: table {t.attrs.get('id', '')} has header cells")
    for b in dom.find_all(cls="badge"):
        check(b.text().strip() != "", f"{page}: a verdict badge carries its word")
    for r in dom.find_all("rect"):
        t = r.find("title")
        check(t is not None and t.text().strip() != "", f"{page}: a strip cell carries its word in a title")
        if t is None:
            break
    refs = [
        (n.tag, a, n.attrs[a])
        for n in dom.walk()
        for a in ("src", "href", "action", "data", "poster")
        if a in n.attrs
    ]
    external = [r for r in refs if not same_origin(base, r[2])]
    check(not external, f"{page}: no reference leaves the agent ({external[:3]})")
    check(not list(dom.find_all("img")), f"{page}: no <img> element (the hostile name stayed text)")


def fleet_checks(dom, base, script):
    page = "fleet page" + ("" if script else " without script")
    common_dom_checks(dom, base, page)
    table = dom.find("table", id="fleet")
    check(table is not None, f"{page}: the fleet table")
    if table is None:
        return
    rows = [r for r in table.find("tbody").find_all("tr")]
    check(len(rows) >= 6, f"{page}: one row per instance ({len(rows)})")
    first = rows[0]
    cells = [c.text().strip() for c in first.children if isinstance(c, Node)]
    print("      first row:", " | ".join(cells[:4]))
    check(cells[0] == HARD_STOP, f"{page}: the hard-stopped instance is listed first ({cells[0]})")
    check("hard stop" in cells[1], f"{page}: its verdict as a word ({cells[1]})")
    check(cells[2] == "memory_pressure_critical", f"{page}: its signal ({cells[2]})")
    check("memory pressure 2 (critical)" in cells[3], f"{page}: its evidence ({cells[3]})")
    standings = [r.attrs.get("data-standing") for r in rows]
    order = {"hard_stop": 0, "unhealthy": 1, "no_sample": 2, "healthy": 3}
    check(
        [order[s] for s in standings] == sorted(order[s] for s in standings),
        f"{page}: hard stops, then unhealthy, no sample, healthy ({standings})",
    )
    check("unhealthy" in standings and "no_sample" in standings, f"{page}: the fixture's other standings")
    counts = dom.find("ul", id="counts")
    check(counts is not None and "hard stop" in counts.text(), f"{page}: counts by verdict on top")
    hostile = [a for a in table.find_all("a") if "<img" in a.text()]
    check(len(hostile) == 1, f"{page}: the hostile name is shown as text")
    form = dom.find("form", id="filters")
    check(form is not None, f"{page}: the filter form")
    if form is not None:
        button = form.find("button")
        hidden = button is not None and "hidden" in button.attrs
        check(hidden == script, f"{page}: the Apply button is {'hidden (script filters in place)' if script else 'there'}")
    pause = dom.find(id="pause")
    check(pause is not None and (("hidden" not in pause.attrs) == script), f"{page}: the pause button {'shows' if script else 'stays hidden'}")


def instance_checks(dom, base):
    page = "instance page"
    common_dom_checks(dom, base, page)
    sentence = dom.find(id="sentence")
    text = " ".join(sentence.text().split()) if sentence else ""
    print("      sentence:", text)
    check(text.startswith("hard stop since "), "instance page: the verdict as a sentence")
    check("memory pressure 2 (critical), limit 1" in text, "instance page: the sentence gives the evidence")
    signals = dom.find(id="signals")
    failing = [r for r in signals.find_all("tr") if "failing" in r.attrs.get("class", "")] if signals else []
    check(len(failing) >= 1 and "memory_pressure_critical" in failing[0].text(), "instance page: the failing signal row")
    charts = list(dom.find_all("figure", cls="chart"))
    fields = [c.attrs.get("data-field") for c in charts]
    check(fields == ["fdTimeoutCount", "peerConnectionFailures", "outboxMessages", "replicationLagEntries"],
          f"instance page: four charts, the replication lag next to the outbox ({fields})")
    fd = next((c for c in charts if c.attrs.get("data-field") == "fdTimeoutCount"), None)
    bands = list(fd.find_all("polyline", cls="band")) if fd else []
    points = list(fd.find_all("circle", cls="pt")) if fd else []
    check(len(bands) == 1 and bands[0].attrs.get("points", "").count(",") >= 2, "instance page: the fd chart has a band line")
    check(len(points) >= 20, f"instance page: the fd chart has points ({len(points)})")
    strip = list(dom.find_all("rect"))
    check(len(strip) == 120, f"instance page: a verdict strip of 120 buckets ({len(strip)})")
    check(any("st-hard_stop" in r.attrs.get("class", "") for r in strip), "instance page: the strip shows the hard stop")
    runs = dom.find("ol", cls="runs")
    check(runs is not None and "hard stop" in runs.text(), "instance page: the strip's runs in words")
    pods = dom.find(id="pods")
    check(pods is not None and "umbrella-us-east-1" in pods.text(), "instance page: the pods")
    links = [a.attrs.get("href") for a in dom.find_all("a")]
    check("/debug/instances/kura/umbrella-us-east" in links, "instance page: link to the JSON")
    check("/instances/kura/umbrella-us-east/metrics" in links, "instance page: link to the Prometheus series")


# --- DevTools over a pipe ------------------------------------------------


class Browser:
    def __init__(self):
        self.profile = tempfile.TemporaryDirectory()
        r_cmd, self.w_cmd = os.pipe()
        self.r_out, w_out = os.pipe()

        def fds():
            os.dup2(r_cmd, 3)
            os.dup2(w_out, 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={self.profile.name}", "--remote-debugging-pipe", "about:blank"],
            pass_fds=(3, 4),
            preexec_fn=fds,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(r_cmd)
        os.close(w_out)
        self.buf, self.next_id, self.events = b"", 0, []

    def _read(self, timeout):
        end = time.time() + timeout
        while b"\0" not in self.buf:
            left = end - time.time()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.r_out], [], [], left)
            if ready:
                chunk = os.read(self.r_out, 1 << 16)
                if not chunk:
                    raise SystemExit("chromium closed the DevTools pipe")
                self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method, params=None, session=None, timeout=30):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.w_cmd, json.dumps(msg).encode() + b"\0")
        while True:
            m = self._read(timeout)
            if m is None:
                raise SystemExit(f"DevTools: no answer to {method}")
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise SystemExit(f"DevTools {method}: {m['error']}")
                return m["result"]
            self.events.append(m)

    def pump(self, seconds):
        end = time.time() + seconds
        while time.time() < end:
            m = self._read(max(0.05, end - time.time()))
            if m is not None:
                self.events.append(m)

    def wait_for(self, pred, seconds):
        end = time.time() + seconds
        while time.time() < end:
            if any(pred(e) for e in self.events):
                return True
            m = self._read(max(0.05, end - time.time()))
            if m is not None:
                self.events.append(m)
        return any(pred(e) for e in self.events)

    def close(self):
        try:
            self.call("Browser.close", timeout=10)
        except SystemExit:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.profile.cleanup()


def devtools_checks(base, out_dir, instance_url):
    b = Browser()
    try:
        target = b.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        s = b.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Network", "Runtime", "Log", "Page"):
            b.call(f"{domain}.enable", {}, s)
        b.call("Emulation.setDeviceMetricsOverride", {"width": 1500, "height": 1000, "deviceScaleFactor": 1, "mobile": False}, s)

        def evaluate(expr):
            r = b.call("Runtime.evaluate", {"expression": expr, "returnByValue": True}, s)
            return r.get("result", {}).get("value")

        def is_fetch(e):
            return e.get("method") == "Network.requestWillBeSent" and e["params"].get("type") == "Fetch"

        def load(url):
            b.events.clear()
            b.call("Page.navigate", {"url": url}, s)
            check(b.wait_for(lambda e: e.get("method") == "Page.loadEventFired", 30), f"{url}: loads")

        def screenshot(name):
            metrics = b.call("Page.getLayoutMetrics", {}, s)
            size = metrics.get("cssContentSize") or metrics["contentSize"]
            height = min(int(size["height"]) + 1, 6000)
            b.call("Emulation.setDeviceMetricsOverride", {"width": 1500, "height": height, "deviceScaleFactor": 1, "mobile": False}, s)
            shot = b.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, s)
            path = os.path.join(out_dir, name)
            with open(path, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
            b.call("Emulation.setDeviceMetricsOverride", {"width": 1500, "height": 1000, "deviceScaleFactor": 1, "mobile": False}, s)
            print(f"      screenshot: {path} (1500x{height})")

        seen = []

        def clean(page):
            requests = [e["params"]["request"]["url"] for e in b.events if e.get("method") == "Network.requestWillBeSent"]
            seen.extend(requests)
            foreign = [u for u in requests if not same_origin(base, u)]
            check(not foreign, f"{page}: every request goes to the agent ({len(requests)} requests; foreign: {foreign[:3]})")
            console = [e["params"] for e in b.events if e.get("method") == "Runtime.consoleAPICalled"]
            check(not console, f"{page}: nothing logged to the console ({console[:2]})")
            logged = [e["params"]["entry"] for e in b.events if e.get("method") == "Log.entryAdded"]
            check(not logged, f"{page}: no browser log entry: no error, no CSP violation ({[l.get('text') for l in logged[:3]]})")
            thrown = [e["params"] for e in b.events if e.get("method") == "Runtime.exceptionThrown"]
            check(not thrown, f"{page}: no script exception ({thrown[:1]})")
            failed = [e["params"] for e in b.events if e.get("method") == "Network.loadingFailed"]
            check(not failed, f"{page}: no failed load ({failed[:2]})")

        # The fleet page: loads clean, refreshes itself, pauses, filters, sorts.
        load(base)
        check(b.wait_for(is_fetch, 12), "fleet page: auto-refresh fetches the page")
        b.pump(1.0)
        check(evaluate("document.querySelector('#rows tr th').textContent") == HARD_STOP, "fleet page: still first after a refresh")
        screenshot("fleet.png")
        evaluate("document.getElementById('pause').click()")
        check(evaluate("document.getElementById('pause').getAttribute('aria-pressed')") == "true", "fleet page: pause pressed")
        fetches = sum(1 for e in b.events if is_fetch(e))
        b.pump(7.0)
        check(sum(1 for e in b.events if is_fetch(e)) == fetches, "fleet page: no refresh while paused")
        shown = evaluate(
            "(function(){var q=document.querySelector('#filters [name=q]');q.value='umbrella';"
            "q.dispatchEvent(new Event('input',{bubbles:true}));"
            "return Array.prototype.filter.call(document.querySelectorAll('#rows tr'),function(r){return !r.hidden}).length})()"
        )
        check(shown == 1, f"fleet page: the text filter leaves one row ({shown})")
        check("q=umbrella" in (evaluate("location.search") or ""), "fleet page: the filter is in the URL")
        first = evaluate(
            "(function(){var q=document.querySelector('#filters [name=q]');q.value='';"
            "q.dispatchEvent(new Event('input',{bubbles:true}));"
            "document.querySelector('th[data-sort=instance] a').click();"
            "return document.querySelector('#rows tr th').textContent})()"
        )
        check(first == "kura/<img src=http://192.0.2.1/x.png>", f"fleet page: sorting by instance in place ({first})")
        clean("fleet page")

        # A window of a fleet larger than it (?limit=2): the server filters,
        # sorts and pages; the script leaves the form and the links to it,
        # and its refresh keeps the window.
        load(urllib.parse.urljoin(base, "/?limit=2"))
        check(evaluate("document.querySelectorAll('#rows tr').length") == 2, "windowed fleet page: two rows")
        check(evaluate("document.querySelector('#rows tr th').textContent") == HARD_STOP, "windowed fleet page: worst first")
        check(evaluate("document.getElementById('shown').hasAttribute('data-window')") is True, "windowed fleet page: marked as a window")
        check(evaluate("document.querySelector('#filters button[type=submit]').hidden") is False, "windowed fleet page: the Apply button shows (the server filters)")
        check(b.wait_for(is_fetch, 12), "windowed fleet page: auto-refresh fetches the page")
        b.pump(1.0)
        fetched = [e["params"]["request"]["url"] for e in b.events if is_fetch(e)]
        check(all("limit=2" in u for u in fetched), f"windowed fleet page: the refresh keeps the window ({fetched[:2]})")
        check(evaluate("document.querySelectorAll('#rows tr').length") == 2, "windowed fleet page: two rows after a refresh")
        clean("windowed fleet page")
        b.events.clear()
        evaluate("document.querySelector('#shown a[rel=next]').click()")
        check(b.wait_for(lambda e: e.get("method") == "Page.loadEventFired", 30), "windowed fleet page: the next link loads")
        check("offset=2" in (evaluate("location.search") or ""), "windowed fleet page: the next window's URL")
        second = evaluate("document.querySelector('#rows tr th').textContent")
        check(second not in (None, HARD_STOP), f"windowed fleet page: the next window starts further down ({second})")
        check(evaluate("document.querySelector('#shown a[rel=prev]') !== null") is True, "windowed fleet page: a link back")
        clean("windowed fleet page, second window")

        # The fleet page with script off (DevTools, since --dump-dom needs
        # script to serialise the page): the plain table and the form.
        b.call("Emulation.setScriptExecutionDisabled", {"value": True}, s)
        load(base)
        doc = b.call("DOM.getDocument", {"depth": 0}, s)["root"]["nodeId"]
        plain = b.call("DOM.getOuterHTML", {"nodeId": doc}, s)["outerHTML"]
        with open(os.path.join(out_dir, "fleet.noscript.dom.html"), "w") as f:
            f.write(plain)
        fleet_checks(parse(plain), base, script=False)
        clean("fleet page without script")
        b.call("Emulation.setScriptExecutionDisabled", {"value": False}, s)

        # The instance page.
        load(instance_url)
        b.pump(1.5)
        check(evaluate("document.querySelectorAll('polyline.band').length") >= 1, "instance page: band line rendered")
        screenshot("instance.png")
        clean("instance page")
        check(all(same_origin(base, u) for u in seen), "both pages: no URL outside the agent was requested")
    finally:
        b.close()


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    base, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    instance_url = urllib.parse.urljoin(base, "/instances/kura/umbrella-us-east")

    fleet = dump_dom(base)
    with open(os.path.join(out_dir, "fleet.dom.html"), "w") as f:
        f.write(fleet)
    fleet_checks(parse(fleet), base, script=True)
    instance = dump_dom(instance_url)
    with open(os.path.join(out_dir, "instance.dom.html"), "w") as f:
        f.write(instance)
    instance_checks(parse(instance), base)
    devtools_checks(base, out_dir, instance_url)

    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed", file=sys.stderr)
        sys.exit(1)
    print("every browser check passed")


if __name__ == "__main__":
    main()
