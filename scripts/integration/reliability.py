#!/usr/bin/env python3
"""Every reliability class in one run, with one table (GUARANTEES.md says what each proves). Each
class is a script beside this one, in scripts/integration/:

  crash, random moment   `kill-test.py` (install) and `kill-test-sync.py` (12-package sync)
  crash, Nth call        `crash-test.py` (install, sync ×3, rollback, confirm, gc, evict, fetch)
  power cut              `powercut-test.py` (the same commands; disk states a power cut allows)
  I/O errors             `io-faults.py` (EIO, ENOSPC, EDQUOT, EACCES at chosen calls; read-only)
  full disk              `enospc.py` (a small tmpfs; root)
  hostile archives       `hostile-archives.py` (verify, install and sync agree)
  faulty origins         `faults.py` (hostile indexes, torn pairs, HTTP faults)
  URLs                   `url-browser.py` (the resolver against Chromium)
  concurrency (--soak)   `tsan-test.sh` (the concurrency suites under ThreadSanitizer)

Usage: scripts/integration/reliability.py [--soak] [--only TEXT]... [--skip TEXT]... [--untimed | --timed]
  (--only / --skip: the classes whose name contains TEXT, or all but them; e.g. two runners at
  once: `--soak --only "random moment: install"` and `--soak --skip "random moment: install"`)
  (--untimed: only the classes that measure no time, which may run beside other work;
  --timed: only the four that do, which need the machine to themselves: scripts/test runs the
  first beside the Swift suites and the second after them)
  (default) the counts `scripts/test` runs, a few minutes;
  --soak    the full counts: 1,200 + 400 random kills, every crash point of every command (up to
            300 per command), every distinct power-cut state, every errno at the 1st, 2nd, 4th…
            call of its kind, 40 fill levels, the slow fault cases (minutes-long drips and
            stalls), 1,000 URLs, and the concurrency suites under ThreadSanitizer. Not run by
            scripts/test.

The classes that crash or fail a command at its Nth system call, cut its power, fill its disk or
hand it hostile archives run two at a time, each on scratch directories of its own; the four
that measure time (the random-moment kills, drawn over an uninterrupted run's duration; faulty
origins: stalls and drips; URLs: a browser's loads) then run alone. Each class's own lines are printed whole when it ends; then one table — class,
checks tried, passed, failed, seconds — and `reliability: N passed, N failed`. Exit 1 when any
check failed or a class did not finish.
Environment: LARDER_BIN (else built once here and shared by every class), RELIABILITY_LANES
(classes at once, default 2; 1 runs them one after another).
"""
import concurrent.futures
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import larder_scripts as ls  # noqa: E402  (found through the line above)
from larder_scripts import say  # noqa: E402

ls.NAME = "reliability"
SUMMARY = re.compile(r"^([\w.-]+): (\d+) passed, (\d+) failed\s*$")


def classes(soak):
    def here(name):
        return os.path.join(HERE, name)
    # (name, command, environment, alone): `alone` classes measure time (kills drawn over an
    # uninterrupted run's duration, stalls, drips, a browser's loads) and run with nothing beside
    # them.
    return [
        # The sample scripts/test runs draws its kill moments from a fixed seed (the soak, a new
        # one each run): the same fractions of the measured duration every run.
        ("crash at a random moment: install", [here("kill-test.py"), "1200" if soak else "50"],
         {} if soak else {"KILL_TEST_SEED": "20261203"}, True),
        ("crash at a random moment: sync", [here("kill-test-sync.py"), "400" if soak else "20"],
         {} if soak else {"KILL_TEST_SEED": "20261203"}, True),
        ("crash at the Nth system call", [here("crash-test.py"), "300" if soak else "25"], {}, False),
        ("power cut (unflushed writes lost)", [here("powercut-test.py"), "all" if soak else "12"], {}, False),
        ("I/O errors and a read-only sandbox", [here("io-faults.py")] + (["--soak"] if soak else []), {}, False),
        ("full disk (ENOSPC)", [here("enospc.py")], {"ENOSPC_LEVELS": "40" if soak else "12"}, False),
        ("hostile archives", [here("hostile-archives.py")], {}, False),
        ("hostile indexes and faulty origins", [here("faults.py")], {"FAULTS_SLOW": "1"} if soak else {}, True),
        ("URLs against the browser", [here("url-browser.py")], {"URL_BROWSER_COUNT": "1000" if soak else "200"},
         True),
    ] + ([("concurrency under ThreadSanitizer", [here("tsan-test.sh")], {}, True)] if soak else [])


def run_class(name, command, env):
    """Runs one class to its end, its output kept; returns (name, tried, passed, failed, seconds,
    output)."""
    t0 = time.time()
    p = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    passed = failed = None
    for line in p.stdout.splitlines():
        m = SUMMARY.match(line.strip())
        if m:
            passed, failed = int(m.group(2)), int(m.group(3))
    if passed is None:
        passed, failed = 0, 1  # the class did not report: count it as a failure
    elif p.returncode != 0 and failed == 0:
        failed = 1  # it exited non-zero without a failed check: a setup failure
    return name, passed + failed, passed, failed, time.time() - t0, p.stdout


def main():
    args = sys.argv[1:]
    soak = "--soak" in args
    # --only TEXT / --skip TEXT (repeatable): the classes whose name contains TEXT, or all but them.
    only = [args[k + 1] for k, a in enumerate(args) if a == "--only" and k + 1 < len(args)]
    skip = [args[k + 1] for k, a in enumerate(args) if a == "--skip" and k + 1 < len(args)]
    lanes = int(os.environ.get("RELIABILITY_LANES", "2"))
    env = dict(os.environ)
    env["LARDER_BIN"] = ls.larder_binary()
    started = time.time()
    untimed, timed = "--untimed" in args, "--timed" in args
    chosen = [(name, command, dict(env, **extra), alone) for name, command, extra, alone in classes(soak)
              if not ((only and not any(t in name for t in only)) or any(t in name for t in skip))
              and not (untimed and alone) and not (timed and not alone)]
    for name, command, _, alone in chosen:
        say("== reliability: %s (%s)%s" % (name, " ".join(os.path.basename(c) if k == 0 else c
                                                         for k, c in enumerate(command)),
                                           "" if alone or lanes < 2 else ", beside another class"))
    results = {}

    def finished(result):
        say("== reliability: %s: done in %.0f s" % (result[0], result[4]))
        sys.stdout.write(result[5])
        sys.stdout.flush()
        results[result[0]] = result

    # Classes of local processes on scratch directories of their own run side by side, in
    # `lanes` at once; the timing-sensitive ones run alone afterwards (a kill class run beside
    # another drew its kills from an unloaded run's duration and missed the late phases). Each
    # class's output is printed whole when it ends.
    side_by_side = [c for c in chosen if not c[3]]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, lanes)) as pool:
        for future in concurrent.futures.as_completed(
                [pool.submit(run_class, name, command, cenv) for name, command, cenv, _ in side_by_side]):
            finished(future.result())
    for name, command, cenv, _ in (c for c in chosen if c[3]):
        finished(run_class(name, command, cenv))
    rows = [results[name] for name, _, _, _ in chosen]
    say("")
    say("| class | checks tried | passed | failed | seconds |")
    say("|---|---|---|---|---|")
    for name, tried, passed, failed, seconds, _ in rows:
        say("| %s | %d | %d | %d | %.0f |" % (name, tried, passed, failed, seconds))
    total_passed = sum(r[2] for r in rows)
    total_failed = sum(r[3] for r in rows)
    say("reliability%s: %.0f s (%d lanes)" % (" --soak" if soak else "", time.time() - started, lanes))
    say("reliability: %d passed, %d failed" % (total_passed, total_failed))
    return 1 if total_failed else 0


if __name__ == "__main__":
    sys.exit(main())
