"""The install rows of `scripts/bench`, and what every bench mode shares: the pinned PyPI wheels
(downloaded once into .bench-cache/), the trees taken from them, and small timing helpers.

`larder install` (extract + verify every file) is timed against `bsdtar -xf` (extracts, verifies
nothing) and against ZIPFoundation's `FileManager.unzipItem(at:to:)` (a small release-built
Swift program, scripts/benchmarks/baselines/zipfoundation-unzip, built into
.build-zipfoundation/), on the same zip, in fresh directories, alternating which tool goes first; on tmpfs and on a fresh ext4
(a loop-mounted image made for the run, when the machine allows mounting one). The warm-up run
checks every extracted tree byte for byte against the source tree.
"""
import glob
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
import zipfile

import larder_scripts as ls
from larder_scripts import die, run, say

REPO = ls.CHECKOUT
CACHE = os.path.join(REPO, ".bench-cache")
# The bundles, in the order they run. Wheels are pinned so runs are comparable.
BUNDLES = [
    {"key": "large", "name": "large", "dist": "ansible", "version": "12.3.0", "pkg": "ansible-tree",
     "runs": 3, "env": "BENCH_WHEEL_LARGE", "tree": "whole wheel", "entry": "first file"},
    {"key": "web", "name": "web assets", "dist": "jupyterlab", "version": "4.6.6", "pkg": "jupyterlab-static",
     "runs": 5, "env": "BENCH_WHEEL_WEB", "tree": "share/jupyter", "entry": "html"},
    # Typical single-page apps' bundles (a hundred to a thousand files, 5-55 MB), as three real
    # apps from three bundlers ship them: tmpfs only, Larder's zip only, target TYPICAL_TARGET.
    {"key": "app100", "name": "prefect UI (Vue)", "dist": "prefect", "version": "3.9.1", "pkg": "prefect-ui",
     "runs": 7, "env": "BENCH_WHEEL_APP100", "tree": "prefect/server/ui", "entry": "html", "typical": True},
    {"key": "app400", "name": "mlflow UI (webpack)", "dist": "mlflow", "version": "3.17.0", "pkg": "mlflow-ui",
     "runs": 7, "env": "BENCH_WHEEL_APP400", "tree": "mlflow/server/js/build", "entry": "html", "typical": True},
    {"key": "app1000", "name": "gradio front end (Vite)", "dist": "gradio", "version": "6.29.1", "pkg": "gradio-ui",
     "runs": 5, "env": "BENCH_WHEEL_APP1000", "tree": "gradio/templates/frontend", "entry": "html", "typical": True},
]
TARGET = 0.70
TYPICAL_TARGET = 0.80


def target_of(spec):
    """The install target of a bundle: ratio to bsdtar at most this."""
    return TYPICAL_TARGET if spec.get("typical") else TARGET


def places_for(spec, out, quick=False):
    """Where a bundle is timed: tmpfs (`out`), and a fresh ext4 unless quick or a typical bundle."""
    places = [("tmpfs" if fs_type(out) == "tmpfs" else fs_type(out), out)]
    if not quick and not spec.get("typical"):
        places.append(("ext4", FreshExt4(ext4_parent(), 2048 if spec["key"] == "large" else 512)))
    return places


def pip_command():
    """A pip to download wheels with: this interpreter's, else Debian's python3-pip (installed
    when missing; `pip download` is allowed where PEP 668 refuses `pip install`)."""
    if subprocess.run([sys.executable, "-m", "pip", "--version"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode == 0:
        return [sys.executable, "-m", "pip"]
    ls.ensure_tool("/usr/bin/pip3", "python3-pip")
    return ["/usr/bin/python3", "-m", "pip"]


def wheel_of(dist, version):
    """The wheel of dist==version, downloaded into .bench-cache/ once."""
    return wheel_path({"dist": dist, "version": version, "env": "BENCH_WHEEL_%s_%s" % (
        dist.upper().replace("-", "_"), version.replace(".", "_"))})


def wheel_path(spec):
    w = os.environ.get(spec["env"])
    if w:
        if not os.path.isfile(w):
            die("%s=%s is not a file" % (spec["env"], w))
        return w
    # A wheel's file name spells the distribution with underscores (dagster_webserver-…).
    names = {spec["dist"], spec["dist"].replace("-", "_")}
    have = sorted(w for n in names for w in glob.glob(os.path.join(CACHE, "%s-%s-*.whl" % (n, spec["version"]))))
    if have:
        return have[-1]
    os.makedirs(CACHE, exist_ok=True)
    req = "%s==%s" % (spec["dist"], spec["version"])
    say("bench: downloading the %s wheel into .bench-cache/ (once)" % req)
    p = subprocess.run(pip_command() + ["download", "--no-deps", "--only-binary=:all:", "-d", CACHE, req],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    have = sorted(w for n in names for w in glob.glob(os.path.join(CACHE, "%s-%s-*.whl" % (n, spec["version"]))))
    if p.returncode != 0 or not have:
        die("pip download %s failed:\n%s" % (req, p.stdout[-2000:]))
    return have[-1]


def tree_stats(root):
    n = size = 0
    for d, _, files in os.walk(root):
        for f in files:
            n += 1
            size += os.lstat(os.path.join(d, f)).st_size
    return n, size


def pick_tree(unpacked):
    """The directory holding the most files directly (the bundler's output), widened to the
    wheel's share/jupyter tree when that alone has fewer than 1000 files."""
    # Ties (the wheel also holds a copy inside the Python package) go to the share/ one.
    best = max(((len(files), "/share/jupyter/" in d + "/", d) for d, _, files in os.walk(unpacked)))[2]
    chosen = best
    if tree_stats(best)[0] < 1000:
        p = best
        while p != unpacked and not p.endswith(os.path.join("share", "jupyter")):
            p = os.path.dirname(p)
        if p != unpacked:
            chosen = p
    return chosen, best


def timed(args):
    t = time.perf_counter()
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t
    if p.returncode != 0:
        die("failed (exit %d): %s\n%s%s" % (p.returncode, " ".join(args), p.stdout, p.stderr))
    return dt


def peak_rss_kb(args):
    p = subprocess.run(["/usr/bin/time", "-v"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        die("failed (exit %d): %s\n%s" % (p.returncode, " ".join(args), p.stderr[-2000:]))
    for line in p.stderr.splitlines():
        if "Maximum resident set size" in line:
            return int(line.split(":")[1])
    die("/usr/bin/time -v printed no peak RSS")


def same_tree(a, b):
    """Every file of a equals the one in b, and nothing more."""
    fa = {}
    for d, _, files in os.walk(a):
        for f in files:
            fa[os.path.relpath(os.path.join(d, f), a)] = os.path.join(d, f)
    fb = set()
    for d, _, files in os.walk(b):
        for f in files:
            fb.add(os.path.relpath(os.path.join(d, f), b))
    if set(fa) != fb:
        return "file sets differ: %d vs %d files" % (len(fa), len(fb))
    for rel, p in fa.items():
        with open(p, "rb") as x, open(os.path.join(b, rel), "rb") as y:
            if x.read() != y.read():
                return "%s differs" % rel
    return None


def cpu_model():
    """The processor's name from /proc/cpuinfo, for the figures' machine line."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def loadavg():
    try:
        return "%.2f %.2f %.2f" % os.getloadavg()
    except OSError:
        return "unavailable"



def zipfoundation_binary():
    """The ZIPFoundation baseline (scripts/benchmarks/baselines/zipfoundation-unzip), built in release
    mode into .build-zipfoundation/ (git-ignored) once; BENCH_ZIPFOUNDATION_BIN names one already built."""
    given = os.environ.get("BENCH_ZIPFOUNDATION_BIN")
    if given:
        return given
    package = os.path.join(ls.SCRIPTS, "benchmarks", "baselines", "zipfoundation-unzip")
    scratch = os.path.join(REPO, ".build-zipfoundation")
    cmd = ["swift", "build", "-c", "release", "--static-swift-stdlib", "--package-path", package,
           "--scratch-path", scratch]
    say("bench: building the ZIPFoundation baseline (%s)" % " ".join(cmd))
    if subprocess.run(cmd, cwd=REPO, stdout=sys.stderr).returncode != 0:
        die("the ZIPFoundation baseline did not build (its output is above)")
    return os.path.join(scratch, "release", "zipfoundation-unzip")


def fs_type(path):
    return subprocess.run(["stat", "-f", "-c", "%T", path], stdout=subprocess.PIPE, text=True).stdout.strip()


class FreshExt4:
    """A new ext4 filesystem on a loop-mounted image in `parent` (on disk), for one bundle's runs:
    what an app's first install meets, rather than a directory that has seen many runs. `mount`
    needs root and a loop device; `reason` says why not when the machine does not allow it."""

    def __init__(self, parent, mib):
        self.image = os.path.join(parent, "larder-bench-ext4.img")
        self.mount = os.path.join(parent, "larder-bench-ext4")
        self.mib = mib
        self.mounted = False

    def __enter__(self):
        mkfs = shutil.which("mkfs.ext4") or "/usr/sbin/mkfs.ext4"
        os.makedirs(self.mount, exist_ok=True)
        with open(self.image, "wb") as f:
            f.truncate(self.mib << 20)
        for args in ([mkfs, "-q", "-F", self.image], ["mount", "-o", "loop", self.image, self.mount]):
            p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if p.returncode != 0:
                self.reason = "%s: %s" % (" ".join(args[:2]), p.stdout.strip()[-200:])
                self.__exit__()
                return None
        self.mounted = True
        return self.mount

    def __exit__(self, *exc):
        if self.mounted:
            subprocess.run(["umount", self.mount])
            self.mounted = False
        shutil.rmtree(self.mount, ignore_errors=True)
        if os.path.exists(self.image):
            os.remove(self.image)


def ext4_parent():
    """Where the ext4 images go: BENCH_EXT4_DIR, else /var/tmp (a disk, not tmpfs)."""
    return os.environ.get("BENCH_EXT4_DIR") or "/var/tmp"


def prepare(larder, work, spec):
    """Unpacks the wheel of `spec`, packs its tree with `larder pack` and zips it with Info-ZIP;
    returns what the timing needs."""
    pkg = spec["pkg"]
    wheel = wheel_path(spec)
    unpacked = os.path.join(work, "wheel")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(unpacked)
    say()
    say("bench [%s]: %s" % (spec["name"], os.path.basename(wheel)))
    if spec["tree"] == "whole wheel":
        tree = unpacked
        nfiles, nbytes = tree_stats(tree)
        rel = "(whole wheel)"
        say("  tree   %s: %d files, %.1f MiB" % (rel, nfiles, nbytes / 2**20))
    elif spec["tree"] != "share/jupyter":
        # A named directory of the wheel: the app's own build output.
        rel = spec["tree"]
        tree = os.path.join(unpacked, rel)
        if not os.path.isdir(tree):
            die("%s has no %s/" % (os.path.basename(wheel), rel))
        nfiles, nbytes = tree_stats(tree)
        say("  tree   %s: %d files, %.1f MiB" % (rel, nfiles, nbytes / 2**20))
    else:
        tree, densest = pick_tree(unpacked)
        nfiles, nbytes = tree_stats(tree)
        rel = os.path.relpath(tree, unpacked)
        say("  tree   %s: %d files, %.1f MiB (densest directory: %s, %d files)" % (
            rel, nfiles, nbytes / 2**20, os.path.relpath(densest, unpacked), len(os.listdir(densest))))
    entry = first_file(tree) if spec["entry"] == "first file" else first_html(tree)
    say("  entry  %s" % entry)
    run([larder, "keygen", "--out", os.path.join(work, "k")])
    repo = os.path.join(work, "repo")
    run([larder, "pack", tree, "--repo", repo, "--id", pkg, "--version", "1.0.0", "--key", os.path.join(work, "k.key"),
         "--entry", entry, "--deltas", "0"])
    vdir = os.path.join(repo, "packages", pkg, "1.0.0")
    bundles = {"larder pack": os.path.join(work, "larder.zip"), "zip -qr": os.path.join(work, "infozip.zip")}
    shutil.copy(os.path.join(vdir, "bundle.zip"), bundles["larder pack"])
    run(["zip", "-qr", bundles["zip -qr"], "."], cwd=tree)
    for name, b in bundles.items():
        with zipfile.ZipFile(b) as z:
            methods = {i.compress_type for i in z.infolist()}
            entries = len(z.infolist())
        say("  bundle %-11s %.1f MiB, %d entries, methods %s" % (
            name, os.path.getsize(b) / 2**20, entries,
            "+".join(sorted({0: "store", 8: "deflate"}.get(m, str(m)) for m in methods))))
    return {"spec": spec, "wheel": os.path.basename(wheel), "rel": rel, "tree": tree, "nfiles": nfiles,
            "nbytes": nbytes, "bundles": bundles, "files_json": os.path.join(vdir, "files.json")}


def bench(larder, zf, work, spec, runs, places, infozip=True):
    """Packs one bundle and times bsdtar, larder install and (when `zf`) ZIPFoundation on it in
    each place ((label, directory) pairs, or (label, FreshExt4) for a filesystem made for this
    bundle); returns the results (exits on any failure or wrong tree)."""
    d = prepare(larder, work, spec)
    pkg, tree = spec["pkg"], d["tree"]
    infozip = infozip and not spec.get("typical")
    zf = None if spec.get("typical") else zf
    bundles = d["bundles"] if infozip else {"larder pack": d["bundles"]["larder pack"]}

    def args_of(tool, bundle, out):
        if tool == "bsdtar":
            return ["bsdtar", "-xf", bundle, "-C", out]
        if tool == "bsdtar+syncfs":
            # As durable as larder install, which calls syncfs(2) on the tree before it reports.
            return ["sh", "-c", 'bsdtar -xf "$1" -C "$2" && sync -f "$2"', "sh", bundle, out]
        if tool == "zipfoundation":
            return [zf, bundle, out]
        return [larder, "install", bundle, "--root", out, "--id", pkg, "--version", "1.0.0", "--files",
                d["files_json"]]

    def result_dir(tool, out):
        return os.path.join(out, "packages", pkg, "1.0.0") if tool == "larder" else out

    times, skipped = {}, {}
    for label, place in places:
        fresh = None
        if isinstance(place, FreshExt4):
            fresh = place
            place = fresh.__enter__()
            if place is None:
                skipped[label] = fresh.reason
                say("  %s: not measured (%s)" % (label, fresh.reason))
                continue
        try:
            times[label] = {"fs": fs_type(place)}
            for name, bundle in bundles.items():
                tools = ["bsdtar", "larder"] + (["zipfoundation"] if zf and name == "larder pack" else []) + (
                    ["bsdtar+syncfs"] if fresh and name == "larder pack" else [])
                got = times[label][name] = {t: [] for t in tools}
                for r in range(runs + 1):
                    order = tools[r % len(tools):] + tools[:r % len(tools)]
                    for tool in order:
                        out = os.path.join(place, "out-" + tool)
                        shutil.rmtree(out, ignore_errors=True)
                        if tool != "larder":
                            os.makedirs(out)
                        subprocess.run(["sync"])
                        dt = timed(args_of(tool, bundle, out))
                        if r == 0:
                            problem = same_tree(tree, result_dir(tool, out))
                            if problem:
                                die("%s of the %s bundle (%s, %s) gave a wrong tree: %s" % (
                                    tool, name, spec["name"], label, problem))
                        else:
                            got[tool].append(dt)
                        shutil.rmtree(out, ignore_errors=True)
                say("  %-6s %-11s %s" % (label, name, "; ".join(
                    "%s %.1f ms" % (t, 1000 * statistics.median(v)) for t, v in got.items())))
        finally:
            if fresh:
                fresh.__exit__()
    rss = {}
    x, y = os.path.join(work, "rss-bsdtar"), os.path.join(work, "rss-larder")
    os.makedirs(x)
    rss["bsdtar"] = peak_rss_kb(args_of("bsdtar", d["bundles"]["larder pack"], x)) / 1024
    rss["larder"] = peak_rss_kb(args_of("larder", d["bundles"]["larder pack"], y)) / 1024
    shutil.rmtree(x, ignore_errors=True)
    shutil.rmtree(y, ignore_errors=True)
    return {"spec": spec, "wheel": d["wheel"], "rel": d["rel"], "nfiles": d["nfiles"], "nbytes": d["nbytes"],
            "runs": runs, "times": times, "skipped": skipped, "rss": rss}


def summary(larder, results, load_start, load_end):
    """The install-only report of `scripts/bench --install`."""
    head = git_describe()
    lines = [
        "larder bench (checkout %s; larder %s from %s; %s, %d CPUs)" % (
            head, run([larder, "version"]).strip(), "LARDER_BIN" if os.environ.get("LARDER_BIN") else "swift build -c release",
            platform.machine(), os.cpu_count() or 0),
        "load average (1, 5, 15 min): start %s, end %s" % (load_start, load_end),
    ]
    for res in results:
        spec = res["spec"]
        lines.append("")
        lines.append("[%s] %s from %s: %d files, %.1f MiB; medians of %d runs after 1 warm-up" % (
            spec["name"], res["rel"], res["wheel"], res["nfiles"], res["nbytes"] / 2**20, res["runs"]))
        for place, by_bundle in res["times"].items():
            for name, t in by_bundle.items():
                if name == "fs":
                    continue
                b = statistics.median(t["bsdtar"])
                lr = statistics.median(t["larder"])
                goal = target_of(spec)
                line = "  %-5s %-11s bsdtar -xf %7.1f ms | larder install %7.1f ms | ratio %.2f (target <= %.2f: %s)" % (
                    place, name + ":", 1000 * b, 1000 * lr, lr / b, goal, "met" if lr / b <= goal else "MISSED")
                if "zipfoundation" in t:
                    z = statistics.median(t["zipfoundation"])
                    line += " | ZIPFoundation %.1f ms (%.1f× larder)" % (1000 * z, z / lr)
                if "bsdtar+syncfs" in t:
                    line += " | bsdtar + sync -f %.1f ms" % (1000 * statistics.median(t["bsdtar+syncfs"]))
                lines.append(line)
        for place, why in res["skipped"].items():
            lines.append("  %s: not measured (%s)" % (place, why))
        lines.append("  peak RSS: bsdtar %.1f MiB, larder install %.1f MiB" % (res["rss"]["bsdtar"], res["rss"]["larder"]))
    lines.append("")
    lines.append("larder install verifies size and sha256 of every file against files.json, bsdtar verifies nothing")
    say()
    say("---- summary ----")
    for l in lines:
        say(l)
    say("-----------------")


def first_html(tree):
    """An entry file for pack: index.html when there is one, else the first .html found."""
    if os.path.exists(os.path.join(tree, "index.html")):
        return "index.html"
    for d, dirnames, files in sorted(os.walk(tree)):
        dirnames.sort()
        for f in sorted(files):
            if f.endswith(".html"):
                return os.path.relpath(os.path.join(d, f), tree)
    for d, dirnames, files in sorted(os.walk(tree)):
        dirnames.sort()
        if files:
            return os.path.relpath(os.path.join(d, sorted(files)[0]), tree)
    die("the tree is empty")


def first_file(tree):
    """An entry file for pack: the first file of the tree, by the UTF-8 bytes of its relative path."""
    files = [os.path.relpath(os.path.join(d, f), tree) for d, _, fs in os.walk(tree) for f in fs]
    if not files:
        die("the tree is empty")
    return min(files, key=lambda p: p.encode("utf-8", "surrogateescape"))


def git_describe():
    p = subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty"], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    return p.stdout.strip() if p.returncode == 0 else "not a git checkout"
