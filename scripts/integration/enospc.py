#!/usr/bin/env python3
"""A full disk, for real: the sandbox lives on a size-limited tmpfs mounted here, and `larder sync`
(an update by objects and one by bundle) and `larder install` run at many fill levels, from no
byte free to enough.

For every case: the command either succeeds or fails with exit 1 or 2 and a message naming the
full disk (`No space left on device`); the active version is the old one or the new one, complete
(`larder doctor` exits 0: every file of the active version checked); and once the space is back
(the filler removed), the next sync — or the same install — succeeds without any cleanup by hand
and leaves the new version active and verified.

Needs root and the right to mount (mount -t tmpfs); otherwise it prints `enospc: skipped: …`,
makes no check and exits 0.
Prints one line per check and `enospc: N passed, M failed`; exit 1 on any failure.
Environment: LARDER_BIN, ENOSPC_LEVELS (fill levels per command, default 12).
"""
import os
import random
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import larder_scripts as ls  # noqa: E402  (found through the line above)
from larder_scripts import SetupError, say  # noqa: E402

ls.NAME = "enospc"
CHECKS = ls.Checks()
check = CHECKS.check
SIZE = 6 << 20  # the small file system


class CannotMount(Exception):
    """This machine does not let even root mount a file system (a container without the right)."""


def mounted(path):
    with open("/proc/mounts") as f:
        return any(line.split()[1] == path for line in f)


class Disk:
    def __init__(self, path):
        self.path = path
        os.makedirs(path, exist_ok=True)
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d,mode=0755" % SIZE, "tmpfs", path],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            raise CannotMount(p.stderr.strip())

    def reset(self):
        for name in os.listdir(self.path):
            p = os.path.join(self.path, name)
            shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)

    def free(self):
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def fill(self, leave):
        """A filler file that leaves about `leave` bytes free."""
        filler = os.path.join(self.path, "filler")
        n = max(0, self.free() - leave)
        with open(filler, "wb") as f:
            chunk = b"\0" * (1 << 16)
            while n > 0:
                try:
                    f.write(chunk[:min(n, len(chunk))])
                    f.flush()
                except OSError:
                    break
                n -= min(n, len(chunk))
        return filler

    def unmount(self):
        subprocess.run(["umount", self.path])


def active(larder, root, pid):
    rc, st, _ = larder.json("status", "--root", root)
    p = ls.find_package(st, pid)
    return p.get("active") if p else None


def judge(larder, case, root, pid, old, new, r):
    text = r.stdout + r.stderr
    # Naming the full disk: the system's ENOSPC, or the sync's check before any download
    # (`no-space`: too little room for what it would fetch and write, and nothing written).
    check("%s: exit 0, or 1/2 naming the full disk (exit %d%s)" % (
        case, r.returncode, "" if r.returncode == 0 else ": " + r.stderr.strip()[-100:]),
        r.returncode == 0 or (r.returncode in (1, 2) and ("No space left on device" in text
                                                          or "not enough free space" in text)), text[-400:])
    v = active(larder, root, pid)
    check("%s: the active version is the old or the new one (%s)" % (case, v), v in (old, new), "")
    d = larder.run("doctor", "--root", root)
    check("%s: larder doctor exits 0 (the active version complete)" % case, d.returncode == 0, d.stdout[-400:])


def main():
    if os.geteuid() != 0:
        say("enospc: skipped (not root: mounting a small tmpfs needs root)")
        return 0
    started = time.time()
    larder = ls.Larder(ls.larder_binary(), timeout=120)
    work = ls.scratch_dir("larder-enospc.")
    disk = None
    try:
        keys = os.path.join(work, "keys", "p")
        larder.must("keygen", "--out", keys)
        repo = os.path.join(work, "repo")
        src = os.path.join(work, "src")
        shutil.copytree(ls.SAMPLE_APP, src)
        larder.must("pack", src, "--repo", repo, "--id", "app", "--version", "1.0.0", "--key", keys + ".key")
        rng = random.Random(7)
        with open(os.path.join(src, "data", "big.bin"), "wb") as f:
            f.write(rng.randbytes(600 << 10))  # incompressible: the update needs real space
        larder.must("pack", src, "--repo", repo, "--id", "app", "--version", "2.0.0", "--key", keys + ".key")
        bundle2 = os.path.join(repo, "packages", "app", "2.0.0", "bundle.zip")
        files2 = os.path.join(repo, "packages", "app", "2.0.0", "files.json")

        disk = Disk(os.path.join(work, "disk"))
        levels = int(os.environ.get("ENOSPC_LEVELS", "12"))
        # From nothing free to more than the update needs.
        leaves = sorted({int(x) for x in [0, 4096] + [i * (2 << 20) // levels for i in range(1, levels)]})
        # The template sandbox: 1.0.0 installed and confirmed (from a repository that has only it),
        # then pointed at the repository with 2.0.0.
        old_repo = os.path.join(work, "repo-old")
        larder.must("pack", ls.SAMPLE_APP, "--repo", old_repo, "--id", "app", "--version", "1.0.0", "--key", keys + ".key")
        template = os.path.join(work, "template")
        larder.must("init", "--root", template, "--repo", "file://" + old_repo, "--public-key", keys + ".pub")
        larder.must("sync", "--root", template)
        larder.must("confirm", "app", "--root", template)
        larder.must("init", "--root", template, "--repo", "file://" + repo, "--public-key", keys + ".pub")
        fresh = os.path.join(work, "fresh")
        larder.must("init", "--root", fresh, "--repo", "file://" + repo, "--public-key", keys + ".pub")
        for mode, start_from, old in (("update by objects", template, "1.0.0"), ("first install, bundle", fresh, None)):
            for leave in leaves:
                case = "sync (%s) with %d KiB free" % (mode, leave // 1024)
                disk.reset()
                root = os.path.join(disk.path, "sb")
                shutil.copytree(start_from, root, symlinks=True)
                filler = disk.fill(leave)
                r = larder.run("sync", "--root", root, "--json")
                judge(larder, case, root, "app", old, "2.0.0", r)
                os.unlink(filler)
                again = larder.run("sync", "--root", root)
                check("%s: with the space back, the next sync succeeds and 2.0.0 is active" % case,
                      again.returncode == 0 and active(larder, root, "app") == "2.0.0",
                      again.stderr.strip()[-200:] + again.stdout[-200:])
                d = larder.run("doctor", "--root", root)
                check("%s: doctor exits 0 after it" % case, d.returncode == 0, d.stdout[-300:])
        for leave in leaves:
            case = "install with %d KiB free" % (leave // 1024)
            disk.reset()
            root = os.path.join(disk.path, "sb")
            shutil.copytree(template, root, symlinks=True)
            filler = disk.fill(leave)
            r = larder.run("install", "--root", root, "--id", "app", "--version", "2.0.0", "--files", files2, bundle2)
            judge(larder, case, root, "app", "1.0.0", "2.0.0", r)
            os.unlink(filler)
            if active(larder, root, "app") != "2.0.0":
                again = larder.run("install", "--root", root, "--id", "app", "--version", "2.0.0", "--files", files2,
                                   bundle2)
                check("%s: with the space back, the same install succeeds" % case, again.returncode == 0,
                      again.stderr[-300:])
            check("%s: 2.0.0 active in the end" % case, active(larder, root, "app") == "2.0.0", "")
    except SetupError as e:
        CHECKS.setup_failed(e)
    except CannotMount as e:
        say("enospc: skipped: root cannot mount a tmpfs here (%s); no check was made" % e)
        shutil.rmtree(work, ignore_errors=True)
        return 0
    finally:
        if disk is not None:
            disk.unmount()
        if not (disk is not None and mounted(disk.path)):
            shutil.rmtree(work, ignore_errors=True)
    return CHECKS.finish(started)


if __name__ == "__main__":
    sys.exit(main())
