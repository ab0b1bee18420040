#!/usr/bin/env python3
"""Fault injection for `larder sync` over HTTP, against a real origin on loopback.

Usage: scripts/integration/faults.py [SUBSTRING...]     (only the cases whose name contains one)

Builds a signed repository with `larder keygen` + `larder pack` of Examples/sample-app: 1.0.0
(serial 1), a beta-channel 1.0.1 (serial 2: the index the template sandbox accepts) and 2.0.0
(serial 3: the update). Two such repositories are served: b/ (2.0.0 changes two files, so the
update downloads the bundle) and o/ (2.0.0 changes one small file, so it downloads one object).
Replacement indexes are kept aside: serial 1 (a replay), a 2.0.0 index that expired a second
after it was signed (--ttl-days 0.00001), and one signed by an untrusted key.

larder-fault-origin (Sources/larder-fault-origin: LarderTestSupport's FaultOrigin, the origin the
Swift suites start in process, as a process driven through its control endpoint) serves them on
127.0.0.1 (and 127.0.0.2, the "other host"), with ETag/304 and Range. A template sandbox per repository has 1.0.0 installed by a healthy sync
and confirmed. Each case gets a copy of it and its own lane of the origin (/lanes/CASE/...), so
cases run concurrently without touching each other's faults. For each case:

  1. inject the fault(s) through the origin's control endpoint, run
     `larder sync --root SB --json`, and check that the fault was exercised and the outcome is
     the right one: exit 1 with the error code for an index-level refusal, exit 2 with a reason
     naming the problem for a package-level failure, or success where the client must recover
     (retry, resume, restart a download the server would not resume);
  2. check what is active (1.0.0 after a failure, 2.0.0 after a recovery) and that
     `larder doctor --root SB` exits 0;
  3. heal the origin and sync again: it must install 2.0.0 (after a failure), or be a no-op that
     fetches the signature file only (after a recovery).
Some cases check the origin's log too (a resume asked for the right byte, no request reached the
other host, Retry-After was honoured, nothing was downloaded past a refused index). Every sync
must end within 30 s.

Prints one line per check and ends with `faults: N passed, M failed`; exits 1 on any failure.

Environment: LARDER_BIN (a built larder; else `swift build` here), FAULT_ORIGIN_BIN (a built
larder-fault-origin; else `swift build` here), FAULTS_JOBS (cases at once,
default 6), FAULTS_SLOW=1 (adds the permanent drip and stall cases, which take minutes because
the CLI cannot shorten the HTTP client's timeouts), FAULTS_DIR (parent of the work directory,
default $TMPDIR or /tmp), FAULTS_KEEP=1 (keep the work directory; it is kept anyway on failure).
All traffic goes to 127.0.0.1 and 127.0.0.2; proxies are switched off for larder.

This is the end-to-end layer over `larder sync`. The transport's own behaviour under each fault
(the FetchError, the retry, the Range resume) is specified by Swift tests against the in-process
origin of LarderTestSupport (FaultOrigin): Tests/LarderFetchTests.
"""
import concurrent.futures
import json
import os
import re
import select
import shutil
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import larder_scripts as ls  # noqa: E402  (found through the line above)
from larder_scripts import die, say  # noqa: E402
from larder_scripts.fault_cases import NEW, OLD, PKG, REASONS, cases  # noqa: E402

ls.NAME = "faults"

# The larder under test (an ls.Larder: proxies off, so it talks to loopback only), set by main().
LARDER = None


# ---- the origin


class Origin:
    def __init__(self, binary, root, logfile):
        self.log = open(logfile, "w")
        self.proc = subprocess.Popen(
            [binary, "--root", root, "--lifetime", "600", "--parent-pid", str(os.getpid())],
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], 15)
        line = self.proc.stdout.readline() if ready else ""
        m = re.match(r"^PORT (\d+)$", line.strip())
        if not m:
            self.proc.kill()
            die("the origin did not start (said %r); see %s" % (line, logfile))
        self.port = int(m.group(1))
        self.url = "http://127.0.0.1:%d" % self.port
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method, headers={"Content-Type": "application/json"})
        with self.opener.open(req, timeout=10) as r:
            return json.loads(r.read().decode())

    def fault(self, rules):
        return self.call("POST", "/__fault", rules)

    def rules(self, prefix):
        return [r for r in self.call("GET", "/__faults") if r["path-prefix"].startswith(prefix)]

    def requests(self, prefix):
        return self.call("GET", "/__log?prefix=" + urllib.request.quote(prefix))

    def reset(self, prefix):
        self.call("POST", "/__reset", {"path-prefix": prefix})

    def stop(self):
        try:
            self.call("POST", "/__shutdown", {})
        except Exception:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# ---- the repository


def snapshot(repo, dest, variant):
    """Keeps index.json and its signature at dest/VARIANT/ (the origin's serve-from layout)."""
    d = os.path.join(dest, variant)
    os.makedirs(d)
    for n in ("index.json", "index.json.sig"):
        shutil.copy2(os.path.join(repo, n), os.path.join(d, n))
    return dest


def make_trees(work):
    """1.0.0 is the sample app; b2 changes two files (bundle update), o2 one (object update)."""
    b2 = os.path.join(work, "app-b2")
    shutil.copytree(ls.SAMPLE_APP, b2)
    with open(os.path.join(b2, "index.html"), "a") as f:
        f.write("<!-- release 2.0.0 -->\n")
    with open(os.path.join(b2, "js", "app.js"), "a") as f:
        f.write("// release 2.0.0\n")
    o2 = os.path.join(work, "app-o2")
    shutil.copytree(ls.SAMPLE_APP, o2)
    p = os.path.join(o2, "data", "catalog.json")
    with open(p) as f:
        doc = json.load(f)
    if isinstance(doc, dict):
        doc["release"] = NEW
    else:
        doc = {"release": NEW, "items": doc}
    with open(p, "w") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
        f.write("\n")
    return {"b": b2, "o": o2}


def pack(tree, repo, version, key, *extra):
    # No deltas: these cases are about the file list, objects and bundles (deltas have theirs in
    # nginx-sync's scenario 10 and the Swift suites).
    LARDER.must("pack", tree, "--repo", repo, "--id", PKG, "--version", version, "--key", key, "--deltas", "0",
                *extra)


def build_repositories(work, keys):
    root = os.path.join(work, "root")
    snaps = os.path.join(work, "snapshots")
    trees = make_trees(work)
    s = {}
    for v in ("b", "o"):
        repo = os.path.join(root, v)
        pack(ls.SAMPLE_APP, repo, OLD, keys["key"])
        s[v + "-s1"] = snapshot(repo, os.path.join(snaps, v + "-s1"), v)
        if v == "b":
            # Another serial 2, differently signed-over bytes: a publisher (or attacker with the
            # key) reusing a serial.
            scratch = os.path.join(work, "scratch-reused")
            shutil.copytree(repo, scratch)
            pack(ls.SAMPLE_APP, scratch, "1.0.1", keys["key"], "--channel", "beta", "--rollout", "50")
            s["b-reused"] = snapshot(scratch, os.path.join(snaps, "b-reused"), v)
            shutil.rmtree(scratch)
        pack(ls.SAMPLE_APP, repo, "1.0.1", keys["key"], "--channel", "beta")
        s[v + "-s2"] = snapshot(repo, os.path.join(snaps, v + "-s2"), v)
        if v == "b":
            scratch = os.path.join(work, "scratch-expired")
            shutil.copytree(repo, scratch)
            pack(trees[v], scratch, NEW, keys["key"], "--ttl-days", "0.00001")
            s["b-expired"] = snapshot(scratch, os.path.join(snaps, "b-expired"), v)
            shutil.rmtree(scratch)
        pack(trees[v], repo, NEW, keys["key"])
    # The same history signed by a key the devices do not trust (pack refuses to sign over an
    # index it cannot verify, so the rogue publisher has its own repository).
    rogue = os.path.join(work, "rogue")
    pack(ls.SAMPLE_APP, rogue, OLD, keys["rogue"])
    pack(ls.SAMPLE_APP, rogue, "1.0.1", keys["rogue"], "--channel", "beta")
    pack(trees["b"], rogue, NEW, keys["rogue"])
    s["b-rogue"] = snapshot(rogue, os.path.join(snaps, "b-rogue"), "b")
    time.sleep(1.0)  # the expired index is now past its expiry
    return root, s


# ---- sandboxes


def status(sb):
    rc, out, _, _ = LARDER.run("status", "--root", sb, "--json")
    if rc != 0:
        return None
    return ls.find_package(json.loads(out), PKG)


def accepted_serial(sb):
    try:
        with open(os.path.join(sb, "state.json")) as f:
            return (json.load(f).get("index") or {}).get("serial")
    except (OSError, ValueError):
        return None


def make_template(work, origin, variant, snaps, pub):
    sb = os.path.join(work, "templates", variant)
    lane = "/lanes/template-%s/%s/" % (variant, variant)
    LARDER.must("init", "--root", sb, "--repo", origin.url + lane, "--public-key", pub)
    # The template accepts serial 2 (1.0.0 on stable), so there is a lower serial to replay.
    origin.fault([{"path-prefix": lane + "index.json", "fault": "serve-from", "dir": snaps[variant + "-s2"], "count": -1}])
    LARDER.must("sync", "--root", sb, "--json", "--progress", "none")
    LARDER.must("confirm", PKG, "--root", sb)
    origin.reset("/lanes/template-%s/" % variant)
    st = status(sb)
    if not st or st.get("active") != OLD or accepted_serial(sb) != 2:
        die("template %s: expected %s active and serial 2 accepted, got %s" % (variant, OLD, st))
    return sb


# ---- cases


def check_outcome(case, rc, out, err):
    """(ok, text) for the first sync's outcome."""
    doc = ls.parse_json(out)
    kind = case.expect[0]
    if rc < 0:
        fatal = [l.strip() for l in (err or "").splitlines() if "Fatal error" in l]
        p = ls.find_package(doc, PKG)
        said = ((doc or {}).get("error") or {}).get("code") or (p or {}).get("reason") or "nothing"
        want = "exit 1 [%s]" % case.expect[1] if kind == "index" else "exit 2, %s" % case.expect[1] if kind == "package" else "exit 0"
        return False, "%s (got: crashed with signal %d%s; stdout said: %s)" % (
            want, -rc, " — " + fatal[0] if fatal else "", said)
    if kind == "ok":
        p = ls.find_package(doc, PKG)
        ok = rc == 0 and p is not None and p.get("outcome") == "done" and p.get("to") == NEW
        got = "exit %d, %s" % (rc, "%s %s→%s %s" % (p["action"], p.get("from"), p.get("to"), p["outcome"]) if p else first_line(err))
        return ok, "recovered: sync succeeds and updates to %s (%s)" % (NEW, got)
    if kind == "index":
        code, message = case.expect[1], case.expect[2]
        e = (doc or {}).get("error") or {}
        ok = rc == 1 and e.get("code") == code and (message is None or message in e.get("message", ""))
        return ok, "refused: exit 1 [%s]%s (got exit %d [%s] %s)" % (
            code, " naming \"%s\"" % message if message else "", rc, e.get("code"), e.get("message") or first_line(err))
    code = case.expect[1]
    p = ls.find_package(doc, PKG)
    reason = (p or {}).get("reason", "")
    ok = rc == 2 and p is not None and p.get("outcome") == "failed" and re.search(REASONS[code], reason) is not None
    return ok, "package failed: exit 2, %s (got exit %d: %s)" % (code, rc, reason or first_line(err) or out[:200])


def first_line(text):
    lines = [l for l in (text or "").splitlines() if l.strip()]
    return lines[-1] if lines else ""


def run_case(case, ctx):
    origin = ctx["origin"]
    checks = []

    def check(ok, text):
        checks.append((bool(ok), text))

    lane = "/lanes/%s/" % case.name
    base = lane + case.variant + "/"
    sb = os.path.join(ctx["work"], "sandboxes", case.name)
    shutil.copytree(ctx["templates"][case.variant], sb, symlinks=True)
    rc, out, err, _ = LARDER.run("init", "--root", sb, "--repo", origin.url + base, "--public-key", ctx["pub"])
    if rc != 0:
        check(False, "larder init failed: %s" % first_line(err))
        return checks
    rules = []
    for r in case.rules:
        spec = {k: v for k, v in r.items() if k != "path"}
        spec["path-prefix"] = base + r["path"]
        if isinstance(spec.get("dir"), str) and spec["dir"].startswith("@"):
            spec["dir"] = ctx["snapshots"][spec["dir"][1:]]
        rules.append(spec)
    if rules:
        origin.fault(rules)
    if case.prepare:
        case.prepare(sb, origin.url + base + "index.json")

    # 1. the faulty sync
    outcomes = []
    for _ in range(case.runs):
        rc, out, err, took = LARDER.run("sync", "--root", sb, "--json", "--progress", "none", timeout=case.timeout)
        outcomes.append((check_outcome(case, rc, out, err), rc, took))
    log = origin.requests(lane)
    if rules:
        applied = [r["applied"] for r in origin.rules(lane)]
        check(all(a > 0 for a in applied), "fault exercised: %s hit %s request(s)" % (
            "+".join(r["fault"] for r in rules), "+".join(str(a) for a in applied)))
    bad = [o for o in outcomes if not o[0][0]]
    (ok, text), _, _ = bad[0] if bad else outcomes[0]
    if case.runs > 1:
        text += "; %d of %d runs right, exit codes %s" % (len(outcomes) - len(bad), len(outcomes), [o[1] for o in outcomes])
    check(ok, text)
    took = max(o[2] for o in outcomes)
    check(took <= case.limit, "sync took %.1f s (limit %d s)" % (took, case.limit))
    for fn in case.checks:
        for ok, text in fn(log, base):
            check(ok, text)

    # 2. what is active, and doctor
    recovered = case.expect[0] == "ok"
    want = NEW if recovered else OLD
    st = status(sb)
    active = st.get("active") if st else None
    health = st.get("health") if st else None
    want_health = "pending" if recovered else "confirmed"  # the template confirmed 1.0.0
    drc, dout, derr, _ = LARDER.run("doctor", "--root", sb)
    check(active == want and health == want_health and drc == 0, "%s active and %s (%s, %s), doctor exit %d%s" % (
        want, want_health, active, health, drc, "" if drc == 0 else ": " + first_line(dout + derr)))
    if case.expect[0] == "index":
        serial = accepted_serial(sb)
        check(serial == 2, "accepted index still serial 2 (%s)" % serial)

    # 3. heal, and sync against the healthy origin
    origin.reset(lane)
    rc, out, err, took = LARDER.run("sync", "--root", sb, "--json", "--progress", "none", timeout=120)
    doc = ls.parse_json(out)
    p = ls.find_package(doc, PKG)
    st = status(sb)
    drc, _, _, _ = LARDER.run("doctor", "--root", sb)
    if recovered:
        reqs = [(e["path"][len(base):].split("?")[0], e["status"]) for e in origin.requests(lane)]
        # After a sync that recovered in full, the next one stops after its one request, for the
        # signature file (upToDate); otherwise it plans and skips the package.
        noop = (doc or {}).get("upToDate") is True or (p is not None and p.get("outcome") == "skipped")
        ok = rc == 0 and doc is not None and noop and not doc.get("indexChanged") and \
            reqs[:1] == [("index.json.sig", 200)] and ("index.json", 200) not in reqs and drc == 0
        check(ok, "next sync is a no-op: exit %d, %s, requests %s, doctor exit %d" % (
            rc, "up to date" if (doc or {}).get("upToDate") else (p.get("reason") if p else first_line(err)),
            reqs, drc))
    else:
        ok = rc == 0 and p is not None and p.get("outcome") == "done" and p.get("to") == NEW and \
            st is not None and st.get("active") == NEW and drc == 0
        check(ok, "healed: sync exit %d, %s, %s active, doctor exit %d" % (
            rc, "%s %s→%s %s" % (p["action"], p.get("from"), p.get("to"), p["outcome"]) if p else first_line(err),
            st.get("active") if st else None, drc))
    left = sorted(os.listdir(os.path.join(sb, "downloads"))) if os.path.isdir(os.path.join(sb, "downloads")) else []
    check(not left, "nothing left in downloads/ once %s is installed (%s)" % (NEW, ", ".join(left) or "empty"))
    if not checks or all(ok for ok, _ in checks):
        shutil.rmtree(sb, ignore_errors=True)
    return checks


def main():
    global LARDER
    selected = sys.argv[1:]
    if any(a.startswith("-") for a in selected):
        print(__doc__)
        return 64
    started = time.time()
    LARDER = ls.Larder(ls.larder_binary())
    origin_bin = ls.fault_origin_binary()
    work = ls.scratch_dir("larder-faults.", "FAULTS_DIR")
    say("faults: work directory %s, larder %s" % (work, LARDER.binary))
    keys = os.path.join(work, "keys")
    LARDER.must("keygen", "--out", os.path.join(keys, "publisher"))
    LARDER.must("keygen", "--out", os.path.join(keys, "rogue"))
    k = {"key": os.path.join(keys, "publisher.key"), "rogue": os.path.join(keys, "rogue.key")}
    pub = os.path.join(keys, "publisher.pub")
    root, snaps = build_repositories(work, k)
    origin = Origin(origin_bin, root, os.path.join(work, "origin.log"))
    results = ls.Checks()
    try:
        say("faults: origin on %s (other host 127.0.0.2:%d)" % (origin.url, origin.port))
        templates = {v: make_template(work, origin, v, snaps, pub) for v in ("b", "o")}
        ctx = {"origin": origin, "work": work, "templates": templates, "snapshots": snaps, "pub": pub}
        todo = [c for c in cases() if not selected or any(s in c.name for s in selected)]
        todo.sort(key=lambda c: not c.slow)  # the slow ones first, so they overlap the rest
        jobs = max(1, int(os.environ.get("FAULTS_JOBS", "6")))
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(run_case, c, ctx): c for c in todo}
            for f in concurrent.futures.as_completed(futures):
                c = futures[f]
                try:
                    checks = f.result()
                except Exception as e:  # a bug in this script: count it, keep going
                    checks = [(False, "the case crashed: %r" % e)]
                for ok, text in checks:
                    results.check("%s: %s" % (c.name, text), ok)
    finally:
        origin.stop()
    say("faults: %.0f s" % (time.time() - started))
    if results.failed == 0 and os.environ.get("FAULTS_KEEP") != "1":
        shutil.rmtree(work, ignore_errors=True)
    else:
        say("faults: kept %s (origin log: %s)" % (work, os.path.join(work, "origin.log")))
    say(results.summary())
    return 0 if results.failed == 0 else 1


if __name__ == "__main__":
    ls.main(main)
