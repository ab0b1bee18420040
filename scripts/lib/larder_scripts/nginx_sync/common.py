"""What nginx-sync's scenarios share: the checks, a scenario's heading, nginx log and index
helpers."""
import hashlib
import json
import os
import time

import larder_scripts as ls
from larder_scripts import say

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
