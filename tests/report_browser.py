#!/usr/bin/env python3
"""tests/report_browser.py — `cbt report --html` looked at as a person would:
opened in headless Chromium (tests/headless.py), which must render it
without errors or network requests, with a screenshot that is not blank and
the plots' elements in the rendered DOM.

    report_browser.py selftest [--keep DIR]
        the checks proven on hand-written pages: a good report-shaped page
        passes every check, and each planted fault (a blank page, an
        external script with and without a CSP, a JS error, a late fetch, a
        missing plot, an empty plot, a hidden plot, plots drawn in white, a
        NaN printed into an SVG attribute,
        the slow operation not named, no CSP) fails the check meant to see
        it; the PNG reader against every PNG filter type
    report_browser.py check FILE.html [--plot ID]... [--text STR]...
                      [--min-plots N] [--screenshot OUT.png]
        every check on one HTML file (any report: the lead's, a user's);
        --plot names a plot that must be there, --text a string the page
        must show, --min-plots how many svg.cbt-plot at least
    report_browser.py demo --cbt PATH --workdir DIR [--screenshot OUT.png]
        `cbt demo --plant-queue`, then `cbt report --html` of its span file,
        then `check` on the page, expecting the planted slow operation named

Prints `ok - <what>` / `FAIL - <what>: <problems>` and closes with
`N passed, N failed`; exit 0 when all passed, 1 otherwise, 77 with a
`SKIP: <reason>` line when there is no Chromium (Debian: the chromium
package; scripts/deps.sh test installs it) or no python3 module it needs.
"""
import argparse
import json
import os
import pathlib
import random
import re
import struct
import subprocess
import sys
import traceback
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import headless  # noqa: E402  (tests/headless.py, next to this file)

SKIP = 77

# ---- a hand-written page of the report's shape ----------------------------------------------

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
SLOW_OP = "cb.retrieve_scatter"
SLOW_LINE = f"slowest stream: {SLOW_OP} queued 1.62 ms p50 behind cb.prefill on the same stream"
PLOT_IDS = ["plot-latency", "plot-breakdown", "plot-timeline", "plot-waterfall-1"]
PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948"]


def _svg(pid, inner, w=1100, h=260, extra=""):
    return (f'<svg class="cbt-plot" id="{pid}" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
            f'xmlns="http://www.w3.org/2000/svg" role="img"{extra}>{inner}</svg>')


def _plots(colours=PALETTE, skip=(), empty=(), hidden=()):
    out = []
    for pid in PLOT_IDS:
        if pid in skip:
            continue
        if pid in empty:
            inner = "<title>nothing drawn</title>"
        elif pid == "plot-latency":  # a histogram per stage
            inner = "".join(
                f'<rect x="{40 + i * 17}" y="{230 - h}" width="15" height="{h}" fill="{colours[i // 12 % len(colours)]}"/>'
                for i, h in enumerate([5, 20, 60, 140, 180, 120, 70, 30, 12, 6, 3, 2] * 5))
        elif pid == "plot-breakdown":  # stacked bars: host, queue, busy, tail
            parts = []
            for b in range(10):
                y = 230
                for k, v in enumerate([40, 30 + b * 3, 60, 15]):
                    parts.append(f'<rect x="{60 + b * 100}" y="{y - v}" width="70" height="{v}" '
                                 f'fill="{colours[k % len(colours)]}"/>')
                    y -= v
            inner = "".join(parts)
        elif pid == "plot-timeline":  # throughput and p99 over the run
            pts = " ".join(f"{40 + x * 10},{150 - (x * 37 % 90)}" for x in range(100))
            pts2 = " ".join(f"{40 + x * 10},{200 - (x * 13 % 40)}" for x in range(100))
            inner = (f'<polyline points="{pts}" fill="none" stroke="{colours[0 % len(colours)]}" stroke-width="3"/>'
                     f'<polyline points="{pts2}" fill="none" stroke="{colours[2 % len(colours)]}" stroke-width="3"/>'
                     f'<path d="M40 230 H1040 M40 20 V230" stroke="#333"/>')
        else:  # a waterfall of the slowest request
            inner = "".join(
                f'<rect x="{40 + x0}" y="{20 + i * 30}" width="{w}" height="22" fill="{colours[i % len(colours)]}"/>'
                f'<text x="{45 + x0}" y="{36 + i * 30}" font-size="12">{n}</text>'
                for i, (x0, w, n) in enumerate([(0, 900, "mp.request"), (10, 120, "mp.lookup"),
                                                (140, 500, "cb.prefill"), (640, 300, SLOW_OP)]))
        out.append(f"<h2>{pid}</h2>" + _svg(pid, inner, extra=' style="display:none"' if pid in hidden else ""))
    return "\n".join(out)


def report_page(csp=CSP, head="", body_top="", plots=None, slow_line=SLOW_LINE, body_end=""):
    """A self-contained page shaped like `cbt report --html`'s."""
    meta = f'<meta http-equiv="Content-Security-Policy" content="{csp}">' if csp else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">{meta}
<title>cbt report</title>
<style>body{{font-family:sans-serif;margin:24px;color:#222}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 8px}} .warn{{background:#fde2e1}}</style>{head}
</head><body>{body_top}
<h1>cbt report</h1>
<p class="warn">Data: 1000 requests, 0 dropped spans, 0 incomplete roots, 0 orphans.</p>
<p>{slow_line}</p>
<table><tr><th>span</th><th>count</th><th>p50</th><th>p99</th><th>queue p50</th></tr>
<tr><td>{SLOW_OP}</td><td>1000</td><td>0.31 ms</td><td>0.52 ms</td><td>1.62 ms</td></tr></table>
{_plots() if plots is None else plots}
{body_end}
</body></html>
"""


# ---- PNG: an encoder for each filter type, to prove the reader ---------------------------

def _png(w, h, rows, bpp, filters):
    """Encode rows (bytes, bpp bytes a pixel) with the given filter per row."""
    ctype = {1: 0, 2: 4, 3: 2, 4: 6}[bpp]
    raw, prev = bytearray(), bytes(w * bpp)
    for y, row in enumerate(rows):
        f = filters[y % len(filters)]
        out = bytearray()
        for i, x in enumerate(row):
            a = row[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            pred = [0, a, b, (a + b) >> 1, headless._paeth(a, b, c)][f]
            out.append((x - pred) & 255)
        raw += bytes([f]) + out
        prev = row

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, ctype, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(bytes(raw))) + chunk(b"IEND", b""))


def png_selftest():
    """decode_png inverts every filter type, for RGB, RGBA and grey."""
    problems = []
    for bpp in (1, 3, 4):
        w, h = 37, 23
        rows = [bytes((x * 7 + y * 13 + (x * y) % 5 + c * 50) & 255 for x in range(w) for c in range(bpp))
                for y in range(h)]
        for filters in ([0], [1], [2], [3], [4], [0, 1, 2, 3, 4]):
            try:
                got = headless.decode_png(_png(w, h, rows, bpp, filters))
            except ValueError as e:
                problems.append(f"bpp {bpp} filters {filters}: {e}")
                continue
            if got[:3] != (w, h, bpp) or got[3] != rows:
                problems.append(f"bpp {bpp} filters {filters}: decoded pixels differ")
    bad = bytearray(_png(4, 4, [bytes(12)] * 4, 3, [0]))
    bad[-20] ^= 0xFF  # inside IDAT: the CRC no longer matches
    try:
        headless.decode_png(bytes(bad))
        problems.append("a PNG with a bad CRC was read")
    except ValueError:
        pass
    return problems


# ---- running the checks -----------------------------------------------------------------------

class Tally:
    def __init__(self):
        self.passed = self.failed = 0

    def result(self, what, problems):
        if problems:
            self.failed += 1
            print(f"FAIL - {what}:")
            for p in problems:
                print(f"    {p}")
        else:
            self.passed += 1
            print(f"ok - {what}")
        sys.stdout.flush()

    def close(self):
        print(f"{self.passed} passed, {self.failed} failed")
        return 0 if self.failed == 0 and self.passed > 0 else 1


def all_checks(page, plots, texts, min_plots=1, empty_class=None):
    """Every check, by name: {check: [problems]}."""
    found = [p["id"] for p in page.plots]
    plot_problems = headless.check_plots(page, plots, empty_class=empty_class)
    if len(found) < min_plots:
        plot_problems.append(f"{len(found)} svg.cbt-plot elements rendered, at least {min_plots} wanted")
    return {
        "renders": headless.check_renders(page),
        "offline": headless.check_offline(page),
        "csp": headless.check_csp(page),
        "screenshot": headless.check_screenshot(page),
        "plots": plot_problems,
        "text": headless.check_text(page, texts),
    }


def BOTH_WITNESSES(got):
    """A request the CSP did not stop is seen by DevTools and by the proxy."""
    out = []
    if not any(p.startswith("network request:") for p in got["offline"]):
        out.append("DevTools' Network events did not see the request")
    if not any(p.startswith("connection to the proxy:") for p in got["offline"]):
        out.append("the recording proxy did not see the request")
    return out


def selftest(browser, keep):
    t = Tally()
    t.result("the PNG reader inverts filters None/Sub/Up/Average/Paeth (grey, RGB, RGBA) "
             "and refuses a bad CRC", png_selftest())

    cases = [
        # name, page, the checks that must fail (every other one must pass)
        ("a report-shaped page passes every check", report_page(), set()),
        ("blank page", report_page(plots="", slow_line="").replace("<h1>cbt report</h1>", "")
         .replace('<p class="warn">', '<p class="warn" style="display:none">')
         .replace("<table>", '<table style="display:none">'),
         {"screenshot", "plots", "text"}),
        ("external <script src=https://...> with the CSP",
         report_page(head='<script src="https://cdn.example.com/plot.js"></script>'),
         {"renders", "offline"}),
        ("external <script src=https://...> without a CSP",
         report_page(csp="", head='<script src="https://cdn.example.com/plot.js"></script>'),
         {"renders", "offline", "csp"}, BOTH_WITNESSES),
        ("a web font from the network (CSP blocks it)",
         report_page(head="<style>@font-face{font-family:F;src:url(https://fonts.example.com/f.woff2)}"
                          "body{font-family:F,sans-serif}</style>"),
         {"renders", "offline"}),
        ("a JS error (no CSP, inline script throws)",
         report_page(csp="", body_end="<script>document.querySelector('#nope').remove()</script>"),
         {"renders", "csp"}),
        ("an inline script the CSP blocks",
         report_page(body_end="<script>var x = 1;</script>"), {"renders"}),
        ("a NaN printed into an SVG attribute (width=\"nan\", d=\"M0 0 L nan 4\")",
         report_page(plots=_plots() + _svg("plot-nan", '<rect x="1" y="1" width="nan" height="10"/>'
                                                        '<path d="M0 0 L nan 4"/>')),
         {"renders"}),
        # after load, yet well inside the renderer's settle time (0.5 s), so a
        # loaded machine's late timer cannot make the plant pass
        ("a fetch 20 ms after load (no CSP)",
         report_page(csp="", body_end="<script>setTimeout(() => fetch('http://collector.example:4318/x')"
                                      ".catch(() => {}), 20)</script>"),
         {"offline", "csp", "renders"}),
        ("a CSP that allows https:",
         report_page(csp="default-src 'none'; style-src 'unsafe-inline'; img-src data: https:"), {"csp"}),
        ("missing plot (plot-timeline)", report_page(plots=_plots(skip={"plot-timeline"})), {"plots"}),
        ("empty plot (plot-breakdown: no path/rect/polyline)",
         report_page(plots=_plots(empty={"plot-breakdown"})), {"plots"}),
        ("hidden plot (plot-latency display:none)", report_page(plots=_plots(hidden={"plot-latency"})),
         {"plots"}),
        ("plots drawn in white on white", report_page(plots=_plots(colours=["#ffffff"])),
         {"screenshot"}),
        ("the slow operation not named", report_page(slow_line="slowest stream: (none)")
         .replace(SLOW_OP, "cb.other"), {"text"}),
    ]
    for name, html, must_fail, *also in cases:
        try:
            page = browser.render(html)
        except headless.BrowserError as e:
            t.result(name, [f"the browser failed: {e}"])
            continue
        if keep:
            safe = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:60]
            pathlib.Path(keep, safe + ".html").write_text(html)
            page.save_png(os.path.join(keep, safe + ".png"))
        got = all_checks(page, PLOT_IDS, [SLOW_OP])
        problems = []
        for check, probs in got.items():
            if check in must_fail and not probs:
                problems.append(f"check '{check}' passed a page planted to fail it")
            elif check not in must_fail and probs:
                problems.append(f"check '{check}' failed: {'; '.join(probs)}")
        for extra in also:
            problems += extra(got)
        seen = "; ".join(f"{c}: {got[c][0]}" for c in sorted(must_fail) if got[c])
        t.result(name + (f" (fails as planted: {seen[:300]})" if must_fail and not problems else ""),
                 problems)
    return t.close()


def check_file(browser, path, plots, texts, min_plots, screenshot, t=None, empty_class=None):
    t = t or Tally()
    try:
        page = browser.render(path)
    except headless.BrowserError as e:
        t.result(f"render {path}", [str(e)])
        return t.close()
    if screenshot:
        page.save_png(screenshot)
        print(f"# screenshot: {screenshot} ({page.size[0]}x{page.size[1]} CSS px laid out)")
    try:
        st = headless.image_stats(page.png)
        print(f"# screenshot {st['width']}x{st['height']}: {st['non_background']:.1%} non-background, "
              f"{st['colours']} colours over 100 px, {st['chromatic_colours']} of them coloured")
    except ValueError:
        pass
    print(f"# plots rendered: {', '.join(p['id'] + ' (' + str(p['drawn']) + ' drawn)' for p in page.plots) or 'none'}")
    for check, probs in all_checks(page, plots, texts, min_plots, empty_class).items():
        t.result(f"{check}: {os.path.basename(path)}", probs)
    return t.close()


# the plots `cbt report --html` draws for a run with queue times and hit
# rates (docs/report.md, "The HTML page")
REPORT_PLOTS = ["plot-latency", "plot-bands", "plot-breakdown", "plot-queue", "plot-streams",
                "plot-hitrate", "plot-timeline", "plot-waterfall-1"]


def slowest_queue(spans_path):
    """(name, summed cbt.queue_ns, count) of the span name whose spans
    waited longest in all (docs/report.md, "Most queueing"), read from the
    span file itself, not from the report: the operation the report must
    name. None when no span has cbt.queue_ns."""
    total, count = {}, {}
    with open(spans_path) as f:
        for line in f:
            if not line.strip():
                continue
            sp = json.loads(line)
            q = sp.get("attributes", {}).get("cbt.queue_ns")
            if isinstance(q, int):
                total[sp["name"]] = total.get(sp["name"], 0) + q
                count[sp["name"]] = count.get(sp["name"], 0) + 1
    if not total:
        return None
    name = max(total, key=total.get)
    return name, total[name], count[name]


def slowest_stream(spans_path):
    """(device or "", stream, summed cbt.queue_ns) of the stream whose spans
    waited longest in all, from the span file; None without cbt.stream."""
    total = {}
    with open(spans_path) as f:
        for line in f:
            if not line.strip():
                continue
            a = json.loads(line).get("attributes", {})
            if "cbt.stream" in a:
                dev = a.get("cbt.device")
                key = (dev if isinstance(dev, str) else "", a["cbt.stream"])
                total[key] = total.get(key, 0) + (a.get("cbt.queue_ns") or 0)
    if not total:
        return None
    key = max(total, key=total.get)
    return key[0], key[1], total[key]


def planted_span_file(path, requests=64, seed=24):
    """A span file in `cbt demo`'s format with a slow stream planted: each
    request's `cb.scatter` waits about 1.6 ms on its stream behind a long
    `cb.prefill` enqueued just before it, while `cb.l2_load` and
    `cb.gather` start at once. For a demo without --plant-queue."""
    rnd = random.Random(seed)
    t = 1_700_000_000_000_000_000
    lines = []

    def span(trace, sid, parent, name, start, end, attrs, kind="internal"):
        lines.append(json.dumps({
            "trace_id": trace, "span_id": sid, "parent_span_id": parent, "name": name,
            "kind": kind, "start_ns": start, "end_ns": end, "status": "unset",
            "incomplete": False, "attributes": attrs, "dropped_attributes": 0, "events": [],
            "dropped_events": 0, "truncated_attributes": 0}, separators=(",", ":")))

    for r in range(requests):
        trace = f"{rnd.getrandbits(128):032x}"
        root = f"{rnd.getrandbits(64):016x}"
        t0 = t + r * 4_000_000
        sess = {"session_id": f"req-{r:04d}"}
        stream = {"cbt.stream": 1 + r % 4, "cbt.device": "cpu"}
        kids, cur, busy, queue = [], t0 + 20_000, [], 0
        for name, dur, q in (("cb.l2_load", 80_000, 3_000), ("cb.prefill", 1_600_000, 2_000),
                             ("cb.scatter", 300_000, 1_620_000 + rnd.randrange(-50_000, 50_000)),
                             ("cb.gather", 60_000, 2_500)):
            enq = cur - q  # the host enqueued it q ns before the stream reached it
            start = max(cur, enq + q)
            end = start + dur + rnd.randrange(0, dur // 10)
            kids.append((name, start, end, dict(sess, **stream, **{"cbt.queue_ns": q, "cbt.enqueue_ns": enq})))
            busy.append((start, end))
            queue += q
            cur = end + 1_000
        end_root = t0 + 200_000
        for name, start, end, attrs in kids:
            span(trace, f"{rnd.getrandbits(64):016x}", root, name, start, end, attrs)
        hit = rnd.choice([0, 256, 512])
        span(trace, root, "", "request", t0, end_root,
             dict(sess, **{"hit_tokens": hit, "requested_tokens": 768, "hit_rate": hit / 768,
                           "cbt.gpu_queue_ns": queue, "cbt.gpu_busy_ns": sum(e - s for s, e in busy),
                           "cbt.gpu_tail_ns": max(0, cur - end_root)}), kind="server")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def run_demo(browser, cbt, workdir, screenshot):
    """cbt demo --plant-queue (or, when the demo has no such flag, a span
    file with the same plant), cbt report --html, then every check, with
    the span file's most-queued operation as the text the page must show."""
    cbt = os.path.abspath(cbt)
    os.makedirs(workdir, exist_ok=True)
    spans = os.path.join(workdir, "cbt-spans.jsonl")
    html = os.path.join(workdir, "report.html")
    for f in (spans, html):
        if os.path.exists(f):
            os.unlink(f)

    def run(args):
        print("# " + " ".join(args))
        r = subprocess.run(args, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=300)
        return r.returncode, r.stdout

    rc, out = run([cbt, "demo", "--help"])
    if "--plant-queue" in out:
        rc, out = run([cbt, "demo", "--cpu", "--plant-queue", "--requests", "64", "--spans", spans,
                       "--output", os.path.join(workdir, "cbt-trace.json"), "--trees", "0",
                       "--slowest", "0"])
        if rc != 0:
            print(out)
            print(f"FAIL - cbt demo --plant-queue exited {rc}")
            return 1
    else:
        print("# this cbt demo has no --plant-queue: a span file with the same plant is written instead")
        planted_span_file(spans)
    slow = slowest_queue(spans)
    if not slow:
        print(f"FAIL - {spans} has no span with cbt.queue_ns: nothing to expect the report to name")
        return 1
    print(f"# the span file's slowest queue: {slow[0]} ({slow[1] / 1e6:.1f} ms of cbt.queue_ns in all, over {slow[2]} spans)")
    rc, out = run([cbt, "report", spans, "--html", html])
    print("\n".join("#   " + l for l in out.splitlines()[:40]))
    if rc != 0 or not os.path.isfile(html):
        print(f"FAIL - cbt report --html exited {rc}")
        return 1
    t = Tally()
    t.result(f"the terminal report names {slow[0]}",
             [] if f"MOST QUEUEING: {slow[0]} " in out else [f"no 'MOST QUEUEING: {slow[0]} ' line"])
    page_html = pathlib.Path(html).read_text()
    m = re.search(r'<[^>]*\bid="slowest-queue"[^>]*>', page_html)
    op = re.search(r'\bdata-op="([^"]*)"', m.group(0)) if m else None
    t.result(f"the page's #slowest-queue names {slow[0]}",
             [] if op and op.group(1) == slow[0] else
             [f"#slowest-queue is {m.group(0) if m else 'missing'}"])
    stream = slowest_stream(spans)
    m = re.search(r'<[^>]*\bid="slowest-stream"[^>]*>', page_html)
    ds = re.search(r'\bdata-stream="([^"]*)"', m.group(0)) if m else None
    want = f"stream {stream[1]}" if stream else None
    t.result("the page's #slowest-stream names " +
             (f"{stream[0] + ' ' if stream[0] else ''}{want}" if stream else "the most-queued stream"),
             ["the span file has no cbt.stream"] if not stream else
             [] if ds and ds.group(1).endswith(want) and (not stream[0] or stream[0] in ds.group(1)) else
             [f"#slowest-stream is {m.group(0) if m else 'missing'}"])
    return check_file(browser, html, REPORT_PLOTS, [slow[0]], len(REPORT_PLOTS), screenshot, t,
                      empty_class="cbt-empty")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("selftest")
    s.add_argument("--keep", help="write each planted page and its screenshot here")
    c = sub.add_parser("check")
    c.add_argument("html")
    c.add_argument("--plot", action="append", default=[])
    c.add_argument("--text", action="append", default=[])
    c.add_argument("--min-plots", type=int, default=1)
    c.add_argument("--screenshot")
    d = sub.add_parser("demo")
    d.add_argument("--cbt", required=True)
    d.add_argument("--workdir", required=True)
    d.add_argument("--screenshot")
    a = ap.parse_args()

    chromium = headless.find_chromium()
    if not chromium:
        print(f"SKIP: report_browser {a.cmd}: no Chromium on PATH (Debian: apt-get install chromium; "
              "scripts/deps.sh test installs it; CBT_CHROMIUM names another)")
        return SKIP
    try:
        browser = headless.Browser(chromium)
    except headless.BrowserError as e:
        print(f"FAIL - headless Chromium did not start: {e}")
        return 1
    print(f"# {chromium}: {browser.version}")
    try:
        if a.cmd == "selftest":
            if a.keep:
                os.makedirs(a.keep, exist_ok=True)
            return selftest(browser, a.keep)
        if a.cmd == "check":
            return check_file(browser, a.html, a.plot, a.text, a.min_plots, a.screenshot)
        return run_demo(browser, a.cbt, a.workdir, a.screenshot)
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        browser.close()


if __name__ == "__main__":
    sys.exit(main())
