"""nginx-sync scenario 9: updates by delta, with every fallback and crashes."""
import json
import os
import random
import shutil

import larder_scripts as ls
from larder_scripts.nginx_sync.common import (check, describe, index_entry, plan_action, published, scenario, show, write)


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

def delta_manifest(repo, entry, base):
    import gzip
    ref = [d for d in entry["deltas"] if d["from"] == base][0]["manifest"]
    with open(os.path.join(repo, ref["path"]), "rb") as f:
        return json.loads(gzip.decompress(f.read()))
