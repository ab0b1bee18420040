#!/usr/bin/env python3
"""One verdict per archive: `larder verify`, `larder install` and `larder sync` (the archive
published as a package's bundle, signed, fetched and extracted while it downloads) must agree on
every archive of scripts/fixtures/make-zips.py — the same refusal code, or all three accept — and
that code must be the one the fixture expects.

For `sync`, each archive replaces the bundle of a published 1.0.0 in its own copy of a repository
whose index is then re-signed (the test holds the key): an accepted archive gets a file list made
from its contents (Python's zipfile, names in NFC), a refused one keeps the sample app's list (the
reader refuses it before any list is compared). A fresh sandbox then syncs (a first install by
bundle); the package's failure code is the verdict, and after a refusal nothing is active in
either sandbox.

Prints one line per disagreement and `hostile-archives: N passed, M failed`.
Environment: LARDER_BIN.
"""
import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import unicodedata
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import larder_scripts as ls  # noqa: E402  (found through the line above)
from larder_scripts import SetupError, say  # noqa: E402

ls.NAME = "hostile-archives"
CHECKS = ls.Checks()


def signer(key_file):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    with open(key_file) as f:
        doc = json.load(f)
    return doc["keyId"], Ed25519PrivateKey.from_private_bytes(base64.b64decode(doc["key"]))


def canonical(doc):
    """The bytes larder writes for a document: sorted keys, two-space indent, ` : `."""
    return (json.dumps(doc, indent=2, sort_keys=True, separators=(",", " : "), ensure_ascii=False) + "\n").encode()


def file_list(zip_path):
    files = []
    with zipfile.ZipFile(zip_path) as z:
        for info in z.infolist():
            if info.is_dir():
                continue
            name = info.filename
            if not info.flag_bits & 0x800:
                # zipfile reads an unflagged name as CP437; libarchive (and Info-ZIP's unzip on
                # a UTF-8 system) as UTF-8, which is what Info-ZIP wrote.
                try:
                    name = name.encode("cp437").decode("utf-8")
                except (UnicodeEncodeError, UnicodeDecodeError):
                    pass
            name = unicodedata.normalize("NFC", name)
            while name.startswith("./"):
                name = name[2:]
            data = z.read(info)
            files.append({"path": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    files.sort(key=lambda e: e["path"].encode())
    return files


def publish(repo, bundle, list_doc, key_id, key):
    """Puts `bundle` and `list_doc` in place of 1.0.0's, and re-signs the index as pack would."""
    vdir = os.path.join(repo, "packages", "app", "1.0.0")
    shutil.copyfile(bundle, os.path.join(vdir, "bundle.zip"))
    list_bytes = canonical(list_doc)
    with open(os.path.join(vdir, "files.json"), "wb") as f:
        f.write(list_bytes)
    with open(os.path.join(repo, "index.json")) as f:
        index = json.load(f)
    entry = index["packages"][0]
    with open(bundle, "rb") as f:
        data = f.read()
    entry["bundle"]["size"] = len(data)
    entry["bundle"]["sha256"] = hashlib.sha256(data).hexdigest()
    entry["files"]["size"] = len(list_bytes)
    entry["files"]["sha256"] = hashlib.sha256(list_bytes).hexdigest()
    index["serial"] += 1
    raw = canonical(index)
    digest = hashlib.sha256(raw).hexdigest()
    sig = {"schemaVersion": 1, "index": {"sha256": digest, "size": len(raw)},
           "signatures": [{"algorithm": "ed25519", "keyId": key_id,
                           "signature": base64.b64encode(key.sign(raw)).decode()}]}
    with open(os.path.join(repo, "indexes", digest + ".json"), "wb") as f:
        f.write(raw)
    with open(os.path.join(repo, "index.json"), "wb") as f:
        f.write(raw)
    with open(os.path.join(repo, "index.json.sig"), "wb") as f:
        f.write(canonical(sig))


def verdict_of_verify(r, doc):
    if r.returncode == 0:
        return "ok"
    problems = (doc or {}).get("problems") or []
    return problems[0]["code"] if problems else "exit %d" % r.returncode


def verdict_of_install(r, doc):
    if r.returncode == 0:
        return "ok"
    return ((doc or {}).get("error") or {}).get("code") or "exit %d" % r.returncode


def verdict_of_sync(r, doc):
    p = ls.find_package(doc, "app")
    if r.returncode == 0 and p is not None and p.get("outcome") == "done":
        return "ok"
    if p is not None and p.get("code"):
        return p["code"]
    return ((doc or {}).get("error") or {}).get("code") or "exit %d" % r.returncode


def main():
    started = time.time()
    larder = ls.Larder(ls.larder_binary(), timeout=60)
    work = ls.scratch_dir("larder-hostile.")
    try:
        fixtures = os.path.join(work, "fixtures")
        out = subprocess.run([sys.executable, os.path.join(ls.SCRIPTS, "fixtures", "make-zips.py"), fixtures],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=True).stdout
        expected = json.loads(out)
        keys = os.path.join(work, "keys", "p")
        larder.must("keygen", "--out", keys)
        key_id, key = signer(keys + ".key")
        base = os.path.join(work, "repo")
        larder.must("pack", ls.SAMPLE_APP, "--repo", base, "--id", "app", "--version", "1.0.0", "--key", keys + ".key")
        with open(os.path.join(base, "packages", "app", "1.0.0", "files.json")) as f:
            sample_list = json.load(f)
        agree = 0
        for name in sorted(expected):
            want = expected[name]
            zip_path = os.path.join(fixtures, name)
            r = larder.run("verify", zip_path, "--json")
            v = verdict_of_verify(r, ls.parse_json(r.stdout))
            sb = os.path.join(work, "sb-install")
            shutil.rmtree(sb, ignore_errors=True)
            r = larder.run("install", "--root", sb, "--id", "app", "--version", "1.0.0", zip_path, "--json")
            i = verdict_of_install(r, ls.parse_json(r.stdout))
            repo = os.path.join(work, "repo-case")
            shutil.rmtree(repo, ignore_errors=True)
            shutil.copytree(base, repo)
            lst = dict(sample_list)
            if want == "ok":
                lst["files"] = file_list(zip_path)
            publish(repo, zip_path, lst, key_id, key)
            sb = os.path.join(work, "sb-sync")
            shutil.rmtree(sb, ignore_errors=True)
            larder.must("init", "--root", sb, "--repo", "file://" + repo, "--public-key", keys + ".pub")
            r = larder.run("sync", "--root", sb, "--json")
            s = verdict_of_sync(r, ls.parse_json(r.stdout))
            if want != "ok":
                for label, root in (("install", os.path.join(work, "sb-install")), ("sync", sb)):
                    rc, st, _ = larder.json("status", "--root", root)
                    p = ls.find_package(st, "app")
                    if p is not None and p.get("active"):
                        CHECKS.check("%s: nothing active after the refused %s" % (name, label), False,
                                     "active %s" % p.get("active"))
            if v == i == s == want:
                agree += 1
                CHECKS.passed += 1
            else:
                CHECKS.check("%s: verify %s, install %s, sync %s (expected %s)" % (name, v, i, s, want), False,
                             r.stdout[-300:] if s != want else "")
        say("hostile-archives: %d archives (%d refused), verify, install and sync agree on %d" % (
            len(expected), sum(1 for v in expected.values() if v != "ok"), agree))
    except (SetupError, subprocess.CalledProcessError) as e:
        CHECKS.setup_failed(e)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return CHECKS.finish(started)


if __name__ == "__main__":
    sys.exit(main())
