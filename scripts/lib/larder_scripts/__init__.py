"""What Larder's Python scripts share: the one Python library, a package (standard library only)
with its modules for the servers and scenarios more than one script runs:

    larder_scripts                  building and running larder, checks, scratch places, file lists
    larder_scripts.nginx_server     nginx as a foreground child (nginx.conf.template beside it)
    larder_scripts.varnish_server   Varnish as a foreground child, a CDN edge before nginx
    larder_scripts.crash_scenarios  the scenarios and checks the crash tests share
    larder_scripts.nginx_sync       nginx-sync.py's scenarios, by subject (basics, deltas, indexes,
                                    transport) over their common checks
    larder_scripts.fault_cases      faults.py's cases: rules, expected outcomes, log checks

A script (scripts/FOLDER/X.py) finds it by its own location and names itself once:

    HERE = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
    import larder_scripts as ls
    ls.NAME = "kill-test"

Building larder and installing Debian packages go through scripts/lib/common.sh (`larder_bin`,
`ensure_packages`), so the shell and the Python scripts find, build and install the same way.
"""
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import namedtuple

PACKAGE = os.path.dirname(os.path.abspath(__file__))
LIB = os.path.dirname(PACKAGE)
SCRIPTS = os.path.dirname(LIB)
CHECKOUT = os.path.dirname(SCRIPTS)
COMMON_SH = os.path.join(LIB, "common.sh")
# The sample app the end-to-end tests publish.
SAMPLE_APP = os.path.join(CHECKOUT, "Examples", "sample-app")

# The script's name: it prefixes die()'s message and Checks' summary line.
NAME = os.path.splitext(os.path.basename(sys.argv[0]))[0] if sys.argv and sys.argv[0] else "script"

_PRINT = threading.Lock()


def say(msg=""):
    """One line on stdout, flushed, whole even when threads print at once."""
    with _PRINT:
        print(msg, flush=True)


def die(msg):
    """`NAME: msg` on stderr, exit 1."""
    with _PRINT:
        print("%s: %s" % (NAME, msg), file=sys.stderr, flush=True)
    sys.exit(1)


class SetupError(Exception):
    """A step the checks depend on could not be done (a build, a tool, a setup command)."""


def main(body):
    """Runs the script's body and exits with what it returns (None: 0); a SetupError ends it
    with `NAME: message` on stderr and exit 1."""
    try:
        code = body()
    except SetupError as e:
        die(str(e))
    sys.exit(code or 0)


def count_argument(doc, default):
    """The script's one optional argument, a number of rounds N > 0 (`default` when there is none):
    -h or --help prints `doc` and exits 0; anything else exits 64 with a usage line."""
    args = sys.argv[1:]
    if len(args) > 1 or args[:1] in (["-h"], ["--help"]):
        print(doc)
        sys.exit(0 if len(args) == 1 else 64)
    if not args:
        return default
    n = int(args[0]) if args[0].isdigit() else 0
    if n < 1:
        script = os.path.relpath(os.path.abspath(sys.argv[0]), CHECKOUT)
        print("usage: %s [N]   (N > 0 rounds)" % script, file=sys.stderr)
        sys.exit(64)
    return n


def run(args, **kw):
    """Runs a command that must succeed; returns its stdout (raises SetupError otherwise)."""
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if p.returncode != 0:
        raise SetupError("setup step failed (exit %d): %s\n%s%s" % (p.returncode, " ".join(map(str, args)), p.stdout, p.stderr))
    return p.stdout


def _common(function, *args):
    """Calls a function of common.sh; its messages and any build output go to stderr. Returns
    what it printed on stdout, or raises SetupError when it failed."""
    env = dict(os.environ, LARDER_SCRIPT=NAME)
    p = subprocess.run(["bash", "-c", '. "$1" && shift && "$@"', "bash", COMMON_SH, function] + list(args),
                       stdout=subprocess.PIPE, text=True, env=env)
    if p.returncode != 0:
        raise SetupError("%s %s failed (its output is above)" % (function, " ".join(args)))
    return p.stdout.strip()


def larder_binary(mode="debug"):
    """The larder binary: $LARDER_BIN when set, else built from this checkout in `mode`
    (debug or release), the compiler's output on stderr."""
    return _common("larder_bin", mode)


def fault_origin_binary():
    """The fault origin (larder-fault-origin, LarderTestSupport's FaultOrigin as a process):
    $FAULT_ORIGIN_BIN when set, else built from this checkout (debug)."""
    given = os.environ.get("FAULT_ORIGIN_BIN")
    if given:
        if not os.access(given, os.X_OK):
            raise SetupError("FAULT_ORIGIN_BIN=%s is not an executable" % given)
        return given
    return _common("swift_product_bin", "larder-fault-origin")


def python_with_modules():
    """A Python 3 that imports what scripts beyond the standard library need (common.sh's
    python_modules): $PYTHON, python3 or Debian's /usr/bin/python3, whichever has them, after
    installing their Debian packages when none has (common.sh's ensure_python_modules)."""
    return _common("python_with_modules")


def ensure_tool(command, package):
    """The path of `command` (a name on PATH or an absolute path), installing the Debian
    `package` (common.sh's ensure_packages: as root or through sudo, no service started) when
    it is missing."""
    def find():
        if os.path.isabs(command):
            return command if os.access(command, os.X_OK) else None
        return shutil.which(command) or next(
            (p for p in ("/usr/sbin/" + command, "/usr/local/sbin/" + command) if os.access(p, os.X_OK)), None)
    found = find()
    if found:
        return found
    _common("ensure_packages", package)
    found = find()
    if not found:
        raise SetupError("%s is missing (Debian package %s)" % (command, package))
    return found


def scratch_dir(prefix, env_var=None, shm=False):
    """A new directory named prefix*: under $env_var when it is set, else on /dev/shm (when
    `shm` and it is writable), else in the system's temporary directory."""
    base = os.environ.get(env_var) if env_var else None
    if not base and shm and os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        base = "/dev/shm"
    return tempfile.mkdtemp(prefix=prefix, dir=base or tempfile.gettempdir())


def kept_unless_ok(work, body):
    """Runs body(), which returns whether every check passed: then the directory `work` is removed,
    else (or when body raised) it is kept, and said so on stderr. Returns body's answer."""
    ok = False
    try:
        ok = body()
    finally:
        if ok:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print("%s: work directory kept: %s" % (NAME, work), file=sys.stderr)
    return ok


def free_port():
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def loopback_env():
    """An environment for larder talking to servers on loopback: no proxy may take the traffic
    elsewhere; times in UTC."""
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,127.0.0.2,localhost"
    env["TZ"] = "UTC"
    return env


# One larder run: exit code (negative: killed by that signal), stdout, stderr, seconds taken.
Result = namedtuple("Result", "returncode stdout stderr seconds")


class Larder:
    """Runs a larder binary in loopback_env()."""

    def __init__(self, binary, timeout=120):
        self.binary = binary
        self.env = loopback_env()
        self.timeout = timeout

    def run(self, *args, timeout=None):
        """Runs larder; a run past `timeout` seconds is killed (exit -9, said on stderr)."""
        timeout = timeout or self.timeout
        started = time.time()
        p = subprocess.Popen([self.binary] + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=self.env)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()  # this run only, by its id
            out, err = p.communicate()
            return Result(-9, out, err + "\n(killed after %d s)" % timeout, time.time() - started)
        return Result(p.returncode, out, err, time.time() - started)

    def must(self, *args, timeout=None):
        """A setup step that must succeed; returns its stdout (raises SetupError otherwise)."""
        r = self.run(*args, timeout=timeout)
        if r.returncode != 0:
            raise SetupError("setup step failed (exit %d): larder %s\n%s%s" % (
                r.returncode, " ".join(map(str, args)), r.stdout, r.stderr))
        return r.stdout

    def json(self, *args, timeout=None):
        """Runs with --json; returns (exit code, parsed stdout or None, the Result)."""
        r = self.run(*(list(args) + ["--json"]), timeout=timeout)
        return r.returncode, parse_json(r.stdout), r


def parse_json(text):
    """The JSON document in text, or None."""
    try:
        return json.loads(text) if text and text.strip() else None
    except ValueError:
        return None


def find_package(doc, pid):
    """The entry for package `pid` in a report's or status's "packages" list, or None."""
    for p in (doc or {}).get("packages", []):
        if p.get("id") == pid:
            return p
    return None


class Checks:
    """Counts checks and prints one line each: `ok   TEXT`, or `FAIL TEXT — DETAIL`; summary()
    is the closing `NAME: N passed, M failed`."""

    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, text, ok, detail=""):
        with _PRINT:
            if ok:
                self.passed += 1
                print("ok   " + text, flush=True)
            else:
                self.failed += 1
                print("FAIL " + text + (" — " + detail if detail else ""), flush=True)
        return ok

    def setup_failed(self, error):
        """A step the checks depend on failed (a SetupError, say): one failed check naming it."""
        return self.check("setup: " + str(error).splitlines()[0], False, str(error))

    def summary(self):
        return "%s: %d passed, %d failed" % (NAME, self.passed, self.failed)

    def finish(self, started=None):
        """The closing lines: `NAME: S s` (the time since `started`, a time.time()) when given,
        then summary(). Returns the script's exit status: 1 when a check failed, else 0."""
        if started is not None:
            say("%s: %.1f s" % (NAME, time.time() - started))
        say(self.summary())
        return 1 if self.failed else 0


# ---- file lists and trees


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_file_list(path):
    """A files.json as {path: (size, sha256)}."""
    with open(path) as f:
        return {e["path"]: (e["size"], e["sha256"]) for e in json.load(f)["files"]}


def tree_problems(tree, want):
    """Checked here, independently of larder: every file of `tree` is a regular file with the
    size and sha256 `want` ({path: (size, sha256)}) gives it, none is missing, none is extra.
    Returns the problems found."""
    problems = []
    have = set()
    for dirpath, dirnames, filenames in os.walk(tree):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, tree)
            if os.path.islink(full) or not os.path.isfile(full):
                problems.append("%s: not a regular file" % rel)
                continue
            have.add(rel)
            if rel not in want:
                problems.append("%s: extra file" % rel)
                continue
            size, sha = want[rel]
            got_size, got_sha = os.path.getsize(full), sha256_file(full)
            if got_size != size or got_sha != sha:
                problems.append("%s: %d bytes sha256 %s, listed %d bytes sha256 %s" % (rel, got_size, got_sha, size, sha))
    for missing in sorted(set(want) - have):
        problems.append("%s: missing" % missing)
    return problems


def show_section(title, begin, end, lines, write, mode):
    """Prints a bench's section (`title` and `lines`) and, when `write`, puts it into BENCHMARKS.md
    (`write_section`), saying so for `scripts/bench MODE`."""
    print("\n".join([title] + lines))
    if write:
        write_section(title, begin, end, lines)
        say("bench %s: wrote BENCHMARKS.md" % mode)


def write_section(title, begin, end, lines):
    """Replaces the section of BENCHMARKS.md from `title` to the `end` marker with `title`, the
    `begin` marker, `lines` and `end` (appended when the markers are not there yet)."""
    path = os.path.join(CHECKOUT, "BENCHMARKS.md")
    text = open(path).read() if os.path.exists(path) else \
        "# Benchmarks\n\nEvery figure here comes from a script anyone can rerun.\n"
    section = "\n".join([title, "", begin] + lines + [end])
    if begin in text and end in text:
        start = text.index(title) if title in text else text.index(begin)
        text = text[:start] + section + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    with open(path, "w") as f:
        f.write(text)
