"""`scripts/bench --delegations`: what delegations (manifests §18) cost a device.

Two file:// repositories on tmpfs of the same 1,000 packages of 10 small files each, written by
larder-bench-scale: one signed by one key (the baseline), one delegated to 20 teams (root and index
key, each team's part signed by its own key: `--teams 20`). With the release build, process start
included, side by side in one run:
  first sync        `larder sync` of an empty sandbox (wall clock; peak RSS by /usr/bin/time -v)
  no-change sync    `larder sync` again (median of runs)
  one-package update the sync after one package got a new version (median of runs, one new
                    version per run: in the delegated repository one team's part changes)
Each row's ratio is delegated ÷ one key; the target is ≤ 1.2 (issue 49). The table is printed and
written into BENCHMARKS.md between the delegations markers, with the machine and command.
"""
import os
import platform
import shutil
import statistics
import tempfile
import time

import bench_install
import bench_scale
import larder_scripts as ls
from larder_scripts import say

BEGIN = "<!-- delegations:begin (scripts/bench --delegations writes this section) -->"
END = "<!-- delegations:end -->"
PACKAGES = 1000
TEAMS = 20


def measure(larder, scale, work, teams, runs):
    label = "%d teams" % teams if teams else "one key"
    say("bench --delegations: %d packages, %s" % (PACKAGES, label))
    d = os.path.join(work, "teams-%d" % teams)
    os.makedirs(d)
    key = os.path.join(d, "k.key")
    bench_scale.timed([larder, "keygen", "--out", key[:-4]])
    repo, root = os.path.join(d, "repo"), os.path.join(d, "sb")
    extra = ["--teams", str(teams)] if teams else []
    bench_scale.timed([scale, repo, key, "--packages", str(PACKAGES), "--files", "10"] + extra)
    bench_scale.timed([larder, "init", "--root", root, "--repo", "file://" + repo, "--public-key", key[:-4] + ".pub"])
    r = {}
    r["first_s"], r["first_mib"] = bench_scale.peak_rss([larder, "sync", "--root", root])
    r["nochange_ms"] = bench_scale.median_ms([larder, "sync", "--root", root], runs)
    updates = []
    for i in range(runs):
        bench_scale.timed([scale, repo, key, "--packages", str(PACKAGES), "--only", str(7 + 10 * i),
                           "--version", "1.0.%d" % (i + 1)] + extra)
        updates.append(bench_scale.timed([larder, "sync", "--root", root])[0])
    r["update_s"] = statistics.median(updates)
    shutil.rmtree(d, ignore_errors=True)
    say("  first sync %.2f s (%.0f MiB), no-change %.1f ms, one-package update %.2f s" % (
        r["first_s"], r["first_mib"], r["nochange_ms"], r["update_s"]))
    return r


def table(one, many, machine, command):
    def row(name, key, fmt):
        ratio = many[key] / one[key]
        return "| %s | %s | %s | %.2f | ≤ 1.2 | %s |" % (name, fmt % many[key], fmt % one[key], ratio,
                                                          "pass" if ratio <= 1.2 else "miss")
    return ["Measured %s with `%s` (release build; %d packages of 10 files in file:// repositories on tmpfs; "
            "process start included)." % (machine, command, PACKAGES), "",
            "| figure | %d teams | one key (baseline) | ratio | target | |" % TEAMS, "|---|---|---|---|---|---|",
            row("first `larder sync` (s)", "first_s", "%.2f"),
            row("peak RSS of the first sync (MiB)", "first_mib", "%.0f"),
            row("no-change `larder sync` (ms)", "nochange_ms", "%.1f"),
            row("one-package update sync (s)", "update_s", "%.2f")]


def main(larder, scale, runs, write):
    ls.ensure_tool("/usr/bin/time", "time")
    base = os.environ.get("BENCH_DIR") or "/dev/shm"
    work = tempfile.mkdtemp(prefix="larder-bench-delegations.", dir=base)
    try:
        one = measure(larder, scale, work, 0, runs)
        many = measure(larder, scale, work, TEAMS, runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    machine = "on %s, %d CPUs (%s), %s, load %.2f" % (platform.machine(), os.cpu_count() or 0,
                                                      bench_install.cpu_model(), time.strftime("%Y-%m-%d"),
                                                      os.getloadavg()[0])
    lines = table(one, many, machine, "scripts/bench --delegations")
    say()
    for line in lines:
        say(line)
    if write:
        ls.write_section("## Delegations (`scripts/bench --delegations`)", BEGIN, END, lines)
        say("bench --delegations: wrote BENCHMARKS.md")
    return 0
