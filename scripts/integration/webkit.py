#!/usr/bin/env python3
"""The web-view path in a real WebKit: WebKitGTK (Debian's libwebkitgtk-6.0) under Xvfb, through
scripts/webview (larder-webview, built with LARDER_WEBKITGTK=1), against the sample app synced
from a file:// repository and an origin on 127.0.0.1 (a Python HTTP server started here).

  1. sample app: v1 loads from larder://sample-app/ with its script, styles, image, font and
     fetched JSON, every request served from sample-app@1.0.0; the DOM the app's script builds says
     "Catalogue v1.0.0 — 5 items"; screenshot artifacts/webkit-v1.png. A probe page asks for a
     Range (206 and the 10 bytes), HEAD (the length, no body), If-None-Match (304), a file the
     package lacks (404), and aborts a 24 MiB fetch after its first chunk (WebKit closes the
     stream and the task stops).
  2. cookies and POST: a page of the package (routed to the origin, /api/ bypassed) logs in
     through a 302 that sets an HttpOnly cookie, gets a script-visible one from the page it
     lands on, sets one from script, then asks the origin what it received, and posts a 100 KB
     body: the page sees only the script-visible cookies in document.cookie, the origin receives
     all three on the later request, the body arrives intact (length and SHA-256), and in
     WebKit's store the session cookie stays a session cookie. Handed over as it came
     (--relay-redirects), the 302 reaches the page's fetch as a 302: WebKitGTK does not follow a
     scheme handler's redirect, which is why the driver follows redirects itself.
  3. a dead web process (SIGKILL to WebKitWebProcess) while a pending v2 is shown: the page comes
     back (reloaded), page health confirms v2 — no rollback.
  4. a release whose script throws (v3): failed through the larderHealth message handler, rolled
     back to v2, and the page shows v2 again.
  5. a release whose page outgrows the web process's memory limit (v4) three times before it is
     ready: rolled back with the memory reason; v2 shows again.

Prints one line per check and ends with `webkit: N passed, M failed`; exits 1 on any failure.
Environment: LARDER_BIN (a built larder), LARDER_WEBVIEW_BIN (a built larder-webview), else both
are built here; WEBKIT_KEEP=1 keeps the work directory.

Usage: scripts/integration/webkit.py
"""
import hashlib
import http.server
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import larder_scripts as ls  # noqa: E402  (found through the line above)
from larder_scripts import say  # noqa: E402

ls.NAME = "webkit"
CHECKOUT = ls.CHECKOUT
WEBVIEW = os.path.join(CHECKOUT, "scripts", "webview")
ARTIFACTS = os.path.join(CHECKOUT, "artifacts")

COOKIE_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>cookies</title></head>
<body><pre id="out">running</pre>
<script>
(async function () {
  var out = {};
  try {
    var login = await fetch('api/login');
    out.login = { status: login.status };
    out.login.body = await login.json();
    document.cookie = 'page=script; Path=/';
    out.documentCookie = document.cookie;
    out.whoami = await (await fetch('api/whoami')).json();
    var body = 'x'.repeat(100000) + '\\u00e9\\u2713';
    var echo = await fetch('api/echo', { method: 'POST', body: body,
      headers: { 'Content-Type': 'text/plain; charset=utf-8' } });
    out.echo = await echo.json();
  } catch (e) { out.error = String(e); }
  document.getElementById('out').textContent = JSON.stringify(out);
  if (window.larder) window.larder.ready();
})();
</script></body></html>
"""

PROBE_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>probe</title></head>
<body><pre id="out">running</pre>
<script>
(async function () {
  var out = {};
  try {
    var r = await fetch('big.bin', { headers: { Range: 'bytes=1000-1009' } });
    var b = new Uint8Array(await r.arrayBuffer());
    out.range = { status: r.status, length: b.length, first: b[0], contentRange: r.headers.get('Content-Range') };
    var h = await fetch('big.bin', { method: 'HEAD' });
    out.head = { status: h.status, length: h.headers.get('Content-Length'), body: (await h.arrayBuffer()).byteLength };
    var e = await fetch('data/catalog.json', { cache: 'no-store' });
    var etag = e.headers.get('ETag');
    var n = await fetch('data/catalog.json', { headers: { 'If-None-Match': etag } });
    out.etag = { etag: etag, status: n.status };
    var m = await fetch('no/such/file.txt');
    out.missing = { status: m.status };
    var ac = new AbortController();
    var s = await fetch('big.bin', { signal: ac.signal, cache: 'no-store' });
    var reader = s.body.getReader();
    var first = await reader.read();
    ac.abort();
    out.cancel = { firstChunk: first.value ? first.value.length : 0 };
  } catch (err) { out.error = String(err); }
  document.getElementById('out').textContent = JSON.stringify(out);
})();
</script></body></html>
"""
BIG_BYTES = 24 << 20
# Incompressible (a zip of repeating bytes trips the zip-bomb ratio limit), the same every run.
BIG = random.Random(28).randbytes(BIG_BYTES)

THROWING_SCRIPT = "throw new Error('release 3.0.0 is broken');\n"
HOG_SCRIPT = """// A release whose page uses more and more memory before it is ready.
var hog = [];
function grow() { for (var i = 0; i < 20; i++) { hog.push(new Array(1e6).fill(i + hog.length)); } setTimeout(grow, 20); }
grow();
"""


class Origin(http.server.BaseHTTPRequestHandler):
    """The package's http origin: a login that redirects and sets an HttpOnly cookie, a page that
    sets a script-visible one, an echo of what a request carried."""
    log = []

    def log_message(self, *args):
        pass

    def reply(self, status, doc, cookies=(), location=None):
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for c in cookies:
            self.send_header("Set-Cookie", c)
        if location:
            self.send_header("Location", location)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        cookie = self.headers.get("Cookie", "")
        Origin.log.append(("GET", self.path, cookie))
        if self.path == "/api/login":
            self.reply(302, {"moved": True}, ["sid=s3cret; Path=/; HttpOnly; SameSite=Lax"], "/api/home")
        elif self.path == "/api/home":
            self.reply(200, {"home": True, "cookie": cookie}, ["theme=dark; Path=/; Max-Age=3600"])
        elif self.path == "/api/whoami":
            self.reply(200, {"cookie": cookie})
        else:
            self.reply(404, {"missing": self.path})

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        Origin.log.append(("POST", self.path, self.headers.get("Cookie", "")))
        self.reply(200, {"method": "POST", "length": len(body), "sha256": hashlib.sha256(body).hexdigest(),
                         "contentType": self.headers.get("Content-Type", ""), "cookie": self.headers.get("Cookie", "")})


class Run:
    """One larder-webview run: its output lines, as they come."""

    def __init__(self, work, name, args, env):
        self.path = os.path.join(work, name + ".log")
        self.out = open(self.path, "w")
        self.proc = subprocess.Popen([WEBVIEW] + args, stdout=self.out, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)

    def text(self):
        with open(self.path) as f:
            return f.read()

    def wait_for(self, pattern, count=1, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if len(re.findall(pattern, self.text(), re.M)) >= count:
                return True
            if self.proc.poll() is not None:
                return len(re.findall(pattern, self.text(), re.M)) >= count
            time.sleep(0.2)
        return False

    def finish(self, timeout=120):
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.out.close()
        return self.proc.returncode

    def last_dom(self):
        doms = re.findall(r"^dom begin .*?\n(.*?)\ndom end$", self.text(), re.M | re.S)
        return doms[-1] if doms else ""

    def web_processes(self):
        """The WebKitWebProcess processes of this run (its session)."""
        pids = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    cmd = f.read()
                if b"WebKitWebProcess" in cmd and b"bwrap" not in cmd and os.getsid(int(pid)) == self.proc.pid:
                    pids.append(int(pid))
            except (OSError, ProcessLookupError):
                continue
        return pids


def page_result(run):
    """The JSON a test page leaves in its <pre id="out">, from the last DOM printed ({} if none)."""
    m = re.search(r"<pre id=\"out\">(.*?)</pre>", run.last_dom(), re.S)
    try:
        return json.loads(m.group(1).replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")) if m else {}
    except ValueError:
        return {}


def main():
    larder = ls.larder_binary()
    env = ls.loopback_env()
    env["LARDER_BIN"] = larder
    # Build larder-webview once (scripts/webview builds it when LARDER_WEBVIEW_BIN is unset).
    if not env.get("LARDER_WEBVIEW_BIN"):
        p = subprocess.run([WEBVIEW, "--help"], stdout=subprocess.DEVNULL, env=env)
        if p.returncode != 0:
            raise ls.SetupError("scripts/webview --help failed (exit %d)" % p.returncode)
    os.makedirs(ARTIFACTS, exist_ok=True)
    work = ls.scratch_dir("larder-webkit-")
    results = []

    def check(name, ok, detail=""):
        results.append(ok)
        say(("ok   " if ok else "FAIL ") + name + ("" if ok or not detail else "\n     " + detail.replace("\n", "\n     ")))
        return ok

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Origin)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def body():
        os.chdir(work)
        ls.run([larder, "keygen", "--out", "key"])

        def publish(version, change=None):
            app = os.path.join(work, "app-" + version)
            shutil.copytree(os.path.join(CHECKOUT, "Examples", "sample-app"), app)
            catalog = os.path.join(app, "data", "catalog.json")
            with open(catalog) as f:
                text = f.read().replace('"version": "1.0.0"', '"version": "%s"' % version)
            with open(catalog, "w") as f:
                f.write(text)
            with open(os.path.join(app, "cookies.html"), "w") as f:
                f.write(COOKIE_PAGE)
            with open(os.path.join(app, "probe.html"), "w") as f:
                f.write(PROBE_PAGE)
            with open(os.path.join(app, "big.bin"), "wb") as f:
                f.write(BIG)
            if change:
                change(app)
            ls.run([larder, "pack", app, "--repo", "repo", "--id", "sample-app", "--version", version,
                    "--key", "key.key", "--route", "http://127.0.0.1:%d/" % port, "--bypass", "/api/"])

        def sync():
            ls.run([larder, "sync", "--root", "sb"], env=env)

        def status():
            doc = json.loads(ls.run([larder, "status", "--root", "sb", "--json"]))
            return ls.find_package(doc, "sample-app") or {}

        def webview(name, url, *extra):
            return Run(work, name, ["--root", "sb", "--upstream-scheme", "http", "--dump-dom", *extra, url], env)

        publish("1.0.0")
        ls.run([larder, "init", "--root", "sb", "--repo", "file://%s/repo" % work, "--public-key", "key.pub"])
        sync()

        # 1. The sample app.
        run = webview("v1", "larder://sample-app/index.html", "--screenshot", os.path.join(ARTIFACTS, "webkit-v1.png"))
        code = run.finish()
        log = run.text()
        served = set(re.findall(r"^GET larder://sample-app/(\S+) 200 sample-app@1\.0\.0 ", log, re.M))
        want = {"index.html", "js/app.js", "css/app.css", "img/logo.png", "fonts/larder-sans.woff2", "data/catalog.json"}
        check("v1 loads: exit 0, every subresource (page, script, styles, image, font, JSON) served from sample-app@1.0.0",
              code == 0 and want <= served, "exit %s; served %s\n%s" % (code, sorted(served), log[-2000:]))
        check("the DOM the app's script builds from its fetched JSON says 'Catalogue v1.0.0 — 5 items'",
              "Catalogue v1.0.0 \u2014 5 items" in run.last_dom(), run.last_dom()[-1500:])
        check("a screenshot of the page: artifacts/webkit-v1.png",
              os.path.getsize(os.path.join(ARTIFACTS, "webkit-v1.png")) > 10000)

        # 1a. --timing and --loads (scripts/bench --pageload): two loads in one view, each timed.
        run = webview("timing", "larder://sample-app/index.html", "--timing", "--loads", "2", "--settle", "0.3")
        code = run.finish()
        timings = [json.loads(t) for t in re.findall(r"^timing (\{.*\})$", run.text(), re.M)]
        check("--timing --loads 2: the page is opened twice, each load's load event and paint timed",
              code == 0 and len(timings) == 2 and all((t.get("load") or 0) > 0 for t in timings)
              and len(re.findall(r"^GET larder://sample-app/index\.html 200 ", run.text(), re.M)) == 2,
              "exit %s; %s\n%s" % (code, timings, run.text()[-1500:]))

        # 1b. What a scheme handler must do besides GET: Range, HEAD, ETag/304, a missing file, cancellation.
        run = webview("probe", "larder://sample-app/probe.html")
        code = run.finish()
        out = page_result(run)
        log = run.text()
        detail = "exit %s; page: %s\n%s" % (code, out, log[-1500:])
        rng = out.get("range", {})
        check("Range: 206 with the 10 bytes asked for and Content-Range",
              rng.get("status") == 206 and rng.get("length") == 10 and rng.get("first") == BIG[1000]
              and rng.get("contentRange") == "bytes 1000-1009/%d" % BIG_BYTES, detail)
        head = out.get("head", {})
        check("HEAD: 200 with the file's Content-Length and no body",
              head.get("status") == 200 and head.get("length") == str(BIG_BYTES) and head.get("body") == 0, detail)
        check("If-None-Match with the file's ETag: 304",
              out.get("etag", {}).get("status") == 304 and bool(out.get("etag", {}).get("etag")), detail)
        check("a file the package does not have: 404", out.get("missing", {}).get("status") == 404, detail)
        # WebKit reads a scheme response's stream as fast as it can, whatever the page consumes: on a
        # fast run the whole 24 MiB may be in WebKit before the page's abort reaches the task, and
        # then there is nothing left to cancel. Such a run proves nothing either way, so the probe
        # runs again (at most three times); an implementation that never stops a task fails all.
        cancels = []
        for attempt in range(3):
            if attempt:
                run = webview("probe-%d" % attempt, "larder://sample-app/probe.html")
                code = run.finish()
                out, log = page_result(run), run.text()
            cancelled = re.search(r"^GET larder://sample-app/big\.bin cancelled by WebKit after (\d+)B", log, re.M)
            cancels.append((code, out.get("cancel"), cancelled.group(0) if cancelled else None))
            if out.get("cancel", {}).get("firstChunk", 0) > 0 and cancelled and int(cancelled.group(1)) < BIG_BYTES:
                break
        check("a fetch aborted after its first chunk stops the task: WebKit closes the stream, the rest is not sent",
              cancels[-1][2] is not None and cancels[-1][1] and cancels[-1][1].get("firstChunk", 0) > 0,
              "attempts (exit, page's cancel, log line): %s\n%s" % (cancels, log[-1500:]))

        # 2. Cookies and POST.
        Origin.log.clear()
        run = webview("cookies", "larder://sample-app/cookies.html", "--page-health",
                      "--dump-cookies", "http://127.0.0.1:%d/api/" % port)
        code = run.finish()
        out = page_result(run)
        detail = "exit %s; page: %s\norigin: %s\n%s" % (code, out, Origin.log, run.text()[-1500:])
        login = out.get("login", {})
        check("a forwarded 302 is followed as a browser would: the page gets the page it lands on (200)",
              login.get("status") == 200 and login.get("body", {}).get("home") is True, detail)
        check("the 302's HttpOnly cookie reached the origin on the next hop",
              any(p == "/api/home" and "sid=s3cret" in c for _, p, c in Origin.log), detail)
        seen = out.get("documentCookie", "")
        check("document.cookie shows the script-visible cookies (theme, page) and not the HttpOnly one",
              "theme=dark" in seen and "page=script" in seen and "sid" not in seen, detail)
        who = out.get("whoami", {}).get("cookie", "")
        check("a later forwarded request carries all three: the HttpOnly, the script-visible and the script's",
              all(c in who for c in ("sid=s3cret", "theme=dark", "page=script")), detail)
        cookies = re.findall(r"^cookie \S+: (.*)$", run.text(), re.M)
        sid = [c for c in cookies if c.startswith("sid=")]
        theme = [c for c in cookies if c.startswith("theme=")]
        check("in WebKit's store: the session cookie stays a session cookie (no expiry), HttpOnly kept; the "
              "Max-Age one has an expiry",
              len(sid) == 1 and "Expires=" not in sid[0] and "HttpOnly" in sid[0]
              and len(theme) == 1 and "Expires=" in theme[0], "cookies: %s" % cookies)
        want_body = ("x" * 100000 + "\u00e9\u2713").encode()
        echo = out.get("echo", {})
        check("a forwarded POST's 100 KB body reaches the origin intact (length, SHA-256, Content-Type)",
              echo.get("length") == len(want_body) and echo.get("sha256") == hashlib.sha256(want_body).hexdigest()
              and echo.get("contentType", "").startswith("text/plain"), detail)

        # Why the driver follows redirects: WebKitGTK does not follow a scheme handler's 3xx, so a
        # page's fetch would get the 302 itself (a browser's fetch never does).
        run = webview("relayed", "larder://sample-app/cookies.html", "--relay-redirects")
        code = run.finish()
        out = page_result(run)
        check("handed a 302 as it came (--relay-redirects), WebKit does not follow it: the page's fetch sees "
              "the 302 — which is why the driver follows redirects itself",
              out.get("login", {}).get("status") == 302, "exit %s; page: %s" % (code, out))

        # 3. A dead web process.
        publish("2.0.0")
        sync()
        run = webview("kill", "larder://sample-app/index.html", "--page-health", "--stay", "6")
        loaded = run.wait_for(r"^load finished ", 1, 60)
        victims = run.web_processes()
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        back = run.wait_for(r"^load finished ", 2, 30)
        code = run.finish()
        log = run.text()
        check("SIGKILL to WebKit's web process: reported as a crash and the page reloaded",
              loaded and bool(victims) and back and "web process crashed: reloading larder://sample-app/index.html" in log,
              "victims %s\n%s" % (victims, log[-2000:]))
        st = status()
        check("the page is back (v2 rendered) and v2 is confirmed by page health, not rolled back",
              "Catalogue v2.0.0" in run.last_dom() and st.get("active") == "2.0.0" and st.get("health") == "confirmed",
              "status %s\n%s" % (st, log[-1500:]))

        # 4. A release whose script throws.
        publish("3.0.0", lambda app: open(os.path.join(app, "js", "app.js"), "w").write(THROWING_SCRIPT))
        sync()
        run = webview("throws", "larder://sample-app/index.html", "--page-health", "--ready-deadline", "3",
                      "--max-script-errors", "1", "--stay", "4",
                      "--screenshot", os.path.join(ARTIFACTS, "webkit-rolled-back.png"))
        run.wait_for(r"^reloading .* after the rollback", 1, 60)
        code = run.finish()
        log = run.text()
        st = status()
        check("v3's uncaught error reaches page health through the message handler: failed, rolled back to 2.0.0",
              re.search(r"health sample-app@3\.0\.0: failed: .*release 3\.0\.0 is broken.*rolled back to 2\.0\.0", log)
              is not None and st.get("active") == "2.0.0", "status %s\n%s" % (st, log[-2000:]))
        check("the page is loaded again and shows v2",
              "Catalogue v2.0.0" in run.last_dom(), run.last_dom()[-800:])

        # 5. A release whose page outgrows the web process's memory limit.
        publish("4.0.0", lambda app: open(os.path.join(app, "js", "app.js"), "w").write(HOG_SCRIPT))
        sync()
        run = webview("memory", "larder://sample-app/index.html", "--page-health", "--memory-limit", "400",
                      "--stay", "15")
        run.wait_for(r"^reloading .* after the rollback", 1, 90)
        code = run.finish()
        log = run.text()
        st = status()
        kills = re.findall(r"^web process exceeded its memory limit: reloading", log, re.M)
        check("v4's page is killed for its memory three times (each reloaded with a longer delay), then rolled back "
              "to 2.0.0 with the memory reason",
              len(kills) == 3 and re.search(
                  r"health sample-app@4\.0\.0: failed: the web content process terminated 3 times before the page was "
                  r"ready \(the last time it exceeded its memory limit\) → rolled back to 2\.0\.0", log) is not None
              and st.get("active") == "2.0.0", "status %s\n%s" % (st, log[-2500:]))
        check("after the rollback the page shows v2 and stays up",
              "Catalogue v2.0.0" in run.last_dom() and code == 0, "exit %s\n%s" % (code, run.last_dom()[-800:]))
        return all(results)

    try:
        ok = ls.kept_unless_ok(work, body) if not os.environ.get("WEBKIT_KEEP") else body()
    finally:
        server.shutdown()
    say("webkit: %d passed, %d failed" % (results.count(True), results.count(False)))
    return 0 if ok else 1


if __name__ == "__main__":
    ls.main(main)
