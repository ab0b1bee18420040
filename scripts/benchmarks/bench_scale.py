"""`scripts/bench --scale`: how Larder's costs grow with the number of packages and of files.

For N = 100, 1,000 and 10,000 packages of 10 small files each (--quick: 100 and 1,000), written
in one signed index by larder-bench-scale (Publisher.pack(batch:)) into a file:// repository on
tmpfs, it measures with the release build, process start included:
  first sync        `larder sync` of an empty sandbox (wall clock; peak RSS by /usr/bin/time -v)
  no-change sync    `larder sync` again (median of runs), next to its baseline in the same run:
                    `curl -s -o /dev/null file://…/index.json`, the same index read by curl
  status, plan      `larder status --json`, `larder plan` (medians)
  confirm           `larder confirm` of one package: the cost of one state write (state.json is
                    one file, rewritten whole; see "State layout" in BENCHMARKS.md)
  resolve (CLI)     `larder resolve URL`: a fresh process, so the snapshot is built cold
  one-package update the sync after one package got a new version
  app resolve       in one process (larder-bench-scale --after-sync): a resolver's first snapshot
                    (cold), then a sync of a one-package update, then the first resolve after it
                    (snapshot rebuild included; the target is <= 50 ms at 1,000 packages)
                    The update and app rows are medians of APP_RUNS (3) such processes, each on a
                    copy of the sandbox as the first sync left it.
and, for one package of ~21,500 files (the unpacked ansible 12.3.0 wheel, as `scripts/bench`
uses; skipped by --quick): peak RSS of `larder install`, of a first sync over file:// and over
HTTP (python3 -m http.server on 127.0.0.1), and the no-change sync against curl.

Each row shows the growth ratio to the size ten times smaller (linear is <= 11x). The table is
printed and written into BENCHMARKS.md between the scale markers, with the machine and command.
"""
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile

import bench_install
import larder_scripts as ls
from larder_scripts import die, say

BEGIN = "<!-- scale:begin (scripts/bench --scale writes this section) -->"
END = "<!-- scale:end -->"
FILES_PER_PACKAGE = 10
APP_RUNS = 3


def timed(args, env=None):
    t = time.perf_counter()
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    dt = time.perf_counter() - t
    if p.returncode != 0:
        die("failed (exit %d): %s\n%s%s" % (p.returncode, " ".join(args), p.stdout[-2000:], p.stderr[-2000:]))
    return dt, p.stdout


def median_ms(args, runs):
    timed(args)  # warm-up
    return 1000 * statistics.median(timed(args)[0] for _ in range(runs))


def peak_rss(args):
    """(seconds, peak RSS in MiB) of one run."""
    t = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-v"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t
    if p.returncode != 0:
        die("failed (exit %d): %s\n%s" % (p.returncode, " ".join(args), p.stderr[-2000:]))
    for line in p.stderr.splitlines():
        if "Maximum resident set size" in line:
            return dt, int(line.split(":")[1]) / 1024
    die("/usr/bin/time -v printed no peak RSS")


def measure_packages(larder, scale, work, n, runs):
    say("bench --scale: %d packages of %d files" % (n, FILES_PER_PACKAGE))
    repo, root = os.path.join(work, "repo-%d" % n), os.path.join(work, "sb-%d" % n)
    key = os.path.join(work, "k.key")
    timed([scale, repo, key, "--packages", str(n), "--files", str(FILES_PER_PACKAGE)])
    timed([larder, "init", "--root", root, "--repo", "file://" + repo, "--public-key", key[:-4] + ".pub"])
    r = {"n": n}
    r["first_sync_s"], r["first_sync_mib"] = peak_rss([larder, "sync", "--root", root])
    r["nochange_ms"] = median_ms([larder, "sync", "--root", root], runs)
    r["curl_ms"] = median_ms(["curl", "-s", "-o", "/dev/null", "file://" + repo + "/index.json"], runs)
    r["status_ms"] = median_ms([larder, "status", "--root", root, "--json"], runs)
    r["plan_ms"] = median_ms([larder, "plan", "--root", root], runs)
    # One state change (a confirmation): the cost of a write of the whole state.json.
    r["confirm_ms"] = median_ms([larder, "confirm", "--root", root, "pkg-%05d" % 3], runs)
    r["state_kib"] = os.path.getsize(os.path.join(root, "state.json")) / 1024
    url = "https://pkg-%05d.bench.example/" % 7
    r["resolve_ms"] = median_ms([larder, "resolve", "--root", root, url], runs)
    # One package gets a new version: the in-process app resolve syncs it, APP_RUNS times, each
    # on a copy of the sandbox as the first sync left it (medians: one run is noisy).
    timed([scale, repo, key, "--packages", str(n), "--only", "7", "--version", "1.0.1"])
    pristine = root + ".synced"
    timed(["cp", "-a", root, pristine])
    apps = []
    for i in range(APP_RUNS):
        if i:
            shutil.rmtree(root)
            timed(["cp", "-a", pristine, root])
        _, out = timed([scale, "--after-sync", root, url])
        apps.append(json.loads(out))
    shutil.rmtree(pristine, ignore_errors=True)
    r["app_cold_ms"] = statistics.median(a["coldMs"] for a in apps)
    r["app_after_ms"] = statistics.median(a["afterSyncMs"] for a in apps)
    r["lists_read"] = max(a["listsRead"] for a in apps)
    r["update_s"] = statistics.median(a["syncSeconds"] for a in apps)
    shutil.rmtree(repo, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)
    say("  first sync %.2f s (%.0f MiB), no-change %.1f ms (curl %.1f ms), status %.1f ms, plan %.1f ms, "
        "resolve %.1f ms; app: cold %.1f ms, after a one-package sync %.1f ms (%d list read), update %.2f s" % (
            r["first_sync_s"], r["first_sync_mib"], r["nochange_ms"], r["curl_ms"], r["status_ms"], r["plan_ms"],
            r["resolve_ms"], r["app_cold_ms"], r["app_after_ms"], r["lists_read"], r["update_s"]))
    return r


def measure_big(larder, work, wheel, runs):
    say("bench --scale: one package of the unpacked %s" % os.path.basename(wheel))
    tree = os.path.join(work, "big-tree")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tree)
    nfiles = sum(len(f) for _, _, f in os.walk(tree))
    repo, key = os.path.join(work, "big-repo"), os.path.join(work, "k.key")
    entry = min((os.path.relpath(os.path.join(d, f), tree) for d, _, fs in os.walk(tree) for f in fs),
                key=lambda p: p.encode("utf-8", "surrogateescape"))
    timed([larder, "pack", tree, "--repo", repo, "--id", "big", "--version", "1.0.0", "--key", key,
           "--entry", entry])
    shutil.rmtree(tree, ignore_errors=True)
    v = os.path.join(repo, "packages", "big", "1.0.0")
    r = {"files": nfiles}
    sb = os.path.join(work, "big-install")
    r["install_s"], r["install_mib"] = peak_rss([larder, "install", os.path.join(v, "bundle.zip"), "--root", sb,
                                                  "--id", "big", "--version", "1.0.0",
                                                  "--files", os.path.join(v, "files.json")])
    shutil.rmtree(sb, ignore_errors=True)
    sb = os.path.join(work, "big-file")
    timed([larder, "init", "--root", sb, "--repo", "file://" + repo, "--public-key", key[:-4] + ".pub"])
    r["sync_file_s"], r["sync_file_mib"] = peak_rss([larder, "sync", "--root", sb])
    r["nochange_ms"] = median_ms([larder, "sync", "--root", sb], runs)
    r["curl_ms"] = median_ms(["curl", "-s", "-o", "/dev/null", "file://" + repo + "/index.json"], runs)
    shutil.rmtree(sb, ignore_errors=True)
    port = ls.free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port),
                               "--directory", repo], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if subprocess.run(["curl", "-s", "-o", "/dev/null", "http://127.0.0.1:%d/index.json" % port]).returncode == 0:
                break
            time.sleep(0.05)
        sb = os.path.join(work, "big-http")
        timed([larder, "init", "--root", sb, "--repo", "http://127.0.0.1:%d" % port, "--public-key",
               key[:-4] + ".pub"])
        r["sync_http_s"], r["sync_http_mib"] = peak_rss([larder, "sync", "--root", sb])
        shutil.rmtree(sb, ignore_errors=True)
    finally:
        server.terminate()
        server.wait()
    shutil.rmtree(repo, ignore_errors=True)
    say("  %d files: install %.1f s %.0f MiB; sync file:// %.1f s %.0f MiB, http %.1f s %.0f MiB; no-change %.1f ms "
        "(curl %.1f ms)" % (nfiles, r["install_s"], r["install_mib"], r["sync_file_s"], r["sync_file_mib"],
                            r["sync_http_s"], r["sync_http_mib"], r["nochange_ms"], r["curl_ms"]))
    return r


def growth(rows, key):
    out = []
    for i, r in enumerate(rows):
        out.append("" if i == 0 else "%.1f×" % (r[key] / rows[i - 1][key]))
    return out


def table(rows, big, machine, command):
    sizes = [r["n"] for r in rows]
    head = "| figure | " + " | ".join("%s packages" % format(n, ",") for n in sizes) + " | target |"
    lines = [head, "|---" * (len(sizes) + 2) + "|"]

    def row(name, key, fmt, target):
        cells = []
        g = growth(rows, key)
        for r, x in zip(rows, g):
            cells.append((fmt % r[key]) + ((" (%s)" % x) if x else ""))
        lines.append("| %s | %s | %s |" % (name, " | ".join(cells), target))

    row("first `larder sync` (s)", "first_sync_s", "%.2f", "≤ 11× per 10× packages")
    row("peak RSS of the first sync (MiB)", "first_sync_mib", "%.0f", "")
    row("no-change `larder sync` (ms)", "nochange_ms", "%.1f", "≤ 11×; ≤ 2× curl")
    row("curl of the same index (ms), baseline", "curl_ms", "%.1f", "")
    lines.append("| no-change sync ÷ curl | %s | ≤ 2 |" % " | ".join(
        "%.1f" % (r["nochange_ms"] / r["curl_ms"]) for r in rows))
    row("one-package update sync (s)", "update_s", "%.2f", "≤ 11×")
    row("`larder status --json` (ms)", "status_ms", "%.1f", "≤ 11×")
    row("`larder plan` (ms)", "plan_ms", "%.1f", "≤ 11×")
    row("`larder confirm` of one package: one state write (ms)", "confirm_ms", "%.1f", "≤ 11×")
    row("state.json (KiB)", "state_kib", "%.0f", "")
    row("`larder resolve` in a new process (ms)", "resolve_ms", "%.1f", "≤ 11×")
    row("app: first snapshot, cold (ms)", "app_cold_ms", "%.1f", "≤ 11×")
    row("app: first resolve after a sync (ms)", "app_after_ms", "%.1f", "≤ 50 at 1,000")
    out = ["Measured %s with `%s` (release build, static Swift runtime; file:// repositories on tmpfs; "
           "process start included in every CLI figure; ratios in parentheses are the growth from the "
           "size ten times smaller)." % (machine, command), ""] + lines
    if big:
        out += ["", "One package of %s files (the unpacked ansible 12.3.0 wheel):" % format(big["files"], ","), "",
                "| figure | Larder | baseline | target |", "|---|---|---|---|",
                "| peak RSS of `larder install` | %.0f MiB (%.1f s) | | < 64 MB |" % (big["install_mib"], big["install_s"]),
                "| peak RSS of the first sync, file:// | %.0f MiB (%.1f s) | | < 64 MB |" % (
                    big["sync_file_mib"], big["sync_file_s"]),
                "| peak RSS of the first sync, HTTP | %.0f MiB (%.1f s) | | < 64 MB |" % (
                    big["sync_http_mib"], big["sync_http_s"]),
                "| no-change sync | %.1f ms | curl %.1f ms | ≤ 2× curl (%.1f×) |" % (
                    big["nochange_ms"], big["curl_ms"], big["nochange_ms"] / big["curl_ms"])]
    return out


def write_benchmarks(lines):
    ls.write_section("## Scale (`scripts/bench --scale`)", BEGIN, END, lines)
    say("bench --scale: wrote BENCHMARKS.md")


def main(larder, scale, wheel_path, quick, sizes, runs, write):
    ls.ensure_tool("/usr/bin/time", "time")
    ls.ensure_tool("curl", "curl")
    base = os.environ.get("BENCH_DIR") or "/dev/shm"
    work = tempfile.mkdtemp(prefix="larder-bench-scale.", dir=base)
    try:
        timed([larder, "keygen", "--out", os.path.join(work, "k")])
        rows = [measure_packages(larder, scale, work, n, runs) for n in sizes]
        big = None if quick else measure_big(larder, work, wheel_path(), runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cpu = bench_install.cpu_model()
    machine = "on %s, %d CPUs (%s), %s, load %s" % (platform.machine(), os.cpu_count() or 0, cpu,
                                                   time.strftime("%Y-%m-%d"), "%.2f" % os.getloadavg()[0])
    command = "scripts/bench --scale" + (" --quick" if quick else "")
    lines = table(rows, big, machine, command)
    say()
    for l in lines:
        say(l)
    if write:
        write_benchmarks(lines)
    return rows, big
