#!/usr/bin/env python3
"""Crash-safety proof for `larder sync` of many packages: kill -9 it at random moments.

Usage: scripts/integration/kill-test-sync.py [N]   (N rounds, default 20)

A sync writes the state once per phase — index, placement of every version, activation of
every dependency group — so that its cost does not grow with the number of packages squared.
This checks that the batching keeps the crash promise. A file:// repository holds P packages
(KILL_SYNC_PACKAGES, default 12), each a deterministic tree (scripts/fixtures/make-big-tree.py)
published as 1.0.0, then as 2.0.0 (about a fifth of the files changed). A template sandbox has
synced 1.0.0 of all of them. N times, on a fresh copy of the template, `larder sync` of the 2.0.0
releases is started, killed with SIGKILL after a random delay in 0..1.2x an uninterrupted sync's
duration (stratified; measured with as many syncs at once as the rounds run), and:
  (a) state.json parses and every package's active version is 1.0.0 or 2.0.0 — and, since the
      activation of the sync is one state write, all packages are on the same one;
  (b) `larder doctor` exits 0 (recovery, then every installed version verified file by file);
  (c) after that open, staging/ and trash/ are empty, and each packages/<id>/ and lists/<id>/
      holds exactly the versions the state names;
  (d) independently of larder (python3 hashlib): every active tree matches the repository's
      files.json of its version, nothing extra;
  (e) a following `larder sync` exits 0 and leaves every package on 2.0.0.
Requires both outcomes (all on 1.0.0, all on 2.0.0) at least once (up to four later rounds,
1.5x-5x the span, are added when no kill fell after the sync's end). Exit 0 when every round
passed, 1 otherwise.

Environment: LARDER_BIN (a built larder; else `swift build` here), KILL_TEST_SEED,
KILL_TEST_JOBS (rounds at once; default min(2, CPUs)), KILL_SYNC_PACKAGES, KILL_SYNC_FILES
(files per package, default 150), KILL_TEST_DIR (work directory; default /dev/shm; removed on
success, kept on failure).
"""
import concurrent.futures
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import larder_scripts as ls  # noqa: E402  (found through the line above)
from larder_scripts import die, run, say  # noqa: E402

ls.NAME = "kill-test-sync"
V1, V2 = "1.0.0", "2.0.0"


def listing(path):
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return []


def load_state(root, ids):
    """(state document, {id: active}) or raises ValueError naming the problem."""
    try:
        with open(os.path.join(root, "state.json"), "rb") as f:
            doc = json.loads(f.read())
    except (OSError, ValueError) as e:
        raise ValueError("state.json unreadable or not JSON: %s" % e)
    try:
        return doc, {i: doc["packages"][i]["active"] for i in ids}
    except (KeyError, TypeError) as e:
        raise ValueError("state.json lacks a package's active version: %s" % e)


def main():
    n = ls.count_argument(__doc__, 20)
    seed = int(os.environ.get("KILL_TEST_SEED", str(random.SystemRandom().randrange(1, 10**9))))
    jobs = int(os.environ.get("KILL_TEST_JOBS", str(min(2, os.cpu_count() or 1))))
    packages = int(os.environ.get("KILL_SYNC_PACKAGES", "12"))
    nfiles = int(os.environ.get("KILL_SYNC_FILES", "150"))
    larder = ls.larder_binary()
    work = ls.scratch_dir("larder-kill-sync.", "KILL_TEST_DIR", shm=True)
    ok = ls.kept_unless_ok(work, lambda: body(larder, work, n, seed, jobs, packages, nfiles))
    sys.exit(0 if ok else 1)


def body(larder, work, n, seed, jobs, packages, nfiles):
    started = time.monotonic()
    say("kill-test-sync: %d rounds, seed %d (KILL_TEST_SEED), %d packages of %d files, %d at a time" % (
        n, seed, packages, nfiles, jobs))
    gen = os.path.join(ls.SCRIPTS, "fixtures", "make-big-tree.py")
    ids = ["app-%02d" % k for k in range(packages)]
    keys = os.path.join(work, "k")
    run([larder, "keygen", "--out", keys])
    repo = os.path.join(work, "repo")
    repo_list = {}
    for v, variant in ((V1, 1), (V2, 2)):
        for k, pid in enumerate(ids):
            src = os.path.join(work, "src-%s-%s" % (pid, v))
            # Each package its own content (its own seed), so nothing is shared between them.
            run([sys.executable, gen, src, "--files", str(nfiles), "--variant", str(variant), "--seed", str(k + 1),
                 "--scale", "0.1"])
            run([larder, "pack", src, "--repo", repo, "--id", pid, "--version", v, "--key", keys + ".key"])
            shutil.rmtree(src)
            repo_list[(pid, v)] = ls.read_file_list(os.path.join(repo, "packages", pid, v, "files.json"))
        if v == V1:
            template = os.path.join(work, "template")
            run([larder, "init", "--root", template, "--repo", "file://" + repo, "--public-key", keys + ".pub"])
            run([larder, "sync", "--root", template, "--progress", "none"])
            _, active = load_state(template, ids)
            if set(active.values()) != {V1}:
                die("the template did not sync %s of every package: %s" % (V1, active))

    def sync_cmd(root):
        return [larder, "sync", "--root", root, "--progress", "none"]

    # Measured as the rounds run: `jobs` syncs at once (a sync verifies on every core, so two at
    # once are each slower than one alone, and delays drawn from a lone sync's time would all
    # land before the activation).
    def measure(k):
        root = os.path.join(work, "measure-%d" % k)
        run(["cp", "-a", template, root])
        t = time.monotonic()
        p = subprocess.run(sync_cmd(root), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        took = time.monotonic() - t
        if p.returncode != 0 or set(load_state(root, ids)[1].values()) != {V2}:
            die("an uninterrupted sync did not bring every package to %s:\n%s" % (V2, p.stdout[-2000:]))
        shutil.rmtree(root)
        return took

    samples = []
    for k in range(3):
        with concurrent.futures.ThreadPoolExecutor(jobs) as ex:
            samples += list(ex.map(measure, [k * jobs + j for j in range(jobs)]))
    duration = statistics.median(samples)
    span = 1.2 * duration
    say("  uninterrupted sync of %d updates, %d at once as in the rounds: median %.3f s of %d; kills drawn from "
        "0..%.3f s" % (packages, jobs, duration, len(samples), span))

    rng = random.Random(seed)
    delays = [(k + rng.random()) * span / n for k in range(n)]
    rng.shuffle(delays)
    lock = threading.Lock()

    def play(i, delay):
        root = os.path.join(work, "round-%03d" % i)
        run(["cp", "-a", template, root])
        p = subprocess.Popen(sync_cmd(root), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(delay)
        try:
            os.kill(p.pid, signal.SIGKILL)  # this process only, by its id
        except ProcessLookupError:
            pass
        err = p.communicate()[1].decode(errors="replace")
        problems = []
        if p.returncode not in (0, -signal.SIGKILL):
            problems.append("sync exited %s (not killed, not success): %s" % (p.returncode, err.strip()[-500:]))
        outcome = None
        # (a) the crash state, before anything repairs it.
        try:
            _, active = load_state(root, ids)
            bad = {i: a for i, a in active.items() if a not in (V1, V2)}
            if bad:
                problems.append("(a) active versions not %s or %s: %s" % (V1, V2, bad))
            elif len(set(active.values())) != 1:
                problems.append("(a) the activation was not one write: %s" % active)
            else:
                outcome = next(iter(active.values()))
        except ValueError as e:
            active = {}
            problems.append("(a) %s" % e)
        # (b) doctor opens (recovers) and verifies everything.
        d = subprocess.run([larder, "doctor", "--root", root], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
        if d.returncode != 0:
            problems.append("(b) larder doctor exited %d: %s" % (d.returncode, " | ".join(d.stdout.splitlines())[:600]))
        # (c) recovery left only what the state names.
        for sub in ("staging", "trash"):
            if listing(os.path.join(root, sub)):
                problems.append("(c) %s/ not empty after doctor: %s" % (sub, listing(os.path.join(root, sub))))
        try:
            doc, after = load_state(root, ids)
            if after != active:
                problems.append("(c) doctor changed active versions: %s -> %s" % (active, after))
            for pid in ids:
                named = sorted(v["version"] for v in doc["packages"][pid]["versions"])
                if listing(os.path.join(root, "packages", pid)) != named:
                    problems.append("(c) packages/%s/ holds %s, the state names %s" % (
                        pid, listing(os.path.join(root, "packages", pid)), named))
                lists = sorted(x[:-5] for x in listing(os.path.join(root, "lists", pid)))
                if lists != named:
                    problems.append("(c) lists/%s/ holds %s, the state names %s" % (pid, lists, named))
        except (ValueError, KeyError, TypeError) as e:
            problems.append("(c) state after doctor: %s" % e)
        # (d) independent check of every active tree.
        for pid, v in active.items():
            if v not in (V1, V2):
                continue
            tree = os.path.join(root, "packages", pid, v)
            try:
                mine = ls.read_file_list(os.path.join(root, "lists", pid, v + ".json"))
            except (OSError, ValueError, KeyError) as e:
                problems.append("(d) %s@%s: list unreadable: %s" % (pid, v, e))
                continue
            if mine != repo_list[(pid, v)]:
                problems.append("(d) %s@%s: the sandbox's list differs from the repository's" % (pid, v))
            problems += ["(d) %s@%s %s" % (pid, v, x) for x in ls.tree_problems(tree, repo_list[(pid, v)])[:5]]
        # (e) the next sync finishes the job.
        again = subprocess.run(sync_cmd(root), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            final = load_state(root, ids)[1]
        except ValueError as e:
            final = {"?": str(e)}
        if again.returncode != 0 or set(final.values()) != {V2}:
            problems.append("(e) the next sync exited %d, active %s: %s" % (
                again.returncode, final, again.stdout.strip()[-400:]))
        with lock:
            say("  round %3d: kill at %.3f s -> %s: %s" % (
                i, delay, "all on " + outcome if outcome else "?", "ok" if not problems else "FAILED"))
            for x in problems:
                say("    round %d: %s" % (i, x))
        if not problems:
            shutil.rmtree(root, ignore_errors=True)
        return outcome, problems

    with concurrent.futures.ThreadPoolExecutor(jobs) as ex:
        done = list(ex.map(lambda a: play(*a), [(i + 1, d) for i, d in enumerate(delays)]))
    # As in kill-test.py: when the last slice's kills all fell before the sync's end (the rounds
    # ran slower than the measurement), a few later kills show the finished sync survives too.
    for factor in (1.5, 2, 3, 5):
        if any(o == V2 for o, _ in done):
            break
        say("  no round ended with every package on %s: one more at %.1fx the span" % (V2, factor))
        done.append(play(len(done) + 1, factor * span))
    n = len(done)
    failed = sum(1 for _, p in done if p)
    on = {V1: sum(1 for o, _ in done if o == V1), V2: sum(1 for o, _ in done if o == V2)}
    covered = on[V1] > 0 and on[V2] > 0
    say("rounds ended: %d with every package on %s, %d with every package on %s" % (on[V1], V1, on[V2], V2))
    if not covered:
        say("kill-test-sync: FAILED: the kills did not land on both sides; the delays need adjusting")
    say("time: %.0f s" % (time.monotonic() - started))
    # Uncovered outcomes count as one failed check, so the summary always reads the same way.
    say("kill-test-sync: %d passed, %d failed" % (n - failed, failed + (0 if covered else 1)))
    return failed == 0 and covered


if __name__ == "__main__":
    ls.main(main)
