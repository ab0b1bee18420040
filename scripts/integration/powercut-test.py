#!/usr/bin/env python3
"""Power cuts: the disk states a crash may leave when the writes not yet made durable are lost,
built from a recorded run and checked like a crash (ALICE's method, with strace as the recorder).

For each device command of `scripts/integration/crash-test.py` (install, first sync, object update, revocation
rollback, rollback, confirm, gc, and the later ones: evict, fetch, sync-sharded, sync-encrypted,
sync-delegated, sync-telemetry) the script runs the command once under `strace -f -y` on a copy
of its starting sandbox, and reads from the trace every call that changes a file under the sandbox
(creating open, write, pwrite, ftruncate, rename, link, unlink, mkdir, rmdir) with its bytes and
offsets, and every flush (fsync, fdatasync, syncfs). Nothing of Larder's own is used to record:
the checker is independent of the code under test.

At each cut point (after the first c calls, c = 0…all) an operation counts as durable only when a
later flush before the cut covers it — a write or truncation by an fsync/fdatasync of the same
file (inode), a name change (create, link, unlink, mkdir, rmdir) by an fsync of the directory
whose entries it changed, a rename (atomic: the old name or the new, never both or neither) by
an fsync of its new name's directory, anything by a syncfs. POSIX promises no more. The others may
or may not have reached the disk, in any order, so the script builds several disk states per cut
by replaying the trace onto a fresh copy of the starting sandbox with some of them left out:

  lost        every non-durable operation lost
  zeroed      all kept, but the data of every non-durable write reads back as zeros
  names       non-durable name changes kept, their data lost (a rename that outran its data)
  data        non-durable data kept, name changes lost
  prefix      the first half of the non-durable operations, in order
  drop-N      all but one non-durable operation (a few per cut)

(An operation whose file or directory is missing in a state — its creation was lost — has no
effect there.) Identical states are counted once. On each distinct state ("after the reboot"):
the checks of crash-test.py (doctor exits 0, the active version is the old or the new one, a URL of it serves its listed bytes, the command or the next sync run again succeeds and leaves
the expected version active: I1, I3, I6). A cut after the command finished must leave the new
version active in every state: a command that reported success has made its result durable.
The trace also shows every change outside the sandbox (I2: none but the terminal).

Usage: scripts/integration/powercut-test.py [STATES]  (distinct states checked per command, spread over the
cuts, plus every state a cut after the command finished may leave; default 12 — 118 states
today, scripts/test; `all` checks every distinct state, 789 today: the soak).
Prints failed checks, a table per command and `powercut-test: N passed, M failed`.
Environment: LARDER_BIN, POWERCUT_TEST_DIR, POWERCUT_TEST_ONLY=NAME (that operation alone).
"""
import hashlib
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

ls.NAME = "powercut-test"
CHECKS = ls.Checks()
QUIET = cs.Quiet(CHECKS)

TRACED = ("open,openat,creat,write,pwrite64,writev,pwritev,pwritev2,lseek,close,fsync,fdatasync,syncfs,sync,"
          "rename,renameat,renameat2,link,linkat,unlink,unlinkat,mkdir,mkdirat,rmdir,ftruncate,truncate,fallocate,"
          "symlink,symlinkat,utimensat,fchmod,fchmodat,chmod")
O_CREAT, O_TRUNC, O_APPEND = "O_CREAT", "O_TRUNC", "O_APPEND"


# ---- reading strace -f -y -xx

HEX = re.compile(r'\\x([0-9a-f]{2})')
LINE = re.compile(r'^(\d+)\s+(.*)$')
CALL = re.compile(r'^(\w+)\((.*)\)\s+=\s+(-?\d+)(?:<([^>]*)>)?(.*)$')


def unhex(text):
    return bytes(int(h, 16) for h in HEX.findall(text))


def split_args(text):
    """The top-level arguments of a call (strings are all \\x escapes: no commas or quotes in them)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def fd_of(arg):
    """(number, path or None) of a decorated descriptor such as `3<\\x2f…>` or `AT_FDCWD<…>`."""
    m = re.match(r'^(-?\d+|AT_FDCWD)(?:<(.*)>)?$', arg)
    if not m:
        return None, None
    path = unhex(m.group(2)).decode("utf-8", "surrogateescape") if m.group(2) else None
    return m.group(1), path


def string_of(arg):
    return unhex(arg).decode("utf-8", "surrogateescape") if arg.startswith('"') else None


def at(dir_arg, name_arg, cwd):
    name = string_of(name_arg)
    if name is None:
        return None
    if name.startswith("/"):
        return os.path.normpath(name)
    _, base = fd_of(dir_arg)
    return os.path.normpath(os.path.join(base or cwd, name))


def read_trace(path, cwd):
    """The completed calls of a trace, in the order they returned: [(name, args, result, decor)]."""
    pending, calls = {}, []
    with open(path, encoding="ascii", errors="replace") as f:
        for raw in f:
            m = LINE.match(raw.rstrip("\n"))
            if not m:
                continue
            pid, text = m.group(1), m.group(2)
            if text.endswith("<unfinished ...>"):
                pending[pid] = text[:-len("<unfinished ...>")].rstrip()
                continue
            r = re.match(r'^<\.\.\. \w+ resumed>\s?(.*)$', text)
            if r:
                text = pending.pop(pid, "") + r.group(1)
            c = CALL.match(text)
            if c:
                calls.append((c.group(1), split_args(c.group(2)), int(c.group(3)), c.group(4)))
    return calls


def operations_of(calls, cwd):
    """The file operations of a trace: ('create', p, truncate) ('write', p, offset, bytes)
    ('truncate', p, n) ('rename', a, b) ('link', a, b) ('unlink', p) ('mkdir', p) ('rmdir', p)
    ('sync', p) ('syncall',) and ('other', text) for a change the model does not replay."""
    ops, pos = [], {}
    for name, args, result, decor in calls:
        if result < 0:
            continue
        if name in ("open", "openat", "creat"):
            if name == "openat":
                path, flags = at(args[0], args[1], cwd), args[2]
            else:
                path = at("AT_FDCWD", args[0], cwd)
                flags = "O_CREAT|O_WRONLY|O_TRUNC" if name == "creat" else args[1]
            pos[result] = 0
            if O_CREAT in flags:
                ops.append(("create", path, O_TRUNC in flags))
            elif O_TRUNC in flags:
                ops.append(("truncate", path, 0))
        elif name in ("write", "pwrite64"):
            number, path = fd_of(args[0])
            data = unhex(args[1])[:result]
            if path is None or not path.startswith("/"):
                continue  # a pipe or the terminal
            if name == "pwrite64":
                offset = int(args[3])
            else:
                offset = pos.get(int(number), 0)
                pos[int(number)] = offset + result
            ops.append(("write", path, offset, data))
        elif name == "lseek":
            number, _ = fd_of(args[0])
            pos[int(number)] = result
        elif name == "close":
            number, _ = fd_of(args[0])
            pos.pop(int(number), None)
        elif name == "ftruncate":
            ops.append(("truncate", fd_of(args[0])[1], int(args[1])))
        elif name in ("fsync", "fdatasync"):
            ops.append(("sync", fd_of(args[0])[1]))
        elif name in ("syncfs", "sync"):
            ops.append(("syncall",))
        elif name in ("rename", "link"):
            ops.append((name, at("AT_FDCWD", args[0], cwd), at("AT_FDCWD", args[1], cwd)))
        elif name in ("renameat", "renameat2", "linkat"):
            kind = "link" if name == "linkat" else "rename"
            if name == "renameat2" and args[4] != "0":
                ops.append(("other", "%s %s" % (name, args[4])))
            ops.append((kind, at(args[0], args[1], cwd), at(args[2], args[3], cwd)))
        elif name == "unlink":
            ops.append(("unlink", at("AT_FDCWD", args[0], cwd)))
        elif name == "unlinkat":
            ops.append(("rmdir" if "AT_REMOVEDIR" in args[2] else "unlink", at(args[0], args[1], cwd)))
        elif name in ("mkdir", "rmdir"):
            ops.append((name, at("AT_FDCWD", args[0], cwd)))
        elif name == "mkdirat":
            ops.append(("mkdir", at(args[0], args[1], cwd)))
        elif name in ("utimensat",):
            continue  # times only: not part of any invariant
        else:
            ops.append(("other", "%s(%s)" % (name, ", ".join(args)[:200])))
    return ops


# ---- which operations a cut may lose

def under(path, root):
    return path is not None and (path == root or path.startswith(root + "/"))


def durability(ops, root):
    """For each operation, the inodes whose flush makes it durable, after following names
    through the run: a data change needs its file's, a name change every parent directory's."""
    names, next_ino = {}, [0]
    for dirpath, dirs, files in os.walk(root):
        for n in [dirpath] + [os.path.join(dirpath, x) for x in dirs + files]:
            names[os.path.normpath(n)] = os.lstat(n).st_ino

    def ino(p):
        if p not in names:
            next_ino[0] -= 1
            names[p] = next_ino[0]
        return names[p]

    needs = []
    for op in ops:
        kind = op[0]
        if kind == "create":
            existed = op[1] in names
            i = ino(op[1])
            needs.append(("data", {i}) if existed else ("names", {ino(os.path.dirname(op[1]))}))
        elif kind in ("write", "truncate"):
            needs.append(("data", {ino(op[1])}))
        elif kind == "mkdir":
            ino(op[1])
            needs.append(("names", {ino(os.path.dirname(op[1]))}))
        elif kind in ("unlink", "rmdir"):
            needs.append(("names", {ino(os.path.dirname(op[1]))}))
            names.pop(op[1], None)
        elif kind == "rename":
            # Atomic in every file system: durable once its new name's directory is flushed.
            needs.append(("names", {ino(os.path.dirname(op[2]))}))
            moved = {k: v for k, v in names.items() if k == op[1] or k.startswith(op[1] + "/")}
            for k in moved:
                del names[k]
            for k, v in moved.items():
                names[op[2] + k[len(op[1]):]] = v
        elif kind == "link":
            needs.append(("names", {ino(os.path.dirname(op[2]))}))
            names[op[2]] = ino(op[1])
        elif kind == "sync":
            needs.append(("flush", {ino(op[1])}))
        elif kind == "syncall":
            needs.append(("flush", None))
        else:
            needs.append(("names", set()))
    return needs


def volatile_at(needs, cut):
    """The operations before `cut` that no later flush before `cut` made durable."""
    out = []
    flushed, everything = set(), False
    for i in range(cut - 1, -1, -1):
        what, inodes = needs[i]
        if what == "flush":
            if inodes is None:
                everything = True
            else:
                flushed |= inodes
            continue
        if not everything and not inodes <= flushed:
            out.append(i)
    return sorted(out)


# ---- building a state

def replay(ops, cut, kept, zeroed, src_root, template, dest):
    """`template` copied to `dest`, then the operations before `cut` that are in `kept` replayed
    (paths under `src_root` moved to `dest`); the writes in `zeroed` write zeros."""
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(template, dest, symlinks=True)

    def there(p):
        return dest + p[len(src_root):]

    for i in range(cut):
        if i not in kept:
            continue
        op = ops[i]
        kind = op[0]
        try:
            if kind == "create":
                p = there(op[1])
                if os.path.isdir(os.path.dirname(p)):
                    if not os.path.lexists(p):
                        open(p, "wb").close()
                    elif op[2] and os.path.isfile(p):
                        os.truncate(p, 0)
            elif kind == "write":
                p = there(op[1])
                if os.path.isfile(p):
                    with open(p, "r+b") as f:
                        f.seek(op[2])
                        f.write(bytes(len(op[3])) if i in zeroed else op[3])
            elif kind == "truncate":
                p = there(op[1])
                if os.path.isfile(p):
                    os.truncate(p, op[2])
            elif kind == "rename":
                if os.path.lexists(there(op[1])):
                    os.rename(there(op[1]), there(op[2]))
            elif kind == "link":
                if os.path.lexists(there(op[1])) and not os.path.lexists(there(op[2])):
                    os.link(there(op[1]), there(op[2]))
            elif kind == "unlink":
                if os.path.lexists(there(op[1])) and not os.path.isdir(there(op[1])):
                    os.unlink(there(op[1]))
            elif kind == "mkdir":
                p = there(op[1])
                if os.path.isdir(os.path.dirname(p)) and not os.path.lexists(p):
                    os.mkdir(p)
            elif kind == "rmdir":
                if os.path.isdir(there(op[1])) and not os.listdir(there(op[1])):
                    os.rmdir(there(op[1]))
        except OSError:
            pass  # the state this subset leaves makes the operation impossible: it has no effect


def state_digest(root):
    h = hashlib.sha256()
    for dirpath, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        h.update(b"d " + os.path.relpath(dirpath, root).encode("utf-8", "surrogateescape") + b"\n")
        for f in sorted(files):
            full = os.path.join(dirpath, f)
            h.update(b"f " + f.encode("utf-8", "surrogateescape") + b" ")
            if os.path.islink(full):
                h.update(os.readlink(full).encode("utf-8", "surrogateescape"))
            else:
                with open(full, "rb") as fh:
                    h.update(hashlib.sha256(fh.read()).digest())
            h.update(b"\n")
    return h.hexdigest()


def variants(ops, needs, cut):
    """(name, kept, zeroed) disk states a power cut after the first `cut` operations may leave."""
    volatile = volatile_at(needs, cut)
    everything = set(range(cut))
    durable = everything - set(volatile)
    data = [i for i in volatile if ops[i][0] in ("write", "truncate")]
    names = [i for i in volatile if i not in data]
    out = [("lost", durable, set()), ("zeroed", everything, {i for i in data if ops[i][0] == "write"}),
           ("names", durable | set(names), set()), ("data", durable | set(data), set()),
           ("prefix", durable | set(volatile[:len(volatile) // 2]), set())]
    for i in sorted({volatile[0], volatile[len(volatile) // 2], volatile[-1]} if volatile else set()):
        out.append(("drop-%d" % (i + 1), everything - {i}, set()))
    return out, len(volatile)


# ---- one command

def trace_command(larder, strace, work, name, template, command):
    root = os.path.join(work, "cases", name + "-traced")
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(template, root, symlinks=True)
    trace = os.path.join(work, "cases", name + ".strace")
    argv = [strace, "-f", "-qq", "-y", "-xx", "-s", "16777216", "-e", "trace=" + TRACED, "-e", "signal=none",
            "-o", trace, larder.binary] + [a.replace("@ROOT", root) for a in command]
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=larder.env,
                       cwd=work, timeout=300)
    if p.returncode != 0:
        raise SetupError("%s under strace failed (exit %d): %s" % (name, p.returncode, p.stderr[-500:]))
    return root, trace


def powercut_operation(larder, strace, run, work, name, template, command, allowed, expected, limit):
    traced_root, trace = trace_command(larder, strace, work, name, template, command)
    all_ops = operations_of(read_trace(trace, work), work)
    outside = [op for op in all_ops if op[0] not in ("sync", "syncall")
               and not any(under(p, traced_root) for p in op[1:] if isinstance(p, str))]
    QUIET("%s: no call changes anything outside the sandbox" % name, not outside,
          "; ".join(str(op[:2])[:160] for op in outside[:5]))
    ops = [op for op in all_ops if op[0] == "syncall" or (op[0] != "other" and any(
        under(p, traced_root) for p in op[1:] if isinstance(p, str)))]
    unknown = [op for op in all_ops if op[0] == "other"]
    QUIET("%s: every change is one the model replays" % name, not unknown, "; ".join(op[1] for op in unknown[:5]))
    # The model's inode numbers start from the sandbox as the traced run found it: a fresh copy.
    start = os.path.join(work, "cases", name + "-start")
    shutil.rmtree(start, ignore_errors=True)
    shutil.copytree(template, start, symlinks=True)
    needs = durability([rebase(op, traced_root, start) for op in ops], start)
    shutil.rmtree(start, ignore_errors=True)
    # Check: replaying the whole trace gives what the run left (the model is faithful).
    whole = os.path.join(work, "cases", name + "-whole")
    replay(ops, len(ops), set(range(len(ops))), set(), traced_root, template, whole)
    QUIET("%s: replaying the whole trace rebuilds the run's final sandbox" % name,
          state_digest(whole) == state_digest(traced_root))
    shutil.rmtree(whole, ignore_errors=True)

    states, seen, max_volatile = [], {}, 0
    scratch = os.path.join(work, "cases", name + "-build")
    for cut in range(len(ops) + 1):
        found, nvol = variants(ops, needs, cut)
        max_volatile = max(max_volatile, nvol)
        for variant, kept, zeroed in found:
            replay(ops, cut, kept, zeroed, traced_root, template, scratch)
            d = state_digest(scratch)
            if d in seen:
                if cut == len(ops):
                    seen[d][3] = True
                continue
            seen[d] = [cut, variant, kept, cut == len(ops), zeroed]
            states.append(d)
    shutil.rmtree(scratch, ignore_errors=True)
    chosen = states if limit is None or len(states) <= limit else \
        [states[(i * (len(states) - 1)) // (limit - 1)] for i in range(limit)]
    # The states a cut after the end may leave are always checked.
    chosen = list(dict.fromkeys(chosen + [d for d in states if seen[d][3]]))
    failed_before = CHECKS.failed
    for d in chosen:
        cut, variant, kept, finished, zeroed = seen[d]
        case_root = os.path.join(work, "cases", "%s-%d-%s" % (name, cut, variant))
        replay(ops, cut, kept, zeroed, traced_root, template, case_root)
        case = "%s power cut after %d of %d operations (%s)" % (name, cut, len(ops), variant)
        cs.check_after_interruption(larder, run, case_root, case, command, allowed, expected, QUIET,
                                    must_be=expected if finished else None)
        shutil.rmtree(case_root, ignore_errors=True)
    shutil.rmtree(traced_root, ignore_errors=True)
    say("powercut-test: %s: %d operations under the sandbox (%d flushes), up to %d not yet durable at a cut; "
        "%d distinct states, %d checked" % (name, len(ops), sum(1 for n in needs if n[0] == "flush"), max_volatile,
                                             len(states), len(chosen)))
    return name, len(ops), max_volatile, len(states), len(chosen), CHECKS.failed - failed_before


def rebase(op, old, new):
    return tuple(new + x[len(old):] if isinstance(x, str) and under(x, old) else x for x in op)


def main():
    started = time.time()
    arg = sys.argv[1] if len(sys.argv) > 1 else "12"
    limit = None if arg == "all" else int(arg)
    strace = ls.ensure_tool("strace", "strace")
    larder = ls.Larder(ls.larder_binary(), timeout=120)
    work = ls.scratch_dir("larder-powercut.", "POWERCUT_TEST_DIR", shm=True)
    totals = []
    try:
        run, ops = cs.operations(larder, work, delegated=True)
        only = os.environ.get("POWERCUT_TEST_ONLY")
        for name, template, command, allowed, expected in ops:
            if only and name != only:
                continue
            totals.append(powercut_operation(larder, strace, run, work, name, template, command, allowed, expected,
                                             limit))
    except SetupError as e:
        CHECKS.setup_failed(e)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say("")
    say("| operation | operations under the sandbox | most not yet durable at a cut | distinct states | checked "
        "| failed checks |")
    say("|---|---|---|---|---|---|")
    for row in totals:
        say("| %s | %d | %d | %d | %d | %d |" % row)
    say("powercut-test: %d disk states checked (of %d distinct) in %.1f s" % (
        sum(r[4] for r in totals), sum(r[3] for r in totals), time.time() - started))
    return CHECKS.finish()


if __name__ == "__main__":
    sys.exit(main())
