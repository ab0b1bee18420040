#!/usr/bin/env python3
"""Release-mode benchmarks, each figure next to a baseline measured in the same run.

Usage: scripts/bench [--quick] [-k RUNS] [--no-write]   every row in one table (bench_table.py)
       scripts/bench --install [--only large|web|app100|app400|app1000] [-k RUNS] [--runs-large N] [--runs-web N]
       scripts/bench --scale [--quick] [--no-write] [-k RUNS]   (see bench_scale.py)
       scripts/bench --net [--quick] [--no-write] [-k RUNS]     (see bench_net.py)
       scripts/bench --edge [--devices N] [--jobs N] [--no-write] (see bench_edge.py)
       scripts/bench --deltas [--no-write]                      (see bench_deltas.py)
       scripts/bench --offline [-k RUNS] [--no-write]           (see bench_offline.py; root)
       scripts/bench --on-demand [-k RUNS] [--no-write]         (see bench_on_demand.py)
       scripts/bench --encrypted [-k RUNS] [--no-write]         (see bench_encrypted.py)
       scripts/bench --pageload [-k RUNS] [--no-write]          (see bench_pageload.py)
       scripts/bench --delegations [-k RUNS] [--no-write]       (see bench_delegations.py)
       scripts/bench --telemetry [--devices N] [--screenshot PNG] [--no-write]  (see bench_telemetry.py)
(scripts/bench runs this file, scripts/benchmarks/bench.py; the modules named are beside it.)

Without a mode, the script measures every row (install, resolve, serve, network, memory, deltas,
scale), prints one table (figure, Larder, baseline, ratio, target, pass or miss), and writes it to
BENCHMARKS.md with a chart, BENCHMARKS.svg (gnuplot); each group also rewrites its own section of
BENCHMARKS.md with its details. `--quick` measures a reduced set (install of the web-asset tree on
tmpfs, resolve, serve, the network rows on loopback) in under two minutes once the release build
and the wheels are there, and writes nothing unless asked to by `--write`.

`--install` is the install rows alone: `larder install` (extract + verify every file) against
`bsdtar -xf` (extract only) and ZIPFoundation's unzipItem on the same zips (Larder's and Info-ZIP's),
on tmpfs and on a fresh ext4, for two real bundles:

  large  the whole unpacked PyPI wheel ansible==12.3.0 (21,488 files, 201 MiB uncompressed)
  web    the static web assets of the PyPI wheel jupyterlab==4.6.6 (its share/jupyter tree:
         lab/static, schemas and themes; 418 files, 16.5 MiB)

The wheels are pinned so runs are comparable. Each is downloaded once with
`pip download --no-deps --only-binary=:all: NAME==VERSION` into .bench-cache/ (git-ignored; set
BENCH_WHEEL_LARGE / BENCH_WHEEL_WEB to use a wheel you already have). Speed is reported, not
asserted: the script fails only when a step fails or gives a wrong result.

Environment: LARDER_BIN (a release larder; else `swift build -c release` here), BENCH_WHEEL_LARGE,
BENCH_WHEEL_WEB, BENCH_DIR (instead of /dev/shm), BENCH_EXT4_DIR (where the ext4 image goes;
/var/tmp), BENCH_ZIPFOUNDATION_BIN, LARDER_URLSESSION_BIN.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import larder_scripts as ls  # noqa: E402  (found through the line above)
from larder_scripts import die, say  # noqa: E402
import bench_install as bi  # noqa: E402  (a module beside this script)

ls.NAME = "bench"
REPO = ls.CHECKOUT


def urlsession_binary():
    """larder built from this checkout with LARDER_URLSESSION=1 (Package.swift then links the
    URLSession engine over FoundationNetworking, as on Apple platforms), release, into
    .build-urlsession/ (git-ignored);
    LARDER_URLSESSION_BIN instead names one already built."""
    given = os.environ.get("LARDER_URLSESSION_BIN")
    if given:
        return given
    ls._common("ensure_packages", "libcurl4-openssl-dev")
    scratch = os.path.join(REPO, ".build-urlsession")
    cmd = ["swift", "build", "-c", "release", "--static-swift-stdlib", "--product", "larder", "--scratch-path", scratch]
    say("bench: building the URLSession variant (LARDER_URLSESSION=1 %s)" % " ".join(cmd))
    env = dict(os.environ, LARDER_URLSESSION="1")
    if subprocess.run(cmd, cwd=REPO, stdout=sys.stderr, env=env).returncode != 0:
        die("the URLSession build failed (its output is above)")
    return os.path.join(scratch, "release", "larder")


def main():
    ap = argparse.ArgumentParser(prog="scripts/bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-k", "--runs", type=int, help="timed runs for every bundle (overrides the defaults)")
    for spec in bi.BUNDLES:
        ap.add_argument("--runs-" + spec["key"], type=int, dest="runs_" + spec["key"],
                        help="timed runs for the %s bundle (default %d)" % (spec["name"], spec["runs"]))
    ap.add_argument("--only", choices=[s["key"] for s in bi.BUNDLES], action="append",
                    help="bench only this bundle (repeatable; default: all)")
    ap.add_argument("--install", action="store_true",
                    help="instead: the install rows alone, on tmpfs and a fresh ext4, with the Info-ZIP zip too")
    ap.add_argument("--scale", action="store_true",
                    help="instead: how costs grow with 100, 1,000 and 10,000 packages and with one package of "
                         "~21,500 files (scripts/benchmarks/bench_scale.py); writes its table into BENCHMARKS.md")
    ap.add_argument("--net", action="store_true",
                    help="instead: the network rows over https to nginx, for each HTTP engine, next to curl "
                         "(scripts/benchmarks/bench_net.py); writes its table into BENCHMARKS.md")
    ap.add_argument("--edge", action="store_true",
                    help="instead: DEVICES sandboxes sync three releases through Varnish in front of nginx "
                         "(scripts/benchmarks/bench_edge.py); writes its table into BENCHMARKS.md")
    ap.add_argument("--deltas", action="store_true",
                    help="instead: the wire bytes of updates between real consecutive releases, by delta and by "
                         "objects, against the bundle and the tar-patch floor (scripts/benchmarks/bench_deltas.py); "
                         "writes its table into BENCHMARKS.md")
    ap.add_argument("--on-demand", action="store_true",
                    help="a device holding 10 of 10,000 on-demand packages against an index of those 10 "
                         "(scripts/benchmarks/bench_on_demand.py); writes its table into BENCHMARKS.md")
    ap.add_argument("--encrypted", action="store_true",
                    help="encrypted packages against the same releases in the clear: first sync, install, update "
                         "bytes (scripts/benchmarks/bench_encrypted.py); writes its table into BENCHMARKS.md")
    ap.add_argument("--pageload", action="store_true",
                    help="real apps' pages in headless Chromium through larder serve against nginx: to the load "
                         "event and first contentful paint, cold and warm (scripts/benchmarks/bench_pageload.py); "
                         "writes its table into BENCHMARKS.md")
    ap.add_argument("--delegations", action="store_true",
                    help="a sync of 1,000 packages in 20 delegated teams against one key's (bench_delegations.py)")
    ap.add_argument("--telemetry", action="store_true",
                    help="the collector under 100,000 devices' events, SQLite and PostgreSQL side by side "
                         "(bench_telemetry.py)")
    ap.add_argument("--screenshot", help="with --telemetry: render the HTML report into this PNG too")
    ap.add_argument("--offline", action="store_true",
                    help="instead: how fast a forwarded request fails in a network namespace with no route or "
                         "resolver, beside curl (root)")
    ap.add_argument("--devices", type=int,
                    help="with --edge: the number of devices (default 1000); with --telemetry: 100000")
    ap.add_argument("--jobs", type=int, default=16, help="with --edge: syncs at once (default 16)")
    ap.add_argument("--quick", action="store_true",
                    help="the whole table: a reduced set in under two minutes, written only with --write; with "
                         "--scale: 100 and 1,000 packages only; with --net: the default engine only")
    ap.add_argument("--no-write", action="store_true",
                    help="print the table only (the default with --quick)")
    ap.add_argument("--write", action="store_true", help="with --quick: write BENCHMARKS.md and BENCHMARKS.svg too")
    a = ap.parse_args()
    if a.runs is not None and a.runs < 1:
        die("the number of runs must be at least 1")
    if not (a.install or a.scale or a.net or a.edge or a.deltas or a.offline or a.on_demand or a.encrypted
            or a.pageload or a.delegations or a.telemetry):
        import bench_table
        write = a.write or not (a.quick or a.no_write)
        sys.exit(bench_table.main(a.quick, a.runs, write))
    if a.on_demand:
        import bench_on_demand
        scale = ls._common("swift_product_bin", "larder-bench-scale", "release")
        nginx_bin = ls.ensure_tool("nginx", "nginx-light")
        sys.exit(bench_on_demand.main(ls.larder_binary("release"), scale, a.runs or 5, not a.no_write, nginx_bin,
                                      bi.wheel_path(bi.BUNDLES[1]), bi.pick_tree))
    if a.encrypted:
        import bench_encrypted
        sys.exit(bench_encrypted.main(ls.larder_binary("release"), bi.wheel_of, a.runs or 5, not a.no_write))
    if a.telemetry:
        import bench_telemetry
        sys.exit(bench_telemetry.main(ls.larder_binary("release"), a.devices or 100000, not a.no_write,
                                      a.screenshot))
    if a.delegations:
        import bench_delegations
        scale = ls._common("swift_product_bin", "larder-bench-scale", "release")
        sys.exit(bench_delegations.main(ls.larder_binary("release"), scale, a.runs or 5, not a.no_write))
    if a.pageload:
        import bench_pageload
        sys.exit(bench_pageload.main(ls.larder_binary("release"), bi.wheel_of, a.runs or 11, not a.no_write))
    if a.offline:
        import bench_offline
        sys.exit(bench_offline.main(ls.larder_binary("release"), a.runs or 9, not a.no_write))
    if a.deltas:
        import bench_deltas
        bench_deltas.main(ls.larder_binary("release"), bi.wheel_of, not a.no_write)
        return
    if a.edge:
        import bench_edge
        sys.exit(bench_edge.main(ls.larder_binary("release"), a.devices or 1000, a.jobs, not a.no_write))
    if a.net:
        import bench_net
        engines = [("AsyncHTTPClient", ls.larder_binary("release"))]
        if not a.quick:
            engines.append(("URLSession", urlsession_binary()))
        bench_net.main(engines, bi.wheel_path(bi.BUNDLES[0]), bi.wheel_path(bi.BUNDLES[1]), bi.pick_tree, a.quick, a.runs or 5,
                       not a.no_write)
        return
    if a.scale:
        import bench_scale
        larder = ls.larder_binary("release")
        scale = ls._common("swift_product_bin", "larder-bench-scale", "release")
        sizes = [100, 1000] if a.quick else [100, 1000, 10000]
        bench_scale.main(larder, scale, lambda: bi.wheel_path(bi.BUNDLES[0]), a.quick, sizes, a.runs or 7,
                         not a.no_write)
        return
    plan = []
    for spec in bi.BUNDLES:
        if a.only and spec["key"] not in a.only:
            continue
        n = getattr(a, "runs_" + spec["key"])
        if n is None:
            n = a.runs if a.runs is not None else spec["runs"]
        if n < 1:
            die("the number of runs must be at least 1")
        plan.append((spec, n))
    load_start = bi.loadavg()
    say("bench: load average at start (1, 5, 15 min): %s on %d CPUs" % (load_start, os.cpu_count() or 0))
    ls.ensure_tool("bsdtar", "libarchive-tools")
    ls.ensure_tool("zip", "zip")
    ls.ensure_tool("/usr/bin/time", "time")
    larder = ls.larder_binary("release")
    base = os.environ.get("BENCH_DIR") or "/dev/shm"
    if not os.path.isdir(base) or not os.access(base, os.W_OK):
        die("%s is not a writable directory (set BENCH_DIR)" % base)
    zf = bi.zipfoundation_binary()
    results = []
    for spec, runs in plan:
        work = tempfile.mkdtemp(prefix="larder-bench.", dir=base)
        out = tempfile.mkdtemp(prefix="larder-bench-out.", dir=base)
        places = bi.places_for(spec, out)
        try:
            results.append(bi.bench(larder, zf, work, spec, runs, places))
        finally:
            shutil.rmtree(work, ignore_errors=True)
            shutil.rmtree(out, ignore_errors=True)
    load_end = bi.loadavg()
    say()
    say("bench: load average at end (1, 5, 15 min): %s" % load_end)
    bi.summary(larder, results, load_start, load_end)



if __name__ == "__main__":
    ls.main(main)
