#!/usr/bin/env python3
"""Integration test of `larder init`, `plan` and `sync` against a real nginx from Debian.

Usage: scripts/integration/nginx-sync.py [--tls]

With --tls every scenario runs over https: the script makes a private certificate authority and
a server certificate for 127.0.0.1 with openssl, nginx listens with `ssl http2`, and larder
trusts the CA through LARDER_CA_FILE (the default of `--ca-file`); a sandbox that does not trust
it must fail with a certificate error and change nothing.

Publishes packages with `larder pack` / `larder revoke` into a temporary repository, serves it
with nginx (a foreground child on 127.0.0.1 and a free port, configured from
scripts/lib/larder_scripts/nginx.conf.template, with a JSON access log of every request: request
line, status, body_bytes_sent, Range, If-Range, If-None-Match, ETag, Content-Range), and checks what
larder asked for and what it did:

  1. first install: signature, index, gzipped file list and bundle fetched (200); doctor passes; status
     shows sample-app 1.0.0 active;
  2. no-change sync: exactly one request, GET /index.json.sig (unconditional, a few hundred
     bytes: it names the index it signs);
  3. an update that changes one file: signature, index, gzipped file list and ONE object; no bundle;
     the report says method objects and bytesFetched equals the object's size (and the log);
  4. resume: a 40 MB bundle served with limit_rate (files appear in staging/ while it downloads),
     the sync killed with SIGKILL once its .part file passes 25 %, the next sync resumes with
     `Range: bytes=N-` (and If-Range), answered 206; doctor and an independent hash check pass;
  5. revoke: the sync rolls back to 1.0.0; status shows 2.0.0 failed;
  6. minClientVersion (skipped as client-too-old, installed after re-init with a newer app
     version, device id kept) and channels (stable skips a beta package; a beta sandbox installs
     it);
  7. a republish within the same second as the previous one, with an index of the same length:
     nginx's ETag ("<mtime seconds>-<length>") does not change, and the next sync must still
     see the new index; and no publish stamps a file in the future (an honest clock);
  8. connection reuse: an update of 60 changed files of another package fetches 60 objects
     over at most 4 connections (HTTP/1.1; the transfer limit), one with HTTP/2 (--tls), and
     with --tls at most 4 TLS handshakes (nginx's $connection and $ssl_session_reused);
  9. updates by delta (deltas are made by pack; scenarios 3, 7 and 8 pack with --deltas 0 to
     test objects): the plan weighs delta, objects and bundle; the sync fetches the manifest and
     the patches only (nginx's log), under 1 % of the bundle; a corrupted patch on the server and
     a base altered on the device each fall back to that content's object; a crash (SIGKILL at
     each disk-changing call of the sync, `LARDER_CRASH_AT`) leaves the old or new version whole
     and the next sync finishes; a device four versions behind gets objects or the bundle, one
     three behind uses its own delta; every tree hashed here against its files.json;
 10. `larder verify URL` of the repository as nginx serves it exits 0 (--tls: through the
     private CA, from LARDER_CA_FILE), every delta checked.

Prints one line per check and ends with `nginx-sync: N passed, M failed`; exit 1 when any
check failed. Needs nginx (installs Debian's nginx-light when it is missing, as root or
through sudo, without starting the system nginx). Environment: LARDER_BIN (a built larder;
else `swift build` in this checkout), NGINX_SYNC_KEEP=1 (keep the work directory; after a
failure only nginx's config and logs are kept).
"""
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import larder_scripts as ls  # noqa: E402  (found through the line above)
from larder_scripts.nginx_server import Nginx, make_certificates  # noqa: E402
from larder_scripts import SetupError, say  # noqa: E402

ls.NAME = "nginx-sync"

CHECKS = ls.Checks()
check = CHECKS.check  # check(name, ok, detail): records and prints one check


STARTED = time.time()


def scenario(title):
    say("-- %s (at %.1f s)" % (title, time.time() - STARTED))


# --------------------------------------------------------------------------------------------
# Tools


def describe(p):
    return "exit %d; stdout: %s; stderr: %s" % (p.returncode, p.stdout.strip()[-800:], p.stderr.strip()[-800:])


# --------------------------------------------------------------------------------------------
# nginx


def show(entries):
    return "; ".join("%s %s %d%s%s" % (e["method"], e["uri"], e["status"],
                                       " range=" + e["range"] if e["range"] else "",
                                       " inm=" + e["if_none_match"] if e["if_none_match"] else "") for e in entries) or "(none)"


# --------------------------------------------------------------------------------------------
# Helpers


def index_entry(repo, pid, channel="stable"):
    with open(os.path.join(repo, "index.json")) as f:
        index = json.load(f)
    for e in index["packages"]:
        if e["id"] == pid and e.get("channel", "stable") == channel:
            return e
    return None


def published(repo):
    """pack/revoke stamp files with the real time (no device relies on nginx's mtime-based ETag
    of the index: it fetches the signature, which names the index, unconditionally); this checks
    after every publish that nothing was stamped in the future, and that the signature names the
    index and its immutable copy exists."""
    path = os.path.join(repo, "index.json")
    t = os.stat(path).st_mtime
    check("the new index's mtime is not in the future (%.1f s ahead)" % (t - time.time()), t <= time.time() + 0.5, "")
    with open(path, "rb") as f:
        raw = f.read()
    with open(os.path.join(repo, "index.json.sig")) as f:
        named = json.load(f).get("index") or {}
    digest = hashlib.sha256(raw).hexdigest()
    check("the signature names the index, and indexes/<sha256>.json holds it",
          named == {"sha256": digest, "size": len(raw)}
          and os.path.isfile(os.path.join(repo, "indexes", digest + ".json")), json.dumps(named))


def plan_action(plan_doc, pid):
    for a in (plan_doc or {}).get("actions", []):
        if a.get("id") == pid:
            return a
    return None


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(path, mode) as f:
        f.write(data)


# --------------------------------------------------------------------------------------------
# Scenarios


def main():
    started = STARTED
    tls_mode = "--tls" in sys.argv[1:]
    ls.NAME = "nginx-sync-tls" if tls_mode else "nginx-sync"
    larder = ls.Larder(ls.larder_binary(), timeout=60)
    nginx_bin = ls.ensure_tool("nginx", "nginx-light")
    work = ls.scratch_dir("larder-nginx.")
    keep = os.environ.get("NGINX_SYNC_KEEP") == "1"
    say("nginx-sync: work directory %s, larder %s, %s" % (work, larder.binary, subprocess.run(
        [nginx_bin, "-v"], stderr=subprocess.PIPE, text=True).stderr.strip()))
    repo = os.path.join(work, "repo")
    keys = os.path.join(work, "keys", "publisher")
    key, pub = keys + ".key", keys + ".pub"
    sb = os.path.join(work, "sb")
    sb2 = os.path.join(work, "sb-beta")
    os.makedirs(repo)
    nginx = Nginx(nginx_bin, work, repo)
    try:
        if tls_mode:
            nginx.tls = make_certificates(work)
            larder.env["LARDER_CA_FILE"] = nginx.tls[0]
        larder.must("keygen", "--out", keys)
        app1 = os.path.join(work, "src", "sample-app-1")
        shutil.copytree(ls.SAMPLE_APP, app1)
        larder.must("pack", app1, "--repo", repo, "--id", "sample-app", "--version", "1.0.0", "--key", key,
                    "--route", "https://app.example.com/")
        published(repo)
        nginx.start()
        say("nginx-sync: nginx pid %d serving %s on %s" % (nginx.proc.pid, repo, nginx.base))
        if tls_mode:
            scenario_untrusted(larder, nginx, work, pub)

        scenario_first_install(larder, nginx, repo, sb, pub)
        scenario_no_change(larder, nginx, sb)
        scenario_objects_update(larder, nginx, repo, sb, key, app1, work)
        scenario_resume(larder, nginx, repo, sb, key, work)
        scenario_revoke(larder, nginx, repo, sb, key)
        scenario_client_version_and_channels(larder, nginx, repo, sb, sb2, key, pub, work)

        scenario_same_second_republish(larder, nginx, repo, sb2, key, work)
        scenario_connection_reuse(larder, nginx, repo, key, pub, work)
        scenario_delta(larder, nginx, repo, key, pub, work)
        scenario_on_demand(larder, nginx, repo, key, pub, work)
        scenario_sharded(larder, nginx, repo, key, pub, work)

        entries = nginx.since(0)
        bad = [e for e in entries if e["status"] >= 400]
        check("no request in the whole run was answered 4xx/5xx", not bad, show(bad))
        scenario_verify_url(larder, nginx, pub)
    except SetupError as e:
        CHECKS.setup_failed(e)
    except KeyboardInterrupt:
        check("the script ran to its end", False, "interrupted")
    except Exception:
        check("the script ran to its end", False, traceback.format_exc())
    finally:
        nginx.stop()
        if nginx.proc is not None:
            check("nginx stopped", nginx.proc.poll() is not None)
    say("nginx-sync: %.1f s" % (time.time() - started))
    if keep:
        say("nginx-sync: kept %s" % work)
    elif CHECKS.failed == 0:
        shutil.rmtree(work, ignore_errors=True)
    else:
        # Keep what explains a failure (nginx's config and logs, the killed sync's output), not
        # the ~130 MB of repository and sandboxes (NGINX_SYNC_KEEP=1 keeps everything).
        for name in os.listdir(work):
            if name not in ("nginx", "killed-sync.out"):
                shutil.rmtree(os.path.join(work, name), ignore_errors=True)
        say("nginx-sync: kept %s/nginx (config, access.log, error.log)" % work)
    return CHECKS.finish()


def scenario_first_install(larder, nginx, repo, sb, pub):
    scenario("1. first install")
    p = larder.run("init", "--root", sb, "--repo", nginx.base, "--public-key", pub)
    check("1: larder init exits 0", p.returncode == 0, describe(p))
    e = index_entry(repo, "sample-app")
    m = nginx.mark()
    rc, report, p = larder.json("sync", "--root", sb)
    log = nginx.since(m)
    check("1: larder sync exits 0", rc == 0, describe(p))
    r = ls.find_package(report, "sample-app")
    check("1: the report installs sample-app 1.0.0 via the bundle, extracted while it downloaded",
          r is not None and r["action"] == "install" and r["to"] == "1.0.0" and r["outcome"] == "done" and r["method"] == "bundle"
          and r.get("streamed") is True,
          json.dumps(r))

    def got(uri, status=200):
        return [x for x in log if x["method"] == "GET" and x["uri"] == uri and x["status"] == status]

    idx = got("/index.json")
    check("1: GET /index.json answered 200 (no If-None-Match)",
          len(idx) == 1 and idx[0]["if_none_match"] == "", show(log))
    check("1: GET /index.json.sig answered 200, first", len(got("/index.json.sig")) == 1
          and log[0]["uri"] == "/index.json.sig", show(log))
    check("1: GET of the gzipped file list (files.json.gz) answered 200, and not files.json",
          len(got("/" + e["filesGzip"]["path"])) == 1 and not got("/" + e["files"]["path"]), show(log))
    b = got("/" + e["bundle"]["path"])
    check("1: GET of the bundle answered 200 with all its bytes",
          len(b) == 1 and b[0]["body_bytes_sent"] == e["bundle"]["size"] and b[0]["range"] == "", show(log))
    check("1: nothing else was requested (4 requests)", len(log) == 4, show(log))
    p = larder.run("doctor", "--root", sb)
    check("1: larder doctor exits 0", p.returncode == 0, describe(p))
    rc, st, p = larder.json("status", "--root", sb)
    s = ls.find_package(st, "sample-app")
    check("1: status --json shows sample-app 1.0.0 active", rc == 0 and s is not None and s["active"] == "1.0.0", describe(p))


def scenario_no_change(larder, nginx, sb):
    scenario("2. no-change sync")
    m = nginx.mark()
    rc, report, p = larder.json("sync", "--root", sb)
    log = nginx.since(m)
    check("2: larder sync exits 0", rc == 0, describe(p))
    check("2: the report says the index is unchanged and nothing changed since the last sync (upToDate, no package acted on)",
          report is not None and report["indexChanged"] is False and report.get("upToDate") is True
          and report["packages"] == [],
          p.stdout.strip())
    check("2: exactly one request", len(log) == 1, show(log))
    check("2: it is GET /index.json.sig, unconditional, answered 200 with under 1 KB",
          len(log) == 1 and log[0]["method"] == "GET" and log[0]["uri"] == "/index.json.sig" and log[0]["status"] == 200
          and log[0]["if_none_match"] == "" and 0 < log[0]["body_bytes_sent"] < 1024, show(log))


def scenario_objects_update(larder, nginx, repo, sb, key, app1, work):
    scenario("3. update that moves only the changed bytes")
    app2 = os.path.join(work, "src", "sample-app-2")
    shutil.copytree(app1, app2)
    catalog = os.path.join(app2, "data", "catalog.json")
    with open(catalog) as f:
        doc = json.load(f)
    doc = {"larderTest": "catalog of 2.0.0", "previous": doc}
    write(catalog, json.dumps(doc, indent=2, sort_keys=True) + "\n")
    # Without deltas: this scenario is the update by objects (scenario 9 is the one by delta).
    larder.must("pack", app2, "--repo", repo, "--id", "sample-app", "--version", "2.0.0", "--key", key, "--deltas", "0",
                "--route", "https://app.example.com/")
    published(repo)
    e = index_entry(repo, "sample-app")
    sha = ls.sha256_file(catalog)
    obj_uri = "/objects/%s/%s" % (sha[:2], sha)
    obj_size = os.path.getsize(os.path.join(repo, obj_uri[1:])) if os.path.exists(os.path.join(repo, obj_uri[1:])) else -1
    check("3: the repository holds the new catalog.json as " + obj_uri[1:], obj_size > 0)

    m = nginx.mark()
    rc, report, p = larder.json("sync", "--root", sb)
    log = nginx.since(m)
    check("3: larder sync exits 0", rc == 0, describe(p))
    want = [("/index.json.sig", 200), ("/index.json", 200), ("/" + e["filesGzip"]["path"], 200), (obj_uri, 200)]
    check("3: the log shows exactly signature, index, files.json.gz of 2.0.0 and the one object, in that order",
          [(x["uri"], x["status"]) for x in log] == want, show(log))
    check("3: no bundle was requested", not any(x["uri"].endswith("bundle.zip") for x in log), show(log))
    obj_log = [x for x in log if x["uri"] == obj_uri]
    check("3: nginx sent the object whole (body_bytes_sent = its size on disk, %d)" % obj_size,
          len(obj_log) == 1 and obj_log[0]["body_bytes_sent"] == obj_size, show(log))
    r = ls.find_package(report, "sample-app")
    check("3: the report says update 1.0.0 → 2.0.0 via objects, done",
          r is not None and r["action"] == "update" and r["from"] == "1.0.0" and r["to"] == "2.0.0"
          and r["method"] == "objects" and r["outcome"] == "done", json.dumps(r))
    check("3: bytesFetched equals the object's size on disk and the log's body_bytes_sent",
          r is not None and r["bytesFetched"] == obj_size == (obj_log[0]["body_bytes_sent"] if obj_log else None),
          "bytesFetched %s, object %d" % (r and r["bytesFetched"], obj_size))
    p = larder.run("doctor", "--root", sb)
    check("3: larder doctor exits 0", p.returncode == 0, describe(p))
    want = ls.read_file_list(os.path.join(repo, e["files"]["path"]))
    problems, n = ls.tree_problems(os.path.join(sb, "packages", "sample-app", "2.0.0"), want), len(want)
    check("3: the assembled 2.0.0 tree matches files.json (%d files, hashed here)" % n, not problems, "; ".join(problems))
    rc, st, p = larder.json("status", "--root", sb)
    s = ls.find_package(st, "sample-app")
    check("3: status shows 2.0.0 active, 1.0.0 fallback",
          s is not None and s["active"] == "2.0.0" and s["fallback"] == "1.0.0", describe(p))


BIG_FILES = 20
BIG_FILE_BYTES = 2 << 20
RATE = "2m"


def scenario_resume(larder, nginx, repo, sb, key, work):
    scenario("4. resume an interrupted bundle download")
    big = os.path.join(work, "src", "big")
    write(os.path.join(big, "index.html"), "<!doctype html><title>big</title><p>random assets</p>\n")
    for i in range(BIG_FILES):
        write(os.path.join(big, "assets", "blob-%02d.bin" % i), os.urandom(BIG_FILE_BYTES))
    larder.must("pack", big, "--repo", repo, "--id", "big", "--version", "1.0.0", "--key", key,
                "--route", "https://big.example.com/", timeout=90)
    published(repo)
    e = index_entry(repo, "big")
    size = e["bundle"]["size"]
    bundle_uri = "/" + e["bundle"]["path"]

    rc, plan, p = larder.json("plan", "--root", sb)
    a = plan_action(plan, "big")
    check("4: plan installs big 1.0.0 via the bundle (%.1f MB)" % (size / 1e6),
          rc == 0 and a is not None and a["kind"] == "install" and (a.get("cost") or {}).get("method") == "bundle",
          describe(p))

    nginx.reload(RATE)
    downloads = os.path.join(sb, "downloads")
    m = nginx.mark()
    out = open(os.path.join(work, "killed-sync.out"), "w")
    proc = subprocess.Popen([larder.binary, "sync", "--root", sb, "--progress", "none"], stdout=out, stderr=out,
                            env=larder.env)
    out.close()
    part, seen, staged, staged_at = None, 0, 0, 0
    deadline = time.time() + 40
    try:
        while time.time() < deadline and proc.poll() is None:
            parts = [f for f in os.listdir(downloads) if f.endswith(".part")] if os.path.isdir(downloads) else []
            if parts:
                part = os.path.join(downloads, parts[0])
                try:
                    seen = os.path.getsize(part)
                except OSError:
                    seen = 0
                # Files extracted into staging/ while the .part is still short of the whole bundle.
                if seen < size and staged == 0:
                    staged = sum(len(files) for _, _, files in os.walk(os.path.join(sb, "staging")))
                    staged_at = seen
                if seen > size // 4 and staged > 0:
                    break
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
    killed = proc.returncode == -signal.SIGKILL
    check("4: the first sync was killed with SIGKILL while the .part file held %d of %d bytes" % (seen, size),
          killed and size // 4 < seen < size, "exit %s, part %s" % (proc.returncode, part))
    check("4: files were extracted into staging/ while the download was under way (%d files seen at %d of %d bytes)"
          % (staged, staged_at, size), staged > 0 and staged_at < size, "staging/ stayed empty")
    have = os.path.getsize(part) if part and os.path.exists(part) else 0
    check("4: the .part file survives under downloads/ (%d bytes)" % have, size // 4 < have < size, str(part))
    rc, st, p = larder.json("status", "--root", sb)
    s = ls.find_package(st, "big")
    check("4: after the kill, status (no lock) shows big not active and sample-app still 2.0.0",
          rc == 0 and (s is None or s.get("active") is None) and (ls.find_package(st, "sample-app") or {}).get("active") == "2.0.0",
          describe(p))
    # nginx logs the cut request when it notices the closed connection: wait for that line, so
    # it cannot land in the next step's part of the log.
    killed_log = nginx.wait_for(m, lambda x: x["uri"] == bundle_uri)
    first = [x for x in killed_log if x["uri"] == bundle_uri]
    check("4: the interrupted GET of the bundle was a plain 200 (no Range), cut short",
          len(first) == 1 and first[0]["status"] == 200 and first[0]["range"] == "" and first[0]["body_bytes_sent"] < size,
          show(killed_log))
    bundle_etag = first[0]["etag"] if first else None

    nginx.reload("0")
    m = nginx.mark()
    rc, report, p = larder.json("sync", "--root", sb, timeout=60)
    log = nginx.since(m)
    check("4: the second larder sync exits 0", rc == 0, describe(p))
    resumed = [x for x in log if x["uri"] == bundle_uri]
    check("4: the bundle was requested once, with `Range: bytes=%d-`, answered 206" % have,
          len(resumed) == 1 and resumed[0]["range"] == "bytes=%d-" % have and resumed[0]["status"] == 206, show(log))
    check("4: the 206 carried exactly the missing %d bytes (Content-Range bytes %d-%d/%d)" % (size - have, have, size - 1, size),
          len(resumed) == 1 and resumed[0]["body_bytes_sent"] == size - have
          and resumed[0]["content_range"] == "bytes %d-%d/%d" % (have, size - 1, size), show(log))
    if nginx.tls:
        # A bundle (more than 1 MiB) goes over HTTP/1.1, where TCP bounds what waits for the
        # reader; the documents keep the HTTP/2 connection.
        others = sorted({x["protocol"] for x in log if x["uri"] != bundle_uri})
        check("4: over https the bundle came over HTTP/1.1, the other requests over HTTP/2 (%s)" % others,
              len(resumed) == 1 and resumed[0]["protocol"] == "HTTP/1.1" and others == ["HTTP/2.0"], show(log))
    check("4: the resumed GET carried If-Range = the ETag of the first response (%s)" % bundle_etag,
          len(resumed) == 1 and bundle_etag and resumed[0]["if_range"] == bundle_etag,
          "If-Range %r" % (resumed[0]["if_range"] if resumed else None))
    r = ls.find_package(report, "big")
    check("4: the report installs big 1.0.0 via the bundle, done, extracted while it downloaded (resumed part first)",
          r is not None and r["action"] == "install" and r["method"] == "bundle" and r["outcome"] == "done"
          and r.get("streamed") is True, json.dumps(r))
    left = sum(len(files) for _, _, files in os.walk(os.path.join(sb, "staging")))
    check("4: staging/ is empty afterwards", left == 0, "%d files left" % left)
    check("4: bytesFetched is what this sync downloaded (%d)" % (size - have),
          r is not None and r["bytesFetched"] == size - have, "bytesFetched %s" % (r and r["bytesFetched"]))
    left = [f for f in os.listdir(downloads)] if os.path.isdir(downloads) else []
    check("4: downloads/ is empty afterwards", not left, " ".join(left))
    p = larder.run("doctor", "--root", sb, timeout=60)
    check("4: larder doctor exits 0", p.returncode == 0, describe(p))
    rc, doc, p = larder.json("doctor", "--root", sb, timeout=60)
    check("4: doctor verified big@1.0.0", doc is not None and any("big" in v and "1.0.0" in v for v in doc.get("verifiedVersions", [])),
          p.stdout.strip()[-400:])
    want = ls.read_file_list(os.path.join(repo, e["files"]["path"]))
    problems, n = ls.tree_problems(os.path.join(sb, "packages", "big", "1.0.0"), want), len(want)
    check("4: the installed big 1.0.0 tree matches files.json (%d files, hashed here)" % n, not problems, "; ".join(problems))


def scenario_revoke(larder, nginx, repo, sb, key):
    scenario("5. revoke")
    larder.must("revoke", "sample-app", "2.0.0", "--repo", repo, "--key", key)
    published(repo)
    m = nginx.mark()
    rc, report, p = larder.json("sync", "--root", sb)
    log = nginx.since(m)
    check("5: larder sync exits 0", rc == 0, describe(p))
    r = ls.find_package(report, "sample-app")
    check("5: the report rolls sample-app back 2.0.0 → 1.0.0",
          r is not None and r["action"] == "rollback" and r["from"] == "2.0.0" and r["to"] == "1.0.0" and r["outcome"] == "done",
          json.dumps(r))
    check("5: only the index and its signature were fetched",
          sorted((x["uri"], x["status"]) for x in log) == [("/index.json", 200), ("/index.json.sig", 200)], show(log))
    m = nginx.mark()
    rc, report, p = larder.json("sync", "--root", sb)
    log = nginx.since(m)
    r = ls.find_package(report, "sample-app")
    # The rollback left nothing to do, so the next sync stops after its one request (upToDate).
    check("5: a further sync leaves sample-app alone (2.0.0 stays revoked; up to date after one request)",
          rc == 0 and report is not None and report.get("upToDate") is True and r is None
          and [(x["uri"], x["status"]) for x in log] == [("/index.json.sig", 200)],
          describe(p) + " log: " + show(log))
    rc, st, p = larder.json("status", "--root", sb)
    s = ls.find_package(st, "sample-app")
    check("5: status shows 1.0.0 active", s is not None and s["active"] == "1.0.0", describe(p))
    check("5: status shows 2.0.0 failed",
          s is not None and any(f.get("version") == "2.0.0" for f in s.get("failed", [])), json.dumps(s and s.get("failed")))
    p = larder.run("doctor", "--root", sb)
    check("5: larder doctor exits 0", p.returncode == 0, describe(p))


def scenario_client_version_and_channels(larder, nginx, repo, sb, sb2, key, pub, work):
    scenario("6. minClientVersion and channels")
    nine = os.path.join(work, "src", "needs-nine")
    write(os.path.join(nine, "index.html"), "<!doctype html><title>nine</title><script src=\"app.js\"></script>\n")
    write(os.path.join(nine, "app.js"), "console.log('needs app 9');\n")
    larder.must("pack", nine, "--repo", repo, "--id", "needs-nine", "--version", "1.0.0", "--key", key,
                "--route", "https://nine.example.com/", "--min-client-version", "9.0.0")
    published(repo)

    rc, plan, p = larder.json("plan", "--root", sb)
    a = plan_action(plan, "needs-nine")
    check("6: plan skips needs-nine as client-too-old",
          rc == 0 and a is not None and a["kind"] == "skip" and a.get("skip") == "client-too-old", describe(p))
    p_text = larder.run("plan", "--root", sb)
    check("6: the text plan names the reason (needs app 9.0.0)",
          p_text.returncode == 0 and "needs-nine" in p_text.stdout and "9.0.0" in p_text.stdout, describe(p_text))
    rc, report, p = larder.json("sync", "--root", sb)
    r = ls.find_package(report, "needs-nine")
    check("6: sync exits 0 and skips needs-nine",
          rc == 0 and r is not None and r["action"] == "skip" and r["outcome"] == "skipped", describe(p))
    rc, st, p = larder.json("status", "--root", sb)
    nine_status = ls.find_package(st, "needs-nine")
    check("6: needs-nine is not installed", nine_status is None or nine_status.get("active") is None, describe(p))

    with open(os.path.join(sb, "config.json")) as f:
        device = json.load(f)["deviceId"]
    p = larder.run("init", "--root", sb, "--repo", nginx.base, "--public-key", pub, "--app-version", "9.1.0")
    with open(os.path.join(sb, "config.json")) as f:
        cfg = json.load(f)
    check("6: re-init with --app-version 9.1.0 keeps the device id",
          p.returncode == 0 and cfg["deviceId"] == device and cfg["appVersion"] == "9.1.0", describe(p) + " " + json.dumps(cfg)[:300])
    rc, report, p = larder.json("sync", "--root", sb)
    r = ls.find_package(report, "needs-nine")
    check("6: sync now installs needs-nine 1.0.0",
          rc == 0 and r is not None and r["action"] == "install" and r["to"] == "1.0.0" and r["outcome"] == "done", describe(p))
    rc, st, p = larder.json("status", "--root", sb)
    s = ls.find_package(st, "needs-nine")
    check("6: status shows needs-nine 1.0.0 active", s is not None and s["active"] == "1.0.0", describe(p))

    beta = os.path.join(work, "src", "beta-app")
    write(os.path.join(beta, "index.html"), "<!doctype html><title>beta</title><p>beta channel</p>\n")
    larder.must("pack", beta, "--repo", repo, "--id", "beta-app", "--version", "1.0.0", "--key", key,
                "--route", "https://beta.example.com/", "--channel", "beta")
    published(repo)
    rc, plan, p = larder.json("plan", "--root", sb)
    a = plan_action(plan, "beta-app")
    check("6: the stable sandbox's plan skips beta-app as other-channel",
          rc == 0 and a is not None and a["kind"] == "skip" and a.get("skip") == "other-channel", describe(p))
    rc, report, p = larder.json("sync", "--root", sb)
    r = ls.find_package(report, "beta-app")
    check("6: the stable sandbox's sync exits 0 and skips beta-app",
          rc == 0 and r is not None and r["action"] == "skip" and r["outcome"] == "skipped", describe(p))
    rc, st, p = larder.json("status", "--root", sb)
    check("6: beta-app is not installed in the stable sandbox", ls.find_package(st, "beta-app") is None, describe(p))

    p = larder.run("init", "--root", sb2, "--repo", nginx.base, "--public-key", pub, "--channel", "beta")
    check("6: init of a beta sandbox exits 0", p.returncode == 0, describe(p))
    m = nginx.mark()
    rc, report, p = larder.json("sync", "--root", sb2)
    log = nginx.since(m)
    r = ls.find_package(report, "beta-app")
    check("6: the beta sandbox's sync installs beta-app 1.0.0",
          rc == 0 and r is not None and r["action"] == "install" and r["outcome"] == "done", describe(p))
    others = [x for x in (report or {}).get("packages", []) if x["id"] != "beta-app"]
    check("6: the beta sandbox skips the stable packages",
          others and all(x["action"] == "skip" for x in others), json.dumps(others)[:400])
    check("6: the beta sandbox fetched nothing of the stable packages",
          not any("/sample-app/" in x["uri"] or "/big/" in x["uri"] or "/needs-nine/" in x["uri"] for x in log), show(log))
    rc, st, p = larder.json("status", "--root", sb2)
    s = ls.find_package(st, "beta-app")
    check("6: status of the beta sandbox shows beta-app 1.0.0 active (and nothing else)",
          s is not None and s["active"] == "1.0.0" and len(st["packages"]) == 1, describe(p))
    for root in (sb, sb2):
        p = larder.run("doctor", "--root", root, timeout=60)
        check("6: larder doctor exits 0 on " + os.path.basename(root), p.returncode == 0, describe(p))


def scenario_same_second_republish(larder, nginx, repo, sb2, key, work):
    """nginx's ETag is "<mtime seconds>-<length>". Two indexes published in the same second with
    the same length get the same ETag, so a device that made a conditional request for the index
    would be answered 304 for the second -- and keep being answered 304 until the index changes
    again. A CI job that publishes two packages back to back does exactly this. pack no longer
    moves the index's mtime forward to dodge it (1,000 quick publishes left index.json about 15
    minutes in the future); instead no device requests the index conditionally: the signature,
    fetched whole, names the index it signs. The test forces the worst case -- the second index
    given the first one's mtime, so nginx sends the same ETag -- and the device must update."""
    scenario("7. a republish within the same second")
    src = os.path.join(work, "src", "etag-probe")
    write(os.path.join(src, "index.html"), "<!doctype html><title>probe</title><p>release A</p>\n")
    larder.must("pack", src, "--repo", repo, "--id", "etag-probe", "--version", "1.0.0", "--key", key,
                "--route", "https://probe.example.com/", "--channel", "beta")
    published(repo)
    index = os.path.join(repo, "index.json")
    sig = os.path.join(repo, "index.json.sig")
    first = os.stat(index)
    rc, report, p = larder.json("sync", "--root", sb2)
    r = ls.find_package(report, "etag-probe")
    check("7: the beta sandbox installs etag-probe 1.0.0",
          rc == 0 and r is not None and r["action"] == "install" and r["outcome"] == "done", describe(p))
    etag_before = [x for x in nginx.since(0) if x["uri"] == "/index.json" and x["status"] == 200][-1]["etag"]

    write(os.path.join(src, "index.html"), "<!doctype html><title>probe</title><p>release B</p>\n")
    # (No delta: it would make the entry, and so the index, longer.)
    larder.must("pack", src, "--repo", repo, "--id", "etag-probe", "--version", "1.0.1", "--key", key, "--deltas", "0",
                "--route", "https://probe.example.com/", "--channel", "beta")
    published(repo)
    second = os.stat(index)
    check("7: precondition: the new index has the old one's length (%d)" % first.st_size,
          second.st_size == first.st_size, "lengths %d and %d" % (first.st_size, second.st_size))
    # The same second as the first publish: nginx's validator for index.json cannot change.
    os.utime(index, ns=(first.st_atime_ns, first.st_mtime_ns))
    os.utime(sig, ns=(first.st_atime_ns, first.st_mtime_ns))
    ca = ["--cacert", nginx.tls[0]] if nginx.tls else []
    p = subprocess.run(["curl", "-sI"] + ca + [nginx.base + "index.json"], stdout=subprocess.PIPE, text=True,
                       timeout=30)
    same = [ln.split(":", 1)[1].strip() for ln in p.stdout.splitlines() if ln.lower().startswith("etag:")]
    check("7: precondition: nginx now sends the first index's ETag for the second (%s)" % etag_before,
          same == [etag_before], p.stdout.strip())
    m = nginx.mark()
    rc, report, p = larder.json("sync", "--root", sb2)
    log = nginx.since(m)
    r = ls.find_package(report, "etag-probe")
    check("7: the next sync sees the new index (serial %s) and updates etag-probe to 1.0.1"
          % json.load(open(index))["serial"],
          rc == 0 and r is not None and r["action"] == "update" and r["to"] == "1.0.1" and r["outcome"] == "done",
          "log: %s; indexChanged %s; etag-probe: %s" % (show(log), (report or {}).get("indexChanged"), json.dumps(r)))
    check("7: no conditional request was made for the index or its signature",
          all(x["if_none_match"] == "" for x in log if x["uri"] in ("/index.json", "/index.json.sig")), show(log))


def delta_app(src, release):
    """A copy of an app with two generated chunks of ~240 KB whose names carry a content hash, as
    a bundler writes them; each release edits one line of each and renames it."""
    if os.path.isdir(src):
        shutil.rmtree(src)
    os.makedirs(os.path.join(src, "js"))
    write(os.path.join(src, "index.html"), "<!doctype html><title>delta</title><p>delta app</p>\n")
    for n in range(2):
        rnd = random.Random(n)
        lines = ["export const c%d_%d = \"%s\";" % (n, i, "".join(rnd.choice("abcdefghijklmnop") for _ in range(30)))
                 for i in range(6000)]
        lines[100 * (release + 1)] = "export const edited%d = %d;" % (release, release)
        name = "chunk%d.%08x.js" % (n, (release + 1) * 0x1234567 + n)
        write(os.path.join(src, "js", name), "\n".join(lines))


def scenario_delta(larder, nginx, repo, key, pub, work):
    scenario("9. updates by delta: patches only, fallbacks, crashes, a device several versions behind")
    src = os.path.join(work, "src", "delta-app")
    sb = os.path.join(work, "sb-delta")

    def pack(release):
        delta_app(src, release)
        larder.must("pack", src, "--repo", repo, "--id", "delta-app", "--version", "1.%d.0" % release, "--key", key,
                    "--route", "https://delta.example.com/")
        published(repo)
        return index_entry(repo, "delta-app")

    def tree_ok(root, version, e):
        want = ls.read_file_list(os.path.join(repo, e["files"]["path"]))
        return ls.tree_problems(os.path.join(root, "packages", "delta-app", version), want)

    pack(0)  # 1.0.0: the release every delta below starts from
    larder.must("init", "--root", sb, "--repo", nginx.base, "--public-key", pub)
    larder.must("sync", "--root", sb)
    behind1 = os.path.join(work, "sb-delta-behind")  # a device left on 1.0.0

    # (a) An update by delta: the manifest and its patch file, nothing else.
    e1 = pack(1)
    shutil.copytree(sb, behind1, symlinks=True)
    rc, plan, p = larder.json("plan", "--root", sb)
    a = plan_action(plan, "delta-app") or {}
    alts = [x["method"] for x in (a.get("cost") or {}).get("alternatives", [])]
    check("9a: the plan weighs delta, objects and bundle, and picks the delta",
          rc == 0 and alts == ["delta", "objects", "bundle"] and a["cost"]["method"] == "delta",
          describe(p) + " stderr: " + p.stderr[-500:])
    m = nginx.mark()
    rc, report, p = larder.json("sync", "--root", sb)
    log = nginx.since(m)
    r = ls.find_package(report, "delta-app")
    uris = [x["uri"] for x in log]
    patches = [x for x in log if x["uri"].startswith("/patches/")]
    delta_uri = "/" + e1["deltas"][0]["manifest"]["path"]
    check("9a: the sync updates 1.0.0 → 1.1.0 by delta, 2 patches applied, no fallback",
          rc == 0 and r is not None and r["method"] == "delta" and r["outcome"] == "done"
          and r["delta"]["patchesApplied"] == 2 and r["delta"]["fallbacks"] == [], describe(p))
    check("9a: nginx's log: signature, index, the delta manifest, one patch file — no file list, object or bundle",
          uris[:3] == ["/index.json.sig", "/index.json", delta_uri] and len(patches) == 1 and len(log) == 4
          and all(x["status"] == 200 for x in log), show(log))
    wire = sum(x["body_bytes_sent"] for x in log if x["uri"] not in ("/index.json.sig", "/index.json"))
    check("9a: the update moved %d bytes (manifest and patches, from the log): under 1 %% of the %d-byte bundle"
          % (wire, e1["bundle"]["size"]), wire * 100 < e1["bundle"]["size"], show(log))
    check("9a: bytesFetched equals the patches' bytes in the log",
          r is not None and r["bytesFetched"] == sum(x["body_bytes_sent"] for x in patches), json.dumps(r))
    problems = tree_ok(sb, "1.1.0", e1)
    check("9a: the 1.1.0 tree matches its files.json (hashed here)", not problems, "; ".join(problems))

    # (b) A corrupted patch file on the server: its contents fall back to their objects.
    e2 = pack(2)
    target = os.path.join(repo, delta_manifest(repo, e2, "1.1.0")["patchFile"]["path"])
    original = open(target, "rb").read()
    damaged = bytearray(original)
    damaged[len(damaged) // 2] ^= 0x40
    with open(target, "wb") as f:
        f.write(damaged)
    m = nginx.mark()
    rc, report, p = larder.json("sync", "--root", sb)
    log = nginx.since(m)
    with open(target, "wb") as f:
        f.write(original)
    r = ls.find_package(report, "delta-app")
    fb = (r or {}).get("delta", {}).get("fallbacks", [])
    check("9b: a corrupted patch file on the server: the update is done, its 2 contents fell back to their objects",
          rc == 0 and r is not None and r["outcome"] == "done" and r["method"] == "delta" and len(fb) == 2
          and all(x["to"] == "object" for x in fb)
          and len([x for x in log if x["uri"].startswith("/objects/")]) == 2, describe(p))
    problems = tree_ok(sb, "1.2.0", e2)
    check("9b: the 1.2.0 tree matches its files.json", not problems, "; ".join(problems))

    # (c) A base altered on the device's disk: its patch is not applied; the object is fetched.
    e3 = pack(3)
    tree = os.path.join(sb, "packages", "delta-app", "1.2.0", "js")
    victim = os.path.join(tree, sorted(os.listdir(tree))[0])
    kept = open(victim, "rb").read()
    os.chmod(victim, 0o644)
    with open(victim, "r+b") as f:
        f.seek(10)
        f.write(bytes([kept[10] ^ 1]))
    rc, report, p = larder.json("sync", "--root", sb)
    with open(victim, "wb") as f:
        f.write(kept)
    r = ls.find_package(report, "delta-app")
    fb = (r or {}).get("delta", {}).get("fallbacks", [])
    check("9c: a base altered on the device: the update is done, one content from its object ('altered')",
          rc == 0 and r is not None and r["outcome"] == "done" and len(fb) == 1 and "altered" in fb[0]["reason"]
          and r["delta"]["patchesApplied"] == 1, describe(p))
    problems = tree_ok(sb, "1.3.0", e3)
    check("9c: the 1.3.0 tree matches its files.json", not problems, "; ".join(problems))

    # (d) A crash at every disk-changing call of a delta sync (SIGKILL through the funnel): each
    # leaves 1.3.0 or 1.4.0 active and whole, and the next sync finishes.
    e4 = pack(4)
    # Every 8th call: about 20 crashes spread over the whole sync. (Over TLS the crash points are
    # the same disk calls: the plain run covers them, and --tls skips this part.)
    stride = 8
    crashes, in_apply, bad = 0, 0, []
    n = 1
    while n < 400 and not nginx.tls:
        trial = os.path.join(work, "sb-crash")
        shutil.rmtree(trial, ignore_errors=True)
        shutil.copytree(sb, trial, symlinks=True)
        larder.env.update(LARDER_CRASH_AT=str(n), LARDER_CRASH_ROOT=trial)
        res = larder.run("sync", "--root", trial)
        del larder.env["LARDER_CRASH_AT"], larder.env["LARDER_CRASH_ROOT"]
        if res.returncode == 0:
            break
        crashes += 1
        if any(x.startswith("applied-") for x in os.listdir(os.path.join(trial, "downloads"))):
            in_apply += 1
        st = json.loads(larder.run("status", "--root", trial, "--json").stdout or "{}")
        active = (ls.find_package(st, "delta-app") or {}).get("active")
        doctor = larder.run("doctor", "--root", trial)
        again, doc, _ = larder.json("sync", "--root", trial)
        after = (ls.find_package(json.loads(larder.run("status", "--root", trial, "--json").stdout), "delta-app")
                 or {}).get("active")
        if active not in ("1.3.0", "1.4.0") or doctor.returncode != 0 or again != 0 or after != "1.4.0" \
                or tree_ok(trial, "1.4.0", e4):
            bad.append("crash at call %d: active %s, doctor %d, next sync %d → %s" % (
                n, active, doctor.returncode, again, after))
        n += stride
    if not nginx.tls:
        check("9d: %d crashes in a delta sync (%d with a patched content already written): each left 1.3.0 or "
              "1.4.0 whole, doctor clean, and the next sync finished on 1.4.0" % (crashes, in_apply),
              crashes >= 10 and in_apply >= 1 and not bad, "; ".join(bad[:5]))

    # (e) Devices behind: three versions behind uses its own base; four behind has none.
    m = nginx.mark()
    rc, report, p = larder.json("sync", "--root", behind1)  # on 1.0.0: four versions behind 1.4.0
    log = nginx.since(m)
    r = ls.find_package(report, "delta-app")
    check("9e: a device on 1.0.0, four versions behind 1.4.0 (deltas from 1.3.0, 1.2.0, 1.1.0): objects or the bundle",
          rc == 0 and r is not None and r["outcome"] == "done" and r["method"] in ("objects", "bundle")
          and not any("/deltas/" in x["uri"] for x in log), describe(p))
    problems = tree_ok(behind1, "1.4.0", e4)
    check("9e: its 1.4.0 tree matches its files.json", not problems, "; ".join(problems))
    three = os.path.join(work, "sb-delta-3")
    shutil.copytree(behind1, three, symlinks=True)  # on 1.4.0 now
    for release in (5, 6, 7):
        pack(release)
    m = nginx.mark()
    rc, report, p = larder.json("sync", "--root", three)
    log = nginx.since(m)
    r = ls.find_package(report, "delta-app")
    want_delta = "/" + [d for d in index_entry(repo, "delta-app")["deltas"] if d["from"] == "1.4.0"][0]["manifest"]["path"]
    check("9e: a device on 1.4.0, three versions behind 1.7.0, uses the delta from 1.4.0",
          rc == 0 and r is not None and r["method"] == "delta" and r["outcome"] == "done"
          and any(x["uri"] == want_delta for x in log), describe(p) + " " + show(log))
    problems = tree_ok(three, "1.7.0", index_entry(repo, "delta-app"))
    check("9e: its 1.7.0 tree matches its files.json", not problems, "; ".join(problems))


def scenario_on_demand(larder, nginx, repo, key, pub, work):
    scenario("11. on-demand packages: a sync fetches none, `larder fetch` one, a disk budget evicts, a small disk refuses")
    ids = ["od-%02d" % i for i in range(12)]
    for i, pid in enumerate(ids):
        src = os.path.join(work, "src", pid)
        os.makedirs(os.path.join(src, "js"), exist_ok=True)
        write(os.path.join(src, "index.html"), "<!doctype html><title>%s</title><p>%s</p>\n" % (pid, pid))
        rnd = random.Random(i)
        write(os.path.join(src, "js", "app.js"), "".join(rnd.choice("abcdefgh\n") for _ in range(40000)))
        larder.must("pack", src, "--repo", repo, "--id", pid, "--version", "1.0.0", "--key", key, "--channel", "od",
                    "--install", "on-demand", "--route", "https://%s.example.com/" % pid)
    big = os.path.join(work, "src", "od-big")
    os.makedirs(big, exist_ok=True)
    write(os.path.join(big, "index.html"), "<!doctype html><title>big</title>\n")
    with open(os.path.join(big, "media.bin"), "wb") as f:
        f.write(os.urandom(3 << 20))
    larder.must("pack", big, "--repo", repo, "--id", "od-big", "--version", "1.0.0", "--key", key, "--channel", "od",
                "--install", "on-demand")
    published(repo)
    sb = os.path.join(work, "sb-od")
    larder.must("init", "--root", sb, "--repo", nginx.base, "--public-key", pub, "--channel", "od")

    m = nginx.mark()
    rc, report, p = larder.json("sync", "--root", sb)
    log = nginx.since(m)
    skipped = [r for r in (report or {}).get("packages", []) if r.get("outcome") == "skipped"
               and "on demand" in r.get("reason", "")]
    check("11: the first sync of an index of %d on-demand packages installs none of them (each skipped: on demand)"
          % (len(ids) + 1), rc == 0 and len(skipped) == len(ids) + 1, describe(p))
    check("11: nginx's log: the signature and the index only, nothing of any package",
          [x["uri"] for x in log] == ["/index.json.sig", "/index.json"], show(log))

    m = nginx.mark()
    rc, report, p = larder.json("fetch", "od-03", "--root", sb)
    log = nginx.since(m)
    r = ls.find_package(report, "od-03")
    check("11: `larder fetch od-03` installs it", rc == 0 and r is not None and r["outcome"] == "done"
          and len(report["packages"]) == 1, describe(p))
    others = [x["uri"] for x in log if x["uri"].startswith("/packages/") and not x["uri"].startswith("/packages/od-03/")]
    check("11: it fetched od-03's list and contents, no other package's", not others
          and any(x["uri"].startswith("/packages/od-03/") for x in log), show(log))
    rc, report, p = larder.json("sync", "--root", sb)
    check("11: a later sync keeps od-03 (held) and installs no other", rc == 0
          and [x["id"] for x in report["packages"] if x["outcome"] == "done"] == [], describe(p))

    # A budget for about two of them: fetching a third evicts the least recently used.
    rc, st, p = larder.json("status", "--root", sb)
    one = (ls.find_package(st, "od-03") or {}).get("diskUse", 0)
    larder.must("init", "--root", sb, "--repo", nginx.base, "--public-key", pub, "--channel", "od",
                "--disk-budget", str(one * 5 // 2))
    larder.must("fetch", "od-04", "--root", sb)
    time.sleep(1.1)
    rc, report, p = larder.json("fetch", "od-05", "--root", sb)
    evicted = ((report or {}).get("budget") or {}).get("evicted")
    check("11: with a budget of 2.5 packages, fetching a third evicts the least recently used (od-03)",
          rc == 0 and evicted == ["od-03"], describe(p))
    rc, st, p = larder.json("status", "--root", sb)
    held = sorted(x["id"] for x in (st or {}).get("packages", []))
    check("11: status: od-04 and od-05 held, each on-demand with bytes and a last use; the budget's use shown",
          held == ["od-04", "od-05"] and all(x.get("install") == "on-demand" and x.get("diskUse", 0) > 0
                                             and x.get("lastUse") for x in st["packages"])
          and st.get("diskBudget") == one * 5 // 2, json.dumps(st)[:600])
    check("11: od-03's tree is gone from the disk", not os.path.exists(os.path.join(sb, "packages", "od-03")),
          str(os.listdir(os.path.join(sb, "packages"))))

    # A disk with little room: the download is refused before anything is written.
    tiny = os.path.join(work, "tiny")
    os.makedirs(tiny, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", tiny], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    check("11: a 4 MiB tmpfs is mounted for the small-disk case", mounted.returncode == 0, mounted.stdout)
    if mounted.returncode != 0:
        return
    try:
        small = os.path.join(tiny, "sb")
        larder.must("init", "--root", small, "--repo", nginx.base, "--public-key", pub, "--channel", "od")
        m = nginx.mark()
        rc, report, p = larder.json("fetch", "od-big", "--root", small)
        log = nginx.since(m)
        r = ls.find_package(report, "od-big") or {}
        check("11: on the 4 MiB disk, fetching a 3 MiB package exits 2 with no-space and the figures",
              rc == 2 and r.get("code") == "no-space" and "are free on" in r.get("reason", "")
              and "to download" in r.get("reason", ""), describe(p))
        check("11: nothing of it was downloaded", not [x for x in log if x["uri"].startswith("/packages/od-big/")
                                                          and not x["uri"].endswith(".json.gz")
                                                          and not x["uri"].endswith("files.json")]
              and not [x for x in log if x["uri"].startswith("/objects/")], show(log))
        written = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(small, "packages")) for f in fs]
        written += [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(small, "downloads")) for f in fs]
        check("11: nothing of it was written (packages/ and downloads/ empty)", not written, str(written[:5]))
    finally:
        subprocess.run(["umount", tiny])


def scenario_sharded(larder, nginx, repo, key, pub, work):
    scenario("12. a sharded index: a device reads the catalog and the shards of what it holds, no others")
    src = os.path.join(work, "src", "sh")
    os.makedirs(src, exist_ok=True)
    write(os.path.join(src, "index.html"), "<!doctype html><title>sh</title>\n")
    ids = ["sh-%02d" % i for i in range(20)]
    for i, pid in enumerate(ids):
        layout = ["--index-layout", "sharded"] if i == len(ids) - 1 else []
        larder.must("pack", src, "--repo", repo, "--id", pid, "--version", "1.0.0", "--key", key, "--channel", "od",
                    "--install", "on-demand", "--route", "https://%s.example.com/" % pid, *layout)
    with open(os.path.join(repo, "index.json")) as f:
        index = json.load(f)
    shards = index.get("shards", {}).get("files", [])
    check("12: the index is sharded: schema version 2, only eager entries signed, %d shards" % len(shards),
          index.get("schemaVersion") == 2 and len(shards) >= 2
          and all(e.get("install", {}).get("mode", "eager") == "eager" for e in index["packages"]), str(index)[:400])

    # The device of scenario 11 holds od-04 and od-05: it keeps them, reading only their shards.
    sb = os.path.join(work, "sb-od")
    m = nginx.mark()
    rc, report, p = larder.json("sync", "--root", sb)
    log = nginx.since(m)
    uris = [x["uri"] for x in log]
    shard_uris = [u for u in uris if u.startswith("/shards/")]
    rc2, st, _ = larder.json("status", "--root", sb)
    held = sorted(x["id"] for x in (st or {}).get("packages", []))
    check("12: a device that held od-04 and od-05 accepts it and keeps both (none taken for removed)",
          rc == 0 and held == ["od-04", "od-05"]
          and not [x for x in (report or {}).get("packages", []) if x.get("action") == "remove"], describe(p))
    check("12: it fetched the signature, the index, the catalog and at most the 2 shards of what it holds",
          uris[:2] == ["/index.json.sig", "/index.json"] and 2 <= len(shard_uris) <= 3
          and all(u.startswith("/shards/") for u in uris[2:]), show(log))

    # A new device: its first sync reads the catalog only; `fetch` reads one shard.
    fresh = os.path.join(work, "sb-sharded")
    larder.must("init", "--root", fresh, "--repo", nginx.base, "--public-key", pub, "--channel", "od")
    m = nginx.mark()
    rc, report, p = larder.json("sync", "--root", fresh)
    uris = [x["uri"] for x in nginx.since(m)]
    check("12: a new device's first sync: the signature, the index and the catalog, nothing else",
          rc == 0 and uris[:2] == ["/index.json.sig", "/index.json"] and len(uris) == 3
          and uris[2] == "/" + index["shards"]["catalog"]["path"], str(uris))
    m = nginx.mark()
    rc, report, p = larder.json("fetch", "sh-07", "--root", fresh)
    log = nginx.since(m)
    uris = [x["uri"] for x in log]
    r = ls.find_package(report, "sh-07")
    check("12: `larder fetch sh-07` reads its one shard and installs it, nothing of another package",
          rc == 0 and r is not None and r["outcome"] == "done"
          and len([u for u in uris if u.startswith("/shards/")]) == 1
          and not [u for u in uris if u.startswith("/packages/") and not u.startswith("/packages/sh-07/")], show(log))

    # The eager package's device is unaffected.
    rc, report, p = larder.json("sync", "--root", os.path.join(work, "sb"))
    check("12: the first device (eager sample-app) syncs the sharded index with nothing to do", rc == 0, describe(p))

    # A damaged shard on the server: the sync that needs it stops with index-shard; nothing changes.
    larder.must("pack", src, "--repo", repo, "--id", "sh-07", "--version", "1.1.0", "--key", key, "--channel", "od",
                "--install", "on-demand", "--route", "https://sh-07.example.com/")
    with open(os.path.join(repo, "index.json")) as f:
        now = json.load(f)
    bucket = [r for r in now["shards"]["files"] if r not in index["shards"]["files"]]
    target = os.path.join(repo, bucket[0]["path"]) if bucket else None
    if target:
        good = open(target, "rb").read()
        write(target, good[:-2].decode() + "x\n")
    state_before = open(os.path.join(fresh, "state.json")).read()
    rc, doc, p = larder.json("sync", "--root", fresh)
    check("12: a shard that is not the one signed stops the sync: exit 1, index-shard, state unchanged",
          target is not None and rc == 1 and ((doc or {}).get("error") or {}).get("code") == "index-shard"
          and open(os.path.join(fresh, "state.json")).read() == state_before, describe(p))
    if target:
        with open(target, "wb") as f:
            f.write(good)
    rc, report, p = larder.json("sync", "--root", fresh)
    r = ls.find_package(report, "sh-07")
    check("12: mended, the next sync updates sh-07 to 1.1.0", rc == 0 and r is not None and r.get("to") == "1.1.0",
          describe(p))


def delta_manifest(repo, entry, base):
    import gzip
    ref = [d for d in entry["deltas"] if d["from"] == base][0]["manifest"]
    with open(os.path.join(repo, ref["path"]), "rb") as f:
        return json.loads(gzip.decompress(f.read()))


def scenario_verify_url(larder, nginx, pub):
    scenario("10. larder verify on the repository's URL (a post-deploy check)")
    m = nginx.mark()
    rc, doc, p = larder.json("verify", nginx.base, "--public-key", pub, timeout=300)
    log = nginx.since(m)
    check("10: larder verify %s exits 0 with every package, list and object checked (%s packages, %s objects)" % (
        nginx.base, (doc or {}).get("packagesChecked"), (doc or {}).get("objectsChecked")),
        rc == 0 and doc is not None and doc.get("ok") is True and doc.get("packagesChecked", 0) >= 4,
        describe(p))
    check("10: the index is sharded by then, and every shard was checked (%s)" % (doc or {}).get("shardsChecked"),
          (doc or {}).get("shardsChecked", 0) >= 2, describe(p))
    check("10: it fetched the signature, the index, the index copy and every bundle (%d requests)" % len(log),
          any(x["uri"] == "/index.json.sig" for x in log) and any(x["uri"].startswith("/indexes/") for x in log)
          and sum(1 for x in log if x["uri"].endswith("/bundle.zip")) >= 4, show(log))


def scenario_untrusted(larder, nginx, work, pub):
    scenario("0. https: a CA the device does not trust is refused; --ca-file trusts it")
    sb = os.path.join(work, "sb-untrusted")
    larder.must("init", "--root", sb, "--repo", nginx.base, "--public-key", pub)
    env = dict(larder.env)
    env.pop("LARDER_CA_FILE", None)
    m = nginx.mark()
    p = subprocess.run([larder.binary, "sync", "--root", sb, "--json", "--attempts", "1"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, env=env, timeout=60)
    log = nginx.since(m)
    check("0: without the CA, sync exits 1 naming the certificate (%s)" % (p.stdout + p.stderr).strip()[-200:],
          p.returncode == 1 and "certificate" in (p.stdout + p.stderr).lower(), describe(p))
    check("0: nginx answered nothing (the handshake failed)", not log, show(log))
    rc, st, q = larder.json("status", "--root", sb)
    check("0: nothing is installed", rc == 0 and all(not x.get("active") for x in (st or {}).get("packages", [])),
          describe(q))
    p = subprocess.run([larder.binary, "sync", "--root", sb, "--json", "--ca-file", nginx.tls[0]],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, timeout=60)
    check("0: with --ca-file naming the CA, the same sync exits 0", p.returncode == 0, describe(p))
    shutil.rmtree(sb, ignore_errors=True)


def scenario_connection_reuse(larder, nginx, repo, key, pub, work):
    scenario("8. connection reuse: 60 changed files over few connections")
    rng = random.Random(8)
    src = os.path.join(work, "src", "many-files")
    for i in range(200):
        write(os.path.join(src, "assets", "f%03d.js" % i), "// %d\n" % i + "".join(
            rng.choice("abcdefghij") for _ in range(4000)))
    write(os.path.join(src, "index.html"), "<!doctype html><title>many</title>\n")
    with open(os.path.join(src, "blob.bin"), "wb") as f:
        f.write(rng.randbytes(2 << 20))
    larder.must("pack", src, "--repo", repo, "--id", "many-files", "--version", "1.0.0", "--key", key,
                "--route", "https://many.example.com/")
    published(repo)
    sb = os.path.join(work, "sb-many")
    larder.must("init", "--root", sb, "--repo", nginx.base, "--public-key", pub)
    rc, report, p = larder.json("sync", "--root", sb)
    check("8: the first sync exits 0", rc == 0, describe(p))
    for i in range(60):
        write(os.path.join(src, "assets", "f%03d.js" % i), "// changed %d\n" % i + "".join(
            rng.choice("klmnopqrst") for _ in range(4000)))
    # Objects, not patches: this scenario counts connections for 60 objects.
    larder.must("pack", src, "--repo", repo, "--id", "many-files", "--version", "2.0.0", "--key", key, "--deltas", "0",
                "--route", "https://many.example.com/")
    published(repo)
    m = nginx.mark()
    rc, report, p = larder.json("sync", "--root", sb)
    log = nginx.since(m)
    check("8: the update exits 0", rc == 0, describe(p))
    r = ls.find_package(report, "many-files")
    check("8: many-files 1.0.0 → 2.0.0 via objects",
          r is not None and r["to"] == "2.0.0" and r["method"] == "objects" and r["outcome"] == "done", json.dumps(r))
    objects = [x for x in log if x["uri"].startswith("/objects/")]
    check("8: 60 objects fetched (%d)" % len(objects), len(objects) == 60, show(log))
    conns = sorted({x["connection"] for x in log})
    protocols = sorted({x["protocol"] for x in log})
    check("8: %d requests over %d connection(s) (%s), at most 4" % (len(log), len(conns), ", ".join(protocols)),
          1 <= len(conns) <= 4, show(log))
    if nginx.tls:
        check("8: over https the server offered HTTP/2 and the client took it: one connection",
              protocols == ["HTTP/2.0"] and len(conns) == 1, "%s over %s" % (protocols, conns))
        first = {}
        for x in log:
            first.setdefault(x["connection"], x)
        full = [c for c, x in first.items() if x["ssl_reused"] != "r"]
        check("8: TLS handshakes: %d (%d full), at most 4" % (len(first), len(full)), len(first) <= 4,
              json.dumps(first))
    want = ls.read_file_list(os.path.join(repo, index_entry(repo, "many-files")["files"]["path"]))
    problems = ls.tree_problems(os.path.join(sb, "packages", "many-files", "2.0.0"), want)
    check("8: the 2.0.0 tree matches files.json (%d files, hashed here)" % len(want), not problems,
          "; ".join(problems))


if __name__ == "__main__":
    def on_signal(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        sys.exit(main())
    except SetupError as e:
        print("nginx-sync: " + str(e), file=sys.stderr)
        CHECKS.failed += 1
        say(CHECKS.summary())
        sys.exit(1)
