"""nginx-sync scenarios 1-7: first install, no-change sync, objects update, resume, revoke, client
version and channels, a same-second republish."""
import json
import os
import shutil
import signal
import subprocess
import time

import larder_scripts as ls
from larder_scripts.nginx_sync.common import (check, describe, index_entry, plan_action, published, scenario, show, write)


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
