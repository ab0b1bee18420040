"""`scripts/bench --pageload`: how long a real app's page takes to load from an offline package
through `larder serve`, against the same files served by nginx.

For four real web apps (the new release of each: marimo, streamlit and prefect, whose entry
pages load the most of their own files without a back end among the releases of `--deltas`
(61–107 files, Vite builds), and dagster (a Next.js static export, 35)), with the release
build:

  1. `larder pack` publishes the tree with the route `http://bench.invalid/`; a device syncs it
     from file:// (tmpfs).
  2. `larder serve --offline` serves the device; nginx (Debian, loopback, sendfile, ETags, one
     worker per CPU) serves the installed version directory — the very files larder serves —
     with larder serve's caching policy (`Cache-Control: no-cache`: a gateway must show a new or
     rolled-back version at once), so that warm loads revalidate alike on both.
  3. Headless Chromium (Debian), driven over the DevTools protocol on a pipe
     (`--remote-debugging-pipe`), its host resolver mapping bench.invalid to one server or the
     other, opens the app's entry page:
       cold — a new browser with an empty profile (the first load after a sync);
       warm — the same browser opens the page again (its HTTP cache filled, revalidated as the
              server's headers ask).
     From the page's own Navigation Timing and Paint Timing: navigation start to the load event,
     and to first contentful paint. The two servers alternate run by run; medians of RUNS.

  4. WebKitGTK (Debian's libwebkitgtk-6.0, under Xvfb): `larder-webview --timing --loads 2`
     (release build) opens the page through Larder's scheme handler (`larder://web/<entry>`),
     and the same files from file:// (`--allow-file-access`, so that module scripts load as
     they do from a server) — or, for a page that names its files from the origin's root
     (`/assets/x.js`, which file:// resolves from the file system's root), from the same nginx
     over loopback in the same view; each run a new view, cold, then warm (the second load in
     it). Cookie bridging is off in all (it injects a script into file: pages too). The view's
     `--timing` waits for the load event and then the first contentful paint before it reads them.

Two apps' trees hold placeholders their own servers replace at serve time (prefect's
`/PREFECT_UI_SERVE_BASE_REPLACE_PLACEHOLDER`, dagster-webserver's `__PATH_PREFIX__` and
`BUILDTIME_ASSETPREFIX_REPLACE_ME`): the bench replaces them in the tree before packing, as a
publisher of such an app would when building its package for the root of an origin (SERVE_TIME).

The apps run without their back ends: a page's scripts may fail on an API call, which is
counted apart. Each run checks that the document was answered 200; that every resource that is
a file of the package was answered 200 or 304 (Chromium's Resource Timing `responseStatus`; the
scheme handler's log in WebKitGTK), so that what failed is only what the package does not hold
(back-end calls); that at least MIN_FROM_PACKAGE were; and that the files of the package the
page took in every run are the same from both servers. In WebKitGTK over http, Resource Timing
must list at least MIN_FROM_PACKAGE resources.

Target (issue 32): larder serve ≤ 1.1× nginx and the scheme handler ≤ 1.1× its baseline for
each, cold and warm.
"""
import json
import os
import re
import select
import shutil
import statistics
import subprocess
import tempfile
import time
import urllib.parse

import bench_deltas
import bench_serve
import larder_scripts as ls
from larder_scripts import die, say

TITLE = "## Page loads from a package: Chromium against nginx, WebKitGTK against file:// or nginx (`scripts/bench --pageload`)"
BEGIN = "<!-- bench-pageload:begin -->"
END = "<!-- bench-pageload:end -->"
# The releases of `--deltas` whose entry page loads the most of its own files without a back end
# (61–107), and a Next.js export (35).
APPS = ("marimo", "streamlit", "prefect", "dagster")
HOST = bench_serve.HOST
PACKAGE = "web"
TIMING = ("JSON.stringify({nav: performance.getEntriesByType('navigation')[0].toJSON(), "
          "paint: performance.getEntriesByType('paint').map(e => [e.name, e.startTime]), "
          "resources: performance.getEntriesByType('resource').map(e => [e.name, e.responseStatus])})")
# A page that takes fewer of its own files than this is not a page-load measurement.
MIN_FROM_PACKAGE = 5
# Placeholders an app's own server replaces at serve time, replaced in its tree before packing
# (for the root of an origin): prefect's UI (prefect/server/api/server.py, create_ui_app) and
# dagster-webserver's index and scripts (dagster_webserver/webserver.py).
SERVE_TIME = {
    "prefect": ((b"/PREFECT_UI_SERVE_BASE_REPLACE_PLACEHOLDER", b""),),
    "dagster": ((b"BUILDTIME_ASSETPREFIX_REPLACE_ME", b""), (b"__PATH_PREFIX__", b"")),
}


def serve_time(name, tree):
    """Replaces SERVE_TIME's placeholders of app `name` in every file of `tree`: files changed."""
    changed = 0
    for d, _, files in os.walk(tree):
        for f in files:
            path = os.path.join(d, f)
            with open(path, "rb") as fh:
                data = fh.read()
            new = data
            for old, by in SERVE_TIME.get(name, ()):
                new = new.replace(old, by)
            if new != data:
                with open(path, "wb") as fh:
                    fh.write(new)
                changed += 1
    if SERVE_TIME.get(name) and changed == 0:
        die("%s: none of its serve-time placeholders is in the tree any more (SERVE_TIME)" % name)
    return changed


def package_file(installed, path):
    """Whether a URL's path (below the package's root) names a file of the installed version:
    the query and fragment dropped, percent-escapes decoded."""
    path = urllib.parse.unquote(path.split("?")[0].split("#")[0])
    return bool(path) and os.path.isfile(os.path.join(installed, path))


def package_resources(name, server, entries, installed):
    """Checks one Chromium load's resources [(url, status)]: every file of the package answered
    200 or 304. Returns (files of the package, other requests), each a sorted tuple of paths."""
    ours, other = [], []
    prefix = "http://%s/" % HOST
    for url, status in entries:
        path = url[len(prefix):] if url.startswith(prefix) else None
        if path is not None and package_file(installed, path):
            if status not in (200, 304):
                die("%s: %s answered %s, a file of the package, with %s" % (name, server, path, status))
            ours.append(path)
        else:
            other.append(url)
    return tuple(sorted(ours)), tuple(sorted(other))


class Browser:
    """Headless Chromium driven over the DevTools protocol on a pipe: commands are written to the
    browser's fd 3 and answers and events read from its fd 4, each a JSON text ended by NUL."""

    def __init__(self, chromium, port, profile, tmp):
        to_browser_r, to_browser_w = os.pipe()
        from_browser_r, from_browser_w = os.pipe()

        def child():
            # Copies first: either end may itself be fd 3 or 4.
            r, w = os.dup(to_browser_r), os.dup(from_browser_w)
            os.dup2(r, 3)
            os.dup2(w, 4)

        cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
               "--disable-features=HttpsUpgrades,HttpsFirstBalancedModeAutoEnable", "--user-data-dir=" + profile,
               "--host-resolver-rules=MAP %s 127.0.0.1:%d, MAP * ~NOTFOUND" % (HOST, port),
               "--remote-debugging-pipe", "about:blank"]
        self.log = os.path.join(tmp, "chromium.log")
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, preexec_fn=child, close_fds=False, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log, env=dict(ls.loopback_env(), TMPDIR=tmp))
        os.close(to_browser_r)
        os.close(from_browser_w)
        self.out, self.inp = to_browser_w, from_browser_r
        self.buffer = b""
        self.last = 0
        self.pending = []
        targets = self.send("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.send("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True})["sessionId"]
        self.send("Page.enable", session=self.session)

    def send(self, method, params=None, session=None):
        self.last += 1
        message = {"id": self.last, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        try:
            os.write(self.out, json.dumps(message).encode() + b"\0")
        except BrokenPipeError:
            die("chromium is gone (exit %s):\n%s" % (self.proc.wait(), self.tail()))
        answer = self.wait(lambda m: m.get("id") == self.last)
        if "error" in answer:
            die("chromium refused %s: %s" % (method, answer["error"]))
        return answer.get("result", {})

    def wait(self, wanted, timeout=60):
        for i, m in enumerate(self.pending):
            if wanted(m):
                return self.pending.pop(i)
        deadline = time.time() + timeout
        while True:
            while b"\0" not in self.buffer:
                left = deadline - time.time()
                if left <= 0 or not select.select([self.inp], [], [], left)[0]:
                    die("chromium did not answer within %d s" % timeout)
                chunk = os.read(self.inp, 1 << 20)
                if not chunk:
                    die("chromium closed its DevTools pipe (exit %s):\n%s" % (self.proc.poll(), self.tail()))
                self.buffer += chunk
            text, self.buffer = self.buffer.split(b"\0", 1)
            m = json.loads(text)
            if wanted(m):
                return m
            self.pending.append(m)

    def tail(self):
        with open(self.log, errors="replace") as f:
            return f.read()[-2000:]

    def load(self, url):
        """Opens `url` and waits for its load event: (ms to the load event, ms to first
        contentful paint or None, [(resource URL, status)], the document's status)."""
        self.pending = [m for m in self.pending if m.get("method") != "Page.loadEventFired"]
        self.send("Page.navigate", {"url": url}, session=self.session)
        self.wait(lambda m: m.get("method") == "Page.loadEventFired" and m.get("sessionId") == self.session)
        # Paint timing is recorded after the frame that paints; give it the next frames.
        for _ in range(20):
            value = self.send("Runtime.evaluate", {"expression": TIMING, "returnByValue": True},
                              session=self.session)["result"]["value"]
            t = json.loads(value)
            paint = dict(t["paint"]).get("first-contentful-paint")
            if paint is not None:
                break
            time.sleep(0.05)
        nav = t["nav"]
        return nav["loadEventStart"], paint, t["resources"], nav.get("responseStatus")

    def close(self):
        try:
            os.write(self.out, json.dumps({"id": self.last + 1, "method": "Browser.close"}).encode() + b"\0")
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        os.close(self.out)
        os.close(self.inp)


def root_absolute(page):
    """The first URL in `page`'s src and href attributes that starts at the origin's root
    ("/assets/x.js", not "//host/x" nor "./x"), or None."""
    with open(page, errors="replace") as f:
        for m in re.finditer(r"""\b(?:src|href)\s*=\s*["']?(/[^/"'\s>][^"'\s>]*)""", f.read()):
            return m.group(1)
    return None


def publish(larder, work, tree, entry):
    """Packs `tree` with the bench's route and syncs it into a device: (sandbox, installed dir)."""
    key, repo, sandbox = (os.path.join(work, n) for n in ("k", "repo", "sandbox"))
    env = ls.loopback_env()
    bench_serve.run([larder, "keygen", "--out", key], env)
    bench_serve.run([larder, "pack", tree, "--repo", repo, "--id", PACKAGE, "--version", "1.0.0", "--key",
                     key + ".key", "--entry", entry, "--route", "http://%s/" % HOST], env)
    bench_serve.run([larder, "init", "--root", sandbox, "--repo", "file://%s/" % repo, "--public-key",
                     key + ".pub"], env)
    bench_serve.run([larder, "sync", "--root", sandbox], env)
    return sandbox, os.path.join(sandbox, "packages", PACKAGE, "1.0.0")


def webview_binary():
    """larder-webview, release build (LARDER_WEBKITGTK=1), unless LARDER_WEBVIEW_BIN names one;
    WebKitGTK and Xvfb installed from Debian when missing."""
    ls._common("ensure_packages", "pkg-config", "libwebkitgtk-6.0-dev", "xvfb", "xauth")
    if os.environ.get("LARDER_WEBVIEW_BIN"):
        return os.environ["LARDER_WEBVIEW_BIN"]
    os.environ["LARDER_WEBKITGTK"] = "1"
    try:
        return ls._common("swift_product_bin", "larder-webview", "release")
    finally:
        del os.environ["LARDER_WEBKITGTK"]


def webkit_loads(webview, sandbox, installed, url, extra):
    """One new WebKitGTK view (under Xvfb) that opens `url` twice: [(load ms, paint ms or None,
    resources)] for the cold and the warm load."""
    cmd = ["xvfb-run", "-a", "-s", "-screen 0 1280x1024x24", webview, "--root", sandbox, "--offline",
           "--no-cookie-bridge", "--timing", "--loads", "2", "--settle", "0.3", "--timeout", "60"] + extra + [url]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ls.loopback_env(),
                       timeout=300)
    timings = [json.loads(line[len("timing "):]) for line in p.stdout.splitlines() if line.startswith("timing ")]
    if p.returncode != 0 or len(timings) != 2 or any(t.get("load") in (None, 0) for t in timings):
        die("larder-webview did not time two loads of %s (exit %d):\n%s" % (url, p.returncode, p.stdout[-3000:]))
    # WebKit's Resource Timing lists no custom-scheme or file: resource: the view's own log counts
    # what the scheme handler answered, and names any file of the package it answered but 200 or 304.
    served = 0
    for line in p.stdout.splitlines():
        m = re.match(r"GET larder://%s/(\S+) (\S+) " % PACKAGE, line)
        if not m:
            continue
        path = m.group(1)
        if m.group(2) in ("200", "304"):
            served += 1
        elif package_file(installed, path):
            die("the scheme handler answered %s, a file of the package, with %s:\n%s" % (path, m.group(2), line))
    if url.startswith("larder:") and served < MIN_FROM_PACKAGE:
        die("the scheme handler answered %d requests for %s:\n%s" % (served, url, p.stdout[-3000:]))
    # Over http, Resource Timing lists what the page took (nginx answers the package's files only).
    if url.startswith("http:") and any(t.get("resources", 0) < MIN_FROM_PACKAGE for t in timings):
        die("the page took fewer than %d resources from %s: %s" % (MIN_FROM_PACKAGE, url, timings))
    return [(t["load"], t.get("paint"), served if url.startswith("larder:") else t.get("resources", 0))
            for t in timings]


def measure(pair, wheel, larder, chromium, nginx_bin, work, runs, webview):
    name = pair["name"]
    base = os.path.join(work, name)
    tree = os.path.join(base, "tree")
    nfiles = bench_deltas.unpack_tree(wheel, tree, pair["tree"])
    entry = bench_deltas.entry_file(tree)
    replaced = serve_time(name, tree)
    say("bench --pageload [%s]: %s %s, %d files (%d with serve-time placeholders replaced), /%s" % (
        name, pair["dist"], pair["new"], nfiles, replaced, entry))
    sandbox, installed = publish(larder, base, tree, entry)
    template = os.path.join(base, "nginx.conf.template")
    # The same caching policy as larder serve (a new or rolled-back version shows at once): warm
    # loads revalidate every resource from both servers alike.
    conf = bench_serve.NGINX_CONF.replace("WORKERS", str(os.cpu_count() or 1)).replace(
        "        location / {\n", "        location / {\n            add_header Cache-Control \"no-cache\" always;\n")
    if "no-cache" not in conf:
        die("the nginx template changed: the Cache-Control line was not added")
    with open(template, "w") as f:
        f.write(conf)
    servers = {"larder": bench_serve.Serve(larder, sandbox, entry, base),
               "nginx": bench_serve.BenchNginx(nginx_bin, base, installed, template)}
    times = {(s, k): [] for s in servers for k in ("cold_load", "cold_paint", "warm_load", "warm_paint")}
    resources = {s: set() for s in servers}
    others = set()
    try:
        for server in servers.values():
            server.start()
        for r in range(runs):
            for s, server in servers.items():
                profile = os.path.join(base, "profile-%s-%d" % (s, r))
                # A short TMPDIR: Chromium's singleton socket path must fit in a sockaddr_un.
                tmp = tempfile.mkdtemp(prefix="lpl.", dir="/tmp")
                browser = Browser(chromium, server.port, profile, tmp)
                try:
                    for kind in ("cold", "warm"):
                        load, paint, entries, status = browser.load("http://%s/%s" % (HOST, entry))
                        if status not in (None, 200, 304):
                            die("%s: %s answered the page %s" % (name, s, status))
                        ours, other = package_resources(name, s, entries, installed)
                        if len(ours) < MIN_FROM_PACKAGE:
                            die("%s: the page took %d files of the package from %s (fewer than %d): %s" % (
                                name, len(ours), s, MIN_FROM_PACKAGE, other[:10]))
                        if load <= 0:
                            die("%s (%s, %s): no load event time" % (name, s, kind))
                        times[s, kind + "_load"].append(load)
                        if paint is not None:
                            times[s, kind + "_paint"].append(paint)
                        if kind == "cold":
                            resources[s].add(ours)
                            others.add(len(other))
                finally:
                    browser.close()
                    shutil.rmtree(profile, ignore_errors=True)
                    shutil.rmtree(tmp, ignore_errors=True)
        # The files every run took (a page may take more after a back-end call failed, as its
        # timing falls: dagster's error page) are the same from both servers.
        took = {s: set.intersection(*(set(r) for r in resources[s])) for s in servers}
        if took["larder"] != took["nginx"]:
            die("%s: the page loaded other files of the package in every run from larder serve than from nginx: %s"
                % (name, sorted(took["larder"] ^ took["nginx"])[:10]))
        # WebKitGTK: the scheme handler (larder://) against the same files from file://; a page that
        # names its files from the origin's root, which file:// cannot serve, against nginx over
        # loopback in the same view.
        rooted = root_absolute(os.path.join(installed, entry))
        baseline = (("web", "http://127.0.0.1:%d/%s" % (servers["nginx"].port, entry), []) if rooted
                    else ("file", "file://" + os.path.join(installed, entry), ["--allow-file-access"]))
        views = (("scheme", "larder://%s/%s" % (PACKAGE, entry), []), baseline)
        for s, _, _ in views:
            times.update({(s, k): [] for k in ("cold_load", "cold_paint", "warm_load", "warm_paint")})
            resources[s] = set()
        for r in range(runs):
            for s, url, extra in views:
                for kind, (load, paint, count) in zip(("cold", "warm"),
                                                      webkit_loads(webview, sandbox, installed, url, extra)):
                    times[s, kind + "_load"].append(load)
                    if paint is not None:
                        times[s, kind + "_paint"].append(paint)
                    if kind == "cold":
                        resources[s].add(count)
    finally:
        for server in servers.values():
            server.stop()
    out = {"name": name, "tool": pair["tool"], "version": pair["new"], "files": nfiles, "entry": entry,
           "resources": max(len(r) for r in resources["nginx"]), "others": max(others), "rooted": rooted,
           "webkit_requests": max(resources["scheme"]), "webkit_baseline": baseline[0]}
    for (s, k), v in times.items():
        out["%s_%s" % (s, k)] = statistics.median(v) if v else None
    shutil.rmtree(base, ignore_errors=True)
    return out


def main(larder, wheel_of, runs, write):
    nginx_bin = ls.ensure_tool("nginx", "nginx-light")
    chromium = ls.ensure_tool("chromium", "chromium")
    ls.ensure_tool("curl", "curl")
    webview = webview_binary()
    work = tempfile.mkdtemp(prefix="larder-bench-pageload.", dir=os.environ.get("BENCH_DIR") or "/dev/shm")
    results = []
    try:
        apps = os.environ.get("BENCH_PAGELOAD_APPS", ",".join(APPS)).split(",")
        for pair in (p for p in bench_deltas.PAIRS if p["name"] in apps):
            results.append(measure(pair, wheel_of(pair["dist"], pair["new"]), os.path.abspath(larder), chromium,
                                   nginx_bin, work, runs, webview))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    machine = "%d CPUs, %s" % (os.cpu_count() or 0, " ".join(os.uname()[0:3:2]))
    version = subprocess.run([chromium, "--version"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True).stdout.strip()
    lines = ["", "Run on %s, %s, %s. Command: `scripts/bench --pageload`, medians of %d, release build; both "
             "servers on loopback; headless Chromium driven over the DevTools protocol." % (
                 machine, time.strftime("%Y-%m-%d"), version, runs), "",
             "| app (build tool, files; page, resources) | row | baseline | Larder | ratio | target |",
             "|---|---|---|---|---|---|"]
    worst = 0.0
    for r in results:
        webkit = ", %d answered by the scheme handler in two WebKitGTK loads" % r["webkit_requests"]
        app = "%s %s (%s, %d files; /%s; %d files of the package and %d back-end calls in Chromium%s)" % (
            r["name"], r["version"], r["tool"], r["files"], r["entry"], r["resources"], r["others"], webkit)
        webkit_against = ("WebKitGTK, scheme handler against nginx (http, loopback; the page names its files "
                          "from the origin's root: %s)" % r["rooted"] if r["rooted"]
                          else "WebKitGTK, scheme handler against file://")
        for where, base_key, ours in (("Chromium, larder serve against nginx", "nginx", "larder"),
                                      (webkit_against, r["webkit_baseline"], "scheme")):
            for label, key in (("cold: load event", "cold_load"), ("cold: first contentful paint", "cold_paint"),
                               ("warm: load event", "warm_load"), ("warm: first contentful paint", "warm_paint")):
                a, b = r["%s_%s" % (base_key, key)], r["%s_%s" % (ours, key)]
                row = "%s, %s" % (where, label)
                if a is None or b is None:
                    lines.append("| %s | %s | no first contentful paint recorded | | | ≤ 1.1× |" % (app, row))
                else:
                    ratio = b / a if a else float("inf")
                    worst = max(worst, ratio)
                    lines.append("| %s | %s | %.0f ms | %.0f ms | **%.2f×** | ≤ 1.1× |" % (app, row, a, b, ratio))
                app = ""
    lines += ["", "Times are the page's own (Navigation Timing `loadEventStart`, Paint Timing "
              "`first-contentful-paint`), from navigation start. Worst ratio: **%.2f×**." % worst, ""]
    ls.show_section(TITLE, BEGIN, END, lines, write, "--pageload")
    return 0
