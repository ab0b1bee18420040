"""`scripts/bench --on-demand`: what on-demand packages cost a device, beside what it holds.

A super-app's index lists thousands of mini-apps; a device holds a few. With the release build,
on tmpfs, over file:// (the index and what is fetched are the same bytes over HTTP):

  rows "10 of 10,000": larder-bench-scale packs 10,000 on-demand packages (10 small files each),
      once in a sharded index (`pack --index-layout sharded`: the signed index names 1,024 shards
      and a catalog; a device reads the shards of what it holds) and once inline (every entry in
      the one signed document, as before shards); a device accepts the index (its first sync,
      which installs nothing), fetches 10 of them (`larder fetch` of the 10); then one of those
      gets a new version and a device that held the 10 under the previous index syncs.
  baseline "10 of 10": the same 10 packages (eager) alone in an index; the device's first sync
      installs them, then the same update and sync.
  rows "first use": a real app's web tree (the jupyterlab wheel, as `--net` uses) packed on
      demand, served by nginx (loopback, then through the emulated link of `--net`); a device that
      accepted the index asks `larder serve` for the app's entry file: time to the answer, the
      install included, beside curl fetching the bundle from the same nginx.

Each figure is the median of RUNS runs (the update row: one per run, on a fresh copy of the
device). The target (issue 30): the 10,000-package index costs a device holding 10 about what the
index of those 10 costs; the sharded rows are judged, the inline ones shown for comparison.
"""
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

import larder_scripts as ls
from larder_scripts import die

TITLE = "## On-demand packages: a device holding 10 of 10,000 (`scripts/bench --on-demand`)"
BEGIN = "<!-- bench-on-demand:begin -->"
END = "<!-- bench-on-demand:end -->"
HELD = 10


def timed(args):
    t = time.perf_counter()
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        die("failed (exit %d): %s\n%s%s" % (p.returncode, " ".join(args), p.stdout[-2000:], p.stderr[-2000:]))
    return time.perf_counter() - t


def ids():
    return ["pkg-%05d" % i for i in range(HELD)]


def measure(larder, scale, work, total, on_demand, runs, sharded=False):
    repo = os.path.join(work, "repo-%d%s" % (total, "-sharded" if sharded else ""))
    key = os.path.join(work, "key")
    flags = (["--on-demand"] if on_demand else []) + (["--sharded"] if sharded else [])
    subprocess.run([scale, repo, key + ".key", "--packages", str(total)] + flags, check=True,
                   stdout=subprocess.PIPE)
    url = "file://" + repo
    first, plan, update, accept = [], [], [], []
    for r in range(runs):
        sb = os.path.join(work, "sb-%d-%d" % (total, r))
        subprocess.run([larder, "init", "--root", sb, "--repo", url, "--public-key", key + ".pub"], check=True,
                       stdout=subprocess.PIPE)
        if on_demand:
            accept.append(timed([larder, "sync", "--root", sb]))  # accept the index; installs nothing
            first.append(timed([larder, "fetch", "--root", sb] + ids()))
        else:
            first.append(timed([larder, "sync", "--root", sb]))
        plan.append(timed([larder, "plan", "--root", sb]))
        shutil.rmtree(sb)
    # One held package's update, then a sync: each run's device accepted the index and holds the
    # 10 when the update is published (as a device that synced before it would), then syncs.
    devices = []
    for r in range(runs):
        sb = os.path.join(work, "sbu-%d-%d" % (total, r))
        subprocess.run([larder, "init", "--root", sb, "--repo", url, "--public-key", key + ".pub"], check=True,
                       stdout=subprocess.PIPE)
        subprocess.run([larder, "sync", "--root", sb], check=True, stdout=subprocess.PIPE)
        if on_demand:
            subprocess.run([larder, "fetch", "--root", sb] + ids(), check=True, stdout=subprocess.PIPE)
        devices.append(sb)
    subprocess.run([scale, repo, key + ".key", "--packages", str(total), "--only", "3", "--version", "1.1.0"]
                   + flags, check=True, stdout=subprocess.PIPE)
    for sb in devices:
        update.append(timed([larder, "sync", "--root", sb]))
        shutil.rmtree(sb)
    size = os.path.getsize(os.path.join(repo, "index.json"))
    catalog = 0
    if sharded:
        with open(os.path.join(repo, "index.json")) as f:
            catalog = json.load(f)["shards"]["catalog"]["size"]
    return {"first": statistics.median(first), "plan": statistics.median(plan),
            "update": statistics.median(update), "index": size, "catalog": catalog,
            "accept": statistics.median(accept) if accept else None}


def first_use(larder, nginx_bin, web_wheel, pick_tree, work, runs):
    """First-use latency of a real app's on-demand package through `larder serve`: from the
    first request for its entry file to its answer (the install included), beside curl fetching
    the package's bundle from the same nginx; on loopback and through the emulated link."""
    import zipfile
    from larder_scripts.nginx_server import Nginx
    from link_relay import LinkRelay
    import bench_net
    unpacked = os.path.join(work, "wheel")
    with zipfile.ZipFile(web_wheel) as z:
        z.extractall(unpacked)
    tree, _ = pick_tree(unpacked)
    repo = os.path.join(work, "fu-repo")
    key = os.path.join(work, "key")
    entry = bench_net.entry_of(tree)
    subprocess.run([larder, "pack", tree, "--repo", repo, "--id", "app", "--version", "1.0.0", "--key", key + ".key",
                    "--install", "on-demand", "--entry", entry], check=True, stdout=subprocess.PIPE)
    with open(os.path.join(repo, "index.json")) as f:
        bundle = next(e for e in json.load(f)["packages"] if e["id"] == "app")["bundle"]
    nginx = Nginx(nginx_bin, os.path.join(work, "fu-nginx"), repo)
    nginx.start()
    relay = LinkRelay(nginx.port, delay_ms=bench_net.LINK_DELAY_MS, rate_mbit=bench_net.LINK_RATE_MBIT)
    relay.start()
    env = ls.loopback_env()
    rows = []
    try:
        for name, port in (("loopback", nginx.port), ("emulated link (%d ms each way, %g Mbit/s)" % (
                bench_net.LINK_DELAY_MS, bench_net.LINK_RATE_MBIT), relay.port)):
            base = "http://127.0.0.1:%d/" % port
            seed = os.path.join(work, "fu-seed-%d" % port)
            subprocess.run([larder, "init", "--root", seed, "--repo", base, "--public-key", key + ".pub"], check=True,
                           stdout=subprocess.PIPE, env=env)
            subprocess.run([larder, "sync", "--root", seed], check=True, stdout=subprocess.PIPE, env=env)
            firsts, curls = [], []
            for r in range(runs):
                sb = os.path.join(work, "fu-sb-%d-%d" % (port, r))
                shutil.copytree(seed, sb, symlinks=True)
                log = os.path.join(work, "fu-serve-%d-%d.log" % (port, r))
                with open(log, "w") as out:
                    serve = subprocess.Popen([larder, "serve", "--root", sb, "--listen", "127.0.0.1:0",
                                              "--first-use-deadline", "600"], stdout=out, stderr=subprocess.STDOUT,
                                             env=env)
                try:
                    gport = None
                    for _ in range(100):
                        text = open(log).read()
                        if "listening on" in text:
                            gport = int(text.split("listening on http://127.0.0.1:")[1].split()[0])
                            break
                        time.sleep(0.05)
                    if gport is None:
                        die("larder serve did not start: " + open(log).read()[-2000:])
                    url = "http://127.0.0.1:%d/app/%s" % (gport, entry)
                    t = time.perf_counter()
                    p = subprocess.run(["curl", "-sf", "-o", "/dev/null", url], env=env)
                    firsts.append(time.perf_counter() - t)
                    if p.returncode != 0:
                        die("the first request failed (curl %d): %s" % (p.returncode, open(log).read()[-2000:]))
                finally:
                    serve.terminate()
                    serve.wait()
                shutil.rmtree(sb)
                t = time.perf_counter()
                subprocess.run(["curl", "-sf", "-o", os.path.join(work, "bundle.zip"), base + bundle["path"]],
                               check=True, env=env)
                curls.append(time.perf_counter() - t)
            rows.append((name, statistics.median(firsts), statistics.median(curls)))
    finally:
        relay.stop()
        nginx.stop()
    files = sum(len(fs) for _, _, fs in os.walk(tree))
    return rows, files, bundle["size"]


def main(larder, scale, runs, write, nginx_bin=None, web_wheel=None, pick_tree=None):
    base = os.environ.get("BENCH_DIR") or "/dev/shm"
    work = tempfile.mkdtemp(prefix="larder-bench-on-demand.", dir=base)
    try:
        subprocess.run([larder, "keygen", "--out", os.path.join(work, "key")], check=True, stdout=subprocess.PIPE)
        sharded = measure(larder, scale, work, 10000, True, runs, sharded=True)
        inline = measure(larder, scale, work, 10000, True, runs)
        small = measure(larder, scale, work, HELD, False, runs)
        fu_rows, fu_files, fu_bundle = first_use(larder, nginx_bin, web_wheel, pick_tree, work, runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    machine = "%d CPUs, %s" % (os.cpu_count() or 0, " ".join(os.uname()[0:3:2]))

    def ms(v):
        return "%.0f ms" % (v * 1000)

    def row(name, key, note):
        a, b, c = sharded[key], inline[key], small[key]
        return "| %s | %s | %s | %s | **%.2f×** | %s |" % (name, ms(a), ms(b), ms(c), a / c, note)

    ratios = [sharded[k] / small[k] for k in ("first", "update", "plan")]
    lines = ["", "Run on %s, %s. Command: `scripts/bench --on-demand`, medians of %d, release build, tmpfs, "
             "file://." % (machine, time.strftime("%Y-%m-%d"), runs), "",
             "| figure | 10 held of 10,000, sharded index (%.0f KB signed, catalog %.0f KB) | 10 held of 10,000, "
             "inline index (%.1f MB) | baseline: the 10 alone (index %.1f KB) | sharded / baseline | note |"
             % (sharded["index"] / 1e3, sharded["catalog"] / 1e3, inline["index"] / 1e6, small["index"] / 1e3),
             "|---|---|---|---|---|---|",
             row("install the 10 (`larder fetch` of them; baseline: first `sync`)", "first",
                 "sharded: the 10 shards of the 10, then the 10"),
             row("sync after one held package's update", "update", "sharded: the index and one new shard"),
             row("`larder plan` (reading and planning the index)", "plan",
                 "sharded: the index and the cached shards of the 10"),
             "| accepting the index (first sync, installs nothing) | %s | %s | – | – | sharded: the index and the "
             "catalog of 10,000 rows, once (a new catalog only when packages come, go or change routes) |"
             % (ms(sharded["accept"]), ms(inline["accept"])),
             "", "Target (issue 30): a device holding 10 of 10,000 costs about what an index of those 10 costs. "
             "**Sharded: %.2f–%.2f× the baseline, %.0f–%.0f ms more; inline: %.0f–%.0f×.** "
             % (min(ratios), max(ratios), min(sharded[k] - small[k] for k in ("first", "update", "plan")) * 1000,
                max(sharded[k] - small[k] for k in ("first", "update", "plan")) * 1000,
                min(inline[k] / small[k] for k in ("first", "update", "plan")),
                max(inline[k] / small[k] for k in ("first", "update", "plan")))
             + "What remains is the signed index's own size: it names each of its 1,024 shards by path, size and "
             "SHA-256 (%.0f KB against the baseline's %.1f KB), decoded on every plan. "
             % (sharded["index"] / 1e3, small["index"] / 1e3)
             + "The inline index makes every device read, verify and decode all 10,000 entries on each new index; "
             "the sharded one signs only the eager entries and the shards' digests, and the device reads the "
             "shards of what it holds. The catalog (what first use and preload need of packages not held) is "
             "read once per new catalog, not per publication: the accept row.", ""]
    lines += ["", "| first use of a real app (%d files, bundle %.1f MB) | larder serve: first request, install "
              "included | curl: the bundle from nginx | ratio | target |" % (fu_files, fu_bundle / 1e6),
              "|---|---|---|---|---|"]
    for name, a, b in fu_rows:
        lines.append("| %s | %.0f ms | %.0f ms | %.2f× | – |" % (name, a * 1000, b * 1000, a / b))
    lines += ["", "First use: a device that accepted the index but does not hold the on-demand package asks "
              "`larder serve` for its entry file; the gateway installs it (a sync of that package: its list, "
              "then the bundle or its objects, verified and placed) and answers. curl only downloads the bundle "
              "from the same nginx (no verification, nothing placed). Medians of %d, each on a fresh copy of the "
              "device." % runs, ""]
    ls.show_section(TITLE, BEGIN, END, lines, write, "--on-demand")
    return 0
