#!/usr/bin/env python3
"""Delegations (manifests §18): four teams publish into one repository served by nginx (origin)
and Varnish (edge, Examples/cdn), both on 127.0.0.1, started here; devices sync through the edge.

  1. migration: a single-key repository gets root 1 (`delegate add`), each team claims its
     published packages (`delegate claim`), the index moves to an online key (`delegate role
     index`); devices follow the root and keep their versions; `verify` checks the chain;
  2. a team publishes alone (`pack --key TEAM.key --index-key ONLINE.key`): devices update;
  3. two teams publish at once (two processes): both land, and devices take both;
  4. a team key rotates (listed beside the old one, a pack with the new key, the old one dropped):
     devices follow; no other team's part is re-signed;
  5. the root rotates (`delegate role root`, signed by the old and the new root key): devices
     follow, a device configured with the old key walks the chain from root 1, one configured with
     the new key starts at the newest root;
  6. a sharded index and an encrypted package under delegations: a team's on-demand package in
     shards, fetched at first use; another team's package sealed to a device's recipient key, then
     rewrapped for a second recipient by its team (another team's key is refused);
  7. hostile (a device on the origin, the repository forged with the real online key and a team's
     or an attacker's key): a package outside the team's patterns, fewer signatures than the
     threshold, a revoked key, an expired key, a part older than accepted, a part that is not the
     one signed, a root not signed by the old root, an index signed by a team key. Each is refused
     with its own code, the device keeps its versions and its root.

Prints one line per check and ends with `delegations: N passed, M failed`; exit 1 when any check
failed. Needs nginx, varnish and Python's `cryptography` (installed from Debian when missing).
Environment: LARDER_BIN (a built larder; else `swift build` here), DELEGATIONS_KEEP=1 (keep the
work directory).
"""
import base64
import concurrent.futures
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import larder_scripts as ls  # noqa: E402  (found through the line above)
from larder_scripts.nginx_server import Nginx  # noqa: E402
from larder_scripts.varnish_server import Varnish  # noqa: E402
from larder_scripts import SetupError, say  # noqa: E402

ls.NAME = "delegations"
if not importlib.util.find_spec("cryptography"):
    python = ls.python_with_modules()
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        ls.die("%s does not import cryptography after scripts/bootstrap" % python)
    os.execv(python, [python] + sys.argv)
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402

CHECKS = ls.Checks()
check = CHECKS.check
SNIPPET = os.path.join(ls.CHECKOUT, "Examples", "cdn", "nginx-repository.conf")
TEAMS = {"pay": ["pay-card"], "shop": ["shop"], "news": ["news"], "ads": []}
EDGE_DEVICES = 3


def canonical(doc):
    return (json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False, separators=(",", " : ")) + "\n").encode()


def sha(data):
    return hashlib.sha256(data).hexdigest()


class Repo:
    """The repository, its keys and servers, and the devices of one run."""

    def __init__(self, work, larder):
        self.work, self.larder = work, larder
        self.repo = os.path.join(work, "repo")
        os.makedirs(self.repo)
        self.keys = os.path.join(work, "keys")
        for k in ("root", "root2", "online", "pay", "pay2", "shop1", "shop2", "news1", "news2", "ads", "evil"):
            larder.must("keygen", "--out", self.key(k, ""))
        larder.must("keygen", "--recipient", "--out", self.key("device", ""))
        with open(SNIPPET) as f:  # the shipped headers, with the index's max-age at 1 s
            text = f.read().replace("max-age=60", "max-age=1")
        self.snippet = os.path.join(work, "cdn.conf")
        with open(self.snippet, "w") as f:
            f.write(text)
        self.nginx = Nginx(ls.ensure_tool("nginx", "nginx-light"), work, self.repo, include=self.snippet)
        self.varnish = None

    def key(self, name, ext=".key"):
        return os.path.join(self.keys, name + ext)

    def pack(self, pid, version, key, *extra, co=(), index=True):
        src = os.path.join(self.work, "src", pid, version)
        os.makedirs(src, exist_ok=True)
        with open(os.path.join(src, "index.html"), "w") as f:
            f.write("<!doctype html><title>%s %s</title><p>%s</p>\n" % (pid, version, "x" * 200))
        args = ["pack", src, "--repo", self.repo, "--id", pid, "--version", version, "--key", self.key(key)]
        for c in co:
            args += ["--co-sign", self.key(c)]
        if index:
            args += ["--index-key", self.key("online")]
        return args + list(extra)

    def device(self, name):
        return os.path.join(self.work, "devices", name)

    def join(self, name, base, key="root"):
        self.larder.must("init", "--root", self.device(name), "--repo", base, "--public-key", self.key(key, ".pub"))

    def sync(self, name):
        return self.larder.json("sync", "--root", self.device(name), "--progress", "none",
                                "--recipient-key", self.key("device"))

    def versions(self, name):
        rc, st, _ = self.larder.json("status", "--root", self.device(name))
        return {p["id"]: p.get("active") for p in (st or {}).get("packages", [])}

    def held_root(self, name):
        path = os.path.join(self.device(name), "trust", "root.json")
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return json.load(f)["version"]

    def index(self):
        with open(os.path.join(self.repo, "index.json")) as f:
            return json.load(f)

    def verify(self, key="root"):
        return self.larder.run("verify", self.repo, "--public-key", self.key(key, ".pub"))


def all_sync(r, names, label, want):
    """Every device syncs (at once); each exits 0 and runs `want` ({id: version})."""
    with concurrent.futures.ThreadPoolExecutor(len(names)) as pool:
        results = list(pool.map(r.sync, names))
    bad = ["%s exit %d %s" % (n, rc, ((doc or {}).get("error") or {}).get("code") or res.stderr[-300:])
           for n, (rc, doc, res) in zip(names, results) if rc != 0]
    got = {n: r.versions(n) for n in names}
    wrong = ["%s runs %s" % (n, got[n]) for n in names if any(got[n].get(k) != v for k, v in want.items())]
    check("%s: %d devices sync through the edge and run %s" % (label, len(names), want), not bad and not wrong,
          "; ".join(bad + wrong))


def scenario_migration(r, devices):
    say("-- 1. migration of a single-key repository")
    for pid in ("pay-card", "shop", "news"):
        r.larder.must(*r.pack(pid, "1.0.0", "root", index=False))
    r.nginx.start()
    r.varnish = Varnish(r.work, r.nginx.port)
    r.varnish.start()
    for d in devices:
        r.join(d, r.varnish.base)
    all_sync(r, devices, "1: before delegation", {"pay-card": "1.0.0", "shop": "1.0.0", "news": "1.0.0"})
    add = ["delegate", "add", "--repo", r.repo, "--key", r.key("root")]
    r.larder.must(*add, "pay", "--public-key", r.key("pay", ".pub"), "--packages", "pay-*")
    r.larder.must(*add, "shop", "--public-key", r.key("shop1", ".pub"), "--public-key", r.key("shop2", ".pub"),
                  "--packages", "shop", "shop.*")
    r.larder.must(*add, "news", "--public-key", r.key("news1", ".pub"), "--public-key", r.key("news2", ".pub"),
                  "--threshold", "2", "--packages", "news*")
    r.larder.must(*add, "ads", "--public-key", r.key("ads", ".pub"), "--packages", "ads-*",
                  "--keys-expire", "2020-01-01T00:00:00Z")
    check("1: before the teams claim, the old index stays (signed by the one key, no delegations)",
          "delegations" not in r.index())
    claim = ["delegate", "claim", "--repo", r.repo, "--index-key", r.key("root"), "--json"]
    r.larder.must(*claim, "--key", r.key("pay"))
    r.larder.must(*claim, "--key", r.key("shop1"))
    out = json.loads(r.larder.must(*claim, "--key", r.key("news1"), "--co-sign", r.key("news2")))
    check("1: the last claim composes the index (%s)" % out.get("serial"), out.get("composed") is True, json.dumps(out))
    r.larder.must("delegate", "role", "index", "--repo", r.repo, "--key", r.key("root"),
                  "--public-key", r.key("online", ".pub"), "--index-key", r.key("online"))
    v = r.verify()
    check("1: verify follows the chain from root 1 and checks every part", v.returncode == 0, v.stdout + v.stderr)
    time.sleep(1.5)
    all_sync(r, devices, "1: after delegation", {"pay-card": "1.0.0", "shop": "1.0.0", "news": "1.0.0"})
    roots = {d: r.held_root(d) for d in devices}
    newest = r.index()["delegations"]["root"]["version"]
    check("1: every device follows root %d" % newest, all(v == newest for v in roots.values()), json.dumps(roots))


def part_serials(r):
    return {p["team"]: p["serial"] for p in r.index()["delegations"]["parts"]}


def scenario_publishing(r, devices):
    say("-- 2. a team publishes alone; 3. two teams at once")
    before = part_serials(r)
    r.larder.must(*r.pack("pay-card", "1.1.0", "pay"))
    after = part_serials(r)
    check("2: pay's part grows by one, the others' are untouched (%s -> %s)" % (before, after),
          after["pay"] == before["pay"] + 1 and all(after[t] == before[t] for t in before if t != "pay"))
    time.sleep(1.5)
    all_sync(r, devices, "2", {"pay-card": "1.1.0", "shop": "1.0.0", "news": "1.0.0"})
    procs = [subprocess.Popen([r.larder.binary] + r.pack(pid, "1.1.0", key, co=co), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=r.larder.env)
             for pid, key, co in (("shop", "shop1", ()), ("news", "news1", ("news2",)))]
    outs = [p.communicate(timeout=120) + (p.returncode,) for p in procs]
    check("3: shop and news pack at the same time, both succeed",
          all(rc == 0 for _, _, rc in outs), json.dumps([(o[-400:], e[-400:], rc) for o, e, rc in outs]))
    ids = {e["id"]: e["version"] for e in r.index()["packages"]}
    check("3: the index names both new releases (%s)" % ids, ids.get("shop") == "1.1.0" and ids.get("news") == "1.1.0")
    time.sleep(1.5)
    all_sync(r, devices, "3", {"pay-card": "1.1.0", "shop": "1.1.0", "news": "1.1.0"})


def scenario_rotations(r, devices):
    say("-- 4. a team key rotates; 5. the root rotates")
    before = part_serials(r)
    add = ["delegate", "add", "pay", "--repo", r.repo, "--key", r.key("root"), "--index-key", r.key("online"),
           "--packages", "pay-*"]
    r.larder.must(*add, "--public-key", r.key("pay", ".pub"), "--public-key", r.key("pay2", ".pub"))
    r.larder.must(*r.pack("pay-card", "1.2.0", "pay2"))
    r.larder.must(*add, "--public-key", r.key("pay2", ".pub"))
    r.larder.must(*r.pack("pay-card", "1.2.1", "pay2"))
    refused = r.larder.run(*r.pack("pay-card", "1.3.0", "pay"))
    check("4: the old pay key can no longer publish (exit %d)" % refused.returncode, refused.returncode == 1,
          refused.stderr[-300:])
    after = part_serials(r)
    check("4: shop's and news's parts were not re-signed (%s -> %s)" % (before, after),
          after["shop"] == before["shop"] and after["news"] == before["news"])
    time.sleep(1.5)
    all_sync(r, devices, "4", {"pay-card": "1.2.1", "shop": "1.1.0", "news": "1.1.0"})
    r.larder.must("delegate", "role", "root", "--repo", r.repo, "--key", r.key("root"), "--co-sign", r.key("root2"),
                  "--public-key", r.key("root2", ".pub"), "--index-key", r.key("online"))
    newest = r.index()["delegations"]["root"]["version"]
    time.sleep(1.5)
    all_sync(r, devices, "5: after the root rotation", {"pay-card": "1.2.1"})
    check("5: devices follow root %d" % newest, all(r.held_root(d) == newest for d in devices))
    r.join("late-old-key", r.varnish.base, key="root")
    r.join("late-new-key", r.varnish.base, key="root2")
    all_sync(r, ["late-old-key", "late-new-key"], "5: new devices configured with the old and the new root key",
             {"pay-card": "1.2.1", "shop": "1.1.0", "news": "1.1.0"})
    v = r.verify("root")
    check("5: verify with the old root key walks every root", v.returncode == 0, v.stdout + v.stderr)


def scenario_sharded_encrypted(r, devices):
    say("-- 6. a sharded index and an encrypted package under delegations")
    r.larder.must(*r.pack("shop.mini", "1.0.0", "shop1", "--install", "on-demand", "--index-layout", "sharded"))
    r.larder.must(*r.pack("news-secret", "1.0.0", "news1", "--encrypt-to", r.key("device", ".pub"),
                          co=("news2",)))
    index = r.index()
    check("6: the composed index is sharded and names the teams' parts",
          index.get("schemaVersion") == 2 and "shards" in index and "delegations" in index)
    time.sleep(1.5)
    all_sync(r, devices, "6", {"news-secret": "1.0.0", "shop": "1.1.0"})
    rc, doc, res = r.larder.json("fetch", "shop.mini", "--root", r.device(devices[0]), "--progress", "none")
    check("6: the on-demand package in a shard is fetched at first use (exit %d)" % rc,
          rc == 0 and r.versions(devices[0]).get("shop.mini") == "1.0.0", res.stdout[-300:] + res.stderr[-300:])
    v = r.verify("root2")
    check("6: verify checks the shards against the parts", v.returncode == 0, v.stdout + v.stderr)
    r.larder.must("keygen", "--recipient", "--out", r.key("device2", ""))
    wrap = ["rewrap", "--repo", r.repo, "--recipient-key", r.key("device"), "--encrypt-to", r.key("device", ".pub"),
            "--encrypt-to", r.key("device2", ".pub"), "--index-key", r.key("online")]
    refused = r.larder.run(*wrap, "--key", r.key("shop1"), "--id", "news-secret")
    check("6: shop's key cannot rewrap news's package (exit %d, delegation-outside)" % refused.returncode,
          refused.returncode == 1 and "delegation-outside" in refused.stderr, refused.stderr[-300:])
    before = part_serials(r)
    r.larder.must(*wrap, "--key", r.key("news1"), "--co-sign", r.key("news2"))
    after = part_serials(r)
    check("6: news rewraps its encrypted package: its part only (%s -> %s)" % (before, after),
          after["news"] == before["news"] + 1 and all(after[t] == before[t] for t in before if t != "news"))
    time.sleep(1.5)
    all_sync(r, devices, "6: after the rewrap", {"news-secret": "1.0.0", "shop": "1.1.0"})


class Forger:
    """Writes documents as an attacker holding some keys would: signed with Python's Ed25519."""

    def __init__(self, r):
        self.r = r

    def sign(self, data, names):
        out = []
        for n in names:
            with open(self.r.key(n)) as f:
                kf = json.load(f)
            k = Ed25519PrivateKey.from_private_bytes(base64.b64decode(kf["key"]))
            out.append({"algorithm": "ed25519", "keyId": kf["keyId"],
                        "signature": base64.b64encode(k.sign(data)).decode()})
        return out

    def write(self, rel, data):
        path = os.path.join(self.r.repo, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)

    def part(self, team, serial, packages, signers):
        data = canonical({"packages": packages, "schemaVersion": 1, "serial": serial, "team": team})
        rel = "parts/%s/%d.json" % (team, serial)
        self.write(rel, data)
        return {"part": {"path": rel, "sha256": sha(data), "size": len(data)}, "serial": serial,
                "signatures": self.sign(data, signers), "team": team}

    def index(self, rows, signers=("online",), root=None):
        """An index listing exactly the rows' parts' entries, signed by `signers`."""
        index = self.r.index()
        packages = []
        for row in rows:
            with open(os.path.join(self.r.repo, row["part"]["path"])) as f:
                packages += json.load(f)["packages"]
        index.update(schemaVersion=1, serial=index["serial"] + 1, packages=sorted(
            packages, key=lambda e: (e["id"], e.get("channel", "stable"))))
        index.pop("shards", None)
        index["delegations"] = {"root": root or index["delegations"]["root"], "parts": rows}
        data = canonical(index)
        sig = {"index": {"sha256": sha(data), "size": len(data)}, "root": index["delegations"]["root"],
               "schemaVersion": 1, "signatures": self.sign(data, signers)}
        self.write("indexes/%s.json" % sha(data), data)
        self.write("index.json.sig", canonical(sig))
        self.write("index.json", data)


def rows_of(r):
    return {row["team"]: row for row in r.index()["delegations"]["parts"]}


def scenario_hostile(r):
    say("-- 7. hostile repositories (a device on the origin)")
    r.join("h", r.nginx.base, key="root2")
    rc, _, res = r.sync("h")
    if rc != 0:
        raise SetupError("the hostile scenarios' device could not sync: %s" % res.stderr[-400:])
    keep = os.path.join(r.work, "repo-good")
    shutil.copytree(r.repo, keep)
    f = Forger(r)
    rows = rows_of(r)
    with open(os.path.join(r.repo, rows["pay"]["part"]["path"])) as fp:
        pay_entries = json.load(fp)["packages"]
    evil = dict(pay_entries[0], id="pay-evil")
    shop_serial = rows["shop"]["serial"]

    def with_rows(**replaced):
        return [replaced.get(t, rows.get(t)) for t in sorted(set(rows) | set(replaced))]

    def shop_entries():
        with open(os.path.join(r.repo, rows["shop"]["part"]["path"])) as fp:
            return json.load(fp)["packages"]

    def older_pay():
        path = "parts/pay/%d.json" % (rows["pay"]["serial"] - 1)
        with open(os.path.join(r.repo, path), "rb") as fp:
            data = fp.read()
        with open(os.path.join(r.repo, path + ".sig")) as fp:
            sigs = json.load(fp)["signatures"]
        return dict(rows["pay"], serial=rows["pay"]["serial"] - 1,
                    part={"path": path, "sha256": sha(data), "size": len(data)}, signatures=sigs)

    def edited_pay():
        with open(os.path.join(r.repo, rows["pay"]["part"]["path"])) as fp:
            doc = json.load(fp)
        doc["packages"][0]["routes"] = ["https://evil.example/"]
        data = canonical(doc)
        f.write(rows["pay"]["part"]["path"], data)
        return dict(rows["pay"], part=dict(rows["pay"]["part"], sha256=sha(data), size=len(data)))

    def forged_root():
        with open(os.path.join(r.repo, "root.json")) as fp:
            root = json.load(fp)
        with open(r.key("evil", ".pub")) as fp:
            evil_pub = json.load(fp)
        root["version"] += 1
        root["keys"].append({"keyId": evil_pub["keyId"], "type": "ed25519-public", "key": evil_pub["key"]})
        root["roles"]["root"] = {"keyIds": [evil_pub["keyId"]], "threshold": 1}
        data = canonical(root)
        rel = "roots/%d.json" % root["version"]
        f.write(rel + ".sig", canonical({"schemaVersion": 1, "signatures": f.sign(data, ["evil"])}))
        f.write(rel, data)
        f.index(with_rows(), root={"version": root["version"], "size": len(data), "sha256": sha(data)})

    cases = [
        ("a team key signing a package outside its patterns", "delegation-outside",
         lambda: f.index(with_rows(shop=f.part("shop", shop_serial + 1, shop_entries() + [evil], ["shop1"])))),
        ("fewer signatures than the team's threshold (news: 2)", "delegation-threshold",
         lambda: f.index(with_rows(news=dict(rows["news"], signatures=rows["news"]["signatures"][:1])))),
        ("a revoked key", "delegation-key-revoked", None),
        ("an expired team key", "delegation-key-expired",
         lambda: f.index(with_rows(ads=f.part("ads", 1, [dict(evil, id="ads-x")], ["ads"])))),
        ("a team part older than the one accepted", "delegation-part-rollback",
         lambda: f.index(with_rows(pay=older_pay()))),
        ("a composition naming a part that is not the one signed", "delegation-part-mismatch",
         lambda: f.index(with_rows(pay=edited_pay()))),
        ("a root change not signed by the old root's keys", "delegation-root", forged_root),
        ("an index signed by a team key instead of the index key", "delegation-threshold",
         lambda: f.index(with_rows(), signers=("pay2",))),
    ]
    before_versions, before_root = r.versions("h"), r.held_root("h")
    for label, code, forge in cases:
        if forge is None:  # the revocation is a real root change, then a part signed by that key
            r.larder.must("delegate", "revoke-key", json.load(open(r.key("shop2", ".pub")))["keyId"], "--repo",
                          r.repo, "--key", r.key("root2"), "--index-key", r.key("online"))
            rc, _, res = r.sync("h")
            before_versions, before_root = r.versions("h"), r.held_root("h")
            shutil.rmtree(keep)  # the revocation is part of the good repository from now on
            shutil.copytree(r.repo, keep)
            rows = rows_of(r)
            forge = (lambda: f.index(with_rows(shop=f.part("shop", rows["shop"]["serial"] + 1, shop_entries(),
                                                            ["shop2"]))))
            shop_serial = rows["shop"]["serial"]
        forge()
        rc, doc, res = r.sync("h")
        got = ((doc or {}).get("error") or {}).get("code")
        check("7: %s: refused with %s (exit %d, %s)" % (label, code, rc, got), rc == 1 and got == code,
              res.stdout[-300:] + res.stderr[-300:])
        check("7: %s: the device keeps its versions and root %s" % (label, before_root),
              r.versions("h") == before_versions and r.held_root("h") == before_root)
        shutil.rmtree(r.repo)
        shutil.copytree(keep, r.repo)
    rc, _, res = r.sync("h")
    check("7: with the repository restored the device syncs again (exit %d)" % rc, rc == 0, res.stderr[-300:])


def main():
    started = time.time()
    larder = ls.Larder(ls.larder_binary(), timeout=120)
    work = ls.scratch_dir("larder-delegations.")
    keep = os.environ.get("DELEGATIONS_KEEP") == "1"
    r = None
    try:
        r = Repo(work, larder)
        devices = ["d%d" % i for i in range(EDGE_DEVICES)]
        scenario_migration(r, devices)
        scenario_publishing(r, devices)
        scenario_rotations(r, devices)
        scenario_sharded_encrypted(r, devices)
        scenario_hostile(r)
        bad = [x for x in r.nginx.since(0) if x["status"] >= 500]
        check("the origin answered no request with 5xx", not bad, json.dumps(bad[:5]))
    except SetupError as e:
        CHECKS.setup_failed(e)
    except Exception:
        check("the script ran to its end", False, traceback.format_exc())
    finally:
        if r is not None:
            if r.varnish is not None:
                r.varnish.stop()
            r.nginx.stop()
    if keep or CHECKS.failed:
        say("delegations: kept %s" % work)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return CHECKS.finish(started)


if __name__ == "__main__":
    sys.exit(main())
