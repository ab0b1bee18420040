"""scripts/bench --edge: 1,000 devices sync through a CDN edge.

nginx serves a repository of the sample app (Examples/sample-app) with the cache headers of
Examples/cdn/nginx-repository.conf (the index and its signature given a 2 s TTL, so that a
release is seen within the run), and Varnish (Examples/cdn/edge.vcl) is the edge in front of it,
both on 127.0.0.1. DEVICES sandboxes (`larder init` against the edge) then sync, at most JOBS at
once, in three phases:

  first install   every device installs 1.0.0;
  release         2.0.0 (two files changed) is published; every device updates by objects;
  10 % rollout    3.0.0 is published with --rollout 10: about a tenth of the devices update
                  (the count is checked against the binomial's mean ± 4 standard deviations);
                  the requests of a device that updates and of one that does not are measured
                  on devices run one at a time before the others.

For each phase: device sync times (p50, p90, p99, max), requests and body bytes at the origin
(nginx's log) and at the edge (varnishstat: client requests, hits, misses), the edge's hit ratio,
and how many times the origin served each immutable file (about once). Loopback only: this
measures the protocol's load on an origin, not a network.
"""
import concurrent.futures
import json
import math
import os
import platform
import re
import shutil
import statistics
import time

import larder_scripts as ls
from larder_scripts import SetupError, say
from larder_scripts.nginx_server import Nginx
from larder_scripts.varnish_server import Varnish

TITLE = "## 1,000 devices through a CDN edge (`scripts/bench --edge`)"
BEGIN = "<!-- bench --edge: begin -->"
END = "<!-- bench --edge: end -->"
SNIPPET = os.path.join(ls.CHECKOUT, "Examples", "cdn", "nginx-repository.conf")
TTL = 2


def percentile(values, p):
    s = sorted(values)
    if not s:
        return 0.0
    k = (len(s) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


class Bench:
    def __init__(self, larder, work, devices, jobs):
        self.larder = ls.Larder(larder, timeout=300)
        self.work = work
        self.devices = devices
        self.jobs = jobs
        self.repo = os.path.join(work, "repo")
        os.makedirs(self.repo)
        self.src = os.path.join(work, "src")
        shutil.copytree(ls.SAMPLE_APP, self.src)
        keys = os.path.join(work, "keys", "publisher")
        self.key, self.pub = keys + ".key", keys + ".pub"
        self.larder.must("keygen", "--out", keys)
        snippet = os.path.join(work, "cdn.conf")
        with open(SNIPPET) as f:
            text = f.read()
        # Only the index and its signature change their TTL: a release is seen within TTL s.
        text, n = re.subn(r'(location ~ /index\\\.json\(\\\.sig\)\?\$ \{\s*add_header Cache-Control "public, )'
                          r'max-age=\d+', r"\g<1>max-age=%d" % TTL, text)
        if n != 1:
            raise SetupError("Examples/cdn/nginx-repository.conf has no index.json max-age to shorten")
        with open(snippet, "w") as f:
            f.write(text)
        self.nginx = Nginx(ls.ensure_tool("nginx", "nginx-light"), work, self.repo, include=snippet)
        self.varnish = None

    def publish(self, version, changed, rollout=None):
        for i in range(changed):
            with open(os.path.join(self.src, "data", "release-%d.json" % i), "w") as f:
                json.dump({"version": version, "file": i}, f)
        args = ["pack", self.src, "--repo", self.repo, "--id", "sample-app", "--version", version, "--key", self.key,
                "--route", "https://app.example.com/"]
        if rollout is not None:
            args += ["--rollout", str(rollout)]
        self.larder.must(*args)
        time.sleep(TTL + 0.5)  # the edge's copy of the previous signature expires

    def device(self, i):
        return os.path.join(self.work, "devices", "d%04d" % i)

    def sync(self, i):
        rc, doc, r = self.larder.json("sync", "--root", self.device(i), "--progress", "none")
        p = ls.find_package(doc, "sample-app")
        return i, rc, (p or {}).get("action"), (p or {}).get("outcome"), r.seconds

    def phase(self, name, devices, alone=()):
        """Syncs `alone` one at a time (measuring each one's edge requests), then the rest of
        `devices` JOBS at once; returns the phase's figures."""
        m = self.nginx.mark()
        before = self.varnish.counters()
        results, single = [], []
        for i in alone:
            c0 = self.varnish.counters()["client_req"]
            res = self.sync(i)
            results.append(res)
            single.append((res[2], self.varnish.counters()["client_req"] - c0))
        rest = [i for i in devices if i not in set(alone)]
        with concurrent.futures.ThreadPoolExecutor(self.jobs) as pool:
            results += list(pool.map(self.sync, rest))
        after = self.varnish.counters()
        origin = self.nginx.since(m, settle=0.5)
        failed = [r for r in results if r[1] != 0]
        if failed:
            raise SetupError("%s: %d device(s) failed, e.g. d%04d exit %d" % (
                name, len(failed), failed[0][0], failed[0][1]))
        times = [r[4] * 1000 for r in results]
        immutable = [x for x in origin if re.search(r"/(objects|packages|indexes)/", x["uri"])]
        per_file = {}
        for x in immutable:
            per_file[x["uri"]] = per_file.get(x["uri"], 0) + 1
        d = {k: after[k] - before[k] for k in after}
        hits, misses = d["cache_hit"], d["cache_miss"]
        figures = {
            "name": name, "devices": len(results),
            "actions": {a: sum(1 for r in results if r[2] == a) for a in {r[2] for r in results}},
            "p50": percentile(times, 50), "p90": percentile(times, 90), "p99": percentile(times, 99),
            "max": max(times),
            "origin_requests": len(origin), "origin_bytes": sum(x["body_bytes_sent"] for x in origin),
            "edge_requests": d["client_req"], "edge_bytes": d["s_resp_bodybytes"],
            "hits": hits, "misses": misses, "hit_ratio": hits / (hits + misses) if hits + misses else 0.0,
            "immutable_files": len(per_file), "immutable_max_fetches": max(per_file.values()) if per_file else 0,
            "single": single,
        }
        say("bench --edge: %s: %d devices, p50 %.0f ms, origin %d requests / %s, edge %d requests, hit ratio %.3f"
            % (name, len(results), figures["p50"], figures["origin_requests"],
               human(figures["origin_bytes"]), figures["edge_requests"], figures["hit_ratio"]))
        return figures


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return ("%d %s" % (n, unit)) if unit == "B" else ("%.1f %s" % (n, unit))
        n /= 1024.0


def main(larder, devices, jobs, write):
    ls.ensure_tool("varnishd", "varnish")
    work = ls.scratch_dir("larder-bench-edge.", "BENCH_DIR")
    bench = Bench(larder, work, devices, jobs)
    started = time.time()
    load = os.getloadavg()
    try:
        bench.publish("1.0.0", 2)
        bench.nginx.start()
        bench.varnish = Varnish(work, bench.nginx.port)
        bench.varnish.start()
        say("bench --edge: %d devices, %d at once; origin %s, edge %s, work %s" % (
            devices, jobs, bench.nginx.base, bench.varnish.base, work))
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            list(pool.map(lambda i: bench.larder.must("init", "--root", bench.device(i), "--repo",
                                                      bench.varnish.base, "--public-key", bench.pub),
                          range(devices)))
        everyone = list(range(devices))
        phases = [bench.phase("first install (1.0.0)", everyone)]
        bench.publish("2.0.0", 2)
        phases.append(bench.phase("release (2.0.0, 2 files changed)", everyone))
        bench.publish("3.0.0", 2, rollout=10)
        phases.append(bench.phase("10 % rollout (3.0.0)", everyone, alone=range(0, 40)))
    finally:
        if bench.varnish is not None:
            bench.varnish.stop()
        bench.nginx.stop()
        shutil.rmtree(work, ignore_errors=True)
    took = time.time() - started
    rollout = phases[-1]
    updated = rollout["actions"].get("update", 0)
    mean, sd = devices * 0.1, math.sqrt(devices * 0.1 * 0.9)
    within = abs(updated - mean) <= 4 * sd
    upd = [n for a, n in rollout["single"] if a == "update"]
    skip = [n for a, n in rollout["single"] if a != "update"]
    lines = [
        "Run on %s, %d CPUs, load average %.2f at the start; %d devices, %d syncs at once; %.0f s in all. "
        "Command: `scripts/bench --edge%s`." % (platform.node() or "this machine", os.cpu_count() or 0, load[0],
                                              devices, jobs, took, "" if devices == 1000 else
                                              " --devices %d" % devices),
        "",
        "| phase | device sync p50 / p90 / p99 / max (ms) | origin requests | origin bytes | edge requests "
        "| edge bytes | edge hit ratio | immutable files, most origin fetches of one |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for f in phases:
        lines.append("| %s | %.0f / %.0f / %.0f / %.0f | %d | %s | %d | %s | %.3f | %d, %d× |" % (
            f["name"], f["p50"], f["p90"], f["p99"], f["max"], f["origin_requests"], human(f["origin_bytes"]),
            f["edge_requests"], human(f["edge_bytes"]), f["hit_ratio"], f["immutable_files"],
            f["immutable_max_fetches"]))
    lines += [
        "",
        "The 10 %% rollout: %d of %d devices updated (expected %.0f ± %.1f; within 4 standard deviations: %s). "
        "Measured alone, a device that updates made %s edge request(s), one that does not %s (the signature, "
        "then the new index it names, from which it learns it is not in the rollout; its next sync is one request)."
        % (updated, devices, mean, sd, "yes" if within else "NO", fmt_counts(upd), fmt_counts(skip)),
    ]
    for line in lines:
        say(line)
    if write:
        ls.write_section(TITLE, BEGIN, END, lines)
        say("bench --edge: wrote the section to BENCHMARKS.md")
    return 0 if within else 1


def fmt_counts(values):
    if not values:
        return "(none measured)"
    return "%d" % statistics.median(values) if min(values) == max(values) else "%d–%d" % (min(values), max(values))
