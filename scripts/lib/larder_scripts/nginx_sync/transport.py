"""nginx-sync scenarios 8 and 10: connection reuse, verify over HTTP(S), an untrusted CA."""
import json
import os
import random
import shutil
import subprocess

import larder_scripts as ls
from larder_scripts.nginx_sync.common import check, describe, index_entry, published, scenario, show, write


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
