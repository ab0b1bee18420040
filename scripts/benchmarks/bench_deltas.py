"""`scripts/bench --deltas`: what an update moves between real consecutive releases.

For each pair of releases of a real web app (the web assets inside PyPI wheels, downloaded once
into .bench-cache/), built by different tools: jupyterlab 4.6.5 → 4.6.6 and notebook 7.6.4 →
7.6.5 (webpack), marimo, airflow, streamlit, gradio, prefect and phoenix (Vite), mlflow and
label-studio (webpack), dagster-webserver (Next.js static export) and optuna-dashboard (webpack,
one 13.6 MB bundle): the PAIRS list below names the versions and the tree inside each wheel.
BENCH_DELTAS_ONLY=name,name… measures only those.

  1. `larder pack` publishes the old release, then the new one twice, into two repositories:
     with deltas (the default, --deltas 3) and without (--deltas 0); each pack of the new release
     is timed.
  2. nginx (from Debian, on loopback, a JSON access log) serves each repository; a device syncs
     the old release, then the new one. The whole update's wire bytes are summed from nginx's
     log — signature, index, manifests, lists, patches, objects — for the device of each
     repository (by delta; by objects and the gzipped list). The delta sync runs under
     /usr/bin/time -v (wall time, peak RSS).
  3. Baselines, computed here: the full bundle; the content-addressed ideal (the gzip objects of
     the contents the old release lacks, as `pack` wrote them); the tar-patch floor:
     `zstd -19 --long=31 --patch-from=OLD.tar NEW.tar` over deterministic tars of the two trees
     (sorted names, mtime 0, uid/gid 0).
  4. The device's tree is compared byte for byte with the new release as unpacked from the wheel
     (`diff -r`); a difference fails the run.

Targets (issue 16): whole-update wire bytes ≤ 1 % of the full bundle; ≤ 3× the tar-patch floor;
peak RSS of the delta sync < 64 MB.
"""
import json
import os
import shutil
import subprocess
import tempfile
import time
import zipfile

import larder_scripts as ls
from larder_scripts import die, say
from larder_scripts.nginx_server import Nginx

TITLE = "## Deltas between real releases (`scripts/bench --deltas`)"
BEGIN = "<!-- bench-deltas:begin -->"
END = "<!-- bench-deltas:end -->"

PAIRS = [
    {"name": "jupyterlab", "dist": "jupyterlab", "old": "4.6.5", "new": "4.6.6", "tree": "share/jupyter/lab",
     "tool": "webpack"},
    {"name": "notebook", "dist": "notebook", "old": "7.6.4", "new": "7.6.5", "tree": None, "tool": "webpack"},
    {"name": "marimo", "dist": "marimo", "old": "0.25.0", "new": "0.25.1", "tree": "marimo/_static", "tool": "Vite"},
    {"name": "mlflow", "dist": "mlflow", "old": "3.16.1", "new": "3.17.0", "tree": "mlflow/server/js/build",
     "tool": "webpack"},
    {"name": "dagster", "dist": "dagster-webserver", "old": "1.13.27", "new": "1.13.28",
     "tree": "dagster_webserver/webapp/build", "tool": "Next.js"},
    {"name": "airflow", "dist": "apache-airflow-core", "old": "3.3.1", "new": "3.3.2", "tree": "airflow/ui/dist",
     "tool": "Vite"},
    {"name": "streamlit", "dist": "streamlit", "old": "1.65.0", "new": "1.66.0", "tree": "streamlit/static",
     "tool": "Vite"},
    {"name": "gradio", "dist": "gradio", "old": "6.29.0", "new": "6.29.1", "tree": "gradio/templates/frontend",
     "tool": "Vite (Rollup)"},
    {"name": "prefect", "dist": "prefect", "old": "3.9.0", "new": "3.9.1", "tree": "prefect/server/ui-v2",
     "tool": "Vite"},
    {"name": "phoenix", "dist": "arize-phoenix", "old": "20.26.0", "new": "20.26.1", "tree": "phoenix/server/static",
     "tool": "Vite"},
    {"name": "label-studio", "dist": "label-studio", "old": "1.22.0", "new": "1.23.0", "tree": "web/dist",
     "tool": "webpack (Nx)"},
    {"name": "optuna-dashboard", "dist": "optuna-dashboard", "old": "0.19.0", "new": "0.20.0",
     "tree": "optuna_dashboard/public", "tool": "webpack, one bundle"},
]


def run(args, env=None):
    p = subprocess.run([str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if p.returncode != 0:
        die("failed (exit %d): %s\n%s%s" % (p.returncode, " ".join(map(str, args)), p.stdout[-3000:],
                                             p.stderr[-3000:]))
    return p.stdout


def unpack_tree(wheel, dest, tree):
    """The release's web tree: `tree` inside the wheel's data (any *.data/data/ prefix), or every
    file that is not Python code or wheel metadata."""
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            name = info.filename
            if name.endswith("/"):
                continue
            if tree:
                at = name.find(tree + "/")
                if at < 0:
                    continue
                rel = name[at + len(tree) + 1:]
            else:
                if name.endswith((".py", ".pyc", ".pyi")) or ".dist-info/" in name:
                    continue
                rel = name
            out = os.path.join(dest, rel)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with z.open(info) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst)
    n = sum(len(f) for _, _, f in os.walk(dest))
    if n == 0:
        die("no files for %s in %s" % (tree or "the non-Python files", wheel))
    return n


def entry_file(tree):
    for cand in ("index.html", "static/index.html"):
        if os.path.isfile(os.path.join(tree, cand)):
            return cand
    for d, _, files in sorted(os.walk(tree)):
        for f in sorted(files):
            if f.endswith(".html"):
                return os.path.relpath(os.path.join(d, f), tree)
    for d, _, files in sorted(os.walk(tree)):
        for f in sorted(files):
            return os.path.relpath(os.path.join(d, f), tree)


def det_tar(src, out):
    run(["tar", "--sort=name", "--mtime=@0", "--owner=0", "--group=0", "--numeric-owner", "-cf", out, "-C", src, "."])


def wire(log):
    return sum(x["body_bytes_sent"] for x in log)


def peak(stderr):
    for line in stderr.splitlines():
        if "Maximum resident set size" in line:
            return int(line.split(":")[1]) / 1024.0
    return None


def measure(pair, wheels, larder, nginx_bin, work):
    name = pair["name"]
    old_tree = os.path.join(work, name, "old")
    new_tree = os.path.join(work, name, "new")
    nold = unpack_tree(wheels[0], old_tree, pair["tree"])
    nnew = unpack_tree(wheels[1], new_tree, pair["tree"])
    say("bench --deltas [%s]: %s → %s, %d → %d files" % (name, pair["old"], pair["new"], nold, nnew))
    key = os.path.join(work, "keys", "pub")
    if not os.path.exists(key + ".key"):
        run([larder, "keygen", "--out", key])
    result = {"name": name, "old": pair["old"], "new": pair["new"], "files": nnew, "tool": pair.get("tool", "?")}
    repos = {}
    for mode, deltas in (("delta", "3"), ("objects", "0")):
        repo = os.path.join(work, name, "repo-" + mode)
        repos[mode] = repo
        run([larder, "pack", old_tree, "--repo", repo, "--id", name, "--version", pair["old"], "--key", key + ".key",
             "--entry", entry_file(old_tree)])
        nginx = Nginx(nginx_bin, os.path.join(work, name, "nginx-" + mode), repo)
        nginx.start()
        try:
            # The device runs the old release...
            sb = os.path.join(work, name, "sb-" + mode)
            run([larder, "init", "--root", sb, "--repo", nginx.base, "--public-key", key + ".pub"])
            run([larder, "sync", "--root", sb])
            # ... when the new one is published (timed) ...
            t = time.perf_counter()
            out = run([larder, "pack", new_tree, "--repo", repo, "--id", name, "--version", pair["new"], "--key",
                       key + ".key", "--entry", entry_file(new_tree), "--deltas", deltas, "--json"])
            result["pack_s_" + mode] = time.perf_counter() - t
            if mode == "delta":
                report = json.loads(out)
                result["pack_report"] = report["deltas"][0] if report.get("deltas") else None
                result["bundle"] = report["bundle"]["size"]
            # ... and it updates: every request of the update from nginx's log.
            m = nginx.mark()
            t = time.perf_counter()
            p = subprocess.run(["/usr/bin/time", "-v", larder, "sync", "--root", sb, "--json"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ls.loopback_env())
            secs = time.perf_counter() - t
            if p.returncode != 0:
                die("the %s sync of %s failed:\n%s%s" % (mode, name, p.stdout[-2000:], p.stderr[-2000:]))
            log = nginx.since(m)
            report = ls.find_package(json.loads(p.stdout), name) or {}
            if report.get("to") != pair["new"] or report.get("outcome") != "done":
                die("%s (%s): the sync did not update to %s: %s" % (name, mode, pair["new"], json.dumps(report)))
            result["wire_" + mode] = wire(log)
            result["requests_" + mode] = len(log)
            result["method_" + mode] = report.get("method")
            result["metadata_" + mode] = sum(x["body_bytes_sent"] for x in log
                                             if "/patches/" not in x["uri"] and "/objects/" not in x["uri"])
            if mode == "delta":
                result["sync_s"] = secs
                result["rss_mib"] = peak(p.stderr)
                result["delta_report"] = report.get("delta")
                result["log"] = [(x["uri"], x["body_bytes_sent"]) for x in log]
            tree = os.path.join(sb, "packages", name, pair["new"])
            d = subprocess.run(["diff", "-r", "-q", tree, new_tree], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
            if d.returncode != 0:
                die("%s (%s): the device's tree differs from the release:\n%s" % (name, mode, d.stdout[-2000:]))
        finally:
            nginx.stop()

    # Baselines: the content-addressed ideal and the tar-patch floor.
    old_list = json.load(open(os.path.join(repos["delta"], "packages", name, pair["old"], "files.json")))
    new_list = json.load(open(os.path.join(repos["delta"], "packages", name, pair["new"], "files.json")))
    held = {f["sha256"] for f in old_list["files"]}
    missing = {f["sha256"]: f for f in new_list["files"] if f["sha256"] not in held}
    result["ideal"] = sum(os.path.getsize(os.path.join(repos["delta"], "objects", s[:2], s)) for s in missing)
    result["missing"] = len(missing)
    ot, nt = os.path.join(work, name, "old.tar"), os.path.join(work, name, "new.tar")
    det_tar(old_tree, ot)
    det_tar(new_tree, nt)
    patch = os.path.join(work, name, "tar.patch.zst")
    run(["zstd", "-q", "-f", "-19", "--long=31", "--patch-from=" + ot, nt, "-o", patch])
    result["floor"] = os.path.getsize(patch)
    # Each pair's trees, repositories and sandboxes (hundreds of MB for the large apps) go now.
    shutil.rmtree(os.path.join(work, name), ignore_errors=True)
    return result


def table(results, machine):
    lines = [""]
    lines.append("Run on %s, %s. Command: `scripts/bench --deltas`." % (machine, time.strftime("%Y-%m-%d")))
    lines.append("")
    lines.append("| release pair (build tool) | full bundle | update by delta (wire, whole) | ÷ bundle | ÷ tar-patch floor | of which metadata (signature, index, delta manifest) | by objects + gzipped list (wire) | content-addressed ideal (objects) | tar-patch floor | target |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        ratio = r["wire_delta"] / r["bundle"]
        lines.append("| %s %s → %s (%s; %d files, %d contents new) | %s | %s in %d requests (%s) | **%.2f %%** | **%.1f×** | %s | %s in %d requests (%.1f %%) | %s | %s (%.2f %%) | ≤ 1 %%; ≤ 3× floor |" % (
            r["name"], r["old"], r["new"], r["tool"], r["files"], r["missing"], kib(r["bundle"]), kib(r["wire_delta"]),
            r["requests_delta"], r["method_delta"], 100 * ratio, r["wire_delta"] / r["floor"],
            kib(r["metadata_delta"]), kib(r["wire_objects"]),
            r["requests_objects"], 100.0 * r["wire_objects"] / r["bundle"], kib(r["ideal"]), kib(r["floor"]),
            100.0 * r["floor"] / r["bundle"]))
    lines.append("")
    lines.append("| release pair | delta sync wall time | peak RSS of the delta sync | pack of the new release: with deltas / without | patches (bytes) | base rules that found them | tree |")
    lines.append("|---|---|---|---|---|---|---|")
    for r in results:
        pr = r.get("pack_report") or {}
        lines.append("| %s | %.2f s | %.0f MiB (target < 64) | %.1f s / %.1f s | %d (%s) | %s | identical to the wheel's (`diff -r`) |" % (
            r["name"], r["sync_s"], r["rss_mib"] or -1, r["pack_s_delta"], r["pack_s_objects"], pr.get("patches", 0),
            kib(pr.get("patchBytes", 0)), ", ".join("%s %d" % kv for kv in sorted((pr.get("rules") or {}).items()))))
    lines.append("")
    lines.append("Wire bytes are nginx's `body_bytes_sent` for every request of the update (signature, index, "
                 "delta manifest or gzipped list, patches, objects). The content-addressed ideal is the gzip objects "
                 "of the contents the old release lacks; the floor is one zstd patch of the whole new tree against "
                 "the whole old one, which no per-file scheme can beat by much.")
    lines.append("")
    return lines


def kib(n):
    return "%.1f KiB" % (n / 1024.0) if n < 1 << 20 else "%.2f MiB" % (n / 1048576.0)


def main(larder, wheel_for, write):
    for tool, pkg in (("nginx", "nginx-light"), ("zstd", "zstd"), ("/usr/bin/time", "time"), ("diff", "diffutils")):
        ls.ensure_tool(tool, pkg)
    nginx_bin = ls.ensure_tool("nginx", "nginx-light")
    base = os.environ.get("BENCH_DIR") or "/dev/shm"
    work = tempfile.mkdtemp(prefix="larder-bench-deltas.", dir=base)
    results = []
    try:
        only = [n for n in os.environ.get("BENCH_DELTAS_ONLY", "").split(",") if n]
        for pair in [p for p in PAIRS if not only or p["name"] in only]:
            wheels = [wheel_for(pair["dist"], pair["old"]), wheel_for(pair["dist"], pair["new"])]
            r = measure(pair, wheels, larder, nginx_bin, work)
            results.append(r)
            say("bench --deltas [%s]: delta %d B (%.2f %% of %d), objects %d B, floor %d B, ideal %d B, RSS %.0f MiB"
                % (r["name"], r["wire_delta"], 100.0 * r["wire_delta"] / r["bundle"], r["bundle"], r["wire_objects"],
                   r["floor"], r["ideal"], r["rss_mib"] or -1))
            say("   requests: " + "; ".join("%s %d" % (u, b) for u, b in r["log"][:12]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    machine = "%d CPUs, %s" % (os.cpu_count() or 0, " ".join(os.uname()[0:3:2]))
    lines = table(results, machine)
    print("\n".join([TITLE, ""] + lines))
    if write:
        ls.write_section(TITLE, BEGIN, END, lines)
        say("bench --deltas: wrote BENCHMARKS.md")
    # Figures are reported, not asserted; a miss is named.
    for r in results:
        # The 1 % target holds where the floor allows it (a floor over 1 % of the bundle cannot be met).
        for what, missed in (("≤ 1 % of the bundle (the floor allows it)",
                              r["wire_delta"] * 100 > r["bundle"] and r["floor"] * 100 <= r["bundle"]),
                             ("≤ 3× the tar-patch floor", r["wire_delta"] > 3 * r["floor"]),
                             ("peak RSS < 64 MB", (r["rss_mib"] or 0) >= 64)):
            if missed:
                say("bench --deltas [%s]: MISS %s" % (r["name"], what))
    return results
