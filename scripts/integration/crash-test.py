#!/usr/bin/env python3
"""Crashes at the Nth system call: every device command killed just before a call that can change
the disk, at points spread over its whole run, and the invariants checked after each crash.

The crash is injected through the system-call funnel (`LARDER_CRASH_AT=N LARDER_CRASH_ROOT=SB`:
the process names the call on stderr and kills itself with SIGKILL before the Nth open, write,
fsync, rename, unlink, mkdir… on a path under the sandbox). For each operation the script first
finds how many such calls a run makes (T), then crashes copies of the same starting sandbox at
N = 1…T (all of them when T is at most POINTS, else POINTS points stratified over 1…T, the first
and the last included). The operations:

  install         `larder install` of 2.0.0's bundle over 1.0.0 (side-load)
  sync-first      `larder sync` of an empty sandbox (1.0.0 by bundle)
  sync-objects    `larder sync` 1.0.0 → 2.0.0 (objects)
  sync-revoked    `larder sync` after 2.0.0 is revoked: the rollback to 1.0.0
  rollback        `larder rollback app` (2.0.0 → 1.0.0)
  confirm         `larder confirm app` (2.0.0 pending → confirmed)
  gc              `larder gc --keep 0` (three versions installed; the oldest removed)
  sync-delegated  `larder sync` 3.0.0 → 4.0.0 of a repository delegated to a team (manifests §18)
  sync-telemetry  `larder sync` 3.0.0 → 4.0.0 with telemetry on (manifests §19): events spooled, a send to
                  a closed port that fails (outbox and back-off written); after each crash every telemetry
                  file is whole and the activation is spooled at most once

After each crash: `larder doctor` exits 0 (the next open cleans leftovers; the active version is
complete, every file checked: I1, I3); the active version is the old or the new one; every file of
that version is on disk with its listed SHA-256 (doctor) and a URL of it resolves to such a file
(`larder resolve`; I1); the repository and everything else outside the sandbox is unchanged (I2); and the next
sync succeeds, as does any other command run again when the crash came before it took effect,
leaving the expected version active (I6). The call each crash hit is
classified into a phase (download, staging/extraction, placement, state write, list write,
removal, lock, record) and the phases hit are printed per operation.

Usage: scripts/integration/crash-test.py [POINTS]   (crash points per operation, default 35; scripts/test runs
the default: 205 crashes). Prints one line per failed check, a table per operation, and
`crash-test: N passed, M failed`. Environment: LARDER_BIN, CRASH_TEST_DIR, CRASH_TEST_ONLY=NAME (that
operation alone).
"""
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import larder_scripts as ls  # noqa: E402  (found through the line above)
from larder_scripts import SetupError, say  # noqa: E402
from larder_scripts import crash_scenarios as cs  # noqa: E402

ls.NAME = "crash-test"
CHECKS = ls.Checks()
QUIET = cs.Quiet(CHECKS)


def main():
    started = time.time()
    points = int(sys.argv[1]) if len(sys.argv) > 1 else 35
    larder = ls.Larder(ls.larder_binary(), timeout=120)
    work = ls.scratch_dir("larder-crash.", "CRASH_TEST_DIR", shm=True)
    totals = []
    try:
        run, ops = cs.operations(larder, work, delegated=True)
        outside = cs.tree_digest(work, skip=os.path.join(work, "cases"))
        only = os.environ.get("CRASH_TEST_ONLY")
        for name, template, command, allowed, expected in ops:
            if only and name != only:
                continue
            totals.append(crash_operation(larder, run, work, name, template, command, allowed, expected, points))
        check_outside = cs.tree_digest(work, skip=os.path.join(work, "cases"))
        CHECKS.check("nothing outside the sandboxes changed in any crash (repositories, templates, keys: %d entries)"
                     % len(outside), outside == check_outside,
                     "changed: %s" % sorted(k for k in set(outside) | set(check_outside)
                                            if outside.get(k) != check_outside.get(k))[:10])
    except SetupError as e:
        CHECKS.setup_failed(e)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say("")
    say("| operation | calls that can change the disk (T) | crashes | failed checks | phases hit |")
    say("|---|---|---|---|---|")
    for name, t, n, failed, phases in totals:
        say("| %s | %d | %d | %d | %s |" % (name, t, n, failed, ", ".join("%s %d" % kv for kv in sorted(phases.items()))))
    say("crash-test: %d crashes in %.1f s" % (sum(x[2] for x in totals), time.time() - started))
    return CHECKS.finish()


def crash_operation(larder, run, work, name, template, command, allowed, expected, points):
    cases = os.path.join(work, "cases")

    def attempt(n):
        root = os.path.join(cases, "%s-%d" % (name, n))
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(template, root, symlinks=True)
        env = dict(larder.env, LARDER_CRASH_AT=str(n), LARDER_CRASH_ROOT=root)
        p = subprocess.run([larder.binary] + [a.replace("@ROOT", root) for a in command], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=env, timeout=120)
        return root, p

    # T: the first N at which the command is not killed, by doubling then bisecting.
    lo, hi = 0, 1
    while True:
        root, p = attempt(hi)
        shutil.rmtree(root, ignore_errors=True)
        if p.returncode != -9:
            break
        lo, hi = hi, hi * 2
        if hi > 1 << 20:
            raise SetupError("%s: still crashing after %d calls" % (name, lo))
    while hi - lo > 1:
        mid = (lo + hi) // 2
        root, p = attempt(mid)
        shutil.rmtree(root, ignore_errors=True)
        lo, hi = (mid, hi) if p.returncode == -9 else (lo, mid)
    total = lo
    if total == 0:
        raise SetupError("%s makes no call that can change the disk" % name)
    if total <= points:
        ns = list(range(1, total + 1))
    else:
        ns = sorted({1, total} | {1 + (i * (total - 1)) // (points - 1) for i in range(points)})
    failed_before = CHECKS.failed
    phases = {}
    for n in ns:
        root, p = attempt(n)
        case = "%s crash at call %d of %d" % (name, n, total)
        line = next((x for x in p.stderr.splitlines() if "crash injected" in x), "")
        if not QUIET(case + ": killed there", p.returncode == -9 and bool(line), p.stderr[-300:]):
            continue
        phase = cs.phase_of(line, root)
        phases[phase] = phases.get(phase, 0) + 1
        cs.check_after_interruption(larder, run, root, case, command, allowed, expected, QUIET)
        shutil.rmtree(root, ignore_errors=True)
    say("crash-test: %s: %d calls can change the disk; %d crashes; phases hit: %s" % (
        name, total, len(ns), ", ".join("%s %d" % kv for kv in sorted(phases.items()))))
    return name, total, len(ns), CHECKS.failed - failed_before, phases


if __name__ == "__main__":
    sys.exit(main())
