#!/usr/bin/env python3
"""Publishing through a CDN edge: nginx as the origin, with the cache headers of
Examples/cdn/nginx-repository.conf, and Varnish as the edge, with Examples/cdn/edge.vcl, both on
127.0.0.1, started here. Devices (sandboxes) sync through the edge while releases are published.

  0. headers: objects, bundles, file lists and index copies are served `immutable` (a second
     request through the edge is a hit); index.json and index.json.sig carry a short max-age;
  1. the index cached longer than its signature (index 15 s, signature 1 s): a release is
     published while 8 devices sync in rounds. The edge serves the new signature with the old
     index; no device fails (with a signature error or any other), each fetches the index copy
     the signature names, and all reach the new release within the window;
  2. the reverse (signature 15 s, index 1 s), after the edge's cache is emptied: the edge serves
     the old signature with the new index; no device fails, the devices at the old release stay
     there (up to date) until the signature expires, a device that joins during the window installs
     the release the signature it got names (the old one, from the index copy), and all reach the
     new release once the signature's TTL is over;
  3. `larder verify URL` (the post-deploy check) passes through the edge, and names an object
     missing at the origin.

After scenarios 1 and 2, every device's active version is one the repository published, its tree
passes `larder doctor`, and its accepted index is byte for byte a published one.

Prints one line per check and ends with `edge: N passed, M failed`; exit 1 when any check
failed. Needs nginx and varnish (installed from Debian when missing, no service started).
Environment: LARDER_BIN (a built larder; else `swift build` here), EDGE_KEEP=1 (keep the work
directory).
"""
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import larder_scripts as ls  # noqa: E402  (found through the line above)
from larder_scripts.nginx_server import Nginx  # noqa: E402
from larder_scripts.varnish_server import Varnish  # noqa: E402
from larder_scripts import SetupError, say  # noqa: E402

ls.NAME = "edge"
CHECKS = ls.Checks()
check = CHECKS.check
SNIPPET = os.path.join(ls.CHECKOUT, "Examples", "cdn", "nginx-repository.conf")
DEVICES = 8


def curl_head(url):
    p = subprocess.run(["curl", "-s", "-D", "-", "-o", "/dev/null", url], stdout=subprocess.PIPE, text=True,
                       timeout=30, env=ls.loopback_env())
    headers = {}
    for line in p.stdout.splitlines()[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return headers


class Edge:
    """The origin, the edge, the repository and the devices of one run."""

    def __init__(self, work, larder):
        self.work = work
        self.larder = larder
        self.repo = os.path.join(work, "repo")
        os.makedirs(self.repo)
        self.snippet = os.path.join(work, "cdn.conf")
        self.ttl(60, 60)
        self.nginx = Nginx(ls.ensure_tool("nginx", "nginx-light"), work, self.repo, include=self.snippet)
        self.varnish = None
        keys = os.path.join(work, "keys", "publisher")
        self.key, self.pub = keys + ".key", keys + ".pub"
        larder.must("keygen", "--out", keys)
        self.src = os.path.join(work, "src")
        shutil.copytree(ls.SAMPLE_APP, self.src)
        self.published = {}  # version -> index bytes' sha256
        self.indexes = set()  # sha256 of every index published

    def ttl(self, index, signature):
        """Examples/cdn/nginx-repository.conf with index.json's and index.json.sig's max-age set
        apart (the shipped file gives both one location)."""
        with open(SNIPPET) as f:
            text = f.read()
        block = re.search(r'location ~ /index\\\.json\(\\\.sig\)\?\$ \{.*?\n\}\n', text, re.S)
        if not block:
            raise SetupError("Examples/cdn/nginx-repository.conf has no index.json location to adjust")
        one = block.group(0)
        split = (one.replace(r"location ~ /index\.json(\.sig)?$", r"location ~ /index\.json$")
                 .replace("max-age=60", "max-age=%d" % index)
                 + one.replace(r"location ~ /index\.json(\.sig)?$", r"location ~ /index\.json\.sig$")
                 .replace("max-age=60", "max-age=%d" % signature))
        with open(self.snippet, "w") as f:
            f.write(text.replace(one, split))

    def publish(self, version):
        with open(os.path.join(self.src, "data", "catalog.json"), "w") as f:
            json.dump({"version": version, "items": []}, f)
        self.larder.must("pack", self.src, "--repo", self.repo, "--id", "sample-app", "--version", version,
                         "--key", self.key, "--route", "https://app.example.com/")
        with open(os.path.join(self.repo, "index.json"), "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        self.published[version] = digest
        self.indexes.add(digest)

    def device(self, i):
        return os.path.join(self.work, "devices", "d%02d" % i)

    def join(self, i):
        self.larder.must("init", "--root", self.device(i), "--repo", self.varnish.base, "--public-key", self.pub)

    def sync_all(self, devices):
        """One sync per device, all at once: [(device, exit code, report, Result)]."""
        def one(i):
            rc, doc, r = self.larder.json("sync", "--root", self.device(i), "--progress", "none")
            return i, rc, doc, r
        with concurrent.futures.ThreadPoolExecutor(len(devices)) as pool:
            return list(pool.map(one, devices))

    def active(self, i):
        rc, st, _ = self.larder.json("status", "--root", self.device(i))
        p = ls.find_package(st, "sample-app")
        return p.get("active") if p else None


def failures(results):
    return ["d%02d exit %d: %s" % (i, rc, ((doc or {}).get("error") or {}).get("code") or r.stderr.strip()[-200:])
            for i, rc, doc, r in results if rc != 0]


def rounds(edge, devices, seconds, during=None):
    """Syncs every device again and again for `seconds` (running `during` in a thread at the
    start): all results, and the versions seen per device."""
    results = []
    seen = {i: [] for i in devices}
    worker = threading.Thread(target=during) if during else None
    if worker:
        worker.start()
    end = time.time() + seconds
    while time.time() < end:
        batch = edge.sync_all(devices)
        results += batch
        for i in devices:
            seen[i].append(edge.active(i))
        time.sleep(0.3)
    if worker:
        worker.join()
    return results, seen


def settled(edge, devices, label):
    """What holds on every device after a scenario: a published version active, doctor clean, and
    the accepted index one that was published."""
    bad = []
    for i in devices:
        v = edge.active(i)
        if v not in edge.published:
            bad.append("d%02d active %s" % (i, v))
        p = edge.larder.run("doctor", "--root", edge.device(i))
        if p.returncode != 0:
            bad.append("d%02d doctor exit %d: %s" % (i, p.returncode, p.stdout.strip()[-200:]))
        cached = os.path.join(edge.device(i), "repository-index.json")
        if os.path.exists(cached):
            with open(cached, "rb") as f:
                if hashlib.sha256(f.read()).hexdigest() not in edge.indexes:
                    bad.append("d%02d accepted an index nobody published" % i)
    check("%s: every device has a published version active, a tree doctor passes and a published index (%d devices)"
          % (label, len(devices)), not bad, "; ".join(bad))


def scenario_headers(edge):
    say("-- 0. cache headers through the edge")
    with open(os.path.join(edge.repo, "index.json")) as f:
        entry = json.load(f)["packages"][0]
    digest = edge.published["1.0.0"]
    with open(os.path.join(edge.repo, entry["files"]["path"])) as f:
        some = json.load(f)["files"][0]["sha256"]
    immutable = [entry["bundle"]["path"], entry["files"]["path"], "indexes/%s.json" % digest,
                 "objects/%s/%s" % (some[:2], some)]
    for path in immutable:
        first = curl_head(edge.varnish.base + path)
        second = curl_head(edge.varnish.base + path)
        check("0: %s is served immutable (%s) and the second request is an edge hit (%s)"
              % (path.split("/")[0] + "/…", first.get("cache-control"), second.get("x-cache")),
              "immutable" in first.get("cache-control", "") and "max-age=31536000" in first.get("cache-control", "")
              and second.get("x-cache") == "HIT", json.dumps([first, second]))
    for path in ("index.json", "index.json.sig"):
        h = curl_head(edge.varnish.base + path)
        check("0: %s carries a short, revalidated max-age (%s)" % (path, h.get("cache-control")),
              re.search(r"max-age=\d{1,3}\b", h.get("cache-control", "")) is not None
              and "must-revalidate" in h.get("cache-control", ""), json.dumps(h))


def scenario_index_outlives_signature(edge, devices):
    say("-- 1. the edge holds the index 15 s, the signature 1 s; a release is published while devices sync")
    edge.ttl(index=15, signature=1)
    edge.nginx.reload("0")
    edge.varnish.restart()
    for i in devices:
        edge.join(i)
    first = edge.sync_all(devices)
    check("1: %d devices install 1.0.0 through the edge" % len(devices),
          not failures(first) and all(edge.active(i) == "1.0.0" for i in devices), "; ".join(failures(first)))
    m = edge.nginx.mark()
    results, seen = rounds(edge, devices, 18, during=lambda: edge.publish("1.1.0"))
    origin = edge.nginx.since(m)
    check("1: no sync failed in %d syncs over 18 s (no signature error, no other)" % len(results),
          not failures(results), "; ".join(failures(results)[:5]))
    copies = [x for x in origin if x["uri"].startswith("/indexes/")]
    check("1: the edge paired the new signature with the old index, and the index copy it names was fetched "
          "(origin: %d request(s) for indexes/)" % len(copies),
          any(x["uri"] == "/indexes/%s.json" % edge.published["1.1.0"] for x in copies), show(origin))
    check("1: every device reached 1.1.0 within the window",
          all(s and s[-1] == "1.1.0" for s in seen.values()), json.dumps(seen))
    check("1: no device ever went back (each went 1.0.0 → 1.1.0 once)",
          all(s == sorted(s, key=lambda v: tuple(map(int, v.split(".")))) for s in seen.values()), json.dumps(seen))
    settled(edge, devices, "1")


def scenario_signature_outlives_index(edge, devices, late):
    say("-- 2. the edge holds the signature 15 s, the index 1 s; a release is published")
    edge.ttl(index=1, signature=15)
    edge.nginx.reload("0")
    edge.varnish.restart()
    # Up-to-date devices fetch the signature (cached for 15 s from now), not the index.
    warm = edge.sync_all(devices)
    check("2: the devices are up to date at 1.1.0 (the edge now holds 1.1.0's signature)",
          not failures(warm) and all((doc or {}).get("upToDate") for _, _, doc, _ in warm), "; ".join(failures(warm)))
    signature_cached_at = time.time()
    edge.publish("1.2.0")
    time.sleep(1.5)  # the edge's index (1 s) expires: the next request for it gets 1.2.0's

    edge.join(late)
    joined = edge.sync_all([late])
    check("2: a device that joins in the window installs the release its signature names (1.1.0, from the "
          "index copy), not the index.json the edge now serves",
          not failures(joined) and edge.active(late) == "1.1.0", "; ".join(failures(joined)) + " active %s"
          % edge.active(late))
    everyone = devices + [late]
    window = max(0.0, 15 - (time.time() - signature_cached_at) - 1)
    results, seen = rounds(edge, everyone, window)
    check("2: no sync failed while the edge paired the old signature with the new index (%d syncs)" % len(results),
          not failures(results), "; ".join(failures(results)[:5]))
    check("2: during the window the devices stayed on 1.1.0 (their signature said so)",
          all(v == "1.1.0" for s in seen.values() for v in s), json.dumps(seen))
    time.sleep(max(0.0, 16 - (time.time() - signature_cached_at)))
    after = edge.sync_all(everyone)
    check("2: once the signature's TTL is over, every device updates to 1.2.0",
          not failures(after) and all(edge.active(i) == "1.2.0" for i in everyone), "; ".join(failures(after)))
    settled(edge, everyone, "2")


def scenario_post_deploy_verify(edge):
    say("-- 3. larder verify on the repository's URL (a post-deploy check)")
    rc, doc, r = edge.larder.json("verify", edge.varnish.base, "--public-key", edge.pub)
    check("3: larder verify %s (through the edge) exits 0 (%s objects, %s files checked)" % (
        edge.varnish.base, (doc or {}).get("objectsChecked"), (doc or {}).get("filesChecked")),
          rc == 0 and doc is not None and doc.get("ok") is True and doc.get("objectsChecked", 0) > 0, r.stdout[-400:])
    with open(os.path.join(edge.repo, "index.json")) as f:
        entry = json.load(f)["packages"][0]
    with open(os.path.join(edge.repo, entry["files"]["path"])) as f:
        sha = json.load(f)["files"][-1]["sha256"]
    obj = os.path.join(edge.repo, "objects", sha[:2], sha)
    aside = obj + ".aside"
    os.rename(obj, aside)
    try:
        rc, doc, r = edge.larder.json("verify", edge.nginx.base, "--public-key", edge.pub)
    finally:
        os.rename(aside, obj)
    problems = (doc or {}).get("problems", [])
    check("3: an object missing at the origin: verify exits 1 naming it (http-status)",
          rc == 1 and any(p["code"] == "http-status" and sha in (p.get("file") or "") for p in problems),
          r.stdout[-600:])


def show(log):
    return ", ".join("%s→%d" % (x["uri"], x["status"]) for x in log[-20:])


def main():
    started = time.time()
    larder = ls.Larder(ls.larder_binary(), timeout=60)
    ls.ensure_tool("curl", "curl")
    work = ls.scratch_dir("larder-edge.")
    keep = os.environ.get("EDGE_KEEP") == "1"
    edge = None
    try:
        edge = Edge(work, larder)
        edge.publish("1.0.0")
        edge.nginx.start()
        edge.varnish = Varnish(work, edge.nginx.port)
        edge.varnish.start()
        say("edge: origin nginx on %s, varnish edge on %s, work directory %s" % (
            edge.nginx.base, edge.varnish.base, work))
        scenario_headers(edge)
        devices = list(range(DEVICES))
        scenario_index_outlives_signature(edge, devices)
        scenario_signature_outlives_index(edge, devices, late=DEVICES)
        bad = [x for x in edge.nginx.since(0) if x["status"] >= 400 and not x["uri"].startswith("/__")]
        check("the origin answered no request with 4xx/5xx", not bad, show(bad))
        scenario_post_deploy_verify(edge)
    except SetupError as e:
        CHECKS.setup_failed(e)
    except Exception:
        check("the script ran to its end", False, traceback.format_exc())
    finally:
        if edge is not None:
            if edge.varnish is not None:
                edge.varnish.stop()
            edge.nginx.stop()
    say("edge: %.1f s" % (time.time() - started))
    if keep or CHECKS.failed:
        say("edge: kept %s" % work)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return CHECKS.finish()


if __name__ == "__main__":
    sys.exit(main())
