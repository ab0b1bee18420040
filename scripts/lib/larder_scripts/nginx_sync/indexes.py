"""nginx-sync: on-demand packages and a sharded index."""
import json
import os
import random
import subprocess
import time

import larder_scripts as ls
from larder_scripts.nginx_sync.common import check, describe, published, scenario, show, write


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
