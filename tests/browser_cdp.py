"""A headless Chromium driven over the Chrome DevTools Protocol, standard library only.

Used by tests/test_bench_page_browser.py to open the published asv page as a user's
browser would. No driver package: Chromium is started with ``--remote-debugging-pipe``
and speaks the protocol (JSON messages ended by a NUL byte) on its file descriptors 3
(commands in) and 4 (replies and events out), so neither a websocket client nor
playwright/selenium nor a free TCP port is needed.

The browser reaches nothing but this machine: ``--host-resolver-rules`` makes every host
name except ``localhost``/``127.0.0.1`` fail to resolve (a CDN request fails at once with
``net::ERR_NAME_NOT_RESOLVED`` whether or not the machine has internet access), and the
background services that would call home are off.

    with Browser.launch(find_chromium(), profile_dir) as b:
        b.navigate("http://127.0.0.1:8000/index.html")
        b.wait_for("document.readyState === 'complete'")
        b.failures()         # scripts/styles that did not load, console errors, exceptions
        b.screenshot(path)
"""

import base64
import fcntl
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

DEBIAN_CHROMIUM = "/usr/bin/chromium"
NAMES = ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"]

# Only the loopback resolves; the rest fails to resolve (no network beyond this machine).
OFFLINE_FLAGS = [
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
    "--no-proxy-server", "--disable-background-networking", "--disable-component-update",
    "--disable-default-apps", "--disable-sync", "--no-first-run", "--no-default-browser-check",
    "--disable-features=MediaRouter,OptimizationHints,Translate",
    "--metrics-recording-only", "--safebrowsing-disable-auto-update",
]


def find_chromium():
    """The Chromium to use: $TAPEFLOW_CHROMIUM, Debian's /usr/bin/chromium, or the first
    of chromium, chromium-browser, google-chrome on PATH; ``(path, None)`` or
    ``(None, reason)``."""
    env = os.environ.get("TAPEFLOW_CHROMIUM")
    if env:
        path = shutil.which(env) or (env if os.access(env, os.X_OK) else None)
        return (path, None) if path else (
            None, f"TAPEFLOW_CHROMIUM={env} is not an executable file")
    if os.access(DEBIAN_CHROMIUM, os.X_OK):
        return DEBIAN_CHROMIUM, None
    for name in NAMES:
        path = shutil.which(name)
        if path:
            return path, None
    return None, ("no Chromium found (set TAPEFLOW_CHROMIUM to a Chromium or Chrome "
                  "binary, or install one: `apt-get install chromium` on Debian, as root)")


class BrowserError(RuntimeError):
    pass


class Browser:
    """One headless Chromium with one page (a target attached in flat mode)."""

    def __init__(self, proc, reader, writer, log=None):
        self.proc, self._reader, self._writer, self.log = proc, reader, writer, log
        self._next_id = 0
        self._cond = threading.Condition()
        self._replies = {}
        self.events = []            # (method, params) of every event, in order
        self.session = None
        self._closed = False
        self._thread = threading.Thread(target=self._read_loop, daemon=True)
        self._thread.start()

    @classmethod
    def launch(cls, binary, profile_dir, width=1280, height=800, timeout=30.0):
        """Start ``binary`` headless with a fresh profile in ``profile_dir`` and open a
        blank page whose network, console and runtime events are recorded."""
        cmd_r, cmd_w = os.pipe()        # we write commands, Chromium reads them on fd 3
        out_r, out_w = os.pipe()        # Chromium writes on fd 4, we read
        args = [binary, "--headless=new", "--remote-debugging-pipe",
                f"--user-data-dir={profile_dir}", f"--window-size={width},{height}",
                "--hide-scrollbars", "--disable-gpu", "--mute-audio", *OFFLINE_FLAGS]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.append("--no-sandbox")     # Chromium refuses to run as root with it

        def _fds():     # in the child: the pipes become fds 3 and 4 (via fds >= 10, so
            a = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 10)       # neither clobbers the other)
            b = fcntl.fcntl(out_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        log = Path(profile_dir) / "chromium.log"
        with open(log, "wb") as err:
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=err, preexec_fn=_fds, pass_fds=(3, 4))
        os.close(cmd_r)
        os.close(out_w)
        browser = cls(proc, os.fdopen(out_r, "rb", buffering=0),
                      os.fdopen(cmd_w, "wb", buffering=0), log)
        try:
            target = browser.send("Target.createTarget", {"url": "about:blank"},
                                  timeout=timeout)["targetId"]
            browser.session = browser.send("Target.attachToTarget",
                                           {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Page", "Network", "Runtime", "Log"):
                browser.send(f"{domain}.enable")
        except BaseException:
            browser.close()
            raise
        return browser

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self._closed:
            return
        self._closed = True
        try:
            self._writer.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.close()

    def _read_loop(self):
        buf = b""
        while True:
            try:
                chunk = self._reader.read(65536)
            except (OSError, ValueError):
                chunk = b""
            if not chunk:
                with self._cond:
                    self._replies[None] = "Chromium closed the DevTools pipe"
                    self._cond.notify_all()
                return
            buf += chunk
            *messages, buf = buf.split(b"\0")
            with self._cond:
                for raw in messages:
                    msg = json.loads(raw)
                    if "id" in msg:
                        self._replies[msg["id"]] = msg
                    else:
                        self.events.append((msg["method"], msg.get("params", {})))
                self._cond.notify_all()

    def send(self, method, params=None, timeout=30.0, session=True):
        """Run one protocol command (on the page's session unless ``session=False``) and
        return its result; BrowserError with the protocol's message if it fails."""
        with self._cond:
            self._next_id += 1
            mid = self._next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        self._writer.write(json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        with self._cond:
            while mid not in self._replies:
                if None in self._replies:
                    raise BrowserError(f"{method}: {self._replies[None]} (exit status "
                                       f"{self.proc.poll()}); its log ends:\n{self._log_tail()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BrowserError(f"{method}: no reply in {timeout} s")
                self._cond.wait(left)
            reply = self._replies.pop(mid)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def _log_tail(self, n=20):
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except (OSError, AttributeError):
            return "(no log)"

    def evaluate(self, expression, timeout=30.0):
        """The JSON value of a JavaScript expression in the page (promises awaited)."""
        res = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                             "awaitPromise": True}, timeout=timeout)
        if "exceptionDetails" in res:
            raise BrowserError(f"{expression!r} threw: "
                               f"{res['exceptionDetails'].get('exception', {})}")
        return res["result"].get("value")

    def navigate(self, url, fresh=True):
        """Open ``url``. ``fresh``: from a blank page, with the events recorded so far
        dropped, so failures() tells about this page alone (a URL differing only in its
        #fragment would otherwise stay in the same document)."""
        if fresh:
            self.send("Page.navigate", {"url": "about:blank"})
            self.wait_for("location.href === 'about:blank' && document.readyState === 'complete'",
                          what="a blank page")
            with self._cond:
                self.events.clear()
        res = self.send("Page.navigate", {"url": url})
        if res.get("errorText"):
            raise BrowserError(f"navigating to {url}: {res['errorText']}")

    def wait_for(self, expression, timeout=20.0, what=None, fail_if="false"):
        """Wait until the JavaScript ``expression`` is truthy in the page (checked every
        25 ms, inside the page) and return its value. BrowserError, with what
        the page shows (its URL and the start of its text) and what failed to load, after
        ``timeout`` seconds or as soon as the ``fail_if`` expression is truthy. A document
        replaced meanwhile (a navigation) is waited on again."""
        script = ("new Promise(resolve => { const t0 = performance.now(); const check = () => {"
                  f" let v, bad; try {{ v = ({expression}); }} catch (e) {{ v = undefined; }}"
                  f" try {{ bad = ({fail_if}); }} catch (e) {{ bad = false; }}"
                  " if (v && !bad) resolve({ok: true, value: v});"
                  f" else if (bad || performance.now() - t0 > {timeout * 1000:.0f})"
                  "   resolve({ok: false, url: location.href, text: (document.body ?"
                  "            document.body.innerText : '').slice(0, 400)});"
                  " else setTimeout(check, 25); }; check(); })")
        deadline = time.monotonic() + timeout
        while True:
            try:
                res = self.evaluate(script, timeout=timeout + 10)
                break
            except BrowserError as e:       # the document went away under the wait
                gone = any(m in str(e) for m in ("navigated or closed", "context was destroyed",
                                                  "Cannot find context"))
                if not gone or time.monotonic() > deadline:
                    raise
                self.wait_for("document.readyState !== 'loading'",
                              max(deadline - time.monotonic(), 1), "a new document")
        if not res["ok"]:
            raise BrowserError(f"gave up waiting for {what or expression}; page {res['url']} "
                               f"shows: {res['text']!r}\n{self.report()}")
        return res["value"]

    def failures(self):
        """Everything that went wrong in the page so far, as lines: requests that failed
        (a script or stylesheet that did not load) or got an HTTP error, console errors,
        uncaught exceptions."""
        urls, out = {}, []
        for method, p in list(self.events):
            if method == "Network.requestWillBeSent":
                urls[p["requestId"]] = (p["request"]["url"], p.get("type", ""))
            elif method == "Network.loadingFailed":
                url, kind = urls.get(p["requestId"], ("?", p.get("type", "")))
                why = p.get("errorText", "")
                if p.get("blockedReason"):
                    why += f", blocked: {p['blockedReason']}"
                out.append(f"{kind or 'request'} failed to load: {url} ({why})")
            elif method == "Network.responseReceived" and p["response"]["status"] >= 400:
                out.append(f"{p.get('type', 'request')} {p['response']['url']}: "
                           f"HTTP {p['response']['status']}")
            elif method == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
                text = " ".join(str(a.get("value", a.get("description", "")))
                                for a in p.get("args", []))
                out.append(f"console.{p['type']}: {text}")
            elif method == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                out.append(f"uncaught exception: "
                           f"{d.get('exception', {}).get('description') or d.get('text')}")
            elif (method == "Log.entryAdded" and p["entry"]["level"] == "error"
                  and p["entry"].get("source") != "network"):    # as loadingFailed
                e = p["entry"]
                out.append(f"console ({e.get('source')}): {e.get('text')} {e.get('url', '')}")
        return list(dict.fromkeys(out))

    def report(self):
        f = self.failures()
        return "no failed requests or console errors" if not f else \
            "failed requests / console errors:\n  " + "\n  ".join(f)

    def screenshot(self, path):
        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        Path(path).write_bytes(base64.b64decode(data))
        return Path(path)
