#!/usr/bin/env python3
"""Release telemetry end to end (manifests §19, docs/privacy.md), with real servers on 127.0.0.1:
nginx serves the repository and fronts the collector, mirroring every batch (nginx's `mirror`) to
a second collector, so one fleet's batches reach `larder collect` over SQLite and over a
PostgreSQL cluster from Debian, started here.

  1. a fleet of device sandboxes with telemetry on syncs 1.0.0 from nginx;
  2. 1.1.0 is broken on purpose (its script throws) and rolled out to half the fleet: each
     device that takes it opens it in headless Chromium through `larder serve --page-health`, the
     page fails its health check and the device rolls back on its own;
  3. each store's report matches what the sandboxes did (devices, attempts, failures and
     rollbacks by reason, page errors, adoption), and the two stores agree;
  4. `report --fail-if` exits 3 on the broken release, 0 on a threshold it does not cross; the
     HTML report opens in Chromium (screenshot) with a curve per version;
  5. hostile batches (unknown kind, a URL member, a user id, bad gzip, too large, a replay) are
     refused or ignored, and nothing else is stored; no table has a column for an address;
  6. a device that is off (never turned on, or turned off) sends nothing; an index without a
     collector records nothing.

Prints one line per check and ends with `telemetry: N passed, M failed`; exit 1 when any check
failed. Environment: LARDER_BIN (a built larder; else `swift build` here), TELEMETRY_DEVICES
(default 16), TELEMETRY_KEEP=1 (keep the work directory), TELEMETRY_SCREENSHOT=FILE (also copy
the report's screenshot there).
"""
import concurrent.futures
import gzip
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import larder_scripts as ls  # noqa: E402  (found through the line above)
from larder_scripts.nginx_server import Nginx, NO_PROXY_OPENER  # noqa: E402
from larder_scripts.postgres_server import Postgres  # noqa: E402
from larder_scripts import SetupError, say  # noqa: E402

ls.NAME = "telemetry"
CHECKS = ls.Checks()
check = CHECKS.check
HOST = "app.larder.invalid"
PID = "sample-app"
DEVICES = int(os.environ.get("TELEMETRY_DEVICES", "16"))


def chromium():
    c = shutil.which("chromium") or shutil.which("chromium-browser")
    if not c:
        raise SetupError("chromium is not installed (scripts/bootstrap installs it)")
    return c


def chromium_args(work, name, port):
    tmp = os.path.join(work, "chromium-tmp")
    os.makedirs(tmp, exist_ok=True)
    return [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
            "--disable-features=HttpsUpgrades,HttpsFirstBalancedModeAutoEnable",
            "--user-data-dir=" + os.path.join(work, "profile-" + name),
            "--host-resolver-rules=MAP %s 127.0.0.1:%d, MAP * ~NOTFOUND" % (HOST, port)], dict(os.environ, TMPDIR=tmp)


class Fleet:
    def __init__(self, work, larder):
        self.work, self.larder = work, larder
        self.repo = os.path.join(work, "repo")
        os.makedirs(self.repo)
        larder.must("keygen", "--out", os.path.join(work, "publisher"))
        self.key = os.path.join(work, "publisher.key")
        self.pub = os.path.join(work, "publisher.pub")
        self.sqlite = os.path.join(work, "events.db")
        self.postgres = Postgres(work)
        self.collectors = []
        self.nginx = None

    def start(self):
        self.postgres.start()
        ports = []
        for db in ("sqlite:" + self.sqlite, self.postgres.url):
            log = open(os.path.join(self.work, "collect-%d.log" % len(ports)), "w")
            p = subprocess.Popen([self.larder.binary, "collect", "--listen", "127.0.0.1:0", "--database", db],
                                 stdout=subprocess.PIPE, stderr=log, text=True, env=ls.loopback_env())
            line = p.stdout.readline()
            m = re.search(r"collecting on http://127\.0\.0\.1:(\d+)", line)
            if not m:
                raise SetupError("larder collect did not start: %r (see %s)" % (line, log.name))
            self.collectors.append(p)
            ports.append(int(m.group(1)))
        self.direct = "http://127.0.0.1:%d/v1/events" % ports[0]
        include = os.path.join(self.work, "collector.conf")
        with open(include, "w") as f:
            f.write("location = /v1/events { mirror /mirror; proxy_pass http://127.0.0.1:%d; }\n" % ports[0])
            f.write("location = /mirror { internal; proxy_pass http://127.0.0.1:%d/v1/events; }\n" % ports[1])
        self.nginx = Nginx(ls.ensure_tool("nginx", "nginx-light"), self.work, self.repo, include=include)
        self.nginx.start()
        self.endpoint = self.nginx.base + "v1/events"

    def stop(self):
        for p in self.collectors:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        if self.nginx:
            self.nginx.stop()
        self.postgres.stop()

    def publish(self, version, broken=False, *extra):
        src = os.path.join(self.work, "src", version)
        shutil.copytree(os.path.join(ls.CHECKOUT, "Examples", "sample-app"), src)
        catalog = os.path.join(src, "data", "catalog.json")
        with open(catalog) as f:
            text = f.read().replace('"version": "1.0.0"', '"version": "%s"' % version)
        with open(catalog, "w") as f:
            f.write(text)
        if broken:
            app = os.path.join(src, "js", "app.js")
            with open(app) as f:
                text = f.read()
            with open(app, "w") as f:
                f.write("throw new Error('boom in %s');\n" % version + text)
        self.larder.must("pack", src, "--repo", self.repo, "--id", PID, "--version", version, "--key", self.key,
                         "--route", "https://%s/" % HOST, *extra)

    def device(self, i):
        return os.path.join(self.work, "devices", "d%02d" % i)

    def sync(self, i):
        return self.larder.json("sync", "--root", self.device(i), "--progress", "none")

    def status(self, i):
        return ls.find_package(self.larder.json("status", "--root", self.device(i))[1], PID) or {}

    def open_page(self, i):
        """Opens the device's package in headless Chromium through its own gateway with page
        health; returns the verdict line the gateway printed."""
        log_path = os.path.join(self.work, "gateway-%02d.log" % i)
        log = open(log_path, "w")
        gw = subprocess.Popen([self.larder.binary, "serve", "--root", self.device(i), "--listen", "127.0.0.1:0",
                               "--offline", "--page-health", "--max-script-errors", "1", "--ready-deadline", "20"],
                              stdout=log, stderr=subprocess.STDOUT, env=ls.loopback_env())
        verdict = ""
        browser = None
        try:
            port = None
            for _ in range(100):
                with open(log_path) as f:
                    m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", f.read())
                if m:
                    port = int(m.group(1))
                    break
                time.sleep(0.05)
            if port is None:
                return "the gateway did not start"
            args, env = chromium_args(self.work, "d%02d" % i, port)
            browser = subprocess.Popen(args + ["--remote-debugging-port=0", "http://%s/" % HOST],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            deadline = time.time() + 40
            while time.time() < deadline and not verdict:
                with open(log_path) as f:
                    verdict = next((line.strip() for line in f if line.startswith("health %s@" % PID)), "")
                time.sleep(0.1)
        finally:
            if browser:
                browser.kill()
                browser.wait()
            gw.terminate()
            gw.wait(timeout=10)
            log.close()
        return verdict

    def report(self, db, *extra):
        return self.larder.run("report", "--database", db, "--since", "24h", "--json", *extra)


def post(url, body, headers):
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with NO_PROXY_OPENER.open(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def counts(f):
    with sqlite3.connect(f.sqlite) as db:
        b = db.execute("SELECT COUNT(*) FROM larder_batches").fetchone()[0]
        e = db.execute("SELECT COUNT(*) FROM larder_events").fetchone()[0]
    pg = f.postgres.query("SELECT (SELECT COUNT(*) FROM larder_batches), (SELECT COUNT(*) FROM larder_events)")[0]
    return (b, e), (int(pg[0]), int(pg[1]))


def hostile(f):
    base = json.loads(json.dumps({
        "schemaVersion": 1, "batch": "0" * 31 + "1", "install": "a" * 32, "app": "2.0.0", "platform": "linux",
        "larder": "0.1.0", "dropped": 0,
        "events": [{"kind": "checked", "package": PID, "version": "1.0.0", "channel": "stable", "reason": "current",
                    "count": 1, "hour": time.strftime("%Y-%m-%dT%H:00:00Z", time.gmtime())}]}))

    def variant(change):
        doc = json.loads(json.dumps(base))
        change(doc)
        return gzip.compress(json.dumps(doc).encode())
    gz = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    before = counts(f)
    cases = [
        ("an unknown kind", variant(lambda d: d["events"][0].update(kind="uninstalled")), gz, 400, "bad-kind"),
        ("a URL member", variant(lambda d: d["events"][0].update(url="https://%s/cart?user=42" % HOST)), gz, 400,
         "bad-json"),
        ("a user id", variant(lambda d: d.update(userId="alice@example.com")), gz, 400, "bad-json"),
        ("a minute in the time", variant(lambda d: d["events"][0].update(hour="2026-12-04T15:17:00Z")), gz, 400,
         "bad-hour"),
        ("a negative count", variant(lambda d: d["events"][0].update(count=-3)), gz, 400, "bad-count"),
        ("bad gzip", b"\x1f\x8bnot gzip at all", gz, 400, "bad-gzip"),
        ("a gzip bomb", gzip.compress(b" " * (8 << 20)), gz, 413, "too-large"),
        ("1,001 events", variant(lambda d: d.update(events=d["events"] * 1001)), gz, 400, "too-many-events"),
    ]
    for name, body, headers, want, code in cases:
        status, text = post(f.endpoint, body, headers)
        check("hostile batch (%s): refused with %d %s" % (name, want, code),
              status == want and ('"%s"' % code) in text, "%d %s" % (status, text[:200]))
    check("hostile batches: nothing stored in either store", counts(f) == before, "%s -> %s" % (before, counts(f)))
    good = variant(lambda d: None)
    first = post(f.endpoint, good, gz)
    again = post(f.endpoint, good, gz)
    time.sleep(0.5)  # the mirror's request runs after the main one
    after = counts(f)
    check("a batch posted twice is stored once (202, then 200 as a replay), in both stores",
          first[0] == 202 and again[0] == 200 and after == ((before[0][0] + 1, before[0][1] + 1),
                                                           (before[1][0] + 1, before[1][1] + 1)),
          "%s %s %s -> %s" % (first, again, before, after))
    with sqlite3.connect(f.sqlite) as db:
        cols = [r[1] for t in ("larder_batches", "larder_events") for r in db.execute("PRAGMA table_info(%s)" % t)]
    check("no column of the store can hold an address, a URL or a user id",
          not [c for c in cols if re.search(r"ip|addr|url|user|agent|host", c)], str(cols))


def body(f):
    f.start()
    say("nginx on %s, collectors over SQLite and PostgreSQL (%s), %d devices" % (f.nginx.base, f.postgres.url,
                                                                                   DEVICES))
    # 1. The healthy release, with the collector signed into the index.
    f.publish("1.0.0", False, "--telemetry-endpoint", f.endpoint)
    for i in range(DEVICES):
        args = ["init", "--root", f.device(i), "--repo", f.nginx.base, "--public-key", f.pub, "--app-version", "2.0.0"]
        f.larder.must(*(args + (["--telemetry", "on"] if i < DEVICES - 1 else [])))
    quiet = DEVICES - 1  # never turned on
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        first = list(pool.map(f.sync, range(DEVICES)))
    check("every device synced 1.0.0 from nginx", all(rc == 0 for rc, _, _ in first),
          str([r.stderr[-200:] for rc, _, r in first if rc != 0]))
    # 2. The broken release, to half the fleet.
    f.publish("1.1.0", True, "--rollout", "50")
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(f.sync, range(DEVICES)))
    took = [i for i in range(DEVICES) if f.status(i).get("active") == "1.1.0"]
    check("part of the fleet took the broken 1.1.0 (rollout 50 %%): %d of %d" % (len(took), DEVICES),
          0 < len(took) < DEVICES)
    verdicts = {i: f.open_page(i) for i in took}
    rolled = [i for i in took if f.status(i).get("active") == "1.0.0"]
    check("each device that took 1.1.0 failed page health in Chromium and rolled back on its own (%d)" % len(rolled),
          rolled == took and all("rolled back to 1.0.0" in v for v in verdicts.values()),
          "; ".join("d%02d: %s" % (i, verdicts[i][:160]) for i in took if i not in rolled))
    # Devices send after their next sync; a flush sends whatever is left.
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(f.sync, range(DEVICES)))
        flushed = list(pool.map(lambda i: f.larder.run("telemetry", "flush", "--root", f.device(i)), range(DEVICES)))
    check("every device's spool is empty after a flush",
          all(json.loads(f.larder.must("telemetry", "status", "--root", f.device(i), "--json"))["pendingEvents"] == 0
              for i in range(DEVICES)), str([r.stdout for r in flushed]))
    check("the device that never turned telemetry on has no telemetry directory and sent nothing",
          not os.path.exists(os.path.join(f.device(quiet), "telemetry")) and
          "telemetry is off" in flushed[quiet].stdout, flushed[quiet].stdout)
    time.sleep(1)  # the mirror's last requests
    # 3. The reports against the sandboxes.
    reporting = DEVICES - 1
    sq = f.report("sqlite:" + f.sqlite)
    pg = f.report(f.postgres.url)
    reports = [json.loads(sq.stdout), json.loads(pg.stdout)] if sq.returncode == 0 and pg.returncode == 0 else []
    if not check("larder report reads both stores", len(reports) == 2, sq.stderr + pg.stderr):
        return
    for name, rep in zip(("SQLite", "PostgreSQL"), reports):
        v = {x["version"]: x for x in rep["versions"] if x["package"] == PID}
        v10, v11 = v.get("1.0.0", {}), v.get("1.1.0", {})
        check("%s: 1.0.0 was reported by every device with telemetry on (%d)" % (name, reporting),
              v10.get("devices") == reporting and v10.get("attempts") == reporting, json.dumps(v10)[:300])
        want_took = len([i for i in took if i != quiet])
        check("%s: 1.1.0's attempts are the devices that took it (%d)" % (name, want_took),
              v11.get("attempts") == want_took, json.dumps(v11)[:300])
        reasons = {(r["kind"], r["reason"]): r["devices"] for r in v11.get("byReason", [])}
        check("%s: 1.1.0's failures and rollbacks are the devices that rolled back, by reason (%d health-failed "
              "script-error, %d rolled-back health)" % (name, want_took, want_took),
              v11.get("failureRate", {}).get("count") == want_took and
              v11.get("rollbackRate", {}).get("count") == want_took and
              reasons == {("health-failed", "script-error"): want_took, ("rolled-back", "health"): want_took},
              json.dumps(v11)[:400])
        check("%s: page errors counted (%d, one per page at least)" % (name, v11.get("pageErrors", 0)),
              v11.get("pageErrors", 0) >= want_took)
        lo, hi = v11["failureRate"].get("lower"), v11["failureRate"].get("upper")
        check("%s: the failure rate's 95 %% Wilson interval is given and holds the rate" % name,
              lo is not None and lo <= v11["failureRate"]["rate"] <= hi)
        check("%s: adoption hour by hour, 1.0.0 the whole fleet in its hour" % name,
              any(p["devices"] == reporting and p["share"] == 1 for p in v10.get("adoption", [])))
    strip = [{k: x[k] for k in ("package", "version", "devices", "attempts", "failureRate", "rollbackRate",
                                  "byReason", "pageErrors", "adoption")} for x in reports[0]["versions"]]
    strip_pg = [{k: x[k] for k in ("package", "version", "devices", "attempts", "failureRate", "rollbackRate",
                                     "byReason", "pageErrors", "adoption")} for x in reports[1]["versions"]]
    check("the SQLite and PostgreSQL reports agree figure for figure", strip == strip_pg)
    # 4. The gate, and the HTML page in a browser.
    gate = f.report("sqlite:" + f.sqlite, "--fail-if", "rollback-rate>10%")
    check("report --fail-if 'rollback-rate>10%' exits 3 and names sample-app 1.1.0",
          gate.returncode == 3 and "sample-app 1.1.0: rollback-rate>10%" in gate.stderr, gate.stderr[-300:])
    passing = f.report(f.postgres.url, "--fail-if", "devices>1000,page-errors>100000")
    check("report --fail-if with thresholds nothing crosses exits 0", passing.returncode == 0, passing.stderr[-300:])
    html = os.path.join(f.work, "report.html")
    f.larder.must("report", "--database", "sqlite:" + f.sqlite, "--html", html)
    args, env = chromium_args(f.work, "report", 9)
    shot = os.path.join(f.work, "report.png")
    subprocess.run(args + ["--window-size=900,1100", "--screenshot=" + shot, "file://" + html],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, timeout=120)
    dom = subprocess.run(args + ["--dump-dom", "file://" + html], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         env=env, timeout=120, text=True).stdout
    check("the HTML report renders in Chromium: a curve per version and bars by reason",
          'data-version="1.0.0"' in dom and 'data-version="1.1.0"' in dom and 'class="bar"' in dom
          and os.path.getsize(shot) > 10000 if os.path.exists(shot) else False)
    if os.environ.get("TELEMETRY_SCREENSHOT") and os.path.exists(shot):
        shutil.copy(shot, os.environ["TELEMETRY_SCREENSHOT"])
    # 5. Hostile batches, straight at the collector behind nginx.
    hostile(f)
    # 6. Off, and an index without a collector.
    before = counts(f)
    f.larder.must("telemetry", "off", "--root", f.device(0))
    f.publish("1.2.0", False, "--telemetry-endpoint", "none")
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(f.sync, range(DEVICES)))
    time.sleep(0.5)
    check("after `telemetry off` and an index naming no collector, nothing more is stored",
          counts(f) == before and not os.path.exists(os.path.join(f.device(0), "telemetry")),
          "%s -> %s" % (before, counts(f)))
    s1 = json.loads(f.larder.must("telemetry", "status", "--root", f.device(1), "--json"))
    check("a device whose index names no collector records nothing", s1.get("endpoint") is None and
          s1.get("pendingEvents") == 0, json.dumps(s1))


def main():
    started = time.time()
    work = ls.scratch_dir("larder-telemetry-", "TELEMETRY_WORK")
    larder = ls.Larder(ls.larder_binary())
    f = Fleet(work, larder)

    def run():
        try:
            body(f)
        except SetupError as e:
            CHECKS.setup_failed(e)
        finally:
            f.stop()
        return CHECKS.failed == 0 and not os.environ.get("TELEMETRY_KEEP")
    ls.kept_unless_ok(work, run)
    return CHECKS.finish(started)


if __name__ == "__main__":
    ls.main(main)
