#!/usr/bin/env python3
"""Crash-safety proof for `larder install`: kill -9 it at random moments, check the sandbox.

Usage: scripts/integration/kill-test.py [N]        (N rounds, default 50)

Generates a deterministic 2000-file web-app tree in two releases (scripts/fixtures/
make-big-tree.py), packs them with `larder pack` as big 1.0.0 and 2.0.0 (throwaway keygen key),
installs and confirms 1.0.0 in a template sandbox, and times an uninterrupted install of 2.0.0.
Then, N times, on a fresh copy of the template: starts `larder install` of 2.0.0 in the
background, waits a random delay in 0..1.2x that duration (stratified, so the kills cover the
whole install), sends SIGKILL, and checks:
  (a) state.json parses and the package's active version is 1.0.0 or 2.0.0;
  (b) `larder doctor` exits 0 (every installed version verified file by file, state vs disk);
  (c) after that open, staging/ and trash/ are empty and packages/big/ holds only the versions
      the state names;
  (d) independently of larder (python3 hashlib): every file of packages/big/<active> matches
      lists/big/<active>.json, which equals the repository's files.json; no extra file.
Prints where each kill landed and how the rounds ended, and requires both outcomes (1.0.0 and
2.0.0 active) at least once: when no kill fell after the install's end (a machine slower in the
rounds than in the measurement), up to four later rounds (1.5x-5x the span) are added. Exit 0 when every round passed, 1 otherwise.

Environment: LARDER_BIN (a built larder; else `swift build` here), KILL_TEST_SEED (the random
delays; printed), KILL_TEST_JOBS (rounds run at once; default min(2, CPUs)), KILL_TEST_FILES
(default 2000: a debug build spends ~0.6 ms per file per verified version in doctor, so 2000
keeps 50 rounds near a minute and a half on two cores; 3000 takes about half as long again),
KILL_TEST_DIR (where the work directory goes; default /dev/shm, else $TMPDIR or /tmp; removed
on success, kept on failure).
"""
import concurrent.futures
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import larder_scripts as ls  # noqa: E402  (found through the line above)
from larder_scripts import die, run, say  # noqa: E402

ls.NAME = "kill-test"
PKG = "big"
V1, V2 = "1.0.0", "2.0.0"
LATE_FACTORS = (1.5, 2, 3, 5)  # extra kills, in spans, when no round saw the install finish


def copy_tree(src, dst):
    run(["cp", "-a", src, dst])


def load_state(root):
    """(state document, active version of PKG) or raises ValueError naming the problem."""
    path = os.path.join(root, "state.json")
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ValueError("state.json unreadable: %s" % e)
    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise ValueError("state.json does not parse (%d bytes): %s" % (len(raw), e))
    try:
        return doc, doc["packages"][PKG]["active"]
    except (KeyError, TypeError):
        raise ValueError("state.json has no active version for %s" % PKG)


def listing(path):
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return []


def check_tree(tree, list_path, repo_list):
    """Independent check: the sandbox's list equals the repository's, and every file of tree
    has the listed size and sha256, nothing extra. Returns a list of problems."""
    try:
        want = ls.read_file_list(list_path)
    except (OSError, ValueError, KeyError) as e:
        return ["%s: unreadable list: %s" % (list_path, e)]
    problems = []
    if want != repo_list:
        problems.append("%s differs from the repository's files.json" % list_path)
    return problems + ls.tree_problems(tree, want)


def where_killed(root, rc, total_files):
    """Where the kill landed, read from the crash state before anything repairs it."""
    if rc == 0:
        return "finished before the kill"
    try:
        _, active = load_state(root)
    except ValueError:
        active = None
    staged = listing(os.path.join(root, "staging"))
    tree2 = os.path.isdir(os.path.join(root, "packages", PKG, V2))
    list2 = os.path.exists(os.path.join(root, "lists", PKG, V2 + ".json"))
    temp_state = any(n.startswith(".state.json.tmp-") for n in listing(root))
    if active == V2:
        return "after the state write" + (" (staging not yet removed)" if staged else "")
    if temp_state:
        return "while writing the state"
    if tree2:
        return "after the rename into packages/, before the state write"
    if list2:
        return "after writing the list, before the rename"
    if staged:
        stage_tree = os.path.join(root, "staging", staged[0], "tree")
        n = sum(len(f) for _, _, f in os.walk(stage_tree)) if os.path.isdir(stage_tree) else 0
        if n == 0:
            return "extraction starting (staging created, no file yet)"
        if n >= total_files:
            return "verifying / syncing (all %d files staged)" % total_files
        q = min(3, 4 * n // total_files)
        return "extracting (%d-%d%% of the files staged)" % (25 * q, 25 * q + 25)
    return "before the install touched the sandbox"


class Round:
    def __init__(self, i, delay):
        self.i = i
        self.delay = delay
        self.problems = []
        self.active = None
        self.landed = None
        self.rc = None


def main():
    n = ls.count_argument(__doc__, 50)
    seed = int(os.environ.get("KILL_TEST_SEED", str(random.SystemRandom().randrange(1, 10**9))))
    jobs = int(os.environ.get("KILL_TEST_JOBS", str(min(2, os.cpu_count() or 1))))
    nfiles = int(os.environ.get("KILL_TEST_FILES", "2000"))
    larder = ls.larder_binary()
    started = time.monotonic()
    # tmpfs when there is one: kill -9 leaves the page cache as it is on any file system, and
    # copying and deleting 100 sandboxes there costs nothing (set KILL_TEST_DIR for a disk).
    work = ls.scratch_dir("larder-kill-test.", "KILL_TEST_DIR", shm=True)
    ok = ls.kept_unless_ok(work, lambda: body(larder, work, n, seed, jobs, nfiles, started))
    sys.exit(0 if ok else 1)


def body(larder, work, n, seed, jobs, nfiles, started):
    say("kill-test: %d rounds, seed %d (KILL_TEST_SEED), %d at a time, larder %s" % (n, seed, jobs, larder))
    gen = os.path.join(ls.SCRIPTS, "fixtures", "make-big-tree.py")
    # Small and medium files (~3 KB on average): the install spends its time creating files.
    for v, variant in ((V1, 1), (V2, 2)):
        run([sys.executable, gen, os.path.join(work, "src-" + v), "--files", str(nfiles),
             "--variant", str(variant), "--scale", "0.1"])
    keys = os.path.join(work, "keys", "k")
    run([larder, "keygen", "--out", keys])
    # Two repositories, packed at once (a debug pack takes ~7 ms a file).
    packs = [subprocess.Popen(
        [larder, "pack", os.path.join(work, "src-" + v), "--repo", os.path.join(work, "repo-" + v),
         "--id", PKG, "--version", v, "--key", keys + ".key"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for v in (V1, V2)]
    for v, p in zip((V1, V2), packs):
        out = p.communicate()[0]
        if p.returncode != 0:
            die("larder pack %s failed:\n%s" % (v, out))
        say("  " + out.splitlines()[0])
    bundle = {v: os.path.join(work, "repo-" + v, "packages", PKG, v, "bundle.zip") for v in (V1, V2)}
    files = {v: os.path.join(work, "repo-" + v, "packages", PKG, v, "files.json") for v in (V1, V2)}
    repo_list = {v: ls.read_file_list(files[v]) for v in (V1, V2)}

    template = os.path.join(work, "template")
    run([larder, "install", bundle[V1], "--root", template, "--id", PKG, "--version", V1, "--files", files[V1]])
    run([larder, "confirm", PKG, "--root", template])
    run([larder, "doctor", "--root", template])
    doc, active = load_state(template)
    if active != V1 or doc["packages"][PKG]["health"] != "confirmed":
        die("the template sandbox is not on %s confirmed: %s" % (V1, json.dumps(doc["packages"][PKG])[:300]))

    def install_cmd(root):
        return [larder, "install", bundle[V2], "--root", root, "--id", PKG, "--version", V2, "--files", files[V2]]

    # An uninterrupted install, timed under the load the rounds run in: while one worker
    # installs, the others copy a sandbox, run doctor on it and delete it.
    def timed(k):
        root = os.path.join(work, "measure-%d" % k)
        copy_tree(template, root)
        t = time.monotonic()
        p = subprocess.run(install_cmd(root), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        dt = time.monotonic() - t
        if p.returncode != 0:
            die("an uninterrupted install of %s failed:\n%s" % (V2, p.stdout))
        if load_state(root)[1] != V2:
            die("an uninterrupted install did not activate %s" % V2)
        shutil.rmtree(root)
        return dt

    stop = threading.Event()

    def background(k):
        j = 0
        while not stop.is_set():
            root = os.path.join(work, "load-%d-%d" % (k, j))
            j += 1
            copy_tree(template, root)
            p = subprocess.Popen([larder, "doctor", "--root", root], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            while p.poll() is None:
                if stop.wait(0.02):
                    p.kill()  # our own doctor, by its id
                    p.wait()
                    break
            shutil.rmtree(root, ignore_errors=True)

    loaders = [threading.Thread(target=background, args=(k,)) for k in range(jobs - 1)]
    for t in loaders:
        t.start()
    time.sleep(0.3 if loaders else 0)
    samples = sorted(timed(k) for k in range(5))
    stop.set()
    for t in loaders:
        t.join()
    duration = samples[len(samples) // 2]
    span = 1.2 * duration
    say("  uninterrupted install of %s (%d round(s) of load alongside, as in the rounds): median %.3f s (%s); "
        "kills drawn from 0..%.3f s" % (V2, jobs - 1, duration, ", ".join("%.3f" % s for s in samples), span))
    setup_done = time.monotonic()

    # Stratified delays: one in each of n equal slices of the span, in random order.
    rng = random.Random(seed)
    delays = [(k + rng.random()) * span / n for k in range(n)]
    rng.shuffle(delays)
    rounds = [Round(i + 1, d) for i, d in enumerate(delays)]
    print_lock = threading.Lock()

    def play(r):
        root = os.path.join(work, "round-%03d" % r.i)
        copy_tree(template, root)
        p = subprocess.Popen(install_cmd(root), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(r.delay)
        try:
            os.kill(p.pid, signal.SIGKILL)  # this process only, by its id
        except ProcessLookupError:
            pass
        err = p.communicate()[1].decode(errors="replace")
        r.rc = p.returncode
        if r.rc not in (0, -signal.SIGKILL):
            r.problems.append("install exited %s (not killed, not success): %s" % (r.rc, err.strip()[-500:]))
        r.landed = where_killed(root, r.rc, len(repo_list[V2]))
        # (a) the crash state, before anything repairs it.
        try:
            doc, r.active = load_state(root)
            if r.active not in (V1, V2):
                r.problems.append("(a) active version is %r, not %s or %s" % (r.active, V1, V2))
        except ValueError as e:
            r.problems.append("(a) %s" % e)
        crash_view = "staging=%s packages/%s=%s" % (
            listing(os.path.join(root, "staging")), PKG, listing(os.path.join(root, "packages", PKG)))
        # (b) doctor opens (recovers) and verifies everything.
        d = subprocess.run([larder, "doctor", "--root", root], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if d.returncode != 0:
            r.problems.append("(b) larder doctor exited %d: %s" % (d.returncode, " | ".join(d.stdout.strip().splitlines())[:600]))
        # (c) recovery emptied staging/ and trash/ and left only the versions the state names.
        for sub in ("staging", "trash"):
            left = listing(os.path.join(root, sub))
            if left:
                r.problems.append("(c) %s/ not empty after doctor: %s" % (sub, left))
        try:
            doc, after = load_state(root)
            if after != r.active:
                r.problems.append("(c) doctor changed the active version: %s -> %s" % (r.active, after))
            named = sorted(v["version"] for v in doc["packages"][PKG]["versions"])
            on_disk = listing(os.path.join(root, "packages", PKG))
            if on_disk != named:
                r.problems.append("(c) packages/%s/ holds %s, the state names %s" % (PKG, on_disk, named))
            lists = sorted(x[:-5] for x in listing(os.path.join(root, "lists", PKG)))
            if lists != named:
                r.problems.append("(c) lists/%s/ holds %s, the state names %s" % (PKG, lists, named))
            if V1 not in on_disk:
                r.problems.append("(c) %s is gone from disk" % V1)
            if after == V2 and doc["packages"][PKG].get("fallback") != V1:
                r.problems.append("(c) %s active but fallback is %r" % (V2, doc["packages"][PKG].get("fallback")))
        except (ValueError, KeyError, TypeError) as e:
            r.problems.append("(c) state after doctor: %s" % e)
        # (d) independent check of the active tree.
        if r.active in (V1, V2):
            tp = check_tree(os.path.join(root, "packages", PKG, r.active),
                            os.path.join(root, "lists", PKG, r.active + ".json"), repo_list[r.active])
            r.problems += ["(d) %s@%s %s" % (PKG, r.active, p) for p in tp[:10]]
            if len(tp) > 10:
                r.problems.append("(d) ... and %d more" % (len(tp) - 10))
        with print_lock:
            status = "ok" if not r.problems else "FAILED"
            say("  round %3d: kill at %.3f s, %s -> active %s: %s" % (r.i, r.delay, r.landed, r.active, status))
            if r.problems:
                say("    crash state: " + crash_view)
                for p in r.problems:
                    say("    round %d: %s" % (r.i, p))
        if not r.problems:
            shutil.rmtree(root, ignore_errors=True)
        return r

    with concurrent.futures.ThreadPoolExecutor(jobs) as ex:
        done = list(ex.map(play, rounds))
    # On a machine slower during the rounds than during the measurement, even the last slice's
    # kills land before the install ends and no round shows 2.0.0 active: a few later kills
    # (1.5x, 2x, 3x, 5x the span, one at a time) show that the finished install survives too.
    for factor in LATE_FACTORS:
        if any(r.active == V2 for r in done):
            break
        late = Round(len(done) + 1, factor * span)
        say("  no round ended with %s active: one more at %.1fx the span" % (V2, factor))
        done.append(play(late))

    passed = sum(1 for r in done if not r.problems)
    failed = len(done) - passed
    ended = {V1: 0, V2: 0, None: 0}
    landed = {}
    for r in done:
        ended[r.active if r.active in (V1, V2) else None] += 1
        landed[r.landed] = landed.get(r.landed, 0) + 1
    say("")
    say("where the kills landed:")
    first = {}
    for r in done:
        first[r.landed] = min(first.get(r.landed, r.delay), r.delay)
    for k, v in sorted(landed.items(), key=lambda kv: first[kv[0]]):
        say("  %3d  %s" % (v, k))
    before = sum(v for k, v in landed.items() if k == "before the install touched the sandbox")
    say("rounds ended: %d with %s active (%d of them killed before the install touched the sandbox), "
        "%d with %s active, %d with neither" % (ended[V1], V1, before, ended[V2], V2, ended[None]))
    covered = ended[V1] > 0 and ended[V2] > 0
    for r in done:
        if r.problems:
            say("kill-test: round %d FAILED (seed %d, kill at %.3f s, %s): %s" % (
                r.i, seed, r.delay, r.landed, r.problems[0].splitlines()[0]))
    if not covered:
        say("kill-test: FAILED: the kills did not land on both sides (%s active: %d, %s active: %d); "
            "the delays need adjusting" % (V1, ended[V1], V2, ended[V2]))
    say("time: %.0f s (setup %.0f s, rounds %.0f s)" % (
        time.monotonic() - started, setup_done - started, time.monotonic() - setup_done))
    # Uncovered outcomes count as one failed check, so the summary always reads the same way.
    say("kill-test: %d passed, %d failed" % (passed, failed + (0 if covered else 1)))
    return failed == 0 and covered


if __name__ == "__main__":
    ls.main(main)
