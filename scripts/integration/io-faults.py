#!/usr/bin/env python3
"""I/O errors at chosen calls, and a read-only sandbox: every device command of crash-test.py
(beside this script) run with one system call failing — EIO, ENOSPC, EDQUOT or EACCES on open,
write, fsync, fdatasync, syncfs, ftruncate, rename, link, mkdir or unlink — through the funnel's
fault seam (`LARDER_FAULT=KIND:N:ERRNO`, `LARDER_FAULT_ROOT=SANDBOX`: the Nth such call under the
sandbox fails, and names itself on stderr). For each operation, kind and errno the Nth call fails
for N = 1, 4, 16, 64… until the fault no longer hits, by default each kind with its first errno
only (EACCES for open, EIO for write…); with --soak every errno listed, for N = 1, 2, 4, 8….

After each run whose fault hit:
  - the command failed with a documented exit code (1, or 2 for a sync with other packages
    applied) and an `error [code]: …` line (or, for a sync's package, a `failed [code] — …`
    line) naming the failing call or its path and the errno (I5) — or it succeeded without the
    failed call (a leftover it could not remove, a best-effort copy it made again another way:
    each such call is listed) and left the new version active and complete; when that call was
    a flush (fsync, fdatasync, syncfs), what it flushed (the file or directory of that inode)
    was abandoned: after the run it lives nowhere but staging/, downloads/ or trash/, never
    flushed again and trusted under packages/ or lists/;
  - after a failed flush of anything staged for a new version, that version is not active: it
    was abandoned, not flushed again and trusted;
  - then without the fault: doctor exits 0, the active version is the old or the new one, a URL
    of it serves its listed bytes, and the command (for a sync, always) run again succeeds and
    leaves the expected version active (I1, I3, I6).

A read-only sandbox (a tmpfs remounted read-only; needs root and the right to mount, else that
part prints `skipped`): status, resolve and doctor work; sync, install, rollback, confirm and gc
fail with exit 1 naming the read-only file system; nothing changes.

Usage: scripts/integration/io-faults.py [--soak | --read-only] (--read-only: that part alone).
Prints failed checks, a table per operation and `io-faults: N passed, M failed`. Environment: LARDER_BIN, IO_FAULTS_DIR.
"""
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import larder_scripts as ls  # noqa: E402  (found through the line above)
from larder_scripts import SetupError, say  # noqa: E402
from larder_scripts import crash_scenarios as cs  # noqa: E402

ls.NAME = "io-faults"
CHECKS = ls.Checks()
QUIET = cs.Quiet(CHECKS)

FAULTS = [
    ("open", "EACCES"), ("open", "ENOSPC"), ("open", "EIO"),
    ("write", "EIO"), ("write", "ENOSPC"), ("write", "EDQUOT"),
    ("pwrite", "EIO"), ("ftruncate", "EIO"),
    ("fsync", "EIO"), ("fdatasync", "EIO"), ("syncfs", "EIO"),
    ("rename", "EIO"), ("rename", "ENOSPC"), ("rename", "EACCES"),
    ("link", "ENOSPC"), ("mkdir", "ENOSPC"), ("mkdir", "EACCES"),
    ("unlink", "EIO"), ("unlink", "EACCES"),
]
FLUSHES = {"fsync", "fdatasync", "syncfs"}
STRERROR = {"EIO": "Input/output error", "ENOSPC": "No space left on device", "EDQUOT": "Disk quota exceeded",
            "EACCES": "Permission denied"}
STAGED = ("/staging/", "/downloads/")
INSTALLS = {"install", "sync-first", "sync-objects"}  # the operations that stage a new version
ANNOUNCED = re.compile(r"larder: fault injected: (\w+) (.*?)(?: -> (.*?))? fails with [^\[\n]*(?:\[inode (\d+)\])?")


def trusted_as(root, inode):
    """The paths outside staging/, downloads/ and trash/ (what the next open removes or a sync
    resumes) where the file or directory `inode` lives after a run, if any: a tree renamed into
    packages/, a list into lists/, a state file. (tmpfs does not reuse inode numbers in a run.)"""
    found = []
    for dirpath, dirs, files in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        if rel.split(os.sep)[0] in ("staging", "downloads", "trash"):
            dirs[:] = []
            continue
        for name in dirs + files:
            if rel == "." and name in ("staging", "downloads", "trash"):
                continue  # those directories themselves hold nothing trusted
            full = os.path.join(dirpath, name)
            if os.lstat(full).st_ino == inode:
                found.append(os.path.relpath(full, root))
    return ", ".join(found)


def run_with_fault(larder, root, command, kind, n, errno):
    env = dict(larder.env, LARDER_FAULT="%s:%d:%s" % (kind, n, errno), LARDER_FAULT_ROOT=root)
    return subprocess.run([larder.binary] + [a.replace("@ROOT", root) for a in command], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=env, timeout=120)


def fault_operation(larder, run, work, name, template, command, allowed, expected, soak):
    cases = os.path.join(work, "cases")
    failed_before = CHECKS.failed
    tried = hit = tolerated = 0
    tolerated_calls = set()
    # By default each kind of call fails with its first errno only; the soak tries them all.
    faults = FAULTS if soak else [f for k, f in enumerate(FAULTS) if all(g[0] != f[0] for g in FAULTS[:k])]
    for kind, errno in faults:
        n, step = 1, 0
        while True:
            root = os.path.join(cases, "%s-%s-%s-%d" % (name, kind, errno, n))
            shutil.rmtree(root, ignore_errors=True)
            shutil.copytree(template, root, symlinks=True)
            p = run_with_fault(larder, root, command, kind, n, errno)
            m = ANNOUNCED.search(p.stderr)
            tried += 1
            if not m:
                shutil.rmtree(root, ignore_errors=True)
                QUIET("%s with %s #%d failing (%s): no fault hit means a clean run (exit 0)" % (name, kind, n, errno),
                      p.returncode == 0, p.stderr[-300:])
                break
            hit += 1
            path = m.group(2)
            inode = int(m.group(4)) if m.group(4) else None
            case = "%s with %s #%d failing with %s (%s)" % (name, kind, n, errno, path.replace(root, "SANDBOX"))
            errors = [x for x in (p.stderr + p.stdout).splitlines() if "error [" in x or ": failed [" in x]
            QUIET(case + ": no crash or trap", p.returncode >= 0 and "Fatal error" not in p.stderr, p.stderr[-300:])
            if p.returncode == 0:
                tolerated += 1
                if kind in FLUSHES:
                    kept = trusted_as(root, inode)
                    QUIET(case + ": what failed to flush was abandoned, not trusted (%s)" % (kept or "nowhere"),
                          inode is not None and not kept, p.stderr[-300:])
                tolerated_calls.add("%s %s" % (kind, re.sub(r"-\d{4,}", "-N", path.replace(root, "SANDBOX"))))
                version, _ = cs.active(larder, root)
                QUIET(case + ": succeeding, it leaves %s active" % expected, version == expected, str(version))
            else:
                QUIET(case + ": exit 1 or 2 (%d)" % p.returncode, p.returncode in (1, 2), p.stderr[-300:])
                text = "\n".join(errors)
                QUIET(case + ": an `error [code]:` line names the failure (%s)" % (errors[:1] or ["none"])[0][:160],
                      bool(errors) and (STRERROR[errno] in text or "errno" in text) and
                      (kind in text or os.path.basename(path) in text or "create" in text),
                      p.stderr[-400:])
                if kind in FLUSHES and any(s in path for s in STAGED) and name in INSTALLS:
                    version, _ = cs.active(larder, root)
                    QUIET(case + ": the version whose flush failed is not active (%s)" % version,
                          version != expected, "")
            cs.check_after_interruption(larder, run, root, case, command, allowed, expected, QUIET)
            shutil.rmtree(root, ignore_errors=True)
            step += 1
            n = 2 ** step if soak else 4 ** step
    say("io-faults: %s: %d runs, %d with a fault hit (%d succeeded without the failed call)" % (
        name, tried, hit, tolerated))
    for call in sorted(tolerated_calls):
        say("io-faults: %s did without: %s" % (name, call))
    return name, tried, hit, tolerated, CHECKS.failed - failed_before


def read_only(larder, run, work, ops):
    """The sandbox on a read-only file system."""
    if os.geteuid() != 0:
        say("io-faults: read-only sandbox skipped (not root: mounting needs root)")
        return
    mnt = os.path.join(work, "ro")
    os.makedirs(mnt)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", mnt], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        say("io-faults: read-only sandbox skipped: root cannot mount a tmpfs here (%s)" % p.stderr.strip())
        return
    try:
        templates = {name: (template, command) for name, template, command, _, _ in ops}
        for name in ("install", "sync-objects", "rollback", "confirm", "gc"):
            template, command = templates[name]
            root = os.path.join(mnt, name)
            shutil.copytree(template, root, symlinks=True)
        subprocess.run(["mount", "-o", "remount,ro", mnt], check=True)
        for name in ("install", "sync-objects", "rollback", "confirm", "gc"):
            template, command = templates[name]
            root = os.path.join(mnt, name)
            before = cs.tree_digest(root)
            version, _ = cs.active(larder, root)
            case = "read-only sandbox (%s)" % name
            for probe in (["status", "--root", root], ["doctor", "--root", root],
                          ["resolve", "larder://app/index.html", "--root", root]):
                r = larder.run(*probe)
                CHECKS.check(case + ": larder %s works (exit 0)" % probe[0], r.returncode == 0, r.stderr[-300:])
            r = larder.run(*[a.replace("@ROOT", root) for a in command])
            CHECKS.check(case + ": larder %s exits 1 naming the read-only file system" % command[0],
                  r.returncode == 1 and "Read-only file system" in r.stderr, "exit %d: %s" % (
                      r.returncode, r.stderr[-300:]))
            CHECKS.check(case + ": nothing changed", cs.tree_digest(root) == before, "")
            CHECKS.check(case + ": %s still active" % version, cs.active(larder, root)[0] == version, "")
    finally:
        subprocess.run(["umount", mnt])


def main():
    started = time.time()
    soak = "--soak" in sys.argv[1:]
    only_read_only = "--read-only" in sys.argv[1:]
    larder = ls.Larder(ls.larder_binary(), timeout=120)
    work = ls.scratch_dir("larder-io-faults.", "IO_FAULTS_DIR", shm=True)
    totals = []
    try:
        run, ops = cs.operations(larder, work)
        outside = cs.tree_digest(work, skip=os.path.join(work, "cases"))
        for name, template, command, allowed, expected in ops:
            if only_read_only:
                break
            totals.append(fault_operation(larder, run, work, name, template, command, allowed, expected, soak))
        CHECKS.check("nothing outside the sandboxes changed", cs.tree_digest(work, skip=os.path.join(
            work, "cases")) == outside)
        read_only(larder, run, work, ops)
    except SetupError as e:
        CHECKS.setup_failed(e)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say("")
    say("| operation | runs | a fault hit | succeeded without the failed call | failed checks |")
    say("|---|---|---|---|---|")
    for row in totals:
        say("| %s | %d | %d | %d | %d |" % row)
    say("io-faults: %d runs in %.1f s" % (sum(r[1] for r in totals), time.time() - started))
    return CHECKS.finish()


if __name__ == "__main__":
    sys.exit(main())
