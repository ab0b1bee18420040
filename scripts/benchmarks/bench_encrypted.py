"""`scripts/bench --encrypted`: what end-to-end encryption costs a device, against the same
releases in the clear.

For three real web apps built by different tools (release pairs of `--deltas`: jupyterlab
(webpack), marimo (Vite), dagster (Next.js static export)), with the release build:

  1. `larder pack` publishes the old release and then the new one into two repositories: in
     the clear, and encrypted (`--encrypt-to` a device's and the publisher's recipient keys;
     `--recipient-key` the publisher's, so deltas are made from the encrypted old release).
  2. nginx (Debian, loopback, a JSON access log) serves each. For each repository, RUNS fresh
     devices each make a first sync of the old release (timed), then each updates to the new
     release (timed; the first one's wire bytes summed from nginx's log, every request of the
     update).
  3. install: the first sync again from a file:// repository on tmpfs, where the transfer is a
     copy and what is timed is the device's own work (check, open, extract, verify, place).
  4. The two forms alternate run by run (clear, encrypted, clear, …), so that the shared
     machine's drift falls on both alike rather than on whichever ran second.
  5. Each device's tree is compared with the release (`diff -r`); a difference fails the run.

Target (issue 31): encrypted ≤ 1.1× in the clear, for first sync, update bytes and install time.
"""
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

import bench_deltas
import larder_scripts as ls
from larder_scripts import die, say
from larder_scripts.nginx_server import Nginx

TITLE = "## Encrypted packages against the same releases in the clear (`scripts/bench --encrypted`)"
BEGIN = "<!-- bench-encrypted:begin -->"
END = "<!-- bench-encrypted:end -->"
APPS = ("jupyterlab", "marimo", "dagster")


run = bench_deltas.run


def timed(args, env=None):
    t = time.perf_counter()
    out = run(args, env=env)
    return time.perf_counter() - t, out


def same_tree(a, b, what):
    d = subprocess.run(["diff", "-r", "-q", a, b], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if d.returncode != 0:
        die("%s: the device's tree differs from the release:\n%s" % (what, d.stdout[-2000:]))


def measure(pair, wheels, larder, nginx_bin, work, keys, runs):
    name = pair["name"]
    old_tree = os.path.join(work, name, "old")
    new_tree = os.path.join(work, name, "new")
    nfiles = bench_deltas.unpack_tree(wheels[0], old_tree, pair["tree"])
    bench_deltas.unpack_tree(wheels[1], new_tree, pair["tree"])
    say("bench --encrypted [%s]: %s → %s, %d files" % (name, pair["old"], pair["new"], nfiles))
    env = ls.loopback_env()
    out = {"name": name, "tool": pair["tool"], "files": nfiles, "old": pair["old"], "new": pair["new"]}
    modes = (
        ("plain", [], []),
        ("sealed", ["--encrypt-to", keys["device"] + ".pub", "--encrypt-to", keys["publisher"] + ".pub",
                    "--recipient-key", keys["publisher"] + ".key"],
         ["--recipient-key", keys["device"] + ".key"]))
    common = {mode: ["--id", name, "--key", keys["sign"] + ".key", "--repo", os.path.join(work, name, "repo-" + mode)]
              for mode, _, _ in modes}
    for mode, extra, _ in modes:
        run([larder, "pack", old_tree, "--version", pair["old"], "--entry", bench_deltas.entry_file(old_tree)]
            + common[mode] + extra)
    servers = {}
    try:
        for mode, _, _ in modes:
            servers[mode] = Nginx(nginx_bin, os.path.join(work, name, "nginx-" + mode),
                                  os.path.join(work, name, "repo-" + mode))
            servers[mode].start()
        # The two forms alternate run by run, so that the machine's drift falls on both alike.
        installs = {mode: [] for mode, _, _ in modes}
        firsts = {mode: [] for mode, _, _ in modes}
        devices = {mode: [] for mode, _, _ in modes}
        for r in range(runs):
            for mode, _, device in modes:
                repo = os.path.join(work, name, "repo-" + mode)
                # Install: the first sync from file:// on tmpfs (the transfer is a copy).
                sb = os.path.join(work, name, "fsb-%s-%d" % (mode, r))
                run([larder, "init", "--root", sb, "--repo", "file://" + repo, "--public-key", keys["sign"] + ".pub"])
                secs, _ = timed([larder, "sync", "--root", sb] + device)
                installs[mode].append(secs)
                same_tree(os.path.join(sb, "packages", name, pair["old"]), old_tree, "%s (%s, file://)" % (name, mode))
                shutil.rmtree(sb)
                # First sync over nginx.
                sb = os.path.join(work, name, "sb-%s-%d" % (mode, r))
                run([larder, "init", "--root", sb, "--repo", servers[mode].base, "--public-key",
                     keys["sign"] + ".pub"], env=env)
                secs, _ = timed([larder, "sync", "--root", sb] + device, env=env)
                firsts[mode].append(secs)
                devices[mode].append(sb)
        for mode, extra, _ in modes:
            out["install_" + mode] = statistics.median(installs[mode])
            out["first_" + mode] = statistics.median(firsts[mode])
            run([larder, "pack", new_tree, "--version", pair["new"], "--entry", bench_deltas.entry_file(new_tree)]
                + common[mode] + extra)
        updates = {mode: [] for mode, _, _ in modes}
        for i in range(runs):
            for mode, _, device in modes:
                sb = devices[mode][i]
                m = servers[mode].mark()
                secs, text = timed([larder, "sync", "--root", sb, "--json"] + device, env=env)
                log = servers[mode].since(m)
                p = ls.find_package(json.loads(text), name) or {}
                if p.get("to") != pair["new"] or p.get("outcome") != "done":
                    die("%s (%s): the update did not reach %s: %s" % (name, mode, pair["new"], json.dumps(p)))
                updates[mode].append(secs)
                if i == 0:
                    out["update_bytes_" + mode] = sum(x["body_bytes_sent"] for x in log)
                    out["method_" + mode] = p.get("method")
                    same_tree(os.path.join(sb, "packages", name, pair["new"]), new_tree, "%s (%s)" % (name, mode))
        for mode, _, _ in modes:
            out["update_" + mode] = statistics.median(updates[mode])
    finally:
        for server in servers.values():
            server.stop()
    shutil.rmtree(os.path.join(work, name), ignore_errors=True)
    return out


def main(larder, wheel_of, runs, write):
    nginx_bin = ls.ensure_tool("nginx", "nginx-light")
    base = os.environ.get("BENCH_DIR") or "/dev/shm"
    work = tempfile.mkdtemp(prefix="larder-bench-encrypted.", dir=base)
    results = []
    try:
        keys = {k: os.path.join(work, "keys", k) for k in ("sign", "device", "publisher")}
        run([larder, "keygen", "--out", keys["sign"]])
        run([larder, "keygen", "--recipient", "--out", keys["device"]])
        run([larder, "keygen", "--recipient", "--out", keys["publisher"]])
        for pair in (p for p in bench_deltas.PAIRS if p["name"] in APPS):
            wheels = (wheel_of(pair["dist"], pair["old"]), wheel_of(pair["dist"], pair["new"]))
            results.append(measure(pair, wheels, larder, nginx_bin, work, keys, runs))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    machine = "%d CPUs, %s" % (os.cpu_count() or 0, " ".join(os.uname()[0:3:2]))

    def ms(v):
        return "%.0f ms" % (v * 1000)

    lines = ["", "Run on %s, %s. Command: `scripts/bench --encrypted`, medians of %d, release build; nginx on "
             "loopback; install from file:// on tmpfs." % (machine, time.strftime("%Y-%m-%d"), runs), "",
             "| app (build tool, files) | row | in the clear (baseline) | encrypted | encrypted / clear | target |",
             "|---|---|---|---|---|---|"]
    worst = 0.0
    for r in results:
        app = "%s %s → %s (%s, %d files)" % (r["name"], r["old"], r["new"], r["tool"], r["files"])
        for label, key, fmt in (("first sync over nginx", "first", ms), ("install (first sync from file://)",
                                                                           "install", ms),
                                ("update: wire bytes (by %s / %s)" % (r["method_plain"], r["method_sealed"]),
                                 "update_bytes", bench_deltas.kib),
                                ("update: time", "update", ms)):
            a, b = r[key + "_plain"], r[key + "_sealed"]
            ratio = b / a if a else float("inf")
            if key != "update":
                worst = max(worst, ratio)
            lines.append("| %s | %s | %s | %s | **%.2f×** | %s |" % (app, label, fmt(a), fmt(b), ratio,
                                                                       "≤ 1.1×" if key != "update" else "–"))
            app = ""
    lines += ["", "The encrypted repository seals every bundle, object, patch, file list and delta manifest "
              "(ChaCha20-Poly1305 in 64 KiB segments: a 16-byte tag per segment and a 16-byte header; a "
              "delta's patch file sealed once, whole) and names "
              "objects by their sealed bytes; a device checks each download's SHA-256, then opens it. "
              "Worst of the three judged rows: **%.2f×**." % worst, ""]
    ls.show_section(TITLE, BEGIN, END, lines, write, "--encrypted")
    return 0
