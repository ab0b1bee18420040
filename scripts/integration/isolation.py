#!/usr/bin/env python3
"""Isolation between packages (manifests §17), the same pages in both engines: WebKitGTK through
scripts/webview (larder://a, larder://b, larder://c) and headless Chromium through larder serve
(http://a.test, http://b.test, http://c.test mapped to the gateway), each with one data directory
(WebKitGTK's --data-dir, Chromium's --user-data-dir) over all its runs, against one origin server.

Everything runs in a network namespace (root) whose hosts file names a.test, b.test and c.test
127.0.0.1, where a Python origin listens on port 80 and answers by Host. Three packages: a and b
bypass /api/ to their origin; c lists b's origins in corsOrigins and only api.c.test in
networkHosts.

Cases, each checked in both engines (the line prints both engines' values):
  1. a's own page (a/login.html) logs in through the origin (HttpOnly session sid, script-visible
     theme, persistent keep, lax) and then, from script, tries to overwrite and shadow the HttpOnly
     cookie, set a Secure one from http, __Host- and __Secure- without Secure, SameSite=None
     without Secure and a Domain that is a public suffix: none is set; the origin still gets sid's
     own value. Deletion by the origin (Max-Age=0) and by script takes the cookie away.
  2. b's page (b/attack.html): document.cookie shows b's cookies only; a's file cannot be read
     across origins; c's can (c lists b); b's cookie bridge naming a's page is refused, a's bridge
     cannot be read across origins, a simple cross-origin POST to it plants nothing, and a
     cross-site request to a's origin carries none of a's Lax (or default) cookies.
  3. c's page asking for a's origin through a passthrough is refused (403, networkHosts) and
     never reaches the origin.
  4. a restart with the same data directory: a's persistent cookie is back, the session ones gone.
  5. page health: a's page fetched as a document by b's page and framed by it with no script is
     never judged (a@1.0.0 not failed past a 2 s deadline); a/health.html, watched: a subframe of b
     and a same-origin subframe call ready
     and send error messages (WebKitGTK: the message handler; Chromium: larder.ready() and the
     gateway's report path): a@1.0.0 is neither confirmed nor failed; then, the same subframes
     forging errors, the main frame's ready confirms it.

Prints one line per check and ends with `isolation: N passed, M failed`; exits 1 on any failure.
Environment: LARDER_BIN, LARDER_WEBVIEW_BIN (else built); ISOLATION_KEEP=1 keeps the work directory.

Usage: scripts/integration/isolation.py   (root: ip netns)
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import larder_scripts as ls  # noqa: E402  (found through the line above)
from larder_scripts import say  # noqa: E402

ls.NAME = "isolation"
CHECKOUT = ls.CHECKOUT
WEBVIEW = os.path.join(CHECKOUT, "scripts", "webview")

ORIGIN = r'''
import http.server, json, sys
COOKIES = {
    ("a.test", "/api/login"): ["sid=A1; Path=/; HttpOnly", "theme=dark; Path=/", "keep=1; Path=/; Max-Age=3600",
                               "lax=1; Path=/; SameSite=Lax"],
    ("b.test", "/api/login"): ["bsid=B1; Path=/; HttpOnly", "btheme=light; Path=/; Max-Age=3600"],
    ("a.test", "/api/temp"): ["temp=1; Path=/; Max-Age=3600"],
    ("a.test", "/api/untemp"): ["temp=; Path=/; Max-Age=0"],
}
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def answer(self):
        host = (self.headers.get("Host") or "").split(":")[0]
        cookie = self.headers.get("Cookie", "")
        print(json.dumps({"host": host, "method": self.command, "path": self.path, "cookie": cookie}), flush=True)
        body = json.dumps({"host": host, "path": self.path, "cookie": cookie}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for c in COOKIES.get((host, self.path.split("?")[0]), []):
            self.send_header("Set-Cookie", c)
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = answer
http.server.ThreadingHTTPServer(("127.0.0.1", 80), H).serve_forever()
'''

HEAD = """<!doctype html><html><head><meta charset="utf-8"></head><body><pre id="out">running</pre><script>
var larderScheme = location.protocol === 'larder:';
var engine = larderScheme ? 'wk' : 'cr';
function origin(id) { return larderScheme ? 'larder://' + id : 'http://' + id + '.test'; }
async function get(url, opts) {
  try { var r = await fetch(url, opts); var t = await r.text(); return { status: r.status, body: t.slice(0, 300) }; }
  catch (e) { return { blocked: String(e) }; }
}
function xhr(method, url, body) {
  try { var x = new XMLHttpRequest(); x.open(method, url, false); x.setRequestHeader('X-Larder-Cookies', '1');
        x.send(body); return { status: x.status, body: x.responseText }; }
  catch (e) { return { blocked: String(e) }; }
}
function done(out) { document.getElementById('out').textContent = JSON.stringify(out); }
"""
TAIL = "</script></body></html>\n"

A_LOGIN = HEAD + """(async function () {
  var out = {};
  await fetch('/api/login');
  document.cookie = 'page=script; Path=/';
  ['sid=evil; Path=/', 'sid=evil2; Path=/api', 'sec=1; Path=/; Secure', '__Host-h=1; Path=/', '__Secure-s=1; Path=/',
   'nn=1; Path=/; SameSite=None', 'dom=1; Path=/; Domain=test'].forEach(function (c) { document.cookie = c; });
  out.afterSets = document.cookie;
  await fetch('/api/temp'); out.withTemp = document.cookie;
  await fetch('/api/untemp'); out.afterServerDelete = document.cookie;
  document.cookie = 'page=; Path=/; Max-Age=0'; out.afterScriptDelete = document.cookie;
  out.whoami = JSON.parse((await get('/api/whoami?from=a-' + engine)).body || '{}');
  done(out);
})();
""" + TAIL

B_ATTACK = HEAD + """(async function () {
  var out = {}, a = origin('a');
  await fetch('/api/login');
  out.ownCookie = document.cookie;
  out.crossFile = await get(a + '/login.html');
  out.corsFile = await get(origin('c') + '/data.json');
  out.bridgeParam = xhr('GET', '/.larder/cookies?page=' + encodeURIComponent(a + '/login.html'), null);
  out.bridgeCross = await get(a + '/.larder/cookies', { headers: { 'X-Larder-Cookies': '1' } });
  await get(a + '/.larder/cookies', { method: 'POST', mode: 'no-cors', body: 'keep=planted; Path=/' });
  out.plantParam = xhr('POST', '/.larder/cookies?page=' + encodeURIComponent(a + '/'), 'keep=planted2; Path=/');
  await get(a + '/api/whoami?from=b-' + engine, { mode: 'no-cors', credentials: 'include' });
  done(out);
})();
""" + TAIL

C_NET = HEAD + """(async function () {
  done({ reach: await get(origin('a') + '/api/whoami?from=c-' + engine) });
})();
""" + TAIL

A_PERSIST = HEAD + """(async function () {
  var out = { cookie: document.cookie };
  out.whoami = JSON.parse((await get('/api/whoami?from=restart-' + engine)).body || '{}');
  done(out);
})();
""" + TAIL

A_HEALTH = HEAD + """(function () {
  var f = document.createElement('iframe'); f.src = origin('b') + '/forge.html'; document.body.appendChild(f);
  var g = document.createElement('iframe'); g.src = '/forge.html'; document.body.appendChild(g);
  setTimeout(function () {
    done({ ready: location.search === '?ready' });
    if (location.search === '?ready') window.larder.ready();
  }, 3000);
})();
""" + TAIL

B_SERVED = HEAD + """(async function () {
  // a's page, served to b's fetch as a document, and framed with no script: never judged.
  await get(origin('a') + '/health.html', { mode: 'no-cors', headers: { Accept: 'text/html' } });
  var f = document.createElement('iframe'); f.setAttribute('sandbox', ''); f.src = origin('a') + '/health.html';
  document.body.appendChild(f);
  done({ served: true });
  if (window.larder) window.larder.ready();
})();
""" + TAIL

FORGE = HEAD + """(function () {
  var h = window.webkit && window.webkit.messageHandlers && window.webkit.messageHandlers.larderHealth;
  if (window.larder && window.larder.ready) window.larder.ready();
  if (h) { try { h.postMessage({ event: 'ready' }); } catch (e) {} }
  for (var i = 0; i < 5; i++) {
    var m = { event: 'error', message: 'forged by a subframe', source: location.href, line: 1 };
    if (h) { try { h.postMessage(m); } catch (e) {} }
    fetch('/.larder/health?page=0', { method: 'POST', body: JSON.stringify(m) }).catch(function () {});
    fetch(origin('a') + '/.larder/health?page=0', { method: 'POST', mode: 'no-cors', body: JSON.stringify(m) })
      .catch(function () {});
  }
  done({ forged: true });
})();
""" + TAIL


def result(dom):
    m = re.search(r"<pre id=\"out\">(.*?)</pre>", dom, re.S)
    try:
        return json.loads(m.group(1).replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")) if m else {}
    except ValueError:
        return {}


def cookies(text):
    return set(c.strip() for c in (text or "").split(";") if c.strip())


CASES = [
    ("1. a's own page: script cannot overwrite or shadow the HttpOnly cookie, nor set Secure from http, __Host-/"
     "__Secure- without Secure, SameSite=None without Secure, or a public-suffix Domain",
     lambda r: cookies(r["login"].get("afterSets")) == {"theme=dark", "keep=1", "lax=1", "page=script"}),
    ("1. the origin gets the HttpOnly cookie's own value: script overwrote it nowhere (Chromium: nor at its path; "
     "it lets script shadow it under a longer path, sid=evil2 at /api, which Larder's bridge refuses too)",
     {"webkitgtk": lambda r: "sid=A1" in whoami(r) and "evil" not in whoami(r),
      "chromium": lambda r: "sid=A1" in whoami(r) and "sid=evil;" not in whoami(r) + ";"}),
    ("1. deletion: the origin's Max-Age=0 and script's Max-Age=0 take the cookie away",
     lambda r: "temp=1" in cookies(r["login"].get("withTemp")) and "temp=1" not in cookies(
         r["login"].get("afterServerDelete")) and "page=script" not in cookies(r["login"].get("afterScriptDelete"))),
    ("2. b's document.cookie shows b's script-visible cookie only, none of a's",
     lambda r: cookies(r["attack"].get("ownCookie")) == {"btheme=light"}),
    ("2. a's file cannot be read from b's page (no Access-Control-Allow-Origin)",
     lambda r: "blocked" in r["attack"].get("crossFile", {})),
    ("2. c's file can: c's signed corsOrigins lists b's origin",
     lambda r: r["attack"].get("corsFile", {}).get("status") == 200 and "shared" in r["attack"]["corsFile"]["body"]),
    ("2. b's cookie bridge naming a's page gives none of a's cookies",
     lambda r: not any(c in r["attack"].get("bridgeParam", {}).get("body", "") for c in ("theme", "keep", "lax"))),
    ("2. a's cookie bridge cannot be read from b's page", lambda r: "blocked" in r["attack"].get("bridgeCross", {})),
    ("2. nothing b's page posts plants a cookie for a (a still has keep=1)",
     lambda r: r["attack"].get("plantParam", {}).get("status") != 200 and "keep=1" in r["persist"].get("cookie", "")),
    ("2. a cross-site request from b's page to a's origin carries none of a's Lax or default cookies",
     lambda r: r["fromB"] is not None and not any(c in r["fromB"] for c in ("sid=", "keep=", "lax=", "theme="))),
    ("3. c's page reaching a's origin through a passthrough is refused (networkHosts) and never reaches it",
     lambda r: r["fromC"] is None and r["refusedC"]),
    ("4. after a restart with the same data directory: the persistent cookie is back, the session ones gone",
     lambda r: cookies(r["persist"].get("cookie")) == {"keep=1"}
     and cookies(r["persist"].get("whoami", {}).get("cookie")) == {"keep=1"}),
    ("5. a's page served to b's fetch and framed by b with no script is never judged: a@1.0.0 not failed past the "
     "deadline", lambda r: r["healthServed"] not in ("confirmed", "failed")),
    ("5. subframes (b's, and a's own) calling ready or sending errors neither confirm nor fail a@1.0.0",
     lambda r: r["healthFrames"] not in ("confirmed", "failed")),
    ("5. with the same subframes forging errors, the main frame's ready confirms a@1.0.0",
     lambda r: r["health"] == "confirmed"),
]


def whoami(r):
    return r["login"].get("whoami", {}).get("cookie", "")


def main():
    if os.geteuid() != 0:
        raise ls.SetupError("ip netns needs root")
    larder = ls.larder_binary()
    env = ls.loopback_env()
    env["LARDER_BIN"] = larder
    if not env.get("LARDER_WEBVIEW_BIN"):
        if subprocess.run([WEBVIEW, "--help"], stdout=subprocess.DEVNULL, env=env).returncode != 0:
            raise ls.SetupError("scripts/webview --help failed")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        raise ls.SetupError("chromium is not installed (scripts/bootstrap installs it)")
    work = ls.scratch_dir("larder-isolation-")
    ns = "larder-iso-%d" % os.getpid()
    os.makedirs("/etc/netns/" + ns, exist_ok=True)
    with open("/etc/netns/%s/hosts" % ns, "w") as f:
        f.write("127.0.0.1 localhost a.test b.test c.test api.c.test\n")
    subprocess.run(["ip", "netns", "add", ns], check=True)
    subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"], check=True)
    inside = ["ip", "netns", "exec", ns]
    procs = []
    results = []

    def check(name, ok, detail=""):
        results.append(ok)
        say(("ok   " if ok else "FAIL ") + name + ("" if ok or not detail else "\n     " + detail.replace("\n", "\n     ")))

    def start(args, log):
        p = subprocess.Popen(inside + args, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
        procs.append(p)
        return p

    def stop(p):
        if p.poll() is None:
            os.killpg(p.pid, 15)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, 9)
                p.wait()

    def body():
        os.chdir(work)
        with open("origin.py", "w") as f:
            f.write(ORIGIN)
        start([sys.executable, "origin.py"], "origin.log")
        ls.run([larder, "keygen", "--out", "key"])
        pages = {"a": {"login.html": A_LOGIN, "persist.html": A_PERSIST, "health.html": A_HEALTH,
                       "forge.html": FORGE},
                 "b": {"attack.html": B_ATTACK, "forge.html": FORGE, "served.html": B_SERVED},
                 "c": {"net.html": C_NET, "data.json": '{"shared": true}\n'}}
        extra = {"a": ["--bypass", "/api/"], "b": ["--bypass", "/api/"],
                 "c": ["--cors-origin", "larder://b", "--cors-origin", "http://b.test", "--network-host", "api.c.test"]}
        for pid, files in pages.items():
            os.makedirs(os.path.join("src", pid))
            with open(os.path.join("src", pid, "index.html"), "w") as f:
                f.write("<!doctype html><title>%s</title>\n" % pid)
            for name, text in files.items():
                with open(os.path.join("src", pid, name), "w") as f:
                    f.write(text)
            ls.run([larder, "pack", os.path.join("src", pid), "--repo", "repo", "--id", pid, "--version", "1.0.0",
                    "--key", "key.key", "--route", "http://%s.test/" % pid] + extra[pid])
        for sb in ("sb-webkit", "sb-chromium"):
            ls.run([larder, "init", "--root", sb, "--repo", "file://%s/repo" % work, "--public-key", "key.pub"])
            ls.run([larder, "sync", "--root", sb], env=env)
        time.sleep(0.5)
        webkit = run_webkit(work, start, stop)
        chrome = run_chromium(work, larder, chromium, start, stop)
        for name, test in CASES:
            values = []
            ok = True
            for engine, r in (("webkitgtk", webkit), ("chromium", chrome)):
                try:
                    good = bool((test[engine] if isinstance(test, dict) else test)(r))
                except (KeyError, TypeError, AttributeError) as e:
                    good = False
                    values.append("%s: %r" % (engine, e))
                ok = ok and good
                if not good:
                    values.append("%s failed: %s" % (engine, json.dumps(r)[:1500]))
            check(name + " (WebKitGTK and Chromium)", ok, "\n".join(values))
        return all(results)

    try:
        ok = ls.kept_unless_ok(work, body) if not os.environ.get("ISOLATION_KEEP") else body()
    finally:
        for p in procs:
            stop(p)
        subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
        shutil.rmtree("/etc/netns/" + ns, ignore_errors=True)
    say("isolation: %d passed, %d failed" % (results.count(True), results.count(False)))
    return 0 if ok else 1


def origin_requests(work, marker):
    """The Cookie of the first request the origin got with `marker` in its path, or None."""
    with open(os.path.join(work, "origin.log")) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if marker in r["path"]:
                return r["cookie"]
    return None


def run_webkit(work, start, stop):
    """The five runs in WebKitGTK, one data directory; what each page left and what the logs say."""
    out = {}
    logs = []

    def view(name, url, *extra):
        log = os.path.join(work, "webkit-%s.log" % name)
        p = start([WEBVIEW, "--root", "sb-webkit", "--upstream-scheme", "http", "--data-dir", "wk-data",
                   "--dump-dom", *extra, url], log)
        try:
            p.wait(120)
        except subprocess.TimeoutExpired:
            stop(p)
        with open(log) as f:
            text = f.read()
        logs.append(text)
        doms = re.findall(r"^dom begin .*?\n(.*?)\ndom end$", text, re.M | re.S)
        return result(doms[-1] if doms else "")

    out["login"] = view("login", "larder://a/login.html")
    out["attack"] = view("attack", "larder://b/attack.html")
    out["net"] = view("net", "larder://c/net.html")
    out["persist"] = view("persist", "larder://a/persist.html")
    view("healthServed", "larder://b/served.html", "--page-health", "--ready-deadline", "2", "--settle", "1",
         "--stay", "3")
    out["healthServed"] = health(work, "sb-webkit")
    for name, query in (("healthFrames", ""), ("health", "?ready")):
        view(name, "larder://a/health.html" + query, "--page-health", "--ready-deadline", "20",
             "--max-script-errors", "1", "--settle", "4")
        out[name] = health(work, "sb-webkit")
    out["fromB"] = origin_requests(work, "from=b-wk")
    out["fromC"] = origin_requests(work, "from=c-wk")
    out["refusedC"] = any("networkHosts does not list a.test" in t for t in logs)
    return out


def run_chromium(work, larder, chromium, start, stop):
    """The same pages in headless Chromium through larder serve, one profile."""
    out = {}
    port = ls.free_port()
    tmp = os.path.join(work, "chromium-tmp")
    os.makedirs(tmp, exist_ok=True)

    runs = []

    def gateway(*extra):
        runs.append(1)
        log = os.path.join(work, "gateway-%d.log" % len(runs))
        g = start([larder, "serve", "--root", "sb-chromium", "--listen", "127.0.0.1:%d" % port, "--upstream-scheme",
                   "http", *extra], log)
        for _ in range(100):
            if "listening on" in open(log).read():
                break
            time.sleep(0.1)
        return g, log

    def visit(url, budget=8000):
        rules = ", ".join("MAP %s.test 127.0.0.1:%d" % (h, port) for h in "abc") + ", MAP * ~NOTFOUND"
        p = subprocess.run(
            ["ip", "netns", "exec", ns_of(), "env", "TMPDIR=" + tmp, chromium, "--headless", "--no-sandbox",
             "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             "--disable-features=HttpsUpgrades,HttpsFirstBalancedModeAutoEnable",
             "--user-data-dir=" + os.path.join(work, "profile"), "--host-resolver-rules=" + rules,
             "--virtual-time-budget=%d" % budget, "--dump-dom", url],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=120)
        return result(p.stdout)

    g, log = gateway()
    out["login"] = visit("http://a.test/login.html")
    out["attack"] = visit("http://b.test/attack.html")
    out["net"] = visit("http://c.test/net.html")
    out["persist"] = visit("http://a.test/persist.html")
    stop(g)
    out["refusedC"] = "networkHosts does not list a.test" in open(log).read()
    g, _ = gateway("--page-health", "--ready-deadline", "2", "--max-script-errors", "1")
    visit("http://b.test/served.html", budget=3000)
    time.sleep(3.5)
    stop(g)
    out["healthServed"] = health(work, "sb-chromium")
    for name, query in (("healthFrames", ""), ("health", "?ready")):
        g, _ = gateway("--page-health", "--ready-deadline", "20", "--max-script-errors", "1")
        visit("http://a.test/health.html" + query, budget=6000)
        time.sleep(1)
        stop(g)
        out[name] = health(work, "sb-chromium")
    out["fromB"] = origin_requests(work, "from=b-cr")
    out["fromC"] = origin_requests(work, "from=c-cr")
    return out


def ns_of():
    return "larder-iso-%d" % os.getpid()


def health(work, sb):
    """a's health as status gives it, or "failed" when its history has a page-health failure (a
    first version, with nothing to roll back to, records the failure and stays pending)."""
    doc = ls.parse_json(ls.run([ls.larder_binary(), "status", "--root", os.path.join(work, sb), "--json"]))
    a = ls.find_package(doc or {}, "a") or {}
    if any(e.get("event") == "failure" and "page health" in e.get("reason", "") for e in a.get("history", [])):
        return "failed"
    return a.get("health")


if __name__ == "__main__":
    ls.main(main)
