"""The cases of scripts/integration/faults.py: hostile indexes, torn pairs and HTTP faults, each
with the rules it gives the fault origin, the outcome expected and the extra checks on the
origin's log (faults.py's docstring says what the run proves)."""
import json
import os
import urllib.request

PKG = "sample-app"
OLD, NEW = "1.0.0", "2.0.0"
BUNDLE = "packages/%s/%s/bundle.zip" % (PKG, NEW)
FILES = "packages/%s/%s/files.json" % (PKG, NEW)
SYNC_LIMIT = 30.0



# Reasons of package-level failures are descriptions (the report has no code per package), so
# each expected code is matched by the wording FetchError/SyncError give it.
REASONS = {
    "http-status": r"the server answered \d+",
    "hash-mismatch": r"sha256 [0-9a-f]{64}, expected [0-9a-f]{64}",
    "too-large": r"more than the \d+ bytes declared or allowed",
    "bad-range": r"Content-Range .* does not continue at byte \d+",
    "bad-range-total": r"Content-Range total \d+, expected \d+",
    "redirect": r"redirect",
    "truncated": r"ended after \d+ of \d+ bytes",
    "too-slow": r"bytes/s|deadline",
    "file-list": r"does not match the size and sha256 the index declares",
    "gzip-trailing": r"data follows the end of the gzip stream",
    "gzip": r"gzip|inflate|deflate|sha256",
    "connection": r"transfer closed|connection|network",
}


class Case:
    def __init__(self, name, rules, expect, variant="b", slow=False, checks=(), limit=SYNC_LIMIT, timeout=120, runs=1,
                 prepare=None):
        self.name, self.rules, self.expect, self.variant = name, rules, expect, variant
        # fn(sandbox, index URL of the case's lane): changes the sandbox before the faulty sync.
        self.prepare = prepare
        self.slow, self.checks, self.limit, self.timeout = slow, list(checks), limit, timeout
        # The faulty sync is run this many times (a fault that stays): every run must end the
        # same way, which catches outcomes that depend on timing.
        self.runs = runs


def R(path, fault, count=1, **params):
    """A rule for one case. index.json's rules apply to it alone (exact), not to index.json.sig,
    unless exact=False is given (a whole publication replayed: both files)."""
    r = {"path": path, "fault": fault, "count": count}
    if path in ("index.json", "index.json.sig"):
        r["exact"] = True
    r.update({k.replace("_", "-"): v for k, v in params.items()})
    return r


OK = ("ok",)


def INDEX(code, message=None):
    return ("index", code, message)


def PACKAGE(code):
    return ("package", code)


# Extra checks on the origin's log of the case's lane: fn(log, base) -> [(ok, text)].


DRIP_RATE = 4  # bytes a second, in pieces of this size


def zeroed_part(sb, index_url):
    """The new bundle's part file at its full size holding zeros: what a power cut leaves when the
    file's size reached the disk and its data did not."""
    with urllib.request.urlopen(index_url, timeout=10) as r:
        index = json.load(r)
    e = [p for p in index["packages"] if p["id"] == PKG and p["version"] == NEW][0]["bundle"]
    downloads = os.path.join(sb, "downloads")
    os.makedirs(downloads, exist_ok=True)
    with open(os.path.join(downloads, "%s-%s-%s.zip.part" % (PKG, NEW, e["sha256"][:16])), "wb") as f:
        f.write(bytes(e["size"]))


def fetched_whole_once(log, base):
    got = [e for e in log if BUNDLE in e["path"]]
    return [(len(got) == 1 and not got[0]["range"] and got[0]["status"] == 200,
             "the bundle fetched once more, whole (no Range): %s" % summary(log))]


def resumed_at_cut(log, base):
    cut = [e for e in log if e["fault"] in ("truncate", "drip", "stall", "length-less") and BUNDLE in e["path"]]
    ranges = [e for e in log if e["range"] and BUNDLE in e["path"]]
    if not cut or not ranges:
        return [(False, "a Range request followed the cut (requests: %s)" % summary(log))]
    first = cut[0]
    at = first["sent"] if first["fault"] != "length-less" else first["declared"]  # what the client accepted
    got = ranges[0]["range"]
    # A drip the client abandons (the floor) can have one piece in flight when the connection
    # closes: sent by the origin, never received; the client then resumes one piece earlier.
    slack = DRIP_RATE if first["fault"] == "drip" else 0
    ok = any(got == "bytes=%d-" % (at - k) for k in range(slack + 1)) and ranges[0]["status"] == 206
    return [(ok, "resumed with Range %s after the %s cut at byte %d%s, answered %d" % (
        got, first["fault"], at, " (less one piece in flight, %d bytes, at most)" % slack if slack else "",
        ranges[0]["status"]))]


def range_ignored(log, base):
    hits = [e for e in log if e["fault"] == "range-ignore"]
    ok = bool(hits) and hits[0]["status"] == 200 and hits[0]["range"]
    return [(ok, "the Range request (%s) got a 200 with the whole body, and the restarted download verified" % (hits[0]["range"] if hits else "none"))]


def nothing_from_other_host(log, base):
    other = [e for e in log if e["host"] != "127.0.0.1"]
    return [(not other, "no request reached the other host (%d did)" % len(other))]


def retry_after_honoured(log, base):
    idx = [e for e in log if e["path"] == base + "index.json"]
    if len(idx) < 2 or idx[0]["status"] != 429:
        return [(False, "a retry followed the 429 (%s)" % summary(log))]
    gap = idx[1]["t"] - idx[0]["t"]
    return [(gap >= 0.9, "retried %.2f s after the 429 with Retry-After: 1" % gap)]


def copy_fetched(log, base):
    copies = [e for e in log if e["path"].startswith(base + "indexes/") and e["status"] == 200]
    return [(len(copies) == 1, "the index copy the signature names was fetched (%s)" % summary(log))]


def fresh_pair_fetched(log, base):
    fresh = [e["path"].split("?")[0] for e in log if "?larder-fresh=" in e["path"] and e["status"] == 200]
    return [(sorted(p[len(base):] for p in fresh) == ["index.json", "index.json.sig"],
             "the pair was fetched again with a query no cache has seen (%s)" % summary(log))]


def nothing_downloaded(log, base):
    got = [e for e in log if "/packages/" in e["path"] or "/objects/" in e["path"]]
    return [(not got, "nothing fetched past the refused index (%d requests)" % len(got))]


def summary(log):
    return ", ".join("%s%s→%d%s" % (e["path"].split("/")[-1], " [%s]" % e["range"] if e["range"] else "", e["status"],
                                     " (%s)" % e["fault"] if e["fault"] else "") for e in log)


def cases():
    idx = "index.json"
    sig = "index.json.sig"
    c = [
        Case("healthy", [], OK),
        # index-level, transient: the client retries
        Case("index-503-once", [R(idx, "status", status=503)], OK),
        Case("index-429-once", [R(idx, "status", status=429, retry_after=1)], OK, checks=[retry_after_honoured]),
        Case("index-500-once", [R(idx, "status", status=500)], OK),
        Case("index-truncate-once", [R(idx, "truncate")], OK),
        Case("sig-503-once", [R(sig, "status", status=503)], OK),
        Case("index-drip-once", [R(idx, "drip", rate=DRIP_RATE)], OK, slow=True),
        Case("index-stall-once", [R(idx, "stall", seconds=60)], OK, slow=True),
        Case("index-redirect-same-host", [R(idx, "redirect", count=2)], OK),
        # index-level, refused
        Case("index-503-always", [R(idx, "status", count=-1, status=503)], INDEX("http-status"), checks=[nothing_downloaded]),
        Case("index-500-always", [R(idx, "status", count=-1, status=500)], INDEX("http-status"), checks=[nothing_downloaded]),
        Case("index-length-more-always", [R(idx, "length-more", count=-1)], INDEX("connection"), checks=[nothing_downloaded]),
        # an index that is not the one the signature names (cut short, corrupted, or an edge's
        # stale copy): the immutable copy the signature names serves instead
        Case("index-length-less-once", [R(idx, "length-less")], OK, checks=[copy_fetched]),
        Case("index-flipped", [R(idx, "flip")], OK, checks=[copy_fetched]),
        Case("index-stale-at-edge", [R(idx, "serve-from", count=-1, dir="@b-s2")], OK, checks=[copy_fetched]),
        # ... and without that copy: the pair again past any cache (a query no cache has seen)
        Case("index-stale-no-copy", [R(idx, "serve-from", count=1, dir="@b-s2"), R("indexes/", "status", status=404)], OK,
             checks=[fresh_pair_fetched]),
        # still torn: index-torn, not a signature error, and nothing downloaded
        Case("index-torn-always", [R(idx, "flip", count=-1), R("indexes/", "status", count=-1, status=404)],
             INDEX("index-torn"), checks=[nothing_downloaded]),
        Case("sig-flipped", [R(sig, "flip", offset=-30)], INDEX("signature"), checks=[nothing_downloaded]),
        Case("index-longer-than-limit", [R(idx, "extra", extra=17 << 20)], INDEX("too-large"), checks=[nothing_downloaded]),
        Case("index-redirect-loop", [R(idx, "redirect-loop", count=-1)], INDEX("redirect", "redirects"), checks=[nothing_downloaded], runs=5),
        Case("index-redirect-other-host", [R(idx, "redirect-host", count=-1)], INDEX("redirect", "another host"),
             checks=[nothing_from_other_host, nothing_downloaded], runs=5),
        Case("index-untrusted-key", [R(idx, "serve-from", count=-1, dir="@b-rogue", exact=False)], INDEX("signature"),
             checks=[nothing_downloaded]),
        Case("index-lower-serial", [R(idx, "serve-from", count=-1, dir="@b-s1", exact=False)], INDEX("rollback-attack"),
             checks=[nothing_downloaded]),
        Case("index-serial-reused", [R(idx, "serve-from", count=-1, dir="@b-reused", exact=False)], INDEX("serial-reused"),
             checks=[nothing_downloaded]),
        Case("index-expired", [R(idx, "serve-from", count=-1, dir="@b-expired", exact=False)], INDEX("index-expired"),
             checks=[nothing_downloaded]),
        # the file list
        # (A rule's path is a prefix: FILES also matches files.json.gz, which a device asks for
        # first, falling back to files.json when the gzip fails.)
        Case("files-503-once", [R(FILES, "status", status=503)], OK),
        Case("files-gzip-flipped", [R(FILES + ".gz", "flip")], OK),
        Case("files-flipped", [R(FILES, "flip", count=2)], PACKAGE("file-list")),
        # the bundle, transient
        Case("bundle-500-once", [R(BUNDLE, "status", status=500)], OK),
        Case("bundle-429-once", [R(BUNDLE, "status", status=429, retry_after=1)], OK),
        Case("bundle-truncate-once", [R(BUNDLE, "truncate")], OK, checks=[resumed_at_cut]),
        Case("bundle-length-less-once", [R(BUNDLE, "length-less")], OK, checks=[resumed_at_cut]),
        Case("bundle-length-more", [R(BUNDLE, "length-more")], PACKAGE("too-large")),
        Case("bundle-range-ignored", [R(BUNDLE, "truncate"), R(BUNDLE, "range-ignore")], OK, checks=[range_ignored]),
        Case("bundle-drip-once", [R(BUNDLE, "drip", rate=DRIP_RATE)], OK, slow=True, checks=[resumed_at_cut]),
        Case("bundle-stall-once", [R(BUNDLE, "stall", seconds=60)], OK, slow=True),
        Case("bundle-redirect-same-host", [R(BUNDLE, "redirect")], OK),
        # a part file a power cut left at full size with zeros: fetched again, not blamed on the server
        Case("bundle-part-zeroed", [], OK, prepare=zeroed_part, checks=[fetched_whole_once]),
        # the bundle, refused
        Case("bundle-503-always", [R(BUNDLE, "status", count=-1, status=503)], PACKAGE("http-status")),
        Case("bundle-404", [R(BUNDLE, "status", status=404)], PACKAGE("http-status")),
        Case("bundle-truncate-always", [R(BUNDLE, "truncate", count=-1)], PACKAGE("connection")),
        Case("bundle-length-less-always", [R(BUNDLE, "length-less", count=-1)], PACKAGE("truncated")),
        Case("bundle-bad-content-range", [R(BUNDLE, "truncate"), R(BUNDLE, "bad-content-range")], PACKAGE("bad-range")),
        Case("bundle-wrong-range-total", [R(BUNDLE, "truncate"), R(BUNDLE, "bad-content-range", total=99999)], PACKAGE("bad-range-total")),
        Case("bundle-longer-unlabelled", [R(BUNDLE, "extra", extra=4096, no_length=True)], PACKAGE("too-large")),
        Case("bundle-flipped", [R(BUNDLE, "flip")], PACKAGE("hash-mismatch")),
        Case("bundle-flipped-after-resume", [R(BUNDLE, "truncate"), R(BUNDLE, "flip", offset=5)], PACKAGE("hash-mismatch")),
        Case("bundle-longer-than-index", [R(BUNDLE, "extra", extra=64)], PACKAGE("too-large")),
        Case("bundle-redirect-loop", [R(BUNDLE, "redirect-loop", count=-1)], PACKAGE("redirect"), runs=5),
        Case("bundle-redirect-other-host", [R(BUNDLE, "redirect-host", count=-1)], PACKAGE("redirect"), checks=[nothing_from_other_host], runs=5),
        # objects (the o/ repository: the update is one object)
        Case("object-healthy", [], OK, variant="o"),
        Case("object-500-once", [R("objects/", "status", status=500)], OK, variant="o"),
        Case("object-truncate-once", [R("objects/", "truncate")], OK, variant="o"),
        Case("object-range-ignored", [R("objects/", "truncate"), R("objects/", "range-ignore")], OK, variant="o", checks=[range_ignored]),
        Case("object-flipped", [R("objects/", "flip")], PACKAGE("gzip"), variant="o"),
        # The list gives each object's exact size (packed): bytes past it are refused as they
        # arrive, before the gzip reader would refuse them as trailing data.
        Case("object-trailing-junk", [R("objects/", "extra", extra=64)], PACKAGE("too-large"), variant="o"),
        Case("object-longer-than-limit", [R("objects/", "extra", extra=1 << 20)], PACKAGE("too-large"), variant="o"),
        Case("object-redirect-other-host", [R("objects/", "redirect-host", count=-1)], PACKAGE("redirect"), variant="o",
             checks=[nothing_from_other_host], runs=5),
    ]
    if os.environ.get("FAULTS_SLOW") == "1":
        # A server that never finishes: the sync gives up within its attempts (5) × the stall
        # timeout (20 s) plus backoff, not within SYNC_LIMIT.
        never = 5 * 20 + 30
        c += [
            Case("bundle-drip-always", [R(BUNDLE, "drip", count=-1, rate=DRIP_RATE)], PACKAGE("too-slow"), slow=True, timeout=400, limit=never),
            Case("bundle-stall-always", [R(BUNDLE, "stall", count=-1, seconds=120)], PACKAGE("too-slow"), slow=True, timeout=400, limit=never),
            Case("index-stall-always", [R(idx, "stall", count=-1, seconds=120)], INDEX("too-slow"), slow=True, timeout=400, limit=never),
        ]
    return c


# ---- running one case
