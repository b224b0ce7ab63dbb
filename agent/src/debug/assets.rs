//! The pages' only style sheet and script, inlined into every page under
//! their SHA-256 hashes in the CSP (no external asset: the pages work offline,
//! inside a cluster).
//!
//! The script is an enhancement only. Without it the fleet table is the
//! server's (filtered, sorted and windowed by the query string, its
//! headers are sort links and its filters a plain GET form) and the page
//! refreshes itself by a `<noscript>` meta refresh that a link turns off.
//! With it, filters and sorting act in place when the whole fleet is on
//! the page; when the page shows a window of a larger fleet (`#shown`
//! carries `data-window`) the form and the header links go to the server.
//! Every element marked `data-live` is refreshed from the server (the
//! current URL: same filters, sort and window) every 5 s unless the pause
//! button is pressed.

/// The style sheet. Verdict colours pair with words everywhere: a colour
/// never carries a verdict alone.
pub const STYLE: &str = r#"
:root{--bg:#f5f6f8;--fg:#1b2130;--muted:#596275;--line:#dde1e8;--card:#fff;--head:#eef1f5;
--healthy:#1d7a3a;--unhealthy:#a34f00;--hard_stop:#b0261c;--no_sample:#5d6573;--suspended:#3f6f8f;--series:#2e5cb0}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;background:var(--bg);color:var(--fg)}
a{color:#1f4fa8}
.bar{display:flex;gap:14px;align-items:center;flex-wrap:wrap;padding:8px 20px;background:#1b2130;color:#e6e9ef}
.bar .brand{color:#fff;font-weight:700;text-decoration:none;font-size:15px}
.bar .muted{color:#aeb6c4}
.bar .ready.is-ready::before{content:"●";color:#5fd08a;margin-right:5px}
.bar .ready.not-ready{color:#ffb4ab;font-weight:600}
.bar .ready.not-ready::before{content:"▲";margin-right:5px}
.spacer{flex:1}
.bar button,.bar .button{font:inherit;font-size:13px;padding:3px 10px;border-radius:6px;border:1px solid #4b556b;background:#2c3447;color:#fff;cursor:pointer;text-decoration:none}
.bar button[aria-pressed=true]{background:#7a5a00;border-color:#a88100}
main{padding:16px 20px 48px}
h1{font-size:21px;margin:2px 0 14px;font-weight:650;word-break:break-all}
h2{font-size:16px;margin:26px 0 8px}
.muted{color:var(--muted)}
.counts{display:flex;gap:12px;flex-wrap:wrap;margin:0 0 16px;padding:0;list-style:none}
.counts a{display:block;min-width:150px;padding:9px 14px;border-radius:8px;background:var(--card);border:1px solid var(--line);border-left:7px solid var(--c,#8a93a3);text-decoration:none;color:inherit}
.counts a:hover{border-color:var(--c,#8a93a3)}
.counts .n{display:block;font-size:26px;font-weight:700;line-height:1.1}
.counts .w{color:var(--muted)}
.healthy{--c:var(--healthy)}.unhealthy{--c:var(--unhealthy)}.hard_stop{--c:var(--hard_stop)}.no_sample{--c:var(--no_sample)}.suspended{--c:var(--suspended)}
.badge{display:inline-block;padding:1px 9px;border-radius:11px;background:var(--c);color:#fff;font-weight:650;white-space:nowrap;font-size:12.5px}
.badge::before{margin-right:4px}
.badge.hard_stop::before{content:"■"}.badge.unhealthy::before{content:"▲"}.badge.no_sample::before{content:"○"}.badge.healthy::before{content:"✓"}.badge.suspended::before{content:"◌"}
.since{display:block;color:var(--muted);font-size:12px;white-space:nowrap}
form.filters{display:flex;gap:12px;align-items:flex-end;flex-wrap:wrap;margin:0 0 10px}
form.filters label{display:flex;flex-direction:column;gap:2px;font-size:12px;color:var(--muted)}
input,select,form button{font:inherit;padding:4px 8px;border:1px solid #b8bfcb;border-radius:6px;background:#fff;color:var(--fg)}
input[type=search]{min-width:260px}
#shown{color:var(--muted);padding-bottom:6px}
#shown .pages{display:inline-flex;gap:14px;margin-left:16px}
.scroll{overflow-x:auto;border:1px solid var(--line);border-radius:8px;background:var(--card)}
table{border-collapse:collapse;width:100%;background:var(--card)}
caption{text-align:left;padding:8px 10px;color:var(--muted);caption-side:top}
th,td{padding:6px 9px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
thead th{background:var(--head);font-weight:650;white-space:nowrap;font-size:12.5px}
thead th a{color:inherit;text-decoration:none}
thead th a:hover{text-decoration:underline}
thead th[aria-sort=ascending] a::after{content:" ▲";font-size:10px}
thead th[aria-sort=descending] a::after{content:" ▼";font-size:10px}
tbody th{font-weight:600;white-space:nowrap}
tbody tr:hover{background:#f3f6fc}
tbody tr.row-hard_stop th{box-shadow:inset 5px 0 var(--hard_stop)}
tbody tr.row-unhealthy th{box-shadow:inset 5px 0 var(--unhealthy)}
tbody tr.row-no_sample th{box-shadow:inset 5px 0 var(--no_sample)}
tbody tr.row-suspended th{box-shadow:inset 5px 0 var(--suspended)}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
.img{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px;white-space:nowrap}
.evidence{min-width:16em;max-width:34em}
.sentence{font-size:17px;line-height:1.5;margin:0 0 16px;padding:12px 16px;background:var(--card);border:1px solid var(--line);border-left:7px solid var(--c);border-radius:8px}
.facts{display:grid;grid-template-columns:max-content 1fr max-content 1fr;gap:4px 18px;margin:0;padding:12px 16px;background:var(--card);border:1px solid var(--line);border-radius:8px}
.facts dt{color:var(--muted)}.facts dd{margin:0}
.result{font-weight:650;white-space:nowrap}
.result.pass{color:var(--healthy)}.result.pass::before{content:"✓ "}
.result.fail{color:var(--hard_stop)}.result.fail::before{content:"✗ "}
.result.skip{color:var(--muted);font-weight:400}
tr.failing{background:#fdf0ee}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:12px}
figure{margin:0;padding:8px 10px 4px;background:var(--card);border:1px solid var(--line);border-radius:8px}
figcaption{font-weight:650;font-size:13px}
figcaption .muted{font-weight:400}
svg{display:block;width:100%;height:auto}
svg text{font:11px system-ui,-apple-system,sans-serif;fill:#596275}
svg .axis{stroke:#c9ced8;stroke-width:1}
svg .grid{stroke:#eceff3;stroke-width:1}
svg .series{fill:none;stroke:var(--series);stroke-width:1.8;stroke-linejoin:round}
svg .pt{fill:var(--series)}
svg .band{fill:none;stroke:var(--hard_stop);stroke-width:1.6;stroke-dasharray:6 4}
svg text.band-label{fill:var(--hard_stop);font-weight:600}
svg .st-healthy{fill:var(--healthy)}svg .st-unhealthy{fill:var(--unhealthy)}svg .st-hard_stop{fill:var(--hard_stop)}svg .st-no_sample{fill:var(--no_sample)}svg .st-suspended{fill:var(--suspended)}svg .st-none{fill:#e6e9ee}
.strip{margin-top:12px}
.strip svg{max-width:720px}
ol.runs{display:flex;flex-wrap:wrap;gap:6px 16px;list-style:none;margin:6px 0 0;padding:0;font-size:12.5px}
ol.runs li::before{content:"";display:inline-block;width:10px;height:10px;margin-right:5px;border-radius:2px;background:var(--c,#e6e9ee);vertical-align:-1px}
.notes li{margin:2px 0}
.links{display:flex;gap:18px;flex-wrap:wrap}
.empty{padding:18px;color:var(--muted)}
@media (max-width:760px){.facts{grid-template-columns:max-content 1fr}}
"#;

/// The script: in-place filters and sorting of the fleet table, and the
/// pausable refresh of `data-live` elements. It only reads the server's
/// own pages (`fetch` of the current URL) and never builds markup from
/// strings.
pub const SCRIPT: &str = r#"
(function () {
  "use strict";
  var d = document, table = d.getElementById("fleet"), form = d.getElementById("filters");
  function windowed() { var s = d.getElementById("shown"); return !!(s && s.hasAttribute("data-window")); }
  function rows() { return table ? Array.prototype.slice.call(table.tBodies[0].rows) : []; }
  function setUrl(changes) {
    var u = new URL(location.href);
    Object.keys(changes).forEach(function (k) { if (changes[k]) u.searchParams.set(k, changes[k]); else u.searchParams.delete(k); });
    history.replaceState(null, "", u);
  }
  function filter() {
    if (!table || !form || windowed()) return;
    var ns = form.elements.ns.value, v = form.elements.verdict.value, q = form.elements.q.value.trim().toLowerCase(), shown = 0, all = rows();
    all.forEach(function (r) {
      var ok = (!ns || r.getAttribute("data-ns") === ns) && (!v || r.getAttribute("data-standing") === v) && (!q || r.textContent.toLowerCase().indexOf(q) >= 0);
      r.hidden = !ok; if (ok) shown++;
    });
    var s = d.getElementById("shown"); if (s) s.textContent = "showing " + shown + " of " + all.length;
  }
  function key(r, i) { var c = r.cells[i]; return c ? c.getAttribute("data-k") || "" : ""; }
  function sort() {
    if (!table || windowed()) return;
    var th = table.querySelector("thead th[aria-sort]"); if (!th) return;
    var i = th.cellIndex, desc = th.getAttribute("aria-sort") === "descending", body = table.tBodies[0];
    rows().map(function (r, n) { return [r, n]; }).sort(function (a, b) {
      var x = key(a[0], i), y = key(b[0], i);
      if (x === "" || y === "") return x === y ? a[1] - b[1] : (x === "" ? 1 : -1);
      var nx = Number(x), ny = Number(y), c = (isFinite(nx) && isFinite(ny)) ? nx - ny : (x < y ? -1 : x > y ? 1 : 0);
      return (desc ? -c : c) || a[1] - b[1];
    }).forEach(function (p) { body.appendChild(p[0]); });
  }
  if (table) table.tHead.addEventListener("click", function (e) {
    var a = e.target.closest("a"); if (!a || windowed()) return;
    e.preventDefault();
    var th = a.closest("th"), was = th.getAttribute("aria-sort");
    var dir = was ? (was === "ascending" ? "desc" : "asc") : th.getAttribute("data-dir");
    table.querySelectorAll("thead th[aria-sort]").forEach(function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", dir === "desc" ? "descending" : "ascending");
    setUrl({ sort: th.getAttribute("data-sort"), dir: dir });
    sort();
  });
  if (form) {
    var apply = form.querySelector("button[type=submit]"); if (apply) apply.hidden = !windowed();
    form.addEventListener("submit", function (e) { if (!windowed()) e.preventDefault(); });
    form.addEventListener("input", function () {
      if (windowed()) return;
      filter();
      setUrl({ ns: form.elements.ns.value, verdict: form.elements.verdict.value, q: form.elements.q.value.trim() });
    });
  }
  var pause = d.getElementById("pause"), paused = false;
  if (!pause) return;
  pause.hidden = false;
  pause.addEventListener("click", function () {
    paused = !paused;
    pause.setAttribute("aria-pressed", String(paused));
    pause.textContent = paused ? "Resume auto-refresh" : "Pause auto-refresh";
  });
  setInterval(function () {
    if (paused || d.hidden) return;
    fetch(location.href, { cache: "no-store", headers: { Accept: "text/html" } }).then(function (r) {
      if (!r.ok) throw new Error(String(r.status));
      return r.text();
    }).then(function (text) {
      if (paused) return;
      var next = new DOMParser().parseFromString(text, "text/html");
      d.querySelectorAll("[data-live]").forEach(function (el) {
        var fresh = el.id && next.getElementById(el.id);
        if (fresh) el.replaceWith(d.adoptNode(fresh));
      });
      sort(); filter();
      if (apply) apply.hidden = !windowed();
    }).catch(function () {
      var u = d.getElementById("updated"); if (u) u.textContent = "refresh failed; retrying";
    });
  }, 5000);
})();
"#;
