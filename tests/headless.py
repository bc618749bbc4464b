"""tests/headless.py — open an HTML file in headless Chromium and say what a
person would see: the rendered DOM, the console's errors, every request the
page made, and a screenshot. Python's standard library only.

    from headless import Browser, find_chromium
    with Browser(find_chromium()) as b:
        page = b.render("/tmp/report.html")
    page.dom          # document.documentElement.outerHTML after load
    page.errors       # console errors, uncaught exceptions, CSP violations,
                      # failed loads: one line each
    page.requests     # every URL the page asked for besides itself and data:
    page.proxy_hits   # the first line of every connection that reached the
                      # recording proxy (what slipped past the DevTools view)
    page.png          # the screenshot (the whole page, 1280 px wide)
    page.plots        # svg.cbt-plot elements: id, size, drawn children
    page.text         # document.body.innerText

How: one Chromium (`--headless=new --no-sandbox --disable-gpu`) driven over
the DevTools protocol on `--remote-debugging-pipe` (fd 3 in, fd 4 out: JSON
messages separated by NUL bytes), so no websocket library is needed. Each
page opens in a browser context of its own whose proxy is a socket on
127.0.0.1 that this module listens on: it records every connection it gets
and answers none. The browser's own services (Debian's build checks for
component updates and Google accounts even with --disable-background-
networking) stay in the default context, whose proxy is a second such
socket, so they are neither let out nor blamed on the page. Name
resolution is off (`--host-resolver-rules=MAP * ~NOTFOUND`). A page that
reaches for the network gets nothing and is seen twice: by the Network
domain (requestWillBeSent, also for what its CSP blocked) and, when nothing
stopped the request inside the browser, by the proxy.

The checks (check_*) return a list of problems, empty when the page passes:
check_renders (no errors), check_offline (no requests), check_screenshot
(not blank: enough non-background pixels, several colours), check_plots
(every expected svg.cbt-plot present, drawn, and sized), check_text (named
strings on the page), check_csp (the page declares its own CSP that allows
no network). tests/report_browser.py uses them; docs/testing.md says what
they prove.
"""
import base64
import collections
import fcntl
import html.parser
import itertools
import json
import os
import pathlib
import select
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
import zlib

# Debian's package installs /usr/bin/chromium; other names for the same
# browser elsewhere
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium():
    """The browser to use: $CBT_CHROMIUM when set (empty: none), else the
    first of CHROMIUM_NAMES on PATH; None when there is none."""
    env = os.environ.get("CBT_CHROMIUM")
    if env is not None:
        return shutil.which(env) if env else None
    for n in CHROMIUM_NAMES:
        p = shutil.which(n)
        if p:
            return p
    return None


class BrowserError(Exception):
    """The browser did not start, answer, or render in time: not a verdict
    on the page."""


# ---- a proxy that records and refuses --------------------------------------------------

class RecordingProxy:
    """Listens on 127.0.0.1 (a port the kernel picks); every connection is
    recorded by its first line (`CONNECT host:443 HTTP/1.1`, `GET http://...`)
    and closed unanswered."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.hits = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="cbt-headless-proxy", daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            line = b""
            try:
                conn.settimeout(1.0)
                while b"\n" not in line and len(line) < 1024:
                    chunk = conn.recv(1024)
                    if not chunk:
                        break
                    line += chunk
            except OSError:
                pass
            finally:
                conn.close()
            first = line.split(b"\r\n", 1)[0].split(b"\n", 1)[0]
            with self._lock:
                self.hits.append(first.decode("latin-1") or "(a connection that sent nothing)")

    def take(self):
        """The hits so far, and forget them."""
        with self._lock:
            out, self.hits = self.hits, []
        return out

    def close(self):
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


# ---- the DevTools protocol over a pipe ---------------------------------------------------

class _Pipe:
    """Chromium's --remote-debugging-pipe: it reads commands on its fd 3 and
    writes answers and events on its fd 4, each a JSON text ended by NUL."""

    def __init__(self, wfd, rfd, proc):
        self.wfd, self.rfd, self.proc = wfd, rfd, proc
        self.buf = b""
        self.next_id = 0
        self.events = []  # (sessionId, method, params) not yet looked at

    def _read_one(self, deadline):
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([self.rfd], [], [], min(left, 0.5))
            if not r:
                if self.proc.poll() is not None:
                    raise BrowserError(f"chromium exited (status {self.proc.returncode})")
                continue
            chunk = os.read(self.rfd, 1 << 20)
            if not chunk:
                raise BrowserError(f"chromium closed the DevTools pipe (status {self.proc.poll()})")
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method, params=None, session=None, timeout=30.0):
        """Send one command and return its result; events read while waiting
        are kept in self.events."""
        self.next_id += 1
        mid = self.next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        data = json.dumps(msg).encode() + b"\0"
        while data:
            data = data[os.write(self.wfd, data):]
        deadline = time.monotonic() + timeout
        while True:
            m = self._read_one(deadline)
            if m is None:
                raise BrowserError(f"no answer to {method} in {timeout:.0f} s")
            if m.get("id") == mid:
                if "error" in m:
                    raise BrowserError(f"{method}: {m['error'].get('message')}")
                return m.get("result", {})
            if "method" in m:
                self.events.append((m.get("sessionId"), m["method"], m.get("params", {})))

    def pump(self, seconds):
        """Read events for up to `seconds` (less when the pipe is quiet is not
        known: it waits the whole time, returning early only on a deadline)."""
        deadline = time.monotonic() + seconds
        while True:
            m = self._read_one(deadline)
            if m is None:
                return
            if "method" in m:
                self.events.append((m.get("sessionId"), m["method"], m.get("params", {})))

    def wait_event(self, method, session, timeout):
        """Wait for an event (keeping every event read); True when it came."""
        deadline = time.monotonic() + timeout
        for e in self.events:
            if e[0] == session and e[1] == method:
                return True
        while True:
            m = self._read_one(deadline)
            if m is None:
                return False
            if "method" in m:
                e = (m.get("sessionId"), m["method"], m.get("params", {}))
                self.events.append(e)
                if e[0] == session and e[1] == method:
                    return True


# ---- one rendered page ---------------------------------------------------------------------

class Page:
    """What render() saw. Lists are of str unless said otherwise."""

    def __init__(self):
        self.url = ""
        self.dom = ""            # outerHTML of the document after load
        self.text = ""           # document.body.innerText
        self.errors = []         # console errors, exceptions, CSP violations, failed loads
        self.warnings = []       # console warnings (not a failure by themselves)
        self.requests = []       # URLs other than the page itself and data:
        self.proxy_hits = []     # first lines of connections the proxy got
        self.plots = []          # dicts: id, width, height, drawn, visible
        self.png = b""           # the screenshot
        self.size = (0, 0)       # the page's laid-out width and height, CSS px

    def save_png(self, path):
        pathlib.Path(path).write_bytes(self.png)


# the document as a person sees it, read after load (run by DevTools, not
# by the page: the page's own CSP does not apply to it)
_INSPECT_JS = r"""
(() => {
  const drawnSel = 'path,rect,polyline,polygon,line,circle,ellipse';
  const plots = Array.from(document.querySelectorAll('svg.cbt-plot')).map(svg => {
    const r = svg.getBoundingClientRect();
    const cs = getComputedStyle(svg);
    let drawn = 0;
    for (const el of svg.querySelectorAll(drawnSel)) {
      const b = el.getBBox ? el.getBBox() : {width: 0, height: 0};
      if (b.width > 0 || b.height > 0) drawn++;
    }
    return {id: svg.id, width: r.width, height: r.height, drawn: drawn,
            visible: cs.display !== 'none' && cs.visibility !== 'hidden' && r.width > 0 && r.height > 0};
  });
  const de = document.documentElement;
  return JSON.stringify({
    plots: plots,
    text: document.body ? document.body.innerText : '',
    dom: de.outerHTML,
    width: Math.max(de.scrollWidth, document.body ? document.body.scrollWidth : 0),
    height: Math.max(de.scrollHeight, document.body ? document.body.scrollHeight : 0),
  });
})()
"""


class Browser:
    """One headless Chromium for any number of render() calls.

    chromium: the executable (find_chromium()); width: the window's width in
    CSS px (the height grows to the page's, up to max_height); settle: how
    long a page is watched after its load event for late errors or requests;
    timeout: the bound on starting, loading and each DevTools call."""

    def __init__(self, chromium, width=1280, height=2000, max_height=12000, settle=0.5, timeout=30.0):
        if not chromium:
            raise BrowserError("no chromium executable given")
        self.width, self.height, self.max_height = width, height, max_height
        self.settle, self.timeout = settle, timeout
        self.proxy = RecordingProxy()       # the pages' (a browser context each)
        self.background = RecordingProxy()  # the browser's own services'
        self.profile = tempfile.mkdtemp(prefix="cbt-headless-")
        self.stderr_path = os.path.join(self.profile, "chromium.stderr")
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()

        def fds_3_and_4():
            # in the child: its fd 3 reads our commands, its fd 4 writes to us
            a = fcntl.fcntl(to_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(from_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)
            os.close(a)
            os.close(b)

        args = [
            chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
            "--remote-debugging-pipe", f"--user-data-dir={self.profile}",
            f"--window-size={width},{height}", "--hide-scrollbars",
            "--no-first-run", "--no-default-browser-check", "--disable-extensions",
            "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--disable-default-apps", "--disable-domain-reliability",
            "--disable-client-side-phishing-detection", "--disable-breakpad",
            "--disable-dev-shm-usage", "--metrics-recording-only", "--mute-audio",
            "--force-color-profile=srgb", "--font-render-hinting=none",
            f"--proxy-server=http://127.0.0.1:{self.background.port}",
            "--proxy-bypass-list=<-loopback>",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            "about:blank",
        ]
        self._stderr = open(self.stderr_path, "wb")
        try:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self._stderr,
                                         stderr=self._stderr, close_fds=False,
                                         preexec_fn=fds_3_and_4)
        except OSError as e:
            self._cleanup_fds(to_r, to_w, from_r, from_w)
            self.close()
            raise BrowserError(f"cannot start {chromium}: {e}") from e
        os.close(to_r)
        os.close(from_w)
        self.pipe = _Pipe(to_w, from_r, self.proc)
        try:
            self.version = self.pipe.send("Browser.getVersion", timeout=timeout).get("product", "?")
        except BrowserError as e:
            self.close()
            raise BrowserError(f"{chromium} did not answer on the DevTools pipe: {e}; "
                               f"its stderr: {self.stderr_tail()}") from e

    @staticmethod
    def _cleanup_fds(*fds):
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass

    def stderr_tail(self, n=1500):
        try:
            return pathlib.Path(self.stderr_path).read_bytes()[-n:].decode("utf-8", "replace")
        except OSError:
            return "(none)"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        pipe = getattr(self, "pipe", None)
        proc = getattr(self, "proc", None)
        if pipe and proc and proc.poll() is None:
            try:
                pipe.send("Browser.close", timeout=5)
            except BrowserError:
                pass
        if proc:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if pipe:
            self._cleanup_fds(pipe.wfd, pipe.rfd)
            self.pipe = None
        if getattr(self, "_stderr", None):
            self._stderr.close()
            self._stderr = None
        for name in ("proxy", "background"):
            if getattr(self, name, None):
                getattr(self, name).close()
                setattr(self, name, None)
        if getattr(self, "profile", None):
            shutil.rmtree(self.profile, ignore_errors=True)
            self.profile = None

    def render(self, path_or_html, full_page=True):
        """Open a file (a path) or an HTML text (a str starting with '<',
        written to a temporary file first) in a fresh tab; return a Page."""
        tmp = None
        if isinstance(path_or_html, str) and path_or_html.lstrip().startswith("<"):
            fd, tmp = tempfile.mkstemp(suffix=".html", prefix="page-", dir=self.profile)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(path_or_html)
            path = tmp
        else:
            path = os.fspath(path_or_html)
        if not os.path.isfile(path):
            raise BrowserError(f"no such file: {path}")
        url = pathlib.Path(os.path.abspath(path)).as_uri()
        try:
            return self._render_url(url, full_page)
        finally:
            if tmp:
                os.unlink(tmp)

    def _render_url(self, url, full_page):
        p, page = self.pipe, Page()
        page.url = url
        self.proxy.take()
        # a browser context of its own, whose traffic goes to the recording
        # proxy: the browser's own services (component updates, account
        # checks) stay in the default context, whose proxy is self.background
        ctx = p.send("Target.createBrowserContext",
                     {"disposeOnDetach": True, "proxyServer": f"http://127.0.0.1:{self.proxy.port}",
                      "proxyBypassList": "<-loopback>"})["browserContextId"]
        target = p.send("Target.createTarget", {"url": "about:blank", "browserContextId": ctx})["targetId"]
        s = p.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        try:
            for domain in ("Page", "Runtime", "Log", "Network"):
                p.send(f"{domain}.enable", session=s)
            p.send("Emulation.setDeviceMetricsOverride",
                   {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False},
                   session=s)
            p.events = [e for e in p.events if e[0] != s]  # about:blank's
            nav = p.send("Page.navigate", {"url": url}, session=s, timeout=self.timeout)
            if nav.get("errorText"):
                page.errors.append(f"navigation failed: {nav['errorText']}")
            if not p.wait_event("Page.loadEventFired", s, self.timeout):
                raise BrowserError(f"{url} did not finish loading in {self.timeout:.0f} s")
            # fonts laid out, then a short watch for anything late
            p.send("Runtime.evaluate", {"expression": "document.fonts.ready.then(() => 1)",
                                        "awaitPromise": True}, session=s)
            p.pump(self.settle)
            got = p.send("Runtime.evaluate", {"expression": _INSPECT_JS, "returnByValue": True},
                         session=s)
            if "exceptionDetails" in got:
                raise BrowserError(f"inspecting the page failed: {got['exceptionDetails']}")
            info = json.loads(got["result"]["value"])
            page.plots, page.text, page.dom = info["plots"], info["text"], info["dom"]
            page.size = (info["width"], info["height"])
            height = self.height
            if full_page:
                height = max(1, min(int(info["height"]), self.max_height))
                p.send("Emulation.setDeviceMetricsOverride",
                       {"width": self.width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                       session=s)
            shot = p.send("Page.captureScreenshot",
                          {"format": "png", "captureBeyondViewport": False, "optimizeForSpeed": True,
                           "clip": {"x": 0, "y": 0, "width": self.width, "height": height, "scale": 1}},
                          session=s, timeout=self.timeout)
            page.png = base64.b64decode(shot["data"])
            p.pump(0.05)
        finally:
            for method, prm in (("Target.closeTarget", {"targetId": target}),
                                ("Target.disposeBrowserContext", {"browserContextId": ctx})):
                try:
                    p.send(method, prm)
                except BrowserError:
                    pass
        self._collect(page, [e for e in p.events if e[0] == s], url)
        p.events = [e for e in p.events if e[0] != s]
        page.proxy_hits = self.proxy.take()
        return page

    @staticmethod
    def _collect(page, events, url):
        def where(d):
            u = d.get("url") or ""
            ln = d.get("lineNumber")
            return f" ({u}{':' + str(ln + 1) if isinstance(ln, int) and u else ''})" if u else ""

        for _, method, prm in events:
            if method == "Runtime.exceptionThrown":
                d = prm.get("exceptionDetails", {})
                exc = d.get("exception", {}).get("description") or d.get("text", "exception")
                page.errors.append(f"uncaught exception: {exc.splitlines()[0]}{where(d)}")
            elif method == "Runtime.consoleAPICalled":
                args = " ".join(str(a.get("value", a.get("description", a.get("type"))))
                                for a in prm.get("args", []))
                if prm.get("type") in ("error", "assert"):
                    page.errors.append(f"console.{prm['type']}: {args}")
                elif prm.get("type") == "warning":
                    page.warnings.append(f"console.warn: {args}")
            elif method == "Log.entryAdded":
                e = prm.get("entry", {})
                line = f"{e.get('source', '?')} {e.get('level', '?')}: {e.get('text', '')}{where(e)}"
                if e.get("level") == "error":
                    page.errors.append(line)
                elif e.get("level") == "warning":
                    page.warnings.append(line)
            elif method == "Network.requestWillBeSent":
                u = prm.get("request", {}).get("url", "")
                if u != url and not u.startswith("data:") and u not in page.requests:
                    page.requests.append(u)
            elif method == "Network.webSocketCreated":
                page.requests.append(prm.get("url", "(a websocket)"))
            elif method == "Network.loadingFailed":
                why = prm.get("blockedReason") or prm.get("corsErrorStatus", {}).get("corsError") \
                    or prm.get("errorText", "")
                if not prm.get("canceled") or why:
                    page.errors.append(f"failed load ({prm.get('type', '?')}): {why}")


# ---- PNG, decoded with zlib ------------------------------------------------------------------

def _paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def decode_png(data):
    """(width, height, bytes per pixel, rows): rows a list of bytes, one per
    image row, pixels as 8-bit RGB, RGBA, grey or grey+alpha. Non-interlaced
    8-bit images only (what Chromium writes); anything else raises
    ValueError naming it. Every filter type (None, Sub, Up, Average, Paeth)."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG (bad signature)")
    pos, idat, ihdr = 8, [], None
    while pos + 8 <= len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if len(body) != n:
            raise ValueError(f"PNG chunk {kind!r} cut short")
        if zlib.crc32(kind + body) != struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0]:
            raise ValueError(f"PNG chunk {kind!r}: bad CRC")
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + n
    if not ihdr:
        raise ValueError("PNG without IHDR")
    w, h, depth, ctype, _, _, interlace = ihdr
    bpp = {0: 1, 2: 3, 4: 2, 6: 4}.get(ctype)
    if depth != 8 or bpp is None or interlace:
        raise ValueError(f"PNG depth {depth} colour type {ctype} interlace {interlace}: only 8-bit "
                         "non-interlaced grey/RGB/RGBA is read")
    raw = zlib.decompress(b"".join(idat))
    stride = w * bpp
    if len(raw) != h * (stride + 1):
        raise ValueError(f"PNG data is {len(raw)} bytes, {h * (stride + 1)} expected")
    lo7 = int.from_bytes(b"\x7f" * stride, "little")
    hi1 = int.from_bytes(b"\x80" * stride, "little")
    mask255 = (255).__and__
    rows, prev = [], bytes(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)]
        if f == 0:
            cur = line
        elif f == 1:  # Sub: a running sum per channel, mod 256
            out = bytearray(stride)
            for c in range(bpp):
                out[c::bpp] = bytes(map(mask255, itertools.accumulate(line[c::bpp])))
            cur = bytes(out)
        elif f == 2:  # Up: bytewise add without carries, on one big integer
            a, b = int.from_bytes(line, "little"), int.from_bytes(prev, "little")
            s = ((a & lo7) + (b & lo7)) ^ ((a ^ b) & hi1)
            cur = s.to_bytes(stride, "little")
        elif f in (3, 4):  # Average, Paeth: byte by byte
            out = bytearray(line)
            for i in range(stride):
                left = out[i - bpp] if i >= bpp else 0
                up = prev[i]
                if f == 3:
                    out[i] = (out[i] + ((left + up) >> 1)) & 255
                else:
                    ul = prev[i - bpp] if i >= bpp else 0
                    out[i] = (out[i] + _paeth(left, up, ul)) & 255
            cur = bytes(out)
        else:
            raise ValueError(f"PNG row {y}: unknown filter type {f}")
        rows.append(cur)
        prev = cur
    return w, h, bpp, rows


def image_stats(png, chroma=48, min_pixels=100):
    """What a screenshot holds: width, height, the background colour (the
    commonest), the share of pixels that are not it, how many colours cover
    at least min_pixels pixels, and how many of those are chromatic (their
    channels differ by more than `chroma`: plotted marks, not black text
    and its grey anti-aliasing). Alpha is ignored."""
    w, h, bpp, rows = decode_png(png)
    counts = collections.Counter()
    for row in rows:
        if bpp >= 3:
            counts.update(zip(row[0::bpp], row[1::bpp], row[2::bpp]))
        else:
            counts.update((g, g, g) for g in row[0::bpp])
    total = w * h
    bg, bg_n = counts.most_common(1)[0] if counts else ((0, 0, 0), 0)
    common = [c for c, n in counts.items() if n >= min_pixels]
    chromatic = [c for c in common if c != bg and max(c) - min(c) > chroma]
    return {
        "width": w, "height": h, "background": bg,
        "non_background": (total - bg_n) / total if total else 0.0,
        "colours": len(common), "chromatic_colours": len(chromatic),
    }


# ---- the checks ------------------------------------------------------------------------------

def check_renders(page):
    """No console errors, exceptions, CSP violations or failed loads (each
    distinct message once, with how many times it came)."""
    seen = collections.Counter(page.errors)
    return [f"error while rendering: {e}" + (f" (x{n})" if n > 1 else "") for e, n in seen.items()]


def check_offline(page):
    """The page asked for nothing beyond itself and data: URLs, and nothing
    reached the proxy."""
    out = [f"network request: {u}" for u in page.requests]
    out += [f"connection to the proxy: {h}" for h in page.proxy_hits]
    return out


def check_screenshot(page, min_non_background=0.03, min_chromatic=3):
    """The screenshot is not blank: at least min_non_background of its
    pixels differ from the background, and at least min_chromatic coloured
    (not grey) colours each cover a visible area."""
    try:
        st = image_stats(page.png)
    except ValueError as e:
        return [f"screenshot unreadable: {e}"]
    out = []
    if st["non_background"] < min_non_background:
        out.append(f"screenshot nearly blank: {st['non_background']:.2%} of {st['width']}x{st['height']} "
                   f"pixels differ from the background {st['background']} (at least "
                   f"{min_non_background:.0%} wanted)")
    if st["chromatic_colours"] < min_chromatic:
        out.append(f"screenshot has {st['chromatic_colours']} coloured areas (colours over 100 px that "
                   f"are not grey), at least {min_chromatic} wanted: no plotted content")
    return out


class _PlotParser(html.parser.HTMLParser):
    """The svg.cbt-plot elements of a serialized DOM, with the drawing
    elements (path, rect, polyline, ...) inside each."""
    DRAWN = {"path", "rect", "polyline", "polygon", "line", "circle", "ellipse"}

    def __init__(self):
        super().__init__()
        self.plots = {}
        self.classes = {}  # plot id: its class list
        self.stack = []  # open elements: (tag, plot id or None)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cur = next((pid for _, pid in reversed(self.stack) if pid), None)
        if tag == "svg" and "cbt-plot" in (a.get("class") or "").split():
            cur = a.get("id") or f"(svg.cbt-plot #{len(self.plots) + 1} without an id)"
            self.plots.setdefault(cur, 0)
            self.classes[cur] = (a.get("class") or "").split()
        elif cur and tag in self.DRAWN:
            self.plots[cur] += 1
        self.stack.append((tag, cur if tag == "svg" else None))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        self.handle_endtag(tag)

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                return


def dom_plots(dom, with_classes=False):
    """{plot id: number of drawing elements inside it} from a DOM dump (and
    {plot id: its classes} too, with_classes)."""
    p = _PlotParser()
    p.feed(dom)
    p.close()
    return (p.plots, p.classes) if with_classes else p.plots


def check_plots(page, expected_ids, min_drawn=1, empty_class=None):
    """Every expected svg.cbt-plot id is in the rendered DOM with at least
    min_drawn drawing elements (path/rect/polyline/...) of non-zero extent,
    and is laid out visible with a non-zero size; and, given empty_class,
    none of them has that class (`cbt report`'s cbt-empty: a plot drawn
    empty because nothing was measured)."""
    out = []
    in_dom, classes = dom_plots(page.dom, with_classes=True)
    laid = {p["id"]: p for p in page.plots}
    for pid in expected_ids:
        if pid not in in_dom:
            out.append(f"plot {pid}: no <svg class=\"cbt-plot\" id=\"{pid}\"> in the rendered DOM")
            continue
        if empty_class and empty_class in classes.get(pid, []):
            out.append(f"plot {pid}: drawn empty (class {empty_class}): nothing measured for it")
        if in_dom[pid] < min_drawn:
            out.append(f"plot {pid}: {in_dom[pid]} drawing elements (path/rect/polyline/...), "
                       f"at least {min_drawn} wanted")
        lp = laid.get(pid)
        if not lp or not lp["visible"]:
            out.append(f"plot {pid}: not visible (no layout box, display:none or zero size)")
        elif lp["drawn"] < min_drawn:
            out.append(f"plot {pid}: {lp['drawn']} drawing elements with a non-zero extent, "
                       f"at least {min_drawn} wanted")
    return out


def check_text(page, needles):
    """Each string appears in the rendered page's text."""
    return [f"the page does not say {n!r}" for n in needles if n not in page.text]


def check_csp(page):
    """The page carries a Content-Security-Policy meta tag whose default-src
    is 'none' and that allows no scheme but data: (so even a browser without
    this test's proxy would fetch nothing for it)."""
    class P(html.parser.HTMLParser):
        csp = []

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            if tag == "meta" and (a.get("http-equiv") or "").lower() == "content-security-policy":
                self.csp.append(a.get("content") or "")

    p = P()
    p.csp = []
    p.feed(page.dom)
    if not p.csp:
        return ["no <meta http-equiv=\"Content-Security-Policy\"> in the page"]
    out = []
    for c in p.csp:
        dirs = {d.split()[0]: d.split()[1:] for d in c.split(";") if d.split()}
        if dirs.get("default-src") != ["'none'"]:
            out.append(f"CSP {c!r}: default-src is not 'none'")
        for name, vals in dirs.items():
            for v in vals:
                if v not in ("'none'", "'unsafe-inline'", "'self'", "data:") and not v.startswith("'sha"):
                    out.append(f"CSP {c!r}: {name} allows {v}")
                if v == "'self'":
                    out.append(f"CSP {c!r}: {name} allows 'self' (other local files)")
    return out
