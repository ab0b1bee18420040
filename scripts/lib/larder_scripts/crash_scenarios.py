"""The scenarios the crash tests share (scripts/integration/crash-test.py, io-faults.py and
powercut-test.py): a signed sample repository in four releases, template sandboxes, the device
commands to interrupt, and the invariant checks run after each interruption."""
import hashlib
import json
import os
import shutil

import larder_scripts as ls
from larder_scripts import SetupError


PHASES = [
    ("telemetry", "/telemetry/"), ("download", "/downloads/"), ("staging", "/staging/"), ("removal", "/trash/"),
    ("list write", "/lists/"),
    ("state write", "state"), ("state write", "/generation"), ("record", "last-sync"), ("index cache", "repository-index"),
    ("placement", "/packages/"), ("lock", "/.lock"),
]


def phase_of(line, root):
    """The phase of the run a call on `line` (naming a path under `root`) belongs to."""
    if line.rstrip("/").endswith(" " + root) or line.rstrip("/").endswith(root):
        return "directory sync"
    for name, marker in PHASES:
        if marker in line:
            return name
    return "other"


def tree_digest(path, skip=None):
    """Every file and directory under `path` (not under `skip`) with size, mtime and content hash."""
    out = {}
    for dirpath, dirs, files in os.walk(path):
        if skip and os.path.abspath(dirpath).startswith(skip):
            continue
        for d in dirs:
            full = os.path.join(dirpath, d)
            if not (skip and os.path.abspath(full).startswith(skip)):
                out[os.path.relpath(full, path)] = "dir %d" % os.lstat(full).st_mtime_ns
        for f in files:
            full = os.path.join(dirpath, f)
            st = os.lstat(full)
            with open(full, "rb") as h:
                out[os.path.relpath(full, path)] = "%d %d %s" % (st.st_size, st.st_mtime_ns,
                                                                 hashlib.sha256(h.read()).hexdigest())
    return out


class Run:
    """Keys and four repositories: repo-1 (1.0.0), repo-2 (+ 2.0.0), repo-3 (2.0.0 revoked),
    repo-4 (+ 3.0.0), with each version's file list in `lists`."""

    def __init__(self, larder, work):
        self.larder = larder
        self.work = work
        keys = os.path.join(work, "keys", "p")
        larder.must("keygen", "--out", keys)
        self.key, self.pub = keys + ".key", keys + ".pub"
        src = os.path.join(work, "src")
        shutil.copytree(ls.SAMPLE_APP, src)
        self.repo1 = os.path.join(work, "repo-1")
        self.repo2 = os.path.join(work, "repo-2")
        self.repo3 = os.path.join(work, "repo-3")
        self.pack(src, self.repo1, "1.0.0")
        shutil.copytree(self.repo1, self.repo2)
        with open(os.path.join(src, "data", "catalog.json"), "w") as f:
            json.dump({"version": "2.0.0", "items": []}, f)
        with open(os.path.join(src, "js", "extra.js"), "w") as f:
            f.write("// 2.0.0\n" * 200)
        self.pack(src, self.repo2, "2.0.0")
        shutil.copytree(self.repo2, self.repo3)
        larder.must("revoke", "app", "2.0.0", "--repo", self.repo3, "--key", self.key)
        self.repo4 = os.path.join(work, "repo-4")
        shutil.copytree(self.repo2, self.repo4)
        with open(os.path.join(src, "data", "catalog.json"), "w") as f:
            json.dump({"version": "3.0.0", "items": []}, f)
        self.pack(src, self.repo4, "3.0.0")
        self.lists = {}
        for v in ("1.0.0", "2.0.0", "3.0.0"):
            with open(os.path.join(self.repo4, "packages", "app", v, "files.json")) as f:
                self.lists[v] = {e["path"]: e["sha256"] for e in json.load(f)["files"]}

    def pack(self, src, repo, version):
        self.larder.must("pack", src, "--repo", repo, "--id", "app", "--version", version, "--key", self.key)

    def sandbox(self, name, repo, steps):
        """A template sandbox: init against `repo`, then the larder commands in `steps`."""
        root = os.path.join(self.work, "templates", name)
        self.larder.must("init", "--root", root, "--repo", "file://" + repo, "--public-key", self.pub)
        for step in steps:
            self.larder.must(*[a.replace("@ROOT", root) for a in step])
        return root

    def retarget(self, root, repo):
        self.larder.must("init", "--root", root, "--repo", "file://" + repo, "--public-key", self.pub)


SYNC = ["sync", "--root", "@ROOT"]


def operations(larder, work, delegated=False):
    """The scenarios, after building their templates: (run, [(name, template, command, versions
    allowed after an interruption, the version active after the command completes)]). With
    `delegated`, also `sync-delegated` (crash-test.py and powercut-test.py)."""
    run = Run(larder, work)
    v1 = run.sandbox("v1", run.repo1, [SYNC, ["confirm", "app", "--root", "@ROOT"]])
    run.retarget(v1, run.repo2)
    v2 = run.sandbox("v2", run.repo1, [SYNC, ["confirm", "app", "--root", "@ROOT"]])
    run.retarget(v2, run.repo2)
    larder.must("sync", "--root", v2)
    v2r = os.path.join(work, "templates", "v2-revoked")
    shutil.copytree(v2, v2r, symlinks=True)
    run.retarget(v2r, run.repo3)
    v3 = os.path.join(work, "templates", "v3")
    shutil.copytree(v2, v3, symlinks=True)
    larder.must("confirm", "app", "--root", v3)
    run.retarget(v3, run.repo4)
    larder.must("sync", "--root", v3)
    larder.must("confirm", "app", "--root", v3)
    fresh = run.sandbox("fresh", run.repo1, [])
    probe = os.path.join(work, "probe")
    shutil.copytree(v3, probe, symlinks=True)
    gc = larder.must("gc", "--keep", "0", "--root", probe).strip()
    if "removed nothing" in gc:
        raise SetupError("gc --keep 0 on the gc template removes nothing: " + gc)
    shutil.rmtree(probe)
    # Eviction: repo-5 adds an on-demand package, "mini"; a device on 3.0.0 fetched it, then its
    # disk budget (1 byte) is lowered below what it holds: gc evicts "mini" (never "app", eager).
    repo5 = os.path.join(work, "repo-5")
    shutil.copytree(run.repo4, repo5)
    mini = os.path.join(work, "src-mini")
    shutil.copytree(ls.SAMPLE_APP, mini)
    larder.must("pack", mini, "--repo", repo5, "--id", "mini", "--version", "1.0.0", "--key", run.key,
                "--install", "on-demand")
    evict = os.path.join(work, "templates", "evict")
    shutil.copytree(v3, evict, symlinks=True)
    larder.must("init", "--root", evict, "--repo", "file://" + repo5, "--public-key", run.pub)
    larder.must("fetch", "mini", "--root", evict)
    larder.must("init", "--root", evict, "--repo", "file://" + repo5, "--public-key", run.pub, "--disk-budget", "1")
    # First use: a device on 3.0.0 that accepted repo-5's index fetches "mini".
    fetch = os.path.join(work, "templates", "fetch")
    shutil.copytree(v3, fetch, symlinks=True)
    larder.must("init", "--root", fetch, "--repo", "file://" + repo5, "--public-key", run.pub)
    larder.must("sync", "--root", fetch)
    # A sharded index: repo-6 is repo-5 with a second on-demand package packed under
    # `--index-layout sharded` (mini moves from the index into a shard). A device on 3.0.0 that
    # held mini from repo-5's inline index syncs it: it caches the catalog and mini's shard
    # before it records the index, and keeps mini.
    repo6 = os.path.join(work, "repo-6")
    shutil.copytree(repo5, repo6)
    larder.must("pack", mini, "--repo", repo6, "--id", "mini-two", "--version", "1.0.0", "--key", run.key,
                "--install", "on-demand", "--index-layout", "sharded")
    sharded = os.path.join(work, "templates", "sharded")
    shutil.copytree(v3, sharded, symlinks=True)
    larder.must("init", "--root", sharded, "--repo", "file://" + repo5, "--public-key", run.pub)
    larder.must("fetch", "mini", "--root", sharded)
    larder.must("init", "--root", sharded, "--repo", "file://" + repo6, "--public-key", run.pub)
    # An encrypted version: repo-7 is repo-4 with app 4.0.0 sealed for a recipient key
    # (`pack --encrypt-to`); a device on 3.0.0 that holds the key syncs it (manifests §16).
    repo7 = os.path.join(work, "repo-7")
    shutil.copytree(run.repo4, repo7)
    recipient = os.path.join(work, "keys", "device")
    larder.must("keygen", "--recipient", "--out", recipient)
    src4 = os.path.join(work, "src-4")
    shutil.copytree(ls.SAMPLE_APP, src4)
    with open(os.path.join(src4, "data", "catalog.json"), "w") as f:
        json.dump({"version": "4.0.0", "items": []}, f)
    larder.must("pack", src4, "--repo", repo7, "--id", "app", "--version", "4.0.0", "--key", run.key,
                "--encrypt-to", recipient + ".pub")
    run.lists["4.0.0"] = {}
    for dirpath, _, files in os.walk(src4):
        for name in files:
            full = os.path.join(dirpath, name)
            with open(full, "rb") as h:
                run.lists["4.0.0"][os.path.relpath(full, src4)] = hashlib.sha256(h.read()).hexdigest()
    encrypted = os.path.join(work, "templates", "encrypted")
    shutil.copytree(v3, encrypted, symlinks=True)
    larder.must("init", "--root", encrypted, "--repo", "file://" + repo7, "--public-key", run.pub)
    # Release telemetry (manifests §19): repo-9 is repo-4 with app 4.0.0 in the clear, its index
    # naming a collector on a closed port; a device on 3.0.0 with telemetry on syncs it, spools its
    # events and fails to send them (the outbox and the back-off written).
    repo9 = os.path.join(work, "repo-9")
    shutil.copytree(run.repo4, repo9)
    larder.must("pack", src4, "--repo", repo9, "--id", "app", "--version", "4.0.0", "--key", run.key,
                "--telemetry-endpoint", "http://127.0.0.1:9/v1/events")
    telemetry = os.path.join(work, "templates", "telemetry")
    shutil.copytree(v3, telemetry, symlinks=True)
    larder.must("init", "--root", telemetry, "--repo", "file://" + repo9, "--public-key", run.pub, "--telemetry", "on")
    bundle2 = os.path.join(run.repo2, "packages", "app", "2.0.0", "bundle.zip")
    files2 = os.path.join(run.repo2, "packages", "app", "2.0.0", "files.json")
    extra = [delegation_case(larder, run, work, v3, src4)] if delegated else []
    return run, extra + [
        ("install", v1, ["install", "--root", "@ROOT", "--id", "app", "--version", "2.0.0", "--files", files2,
                         bundle2], {"1.0.0", "2.0.0"}, "2.0.0"),
        ("sync-first", fresh, SYNC, {None, "1.0.0"}, "1.0.0"),
        ("sync-objects", v1, SYNC, {"1.0.0", "2.0.0"}, "2.0.0"),
        ("sync-revoked", v2r, SYNC, {"1.0.0", "2.0.0"}, "1.0.0"),
        ("rollback", v2, ["rollback", "app", "--root", "@ROOT"], {"1.0.0", "2.0.0"}, "1.0.0"),
        ("confirm", v2, ["confirm", "app", "--root", "@ROOT"], {"2.0.0"}, "2.0.0"),
        ("gc", v3, ["gc", "--keep", "0", "--root", "@ROOT"], {"3.0.0"}, "3.0.0"),
        ("evict", evict, ["gc", "--keep", "1", "--root", "@ROOT"], {"3.0.0"}, "3.0.0"),
        ("fetch", fetch, ["fetch", "mini", "--root", "@ROOT"], {"3.0.0"}, "3.0.0"),
        ("sync-sharded", sharded, SYNC, {"3.0.0"}, "3.0.0"),
        ("sync-encrypted", encrypted, SYNC + ["--recipient-key", recipient + ".key"], {"3.0.0", "4.0.0"}, "4.0.0"),
        ("sync-telemetry", telemetry, SYNC, {"3.0.0", "4.0.0"}, "4.0.0"),
    ]


def delegation_case(larder, run, work, v3, src4):
    """`sync-delegated` (manifests §18): repo-8 is repo-4 delegated to a team "apps" (root and
    index key: the publisher's), which claims app and packs 4.0.0 in the clear with its own key. A
    device on 3.0.0 that trusts the publisher's key syncs it: it follows root 1, checks the team's
    part, keeps trust/ before it records the index, and installs 4.0.0."""
    repo8 = os.path.join(work, "repo-8")
    shutil.copytree(run.repo4, repo8)
    team = os.path.join(work, "keys", "team")
    larder.must("keygen", "--out", team)
    larder.must("delegate", "add", "apps", "--repo", repo8, "--key", run.key, "--public-key", team + ".pub",
                "--packages", "app", "mini*")
    larder.must("delegate", "claim", "--repo", repo8, "--key", team + ".key", "--index-key", run.key)
    larder.must("pack", src4, "--repo", repo8, "--id", "app", "--version", "4.0.0", "--key", team + ".key",
                "--index-key", run.key)
    template = os.path.join(work, "templates", "delegated")
    shutil.copytree(v3, template, symlinks=True)
    larder.must("init", "--root", template, "--repo", "file://" + repo8, "--public-key", run.pub)
    return ("sync-delegated", template, SYNC, {"3.0.0", "4.0.0"}, "4.0.0")


def active(larder, root):
    """(active, pending) of the package `app`."""
    rc, st, _ = larder.json("status", "--root", root)
    p = ls.find_package(st, "app")
    return (p.get("active"), p.get("pending")) if p else (None, None)


class Quiet:
    """Checks counted silently when they pass, printed when they fail (thousands per run)."""

    def __init__(self, checks):
        self.checks = checks

    def __call__(self, text, ok, detail=""):
        if ok:
            self.checks.passed += 1
            return True
        return self.checks.check(text, False, detail)


def check_after_interruption(larder, run, root, case, command, allowed, expected, quiet, must_be=None):
    """The invariants after a crash or power cut left `root` as it is: doctor exits 0 (I1, I3:
    leftovers cleaned, the active version complete, every file checked), the active version is
    one of `allowed` (or exactly `must_be`), a URL of it resolves to its listed bytes, the command
    run again (always for a sync: I6; for another command when it had not taken effect)
    succeeds and leaves `expected` active."""
    r = larder.run("doctor", "--root", root)
    ok = quiet(case + ": doctor exits 0 (leftovers cleaned, the active version complete)", r.returncode == 0,
               (r.stdout + r.stderr)[-300:])
    version, _ = active(larder, root)
    if must_be is not None:
        quiet(case + ": %s is active (%s)" % (must_be, version), version == must_be)
    else:
        quiet(case + ": the active version is the old or the new one (%s)" % version, version in allowed)
    if ok and version is not None:
        bad = []
        for path, sha in sorted(run.lists[version].items())[:1]:
            rc, doc, _ = larder.json("resolve", "larder://app/" + path, "--root", root)
            f = (doc or {}).get("file")
            if rc != 0 or not f or not os.path.isfile(f):
                bad.append("%s unresolved" % path)
                continue
            with open(f, "rb") as h:
                if hashlib.sha256(h.read()).hexdigest() != sha:
                    bad.append("%s has other bytes" % path)
        quiet(case + ": a file of %s resolves to its listed bytes" % version, not bad, "; ".join(bad[:5]))
    if command[0] == "sync" or version != expected:
        again = larder.run(*[a.replace("@ROOT", root) for a in command])
        quiet(case + ": the same command run again succeeds", again.returncode == 0, again.stderr[-300:])
    got = active(larder, root)
    quiet(case + ": then %s is active" % expected, got[0] == expected, "got %s" % (got,))
    if case.startswith("fetch"):
        # The fetched package was whole or absent (doctor above); fetched again, it is installed.
        again = larder.run("fetch", "mini", "--root", root)
        rc, st, _ = larder.json("status", "--root", root)
        got = (ls.find_package(st, "mini") or {}).get("active")
        quiet(case + ": fetch run again installs mini 1.0.0", again.returncode == 0 and got == "1.0.0",
              "%s %s" % (again.stderr[-200:], got))
    if case.startswith("sync-sharded"):
        # Whatever the interruption, the held on-demand package stays held and serves: the
        # shards of what the device holds were cached before the sharded index was recorded.
        rc, st, _ = larder.json("status", "--root", root)
        got = (ls.find_package(st, "mini") or {}).get("active")
        rc2, doc, _ = larder.json("resolve", "larder://mini/index.html", "--root", root)
        quiet(case + ": mini 1.0.0 is still held and resolves", got == "1.0.0" and rc2 == 0 and (doc or {}).get("file"),
              "%s %s" % (got, doc))
    if case.startswith("sync-telemetry"):
        # Every telemetry file whole (each written whole), and 4.0.0's activation to be sent at most
        # once: a spool file the outbox took (its seq at most the outbox's `through`; its removal
        # may be lost to a power cut) is removed before anything is sent, so it does not count.
        torn, activations, through = [], 0, 0
        try:
            with open(os.path.join(root, "telemetry", "outbox.json")) as h:
                through = json.load(h).get("through", 0)
        except (OSError, ValueError):
            pass
        # A spool file superseded by a merge (the same seq, a larger count) does not count either.
        largest = {}
        for name in os.listdir(os.path.join(root, "telemetry", "spool")) if os.path.isdir(
                os.path.join(root, "telemetry", "spool")) else []:
            seq, _, count = name[:-5].partition("-")
            if seq.isdigit() and count.isdigit():
                largest[seq] = max(largest.get(seq, 0), int(count))
        for dirpath, _, files in os.walk(os.path.join(root, "telemetry")):
            for name in files:
                if not name.endswith(".json"):
                    continue
                seq, _, count = name[:-5].partition("-")
                if os.path.basename(dirpath) == "spool" and seq.isdigit() and count.isdigit() and (
                        int(seq) <= through or int(count) < largest.get(seq, 0)):
                    continue
                try:
                    with open(os.path.join(dirpath, name)) as h:
                        doc = json.load(h)
                except ValueError:
                    torn.append(name)
                    continue
                events = doc if isinstance(doc, list) else (doc.get("batch") or {}).get("events", [])
                activations += sum(1 for e in events if e.get("kind") == "activated" and e.get("version") == "4.0.0")
        quiet(case + ": every telemetry file whole, the activation spooled at most once",
              not torn and activations <= 1, "torn %s, %d activations" % (torn, activations))
    if case.startswith("evict"):
        # The evicted package was whole or gone (doctor above); gc run again leaves it gone.
        again = larder.run("gc", "--root", root)
        rc, st, _ = larder.json("status", "--root", root)
        left = ls.find_package(st, "mini")
        quiet(case + ": gc run again evicts mini, tree and all", again.returncode == 0 and left is None
              and not os.path.exists(os.path.join(root, "packages", "mini", "1.0.0")),
              "%s %s" % (again.stderr[-200:], left))
