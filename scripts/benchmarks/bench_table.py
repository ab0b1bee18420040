"""`scripts/bench [--quick]`: every speed figure in one table, each next to its baseline measured in
the same run, with its target and whether it was met, and a chart of how far each figure is from
its target; written to BENCHMARKS.md (section "The whole table") and BENCHMARKS.svg.

Groups, in the order they run (the full run; --quick keeps the ones marked *):
  install *   `larder install` against `bsdtar -xf` and ZIPFoundation's unzipItem, on tmpfs and on
              a fresh ext4 (bench_install.py); three typical apps' bundles (about 100, 400 and
              1,000 files) against bsdtar on tmpfs; quick: the web-asset tree on tmpfs only
  resolve *   Resolver.resolve over 10,000 files in 200 packages against URL parsing and one
              Dictionary lookup (larder-bench-resolve), pinned to one CPU, several processes
  serve *     `larder serve` against nginx serving the same tree, wrk -t2 -c32 (bench_serve.py)
  network *   over https to nginx: no-change sync, object update, first sync of the large bundle,
              next to curl; on an emulated mobile link too, unless --quick (bench_net.py)
  memory      peak RSS of an HTTP sync of 160 and 320 MiB bundles (scripts/benchmarks/bench-memory.sh)
  deltas      update bytes between real releases (bench_deltas.py)
  scale       100, 1,000 and 10,000 packages, and one package of ~21,500 files (bench_scale.py)
The full run also rewrites each group's own section of BENCHMARKS.md with its details.
"""
import os
import platform
import re
import shutil
import statistics
import subprocess
import tempfile
import time

import bench_install as bi
import larder_scripts as ls
from larder_scripts import die, say

BEGIN = "<!-- table:begin (scripts/bench writes this section) -->"
END = "<!-- table:end -->"
TITLE = "## The whole table (`scripts/bench`)"
CHART = "BENCHMARKS.svg"


class Table:
    def __init__(self):
        self.rows = []

    def add(self, group, figure, larder, baseline, ratio, target, ok, distance=None):
        """One row. `distance` is the figure over its target, in the direction where below 1 meets
        it (the chart's bar); None when the row has no target."""
        self.rows.append({"group": group, "figure": figure, "larder": larder, "baseline": baseline,
                          "ratio": ratio, "target": target, "ok": ok, "distance": distance})

    def at_most(self, group, figure, larder, baseline, ratio, limit, unit="×"):
        """A row whose target is ratio ≤ limit."""
        self.add(group, figure, larder, baseline, "%.2f%s" % (ratio, unit) if unit else "%.2f" % ratio,
                 "≤ %g%s" % (limit, unit), ratio <= limit, ratio / limit)

    def at_least(self, group, figure, larder, baseline, ratio, limit, unit="×"):
        """A row whose target is ratio ≥ limit."""
        self.add(group, figure, larder, baseline, "%.2f%s" % (ratio, unit), "≥ %g%s" % (limit, unit),
                 ratio >= limit, limit / ratio if ratio else float("inf"))

    def markdown(self):
        lines = ["| group | figure | Larder | baseline | ratio | target | |", "|---|---|---|---|---|---|---|"]
        for r in self.rows:
            mark = "" if r["ok"] is None else ("pass" if r["ok"] else "**miss**")
            lines.append("| %s | %s | %s | %s | %s | %s | %s |" % (
                r["group"], r["figure"], r["larder"], r["baseline"], r["ratio"] or "", r["target"], mark))
        return lines

    def text(self):
        out = []
        for r in self.rows:
            mark = "" if r["ok"] is None else ("pass" if r["ok"] else "MISS")
            out.append("%-8s %-58s %-26s %-40s %-9s %-14s %s" % (
                r["group"], r["figure"][:58], r["larder"][:26], r["baseline"][:40], r["ratio"] or "", r["target"],
                mark))
        return out


def median_spread(values, fmt):
    """'median (min–max)' of values."""
    return "%s (%s–%s)" % (fmt % statistics.median(values), fmt % min(values), fmt % max(values))


# --- groups ---

def group_install(t, larder, zf, quick, runs):
    shm = tempfile.mkdtemp(prefix="larder-bench.", dir=os.environ.get("BENCH_DIR") or "/dev/shm")
    specs = [s for s in bi.BUNDLES if not quick or s["key"] == "web"]
    results = []
    try:
        for spec in specs:
            work = tempfile.mkdtemp(prefix="w.", dir=shm)
            out = tempfile.mkdtemp(prefix="o.", dir=shm)
            places = bi.places_for(spec, out, quick)
            n = runs or (3 if quick else spec["runs"])
            results.append(bi.bench(larder, zf, work, spec, n, places, infozip=not quick))
            shutil.rmtree(work, ignore_errors=True)
            shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(shm, ignore_errors=True)
    for res in results:
        tree = "%s tree (%s files, %.0f MiB)" % (res["spec"]["name"], format(res["nfiles"], ","), res["nbytes"] / 2**20)
        for place, by_bundle in res["times"].items():
            for name, tm in by_bundle.items():
                if name == "fs":
                    continue
                b, lr = statistics.median(tm["bsdtar"]), statistics.median(tm["larder"])
                zip_by = "" if name == "larder pack" else ", zipped by Info-ZIP"
                t.at_most("install", "install, %s, %s%s (ms)" % (tree, place, zip_by), "%.0f" % (1000 * lr),
                          "bsdtar -xf: %.0f" % (1000 * b), lr / b, bi.target_of(res["spec"]))
                if "bsdtar+syncfs" in tm:
                    d = statistics.median(tm["bsdtar+syncfs"])
                    t.add("install", "… against bsdtar made as durable (then `sync -f`), %s" % place,
                          "%.0f" % (1000 * lr), "bsdtar + syncfs: %.0f" % (1000 * d), "%.2f×" % (lr / d), "", None)
                if "zipfoundation" in tm:
                    z = statistics.median(tm["zipfoundation"])
                    t.at_least("install", "… faster than ZIPFoundation unzipItem, %s" % place, "%.0f" % (1000 * lr),
                               "ZIPFoundation: %.0f" % (1000 * z), z / lr, 2.5)
        for place, why in res["skipped"].items():
            t.add("install", "install, %s, %s" % (tree, place), "not measured", why, None, "", None)
        if res["spec"]["key"] == "large":
            t.add("memory", "peak RSS, install of the large tree (MiB)", "%.0f" % res["rss"]["larder"],
                  "bsdtar: %.0f" % res["rss"]["bsdtar"], None, "< 64 MB", res["rss"]["larder"] * 2**20 < 64e6,
                  res["rss"]["larder"] * 2**20 / 64e6)
    return results


def group_resolve(t, quick):
    binary = ls._common("swift_product_bin", "larder-bench-resolve", "release")
    work = tempfile.mkdtemp(prefix="larder-bench-resolve.", dir=os.environ.get("BENCH_DIR") or "/dev/shm")
    ratios, ours, base = [], [], []
    cpu = str((os.cpu_count() or 1) - 1)
    pin = ["taskset", "-c", cpu] if shutil.which("taskset") else []
    try:
        subprocess.run([binary, os.path.join(work, "w"), "--setup-only"], check=True, stdout=subprocess.DEVNULL)
        for _ in range(3 if quick else 9):
            p = subprocess.run(pin + [binary, os.path.join(work, "w"), "--rounds", "7" if quick else "15"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if p.returncode != 0:
                die("larder-bench-resolve failed:\n%s%s" % (p.stdout, p.stderr))
            a = float(re.search(r"Resolver.resolve\(String\)\s+(\d+) ns", p.stdout).group(1))
            b = float(re.search(r"URL\(string:\) \+ host/path \+ Dictionary\s+(\d+) ns", p.stdout).group(1))
            ours.append(a)
            base.append(b)
            ratios.append(a / b)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    n = len(ratios)
    t.at_most("resolve", "resolve(url), 10,000 files in 200 packages (ns/URL; median of %d processes%s, "
              "spread of the ratio %.2f–%.2f)" % (n, " pinned to CPU " + cpu if pin else "", min(ratios), max(ratios)),
              "%.0f" % statistics.median(ours), "URL(string:) + one lookup: %.0f" % statistics.median(base),
              statistics.median(ratios), 1.0)


def group_serve(t, larder, quick):
    import bench_serve
    import zipfile
    work = tempfile.mkdtemp(prefix="larder-bench-serve.", dir=os.environ.get("BENCH_DIR") or "/dev/shm")
    try:
        with zipfile.ZipFile(bi.wheel_path(bi.BUNDLES[1])) as z:
            z.extractall(os.path.join(work, "wheel"))
        tree, _ = bi.pick_tree(os.path.join(work, "wheel"))
        os.makedirs(os.path.join(work, "serve"))
        nio = ls._common("swift_product_bin", "larder-bench-nio", "release")
        r = bench_serve.measure(larder, os.path.join(work, "serve"), tree, duration=3 if quick else 10, quick=quick,
                                nio=nio)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for size in ("2k", "100k"):
        s = r[size]
        label = "%.0f KB file" % (s["bytes"] / 1000)
        t.at_least("serve", "larder serve, %s, keep-alive, %s (requests/s)" % (label, r["wrk"]),
                   "%.0f" % s["larder_rps"], "nginx: %.0f" % s["nginx_rps"], s["larder_rps"] / s["nginx_rps"], 0.8)
        t.at_most("serve", "… p99 latency (ms)", "%.2f" % s["larder_p99_ms"], "nginx: %.2f" % s["nginx_p99_ms"],
                  s["larder_p99_ms"] / s["nginx_p99_ms"], 1.5)
        t.add("serve", "… CPU per request (µs)", "%.0f" % s["larder_cpu_us_per_req"],
              "nginx: %.0f" % s["nginx_cpu_us_per_req"],
              "%.2f×" % (s["larder_cpu_us_per_req"] / s["nginx_cpu_us_per_req"]), "", None)
        t.add("serve", "… every request from a task through Hummingbird (`--task-responder`): requests/s",
              "%.0f" % s["task_rps"], "nginx: %.0f" % s["nginx_rps"], "%.2f×" % (s["task_rps"] / s["nginx_rps"]), "",
              None)
        t.add("serve", "… SwiftNIO alone, the same files (larder-bench-nio: no Hummingbird, no resolver): "
              "requests/s, p99 (ms), CPU per request (µs)",
              "%.0f, %.2f, %.0f" % (s["nio_rps"], s["nio_p99_ms"], s["nio_cpu_us_per_req"]),
              "nginx: %.0f, %.2f, %.0f" % (s["nginx_rps"], s["nginx_p99_ms"], s["nginx_cpu_us_per_req"]),
              "%.2f×" % (s["nio_rps"] / s["nginx_rps"]), "", None)


def group_network(t, larder, quick, runs):
    import bench_net
    res = bench_net.main([("AsyncHTTPClient", larder)], bi.wheel_path(bi.BUNDLES[0]), bi.wheel_path(bi.BUNDLES[1]),
                         bi.pick_tree, quick, runs or (3 if quick else 5), write=not quick, link=not quick)
    e, b = res["tls"][0], res["tls_base"]
    t.add("network", "no-change sync over https: requests", "%d" % e["nochange_requests"], "curl: 1", None,
          "exactly 1", e["nochange_requests"] == 1, None)
    t.at_most("network", "no-change sync over https (ms; curl trusting the system's CAs and the private one)",
              "%.1f" % e["nochange_ms"], "curl GET of index.json.sig: %.1f" % b["nochange_ms"],
              e["nochange_ms"] / b["nochange_ms"], 2.0)
    t.add("network", "… against curl trusting only the private CA", "%.1f" % e["nochange_ms"],
          "curl: %.1f" % b["nochange_ca_only_ms"], "%.2f×" % (e["nochange_ms"] / b["nochange_ca_only_ms"]), "", None)
    # The target of this row is on the emulated link (below); on loopback, where the transfer takes
    # a few milliseconds, it shows the work around the transfer.
    t.add("network", "object update, %d changed files, https, loopback (ms)" % e["objects"], "%.0f" % e["update_ms"],
          "curl --parallel-max 4: %.0f" % b["update_ms"], "%.2f×" % (e["update_ms"] / b["update_ms"]),
          "(on the link)", None)
    t.add("network", "… TLS handshakes (connections)", "%d (%d)" % (e["update_full_handshakes"], e["update_conns"]),
          "curl: %d (%d)" % (b["update_full_handshakes"], b["update_conns"]), None, "≤ 4",
          e["update_full_handshakes"] <= 4, None)
    t.at_most("network", "first sync of the large bundle, https, loopback (s)", "%.2f" % e["large_s"],
              "curl -o + bsdtar -xf: %.2f" % b["large_s"], e["large_s"] / b["large_s"], 0.8)
    t.add("memory", "peak RSS, first sync of the large bundle over https (MiB)", "%.0f" % e["large_mib"],
          "bsdtar: %.0f" % b["large_mib"], None, "< 64 MB", e["large_mib"] * 2**20 < 64e6,
          e["large_mib"] * 2**20 / 64e6)
    link = res.get("link")
    if link:
        e, b, how = link["engine"], link["base"], link["how"]
        t.at_most("network", "object update, %d changed files, https, emulated link (ms)" % e["objects"],
                  "%.0f" % e["update_ms"], "curl --parallel-max 4: %.0f" % b["update_ms"],
                  e["update_ms"] / b["update_ms"], 1.2)
        t.add("network", "… TLS handshakes on the link (connections)",
              "%d (%d)" % (e["update_full_handshakes"], e["update_conns"]),
              "curl: %d (%d)" % (b["update_full_handshakes"], b["update_conns"]), None, "≤ 4",
              e["update_full_handshakes"] <= 4, None)
        t.at_most("network", "first sync of the large bundle, https, emulated link (s)", "%.2f" % e["large_s"],
                  "curl -o alone: %.2f" % b["large_curl_s"], e["large_s"] / b["large_curl_s"], 1.1)
        t.at_most("network", "no-change sync, https, emulated link (ms)", "%.0f" % e["nochange_ms"],
                  "curl: %.0f" % b["nochange_ms"], e["nochange_ms"] / b["nochange_ms"], 2.0)
        return how
    return res.get("link_note")


def group_memory(t, larder):
    env = dict(os.environ, LARDER_BIN=larder)
    p = subprocess.run([os.path.join(ls.SCRIPTS, "benchmarks", "bench-memory.sh"), "160"], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    m = re.search(r"http: ([\d.]+) MiB for 160 MiB, ([\d.]+) MiB for 320 MiB: \+?(-?[\d.]+) %", p.stdout)
    if p.returncode != 0 or not m:
        die("scripts/benchmarks/bench-memory.sh failed:\n%s" % p.stdout[-3000:])
    a, b, grow = float(m.group(1)), float(m.group(2)), float(m.group(3))
    t.add("memory", "peak RSS, HTTP sync of a 320 MiB bundle (MiB)", "%.1f" % b, "", None, "< 64 MB",
          b * 2**20 < 64e6, b * 2**20 / 64e6)
    t.add("memory", "… growth from a 160 MiB bundle (flat in bundle size)", "%+.1f %%" % grow, "%.1f MiB" % a, None,
          "< 10 %", grow < 10, max(grow, 0.01) / 10)


def group_deltas(t, larder):
    import bench_deltas
    for r in bench_deltas.main(larder, bi.wheel_of, True):
        share = 100.0 * r["wire_delta"] / r["bundle"]
        t.at_most("deltas", "update bytes, %s (KiB)" % r["name"], "%.1f" % (r["wire_delta"] / 1024),
                  "bundle: %.0f" % (r["bundle"] / 1024), share, 1.0, unit=" %")
        t.at_most("deltas", "… against the tar-patch floor", "%.1f" % (r["wire_delta"] / 1024),
                  "floor: %.1f" % (r["floor"] / 1024), r["wire_delta"] / r["floor"], 3.0)


def group_scale(t, larder, runs):
    import bench_scale
    scale = ls._common("swift_product_bin", "larder-bench-scale", "release")
    rows, big = bench_scale.main(larder, scale, lambda: bi.wheel_path(bi.BUNDLES[0]), False, [100, 1000, 10000],
                                 runs or 7, True)
    by = {r["n"]: r for r in rows}
    for key, label in (("first_sync_s", "first sync"), ("update_s", "one-package update"),
                       ("status_ms", "status --json"), ("plan_ms", "plan"), ("confirm_ms", "confirm"),
                       ("resolve_ms", "resolve in a new process"), ("app_after_ms", "app: first resolve after a sync")):
        for a, b in ((100, 1000), (1000, 10000)):
            t.at_most("scale", "%s, growth %s → %s packages" % (label, format(a, ","), format(b, ",")),
                      "%.4g" % by[b][key], "%s: %.4g" % (format(a, ","), by[a][key]), by[b][key] / by[a][key], 11)
    t.at_most("scale", "app: first resolve after a sync, 1,000 packages (ms)", "%.1f" % by[1000]["app_after_ms"], "",
              by[1000]["app_after_ms"], 50, unit=" ms")
    worst = max(rows, key=lambda r: r["nochange_ms"] / r["curl_ms"])
    t.at_most("scale", "no-change sync over file://, worst of 100–10,000 packages (ms)", "%.1f" % worst["nochange_ms"],
              "curl: %.1f" % worst["curl_ms"], worst["nochange_ms"] / worst["curl_ms"], 2.0)
    if big:
        for key, label in (("install_mib", "install"), ("sync_http_mib", "HTTP sync")):
            t.add("memory", "peak RSS, %s of the %s-file tree (MiB)" % (label, format(big["files"], ",")),
                  "%.0f" % big[key], "", None, "< 64 MB", big[key] * 2**20 < 64e6, big[key] * 2**20 / 64e6)


# --- output ---

def chart(t, path, title):
    """A bar per row with a target: the figure over its target (below the line at 1 meets it)."""
    gnuplot = ls.ensure_tool("gnuplot", "gnuplot-nox")
    rows = [r for r in t.rows if r["distance"] is not None]
    data = tempfile.NamedTemporaryFile("w", suffix=".dat", delete=False)
    for i, r in enumerate(rows):
        label = ("%s: %s" % (r["group"], r["figure"].split(" (")[0]))[:60].replace('"', "'")
        data.write('%d "%s" %.4f %d\n' % (i, label, min(r["distance"], 4.0), 1 if r["ok"] else 0))
    data.close()
    script = """
set terminal svg size 1100,%d font "sans,11" background rgb "white"
set output "%s"
set title "%s"
set style fill solid 0.8 noborder
set yrange [-0.6:%f] reverse
set xrange [0:4.2]
set ytics nomirror font "sans,9"
set xtics ("0" 0, "0.5" 0.5, "1 = target" 1, "2" 2, "3" 3, "≥ 4" 4)
set xlabel "figure ÷ target (the direction in which less is better; bars left of 1 meet their target)"
set grid xtics
set arrow from 1, graph 0 to 1, graph 1 nohead lw 2 lc rgb "#444444"
unset key
myBoxH = 0.35
plot "%s" using (($3)/2):1:(($3)/2):(myBoxH):($4 == 1 ? 0x2e8b57 : 0xcc3333):ytic(2) with boxxyerror lc rgb variable
""" % (160 + 22 * len(rows), path, title.replace('"', "'"), len(rows) - 0.4, data.name)
    p = subprocess.run([gnuplot], input=script, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    os.remove(data.name)
    if p.returncode != 0:
        die("gnuplot failed: %s" % p.stderr[-1000:])


def main(quick, runs, write):
    for tool, pkg in (("bsdtar", "libarchive-tools"), ("zip", "zip"), ("/usr/bin/time", "time"), ("wrk", "wrk"),
                      ("curl", "curl"), ("nginx", "nginx-light"), ("zstd", "zstd"), ("hyperfine", "hyperfine"),
                      ("taskset", "util-linux")):
        ls.ensure_tool(tool, pkg)
    t0 = time.time()
    load_start = os.getloadavg()[0]
    larder = ls.larder_binary("release")
    zf = bi.zipfoundation_binary()
    t = Table()
    timings = []

    def step(name, fn, *args):
        s = time.time()
        say("bench: --- %s ---" % name)
        out = fn(*args)
        timings.append("%s %.0f s" % (name, time.time() - s))
        return out

    step("install", group_install, t, larder, zf, quick, runs)
    step("resolve", group_resolve, t, quick)
    step("serve", group_serve, t, larder, quick)
    link_note = step("network", group_network, t, larder, quick, runs)
    if not quick:
        step("memory", group_memory, t, larder)
        step("deltas", group_deltas, t, larder)
        step("scale", group_scale, t, larder, runs)
    cpu = bi.cpu_model()
    command = "scripts/bench" + (" --quick" if quick else "") + (" -k %d" % runs if runs else "")
    passed = sum(1 for r in t.rows if r["ok"])
    missed = sum(1 for r in t.rows if r["ok"] is False)
    head = ("Machine: %s, %d CPUs (%s), %s; load %.2f at the start, %.2f at the end; %s (%s); %.0f s in all (%s). "
            "Command: `%s`. %d rows met their target, %d missed. Ratios are Larder ÷ baseline, both measured in "
            "this run; process start is included on both sides wherever a process is timed." % (
                platform.machine(), os.cpu_count() or 0, cpu, time.strftime("%Y-%m-%d"), load_start,
                os.getloadavg()[0], bi.git_describe(), ls.run([larder, "version"]).strip(), time.time() - t0,
                ", ".join(timings), command, passed, missed))
    lines = [head, ""]
    if link_note:
        lines += ["Emulated link: %s" % link_note, ""]
    lines += t.markdown()
    lines += ["", "![Each figure over its target](%s)" % CHART]
    say()
    for line in t.text():
        say(line)
    say()
    say("bench: %d rows met their target, %d missed" % (passed, missed))
    if write:
        chart(t, os.path.join(ls.CHECKOUT, CHART), "Larder, %s: each figure over its target" % time.strftime("%Y-%m-%d"))
        ls.write_section(TITLE, BEGIN, END, lines)
        say("bench: wrote BENCHMARKS.md and %s" % CHART)
    return 0
