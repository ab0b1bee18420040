#!/usr/bin/env python3
"""Encrypted packages (manifests/README.md §16) over nginx and through a Varnish edge, both on
127.0.0.1, started here, with the cache headers of Examples/cdn/ and Varnish keeping its cache in
a file, so that what the edge holds can be read.

  1. Two releases of the sample app (the second with a large script edited, so that an update
     goes by delta) are packed encrypted for a device's recipient key and the publisher's
     (`pack --encrypt-to`, the second with `--recipient-key` so deltas are made from the first).
  2. A device syncs through the edge with its key: the first release is installed, then the
     second by delta; each tree is the release's, byte for byte; `larder rollback` and a
     revocation bring the first back, and its files resolve to its bytes.
  3. Refused, each with its code, the device's active version unchanged and nothing of the
     version written: a device without a key (`recipient-key-missing`), with another recipient's
     key (`not-a-recipient`), and a sealed bundle damaged at the origin (`hash-mismatch`).
  4. `larder verify URL` through the edge: without the key (nothing opened), and with it (every
     version opened and checked).
  5. No file of the repository, and nothing in the edge's cache, holds any of the package's file
     names (but the entry file's, which the index names) or a piece of any of its contents; no
     repository file starts as a zip, gzip or zstd stream, and no zip entry header appears
     anywhere.

Prints one line per check and ends with `encrypted: N passed, M failed`; exit 1 when any check
failed. Needs nginx and varnish (installed from Debian when missing, no service started).
Environment: LARDER_BIN (a built larder; else `swift build` here), ENCRYPTED_KEEP=1 (keep the
work directory).
"""
import json
import os
import shutil
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import larder_scripts as ls  # noqa: E402  (found through the line above)
from larder_scripts.nginx_server import Nginx  # noqa: E402
from larder_scripts.varnish_server import Varnish  # noqa: E402
from larder_scripts import SetupError, say  # noqa: E402

ls.NAME = "encrypted"
CHECKS = ls.Checks()
check = CHECKS.check
SNIPPET = os.path.join(ls.CHECKOUT, "Examples", "cdn", "nginx-repository.conf")
PID = "sample-app"


def write_release(src, release):
    """The sample app with its catalogue naming the release and a 200 KB generated script of
    which one line changes per release (a delta patches it)."""
    with open(os.path.join(src, "data", "catalog.json"), "w") as f:
        json.dump({"version": "1.%d.0" % release, "items": []}, f)
    lines = []
    seed = 12345
    for i in range(4000):
        seed = (seed * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        lines.append("export const secretWord%d = \"%x\";" % (i, seed >> 16) if i != 100 * (release + 1)
                     else "export const editedIn%d = %d;" % (release, release))
    with open(os.path.join(src, "js", "bundle.js"), "w") as f:
        f.write("\n".join(lines))


def tree_files(root):
    out = {}
    for d, _, files in os.walk(root):
        for name in files:
            full = os.path.join(d, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, root)] = f.read()
    return out


def same_tree(device_tree, release):
    got = tree_files(device_tree)
    return sorted(got) == sorted(release) and all(got[p] == release[p] for p in release)


class Run:
    def __init__(self, work, larder):
        self.work = work
        self.larder = larder
        self.repo = os.path.join(work, "repo")
        os.makedirs(self.repo)
        keys = os.path.join(work, "keys")
        self.sign = os.path.join(keys, "publisher")
        self.device_key = os.path.join(keys, "device")
        self.publisher_key = os.path.join(keys, "publisher-recipient")
        self.other_key = os.path.join(keys, "other")
        larder.must("keygen", "--out", self.sign)
        for k in (self.device_key, self.publisher_key, self.other_key):
            larder.must("keygen", "--recipient", "--out", k)
        self.src = os.path.join(work, "src")
        shutil.copytree(ls.SAMPLE_APP, self.src)
        self.releases = {}
        # The shipped cache headers, the index pair's max-age cut to 1 s (a release shows at once).
        self.snippet = os.path.join(work, "cdn.conf")
        with open(SNIPPET) as f:
            text = f.read()
        if "max-age=60" not in text:
            raise SetupError("Examples/cdn/nginx-repository.conf has no max-age=60 for the index pair")
        with open(self.snippet, "w") as f:
            f.write(text.replace("max-age=60", "max-age=1"))
        self.nginx = Nginx(ls.ensure_tool("nginx", "nginx-light"), work, self.repo, include=self.snippet)
        self.varnish = None
        self.storage = os.path.join(work, "varnish-cache.bin")

    def publish(self, release):
        write_release(self.src, release)
        version = "1.%d.0" % release
        self.larder.must("pack", self.src, "--repo", self.repo, "--id", PID, "--version", version, "--key",
                         self.sign + ".key", "--encrypt-to", self.device_key + ".pub", "--encrypt-to",
                         self.publisher_key + ".pub", "--recipient-key", self.publisher_key + ".key")
        self.releases[version] = tree_files(self.src)
        time.sleep(1.5)  # the edge's copy of the index pair expires
        return version

    def device(self, name, base=None):
        root = os.path.join(self.work, "devices", name)
        self.larder.must("init", "--root", root, "--repo", base or self.varnish.base, "--public-key",
                         self.sign + ".pub")
        return root

    def sync(self, root, key=None):
        return self.larder.json("sync", "--root", root, *(["--recipient-key", key + ".key"] if key else []))

    def active(self, root):
        rc, st, _ = self.larder.json("status", "--root", root)
        p = ls.find_package(st, PID)
        return p.get("active") if p else None


def package(doc):
    return ls.find_package(doc or {}, PID) or {}


def scenario_sync_update_rollback(run):
    dev = run.device("d")
    rc, doc, r = run.sync(dev, run.device_key)
    p = package(doc)
    check("1.0.0 installed through the edge with the recipient key", rc == 0 and p.get("outcome") == "done",
          r.stdout[-400:] + r.stderr[-400:])
    tree = os.path.join(dev, "packages", PID)
    check("the device's tree of 1.0.0 is the release, byte for byte",
          same_tree(os.path.join(tree, "1.0.0"), run.releases["1.0.0"]))
    run.publish(1)
    rc, doc, r = run.sync(dev, run.device_key)
    p = package(doc)
    delta = p.get("delta") or {}
    check("1.1.0 installed by delta (patches sealed one by one)",
          rc == 0 and p.get("method") == "delta" and delta.get("patchesApplied", 0) > 0 and not delta.get("fallbacks"),
          json.dumps(p)[:600])
    check("the device's tree of 1.1.0 is the release, byte for byte",
          same_tree(os.path.join(tree, "1.1.0"), run.releases["1.1.0"]))
    rc, _, r = run.larder.json("rollback", PID, "--root", dev)
    check("larder rollback brings 1.0.0 back", rc == 0 and run.active(dev) == "1.0.0", r.stderr[-300:])
    rc, res, _ = run.larder.json("resolve", "larder://%s/js/bundle.js" % PID, "--root", dev)
    f = (res or {}).get("file")
    ok = rc == 0 and f and open(f, "rb").read() == run.releases["1.0.0"]["js/bundle.js"]
    check("a URL of 1.0.0 resolves to its bytes after the rollback", ok, json.dumps(res)[:300])
    run.larder.must("revoke", PID, "1.1.0", "--repo", run.repo, "--key", run.sign + ".key")
    rc, doc, r = run.sync(dev, run.device_key)
    check("after a revocation of 1.1.0 the device stays on 1.0.0", rc == 0 and run.active(dev) == "1.0.0",
          r.stdout[-300:])
    return dev


def scenario_refusals(run):
    version = run.publish(2)
    for name, key, code in (("nokey", None, "recipient-key-missing"), ("other", run.other_key, "not-a-recipient")):
        dev = run.device(name)
        rc, doc, r = run.sync(dev, key)
        p = package(doc)
        check("a device %s is refused with %s (exit 2), nothing installed" % (
            "without a recipient key" if key is None else "with another recipient's key", code),
            rc == 2 and p.get("code") == code and run.active(dev) is None
            and not os.path.exists(os.path.join(dev, "packages", PID, version)), r.stdout[-400:])
    # A sealed bundle damaged at the origin (a second repository, served by its own nginx).
    damaged = os.path.join(run.work, "repo-damaged")
    shutil.copytree(run.repo, damaged)
    bundle = os.path.join(damaged, "packages", PID, version, "bundle.sealed")
    data = bytearray(open(bundle, "rb").read())
    data[len(data) // 2] ^= 1
    open(bundle, "wb").write(bytes(data))
    for d, _, files in os.walk(os.path.join(damaged, "objects")):
        for name in files:
            path = os.path.join(d, name)
            obj = bytearray(open(path, "rb").read())
            obj[len(obj) // 2] ^= 1
            open(path, "wb").write(bytes(obj))
    origin = Nginx(ls.ensure_tool("nginx", "nginx-light"), os.path.join(run.work, "nginx-damaged"), damaged)
    origin.start()
    try:
        dev = run.device("damaged", origin.base)
        rc, doc, r = run.sync(dev, run.device_key)
        p = package(doc)
        leftovers = [n for n in os.listdir(os.path.join(dev, "downloads")) if n.endswith(".open")] \
            if os.path.isdir(os.path.join(dev, "downloads")) else []
        check("a sealed bundle and objects damaged at the origin are refused by their digest (hash-mismatch), "
              "nothing opened or installed", rc == 2 and p.get("code") == "hash-mismatch" and run.active(dev) is None
              and not leftovers, r.stdout[-400:] + " " + str(leftovers))
    finally:
        origin.stop()


def scenario_verify(run):
    rc, doc, r = run.larder.json("verify", run.varnish.base, "--public-key", run.sign + ".pub", "--allow-http")
    check("larder verify URL without the key: no problem, nothing opened",
          rc == 0 and (doc or {}).get("encryptedChecked") == 1 and (doc or {}).get("encryptedOpened") == 0,
          r.stdout[-400:])
    rc, doc, r = run.larder.json("verify", run.varnish.base, "--public-key", run.sign + ".pub", "--allow-http",
                                 "--recipient-key", run.device_key + ".key")
    check("larder verify URL with the key: every encrypted version opened and checked",
          rc == 0 and (doc or {}).get("encryptedOpened") == 1 and (doc or {}).get("objectsChecked", 0) > 0,
          r.stdout[-400:])


def secrets(run):
    """Byte strings that must appear nowhere the server side holds: every file name but the
    entry's, and a 32-byte piece from the middle of every file of 64 bytes or more."""
    out = set()
    for release in run.releases.values():
        for path, data in release.items():
            if path != "index.html":
                out.add(path.encode())
            if len(data) >= 64:
                out.add(data[len(data) // 2:len(data) // 2 + 32])
    out.add(b"secretWord")
    return out


def scenario_scan(run):
    known = secrets(run)
    found = []
    starts = []
    for d, _, files in os.walk(run.repo):
        for name in files:
            path = os.path.join(d, name)
            data = open(path, "rb").read()
            rel = os.path.relpath(path, run.repo)
            for k in known:
                if k in data:
                    found.append("%s holds %r" % (rel, k[:40]))
            if b"PK\x03\x04" in data or data[:2] == b"\x1f\x8b" or data[:4] == b"\x28\xb5\x2f\xfd":
                starts.append(rel)
    check("no repository file holds a file name or a piece of content of the package", not found, "; ".join(found[:5]))
    check("no repository file is or holds a zip, gzip or zstd stream", not starts, ", ".join(starts[:5]))
    cache = open(run.storage, "rb").read()
    # The edge holds what the devices fetched (a storage file of 64 MB, mostly empty).
    held = [k for k in known if k in cache]
    check("the edge's cache holds no file name or piece of content of the package", not held,
          ", ".join(repr(k[:40]) for k in held[:5]))
    check("the edge's cache holds no zip entry header", b"PK\x03\x04" not in cache)
    check("the edge's cache holds the sealed blobs it served (the scan read them)", b"LRDE" in cache)


def main():
    started = time.time()
    larder = ls.Larder(ls.larder_binary(), timeout=120)
    ls.ensure_tool("curl", "curl")
    work = ls.scratch_dir("larder-encrypted.")
    keep = os.environ.get("ENCRYPTED_KEEP") == "1"
    run = None
    try:
        run = Run(work, larder)
        run.publish(0)
        run.nginx.start()
        run.varnish = Varnish(work, run.nginx.port, storage="file,%s,64m" % run.storage)
        run.varnish.start()
        say("encrypted: origin nginx on %s, varnish edge on %s, work directory %s" % (
            run.nginx.base, run.varnish.base, work))
        scenario_sync_update_rollback(run)
        scenario_refusals(run)
        scenario_verify(run)
        scenario_scan(run)
    except SetupError as e:
        CHECKS.setup_failed(e)
    except Exception:
        check("the script ran to its end", False, traceback.format_exc())
    finally:
        if run is not None:
            if run.varnish is not None:
                run.varnish.stop()
            run.nginx.stop()
    say("encrypted: %.1f s" % (time.time() - started))
    if keep or CHECKS.failed:
        say("encrypted: kept %s" % work)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return CHECKS.finish()


if __name__ == "__main__":
    sys.exit(main())
