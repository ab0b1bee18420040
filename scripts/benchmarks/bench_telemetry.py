"""`scripts/bench --telemetry`: the collector under a fleet's events (manifests §19).

100,000 simulated devices (`--devices N`), each posting one gzip batch of its day: 1.0.0 checked,
2.0.0 activated by delta hours after its release (an adoption curve over 24 hours), 3 % failing
page health and rolling back, 1 % failing the download; about 3.3 events a device. The same
batches go to `larder collect` (release build) over SQLite (a file on tmpfs) and over PostgreSQL
(a cluster from Debian on 127.0.0.1, data on tmpfs), side by side in one run, from 8 client
threads over keep-alive connections on the same machine (the client's cost is in both figures):
  events per second   events stored ÷ wall time of posting every batch
  peak RSS            the collector's VmHWM after the run
  report              `larder report --json` over the whole day (wall clock, process start included)
The ratio is PostgreSQL ÷ SQLite. The table is printed and written into BENCHMARKS.md between the
telemetry markers; with --screenshot FILE the HTML report of the SQLite store is also rendered in
headless Chromium (the README shows it: docs/telemetry-report.png).
"""
import gzip
import http.client
import json
import os
import platform
import random
import re
import shutil
import subprocess
import tempfile
import threading
import time

import bench_install
import larder_scripts as ls
from larder_scripts import say
from larder_scripts.postgres_server import Postgres

BEGIN = "<!-- telemetry:begin (scripts/bench --telemetry writes this section) -->"
END = "<!-- telemetry:end -->"
THREADS = 8


def fleet(devices, seed=50):
    """One gzip body per device, and the events in all."""
    rng = random.Random(seed)
    now = int(time.time()) // 3600 * 3600
    release = now - 20 * 3600

    def hour(t):
        return time.strftime("%Y-%m-%dT%H:00:00Z", time.gmtime(t))

    def ev(kind, version, reason, t, frm=None, count=1, size=None):
        e = {"kind": kind, "package": "shop", "version": version, "channel": "stable", "reason": reason,
             "count": count, "hour": hour(t)}
        if frm:
            e["from"] = frm
        if size is not None:
            e["bytes"] = size
        return e
    bodies, total = [], 0
    for d in range(devices):
        seen = now - 24 * 3600 + rng.randrange(0, 4) * 3600
        events = [ev("checked", "1.0.0", "current", seen)]
        took = release + int(rng.expovariate(1 / (4 * 3600)))
        if took < now:
            if rng.random() < 0.01:
                events.append(ev("download-failed", "2.0.0", "hash-mismatch", took, "1.0.0"))
            else:
                events.append(ev("activated", "2.0.0", "delta", took, "1.0.0", size=rng.randrange(20000, 90000)))
                if rng.random() < 0.03:
                    events += [ev("health-failed", "2.0.0", "script-error", took),
                               ev("page-error", "2.0.0", "script-error", took, count=rng.randrange(1, 6)),
                               ev("rolled-back", "1.0.0", "health", took, "2.0.0")]
                elif took + 3600 < now:
                    events.append(ev("checked", "2.0.0", "current", took + 3600))
        total += len(events)
        batch = {"schemaVersion": 1, "batch": "%032x" % rng.getrandbits(128), "install": "%032x" % rng.getrandbits(128),
                 "app": "4.2.0", "platform": rng.choice(["ios", "android"]), "larder": "0.1.0", "dropped": 0,
                 "events": events}
        bodies.append(gzip.compress(json.dumps(batch).encode(), 6))
    return bodies, total


def post_all(port, bodies):
    """Posts every body from THREADS threads; returns (seconds, statuses counted)."""
    statuses = {}
    lock = threading.Lock()
    chunks = [bodies[i::THREADS] for i in range(THREADS)]

    def worker(chunk):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        local = {}
        for b in chunk:
            conn.request("POST", "/v1/events", body=b,
                         headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})
            r = conn.getresponse()
            r.read()
            local[r.status] = local.get(r.status, 0) + 1
        conn.close()
        with lock:
            for k, v in local.items():
                statuses[k] = statuses.get(k, 0) + v
    threads = [threading.Thread(target=worker, args=(c,)) for c in chunks]
    started = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.time() - started, statuses


def vm_hwm(pid):
    with open("/proc/%d/status" % pid) as f:
        m = re.search(r"VmHWM:\s+(\d+) kB", f.read())
    return int(m.group(1)) / 1024 if m else 0.0


def measure(larder, database, bodies, events, label):
    say("bench --telemetry: %d batches (%d events) into %s" % (len(bodies), events, label))
    p = subprocess.Popen([larder, "collect", "--listen", "127.0.0.1:0", "--database", database,
                          "--batches-per-hour", "1000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=ls.loopback_env())
    line = p.stdout.readline()
    m = re.search(r":(\d+)\s", line)
    if not m:
        raise ls.SetupError("larder collect did not start: %r %s" % (line, p.stderr.read()))
    try:
        seconds, statuses = post_all(int(m.group(1)), bodies)
        rss = vm_hwm(p.pid)
    finally:
        p.terminate()
        p.wait(timeout=30)
    if statuses != {202: len(bodies)}:
        raise ls.SetupError("%s: not every batch was stored: %s" % (label, statuses))
    started = time.time()
    out = subprocess.run([larder, "report", "--database", database, "--since", "30h", "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ls.loopback_env())
    report_s = time.time() - started
    if out.returncode != 0:
        raise ls.SetupError("%s: report failed: %s" % (label, out.stderr))
    doc = json.loads(out.stdout)
    v2 = next(v for v in doc["versions"] if v["version"] == "2.0.0")
    r = {"events_s": events / seconds, "rss": rss, "report_s": report_s, "seconds": seconds,
         "attempts": v2["attempts"], "failures": v2["failureRate"]["count"]}
    say("  %.0f events/s (%.1f s), peak RSS %.0f MiB, report %.2f s; 2.0.0: %d attempts, %d failures" % (
        r["events_s"], seconds, rss, report_s, r["attempts"], r["failures"]))
    return r


def table(sq, pg, devices, events, machine, command):
    def row(name, key, fmt, better):
        ratio = pg[key] / sq[key]
        return "| %s | %s | %s | %.2f |" % (name, fmt % pg[key], fmt % sq[key], ratio)
    return ["Measured %s with `%s` (release build; %s simulated devices, one gzip batch each, %s events; "
            "8 client threads on the same machine; SQLite on tmpfs, PostgreSQL 15 from Debian with its data on "
            "tmpfs)." % (machine, command, format(devices, ","), format(events, ",")), "",
            "| figure | PostgreSQL | SQLite (baseline) | ratio |", "|---|---|---|---|",
            row("events stored per second", "events_s", "%.0f", True),
            row("collector's peak RSS (MiB)", "rss", "%.0f", False),
            row("`larder report` over the day (s)", "report_s", "%.2f", False),
            "", "Both stores answered the same report: %d devices attempted 2.0.0, %d failed it." % (
                sq["attempts"], sq["failures"])]


def main(larder, devices, write, screenshot=None):
    base = os.environ.get("BENCH_DIR") or "/dev/shm"
    work = tempfile.mkdtemp(prefix="larder-bench-telemetry.", dir=base)
    pg = Postgres(work)
    try:
        say("bench --telemetry: making %d devices' batches" % devices)
        bodies, events = fleet(devices)
        pg.start()
        sq = measure(larder, "sqlite:" + os.path.join(work, "events.db"), bodies, events, "SQLite")
        pgr = measure(larder, pg.url, bodies, events, "PostgreSQL")
        if (sq["attempts"], sq["failures"]) != (pgr["attempts"], pgr["failures"]):
            raise ls.SetupError("the stores disagree: %s against %s" % (sq, pgr))
        if screenshot:
            html = os.path.join(work, "report.html")
            subprocess.run([larder, "report", "--database", "sqlite:" + os.path.join(work, "events.db"),
                            "--since", "30h", "--html", html], check=True, stdout=subprocess.DEVNULL)
            chromium = shutil.which("chromium") or shutil.which("chromium-browser")
            subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                            "--window-size=900,760", "--user-data-dir=" + os.path.join(work, "profile"),
                            "--screenshot=" + os.path.abspath(screenshot), "file://" + html],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
            say("bench --telemetry: wrote %s" % screenshot)
    finally:
        pg.stop()
        shutil.rmtree(work, ignore_errors=True)
    machine = "on %s, %d CPUs (%s), %s, load %.2f" % (platform.machine(), os.cpu_count() or 0,
                                                      bench_install.cpu_model(), time.strftime("%Y-%m-%d"),
                                                      os.getloadavg()[0])
    lines = table(sq, pgr, devices, events, machine, "scripts/bench --telemetry")
    say()
    for line in lines:
        say(line)
    if write:
        ls.write_section("## Release telemetry (`scripts/bench --telemetry`)", BEGIN, END, lines)
        say("bench --telemetry: wrote BENCHMARKS.md")
    return 0
