#!/usr/bin/env python3
"""Validates the repository-format examples in manifests/ against their JSON Schemas.

  scripts/tools/check-manifests.py

- every file in manifests/examples/ must validate against its schema
  (index.json, files.json, index.json.sig, key.pub, delta.json);
- every file in manifests/examples/invalid/ must FAIL its schema, picked by name prefix
  (index-*.json, files-*.json, signature-*.json, key-*.json, delta-*.json);
- the examples must agree with each other: key id = sha256(key)[:16], the signature verifies
  (with Python's `cryptography`), index.json's reference to files.json has its size and
  sha256, files.json is sorted and collision-free, and every example is in the canonical JSON
  form that ManifestCoding writes;
- the delegation examples (root.json, part.json, index-delegated.json and their signature files,
  root-*.json and part-*.json invalid, manifests §18) agree too: root key ids, the root's role and
  team rules that the schema cannot state, the root's and the index's signatures by their roles'
  thresholds, the names of the root and the part, the team's signatures over the part, and the
  part's entries within the team's patterns and in the index.

Prints one line per check and exits 1 on any surprise. Needs a Python 3 with `jsonschema` and
`cryptography`: when the python3 running it lacks them, it runs again under $PYTHON or Debian's
/usr/bin/python3, whichever has them; when none has, Debian's python3-jsonschema and
python3-cryptography are installed first (as scripts/bootstrap does). A signature that cannot
be checked is a failure, not a skip.
"""
import base64
import fnmatch
import hashlib
import importlib.util
import json
import os
import re
import sys
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import larder_scripts as ls  # noqa: E402  (found through the line above)

ls.NAME = "check-manifests"
if not all(importlib.util.find_spec(m) for m in ("jsonschema", "cryptography")):
    # Another interpreter has them (common.sh's ensure_python_modules: installed if none has).
    try:
        python = ls.python_with_modules()
    except ls.SetupError as e:
        ls.die(str(e))
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        ls.die("%s does not import jsonschema and cryptography after scripts/bootstrap" % python)
    os.execv(python, [python] + sys.argv)
import jsonschema  # noqa: E402
from jsonschema import Draft202012Validator, ValidationError  # noqa: E402

manifests = os.path.join(ls.CHECKOUT, "manifests")
examples = os.path.join(manifests, "examples")
invalid_dir = os.path.join(examples, "invalid")

VALID = {  # example file -> schema
    "index.json": "index.schema.json",
    "files.json": "files.schema.json",
    "index.json.sig": "signature.schema.json",
    "key.pub": "key.schema.json",
    "delta.json": "delta.schema.json",
    "index-sharded.json": "index.schema.json",
    "index-encrypted.json": "index.schema.json",
    "shard.json": "shard.schema.json",
    "catalog.json": "catalog.schema.json",
    "root.json": "root.schema.json",
    "root.json.sig": "signature.schema.json",
    "part.json": "part.schema.json",
    "index-delegated.json": "index.schema.json",
    "index-delegated.json.sig": "signature.schema.json",
    "index-telemetry.json": "index.schema.json",
    "index-rollout.json": "index.schema.json",
    "batch.json": "batch.schema.json",
}
INVALID_PREFIX = {  # invalid example prefix -> schema
    "batch-": "batch.schema.json",
    "index-": "index.schema.json",
    "files-": "files.schema.json",
    "signature-": "signature.schema.json",
    "key-": "key.schema.json",
    "delta-": "delta.schema.json",
    "shard-": "shard.schema.json",
    "catalog-": "catalog.schema.json",
    "root-": "root.schema.json",
    "part-": "part.schema.json",
}
MAX_DOCUMENT_BYTES = 16 << 20  # ManifestCoding.maxDocumentBytes

failures = 0


def report(ok, what, detail=""):
    global failures
    if not ok:
        failures += 1
    print(f"{'ok  ' if ok else 'FAIL'}  {what}{': ' + detail if detail else ''}")


class DocumentError(Exception):
    pass


def load(path):
    """Strict JSON: UTF-8, no duplicate keys (Foundation keeps the first, Python the last),
    no NaN/Infinity, at most maxDocumentBytes."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) > MAX_DOCUMENT_BYTES:
        raise DocumentError(f"{len(data)} bytes, readers accept at most {MAX_DOCUMENT_BYTES}")

    def pairs(items):
        obj = {}
        for k, v in items:
            if k in obj:
                raise DocumentError(f"duplicate key {k!r}")
            obj[k] = v
        return obj

    def constant(name):
        raise DocumentError(f"{name} is not JSON")

    try:
        return data, json.loads(data.decode("utf-8"), object_pairs_hook=pairs, parse_constant=constant)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DocumentError(f"not JSON: {e}") from None


def ecma_pattern(pattern):
    """JSON Schema patterns are ECMA-262 regexes, where `$` matches only at the very end. Python's
    `$` also matches before a final newline, so "sample-app\\n" would pass ^[a-z0-9]...$; use `\\Z`
    (outside character classes) instead."""
    out, i, in_class = [], 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if pattern[i + 1:i + 2] == "^":
                out.append("[^")
                i += 2
                if pattern[i:i + 1] == "]":  # a literal ']' first in the class
                    out.append("]")
                    i += 1
                continue
        elif c == "$":
            c = r"\Z"
        out.append(c)
        i += 1
    return re.compile("".join(out))


_compiled = {}
_pattern_names = {}  # pattern -> the definition or property that declares it, for short messages


def name_patterns(node, label="pattern"):
    if isinstance(node, dict):
        if isinstance(node.get("pattern"), str):
            _pattern_names.setdefault(node["pattern"], label)
        for key, value in node.items():
            if key in ("$defs", "properties") and isinstance(value, dict):
                for name, sub in value.items():
                    name_patterns(sub, name)
            else:
                name_patterns(value, label)
    elif isinstance(node, list):
        for value in node:
            name_patterns(value, label)


def pattern_keyword(validator, pattern, instance, schema):
    if not validator.is_type(instance, "string"):
        return
    regex = _compiled.get(pattern) or _compiled.setdefault(pattern, ecma_pattern(pattern))
    if not regex.search(instance):
        yield ValidationError(f"{instance!r} does not match the pattern of {_pattern_names.get(pattern, repr(pattern))}")


Validator = jsonschema.validators.extend(Draft202012Validator, {"pattern": pattern_keyword})

# ---------------------------------------------------------------- schemas
schemas, validators = {}, {}
for name in sorted(set(VALID.values())):
    path = os.path.join(manifests, name)
    try:
        _, schema = load(path)
        Draft202012Validator.check_schema(schema)
        schemas[name] = schema
        name_patterns(schema)
        validators[name] = Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
        report(True, f"manifests/{name}", "a valid draft 2020-12 schema")
    except (OSError, DocumentError, jsonschema.SchemaError) as e:
        report(False, f"manifests/{name}", str(e).splitlines()[0])

# Definitions repeated in several schemas (packageId, semanticVersion, ...) must not drift apart.
seen = {}
for name, schema in schemas.items():
    for key, value in schema.get("$defs", {}).items():
        seen.setdefault(key, []).append((name, value))
for key, uses in sorted(seen.items()):
    if len(uses) > 1:
        same = all(v == uses[0][1] for _, v in uses)
        report(same, f"$defs/{key}", ("identical in " if same else "differs between ") + ", ".join(n for n, _ in uses))


def first_error(name, doc):
    errors = sorted(validators[name].iter_errors(doc), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    e = errors[0]
    where = "/".join(str(p) for p in e.absolute_path) or "(top level)"
    return f"{where}: {e.message}"


# ---------------------------------------------------------------- valid examples
docs, raw = {}, {}
present = sorted(f for f in os.listdir(examples) if os.path.isfile(os.path.join(examples, f)))
for f in present:
    if f not in VALID:
        report(False, f"examples/{f}", f"no schema for this name (expected one of {', '.join(VALID)})")
for f, name in VALID.items():
    what = f"examples/{f}"
    if f not in present:
        report(False, what, "missing")
        continue
    if name not in validators:
        report(False, what, f"{name} did not load")
        continue
    try:
        raw[f], docs[f] = load(os.path.join(examples, f))
    except DocumentError as e:
        report(False, what, str(e))
        continue
    error = first_error(name, docs[f])
    report(error is None, what, error or f"valid ({name})")

# ---------------------------------------------------------------- invalid examples
bad = sorted(os.listdir(invalid_dir)) if os.path.isdir(invalid_dir) else []
covered = set()
for f in bad:
    what = f"examples/invalid/{f}"
    name = next((s for p, s in INVALID_PREFIX.items() if f.startswith(p) and f.endswith(".json")), None)
    if name is None:
        report(False, what, f"name must be <{'|'.join(p.rstrip('-') for p in INVALID_PREFIX)}>-*.json")
        continue
    if name not in validators:
        report(False, what, f"{name} did not load")
        continue
    covered.add(name)
    try:
        _, doc = load(os.path.join(invalid_dir, f))
    except DocumentError as e:
        report(False, what, f"{e} (an invalid example must be well-formed JSON that the schema refuses)")
        continue
    error = first_error(name, doc)
    report(error is not None, what, f"rejected, {error}" if error else f"ACCEPTED by {name}, expected a failure")
for name in sorted(set(INVALID_PREFIX.values()) - covered):
    report(False, f"examples/invalid/ for {name}", "no invalid example")


# ---------------------------------------------------------------- cross-checks
def canonical(v, indent=0):
    """ManifestCoding.encode's layout (Foundation JSONEncoder, sortedKeys + prettyPrinted +
    withoutEscapingSlashes): `"key" : value`, two spaces, empty containers as "[\\n\\n<indent>]"."""
    pad, end = "  " * (indent + 1), "  " * indent
    if isinstance(v, dict):
        if not v:
            return "{\n\n" + end + "}"
        items = (pad + json.dumps(k, ensure_ascii=False) + " : " + canonical(v[k], indent + 1) for k in sorted(v))
        return "{\n" + ",\n".join(items) + "\n" + end + "}"
    if isinstance(v, list):
        if not v:
            return "[\n\n" + end + "]"
        return "[\n" + ",\n".join(pad + canonical(x, indent + 1) for x in v) + "\n" + end + "]"
    return json.dumps(v, ensure_ascii=False)


for f in VALID:
    if f in docs:
        same = (canonical(docs[f]) + "\n").encode() == raw[f]
        report(same, f"examples/{f}", "canonical form" if same else "not in canonical form (sorted keys, '\"key\" : value', 2 spaces, final newline)")

if "key.pub" in docs:
    key = docs["key.pub"]
    try:
        raw_key = base64.b64decode(key["key"], validate=True)
        key_id = hashlib.sha256(raw_key).hexdigest()[:16]
        report(key_id == key["keyId"], "examples/key.pub keyId", f"sha256(key)[:16] = {key_id}")
    except (KeyError, ValueError) as e:
        report(False, "examples/key.pub keyId", str(e))

if "key.pub" in docs and "index.json.sig" in docs and "index.json" in raw:
    what = "examples/index.json.sig verifies over examples/index.json with examples/key.pub"
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    except ImportError as e:
        report(False, what, f"cannot be checked: {e} (scripts/bootstrap installs python3-cryptography)")
    else:
        pub = Ed25519PublicKey.from_public_bytes(base64.b64decode(docs["key.pub"]["key"]))
        mine = [s for s in docs["index.json.sig"]["signatures"] if s["keyId"] == docs["key.pub"]["keyId"]]
        try:
            if not mine:
                raise InvalidSignature("no signature by this key")
            for s in mine:
                pub.verify(base64.b64decode(s["signature"]), raw["index.json"])
            report(True, what)
        except InvalidSignature as e:
            report(False, what, str(e) or "signature does not match (index.json edited after signing?)")

if "index.json.sig" in docs and "index.json" in raw and "index" in docs["index.json.sig"]:
    named = docs["index.json.sig"]["index"]
    digest = hashlib.sha256(raw["index.json"]).hexdigest()
    report(named == {"sha256": digest, "size": len(raw["index.json"])},
           "examples/index.json.sig names examples/index.json", f"sha256 {digest[:12]}…, {len(raw['index.json'])} bytes")

if "index.json" in docs:
    index = docs["index.json"]
    pairs = [(p["id"], p.get("channel", "stable")) for p in index["packages"]]
    dupes = sorted({p for p in pairs if pairs.count(p) > 1})
    report(not dupes, "examples/index.json (id, channel) pairs", f"repeated: {dupes}" if dupes else "each at most once")
    wrong = [f"{p['id']}: {ref} path {p[ref]['path']}" for p in index["packages"] for ref, leaf in
             (("bundle", "bundle.zip"), ("files", "files.json")) if p[ref]["path"] != f"packages/{p['id']}/{p['version']}/{leaf}"]
    report(not wrong, "examples/index.json bundle/files paths", "; ".join(wrong) or "match packages/<id>/<version>/")

if "files.json" in docs:
    fl = docs["files.json"]
    paths = [e["path"] for e in fl["files"]]
    ordered = paths == sorted(paths, key=lambda p: p.encode("utf-8"))
    keys = [unicodedata.normalize("NFC", unicodedata.normalize("NFC", p).lower()) for p in paths]
    unique = len(set(keys)) == len(keys)
    nfc = all(unicodedata.normalize("NFC", p) == p for p in paths)
    report(ordered and unique and nfc, "examples/files.json paths",
           "sorted by UTF-8 bytes, NFC, no duplicates or case/normalisation collisions" if ordered and unique and nfc
           else f"sorted={ordered} nfc={nfc} collision-free={unique}")
    if "index.json" in docs:
        entry = next((p for p in docs["index.json"]["packages"] if p["id"] == fl["id"] and p["version"] == fl["version"]), None)
        what = f"examples/index.json files ref of {fl['id']} {fl['version']}"
        if entry is None:
            report(False, what, "no such entry")
        else:
            ref, data = entry["files"], raw["files.json"]
            match = ref["size"] == len(data) and ref["sha256"] == hashlib.sha256(data).hexdigest()
            report(match, what, "size and sha256 of examples/files.json" if match else
                   f"expected size {len(data)} sha256 {hashlib.sha256(data).hexdigest()}")

if all(k in docs for k in ("index-sharded.json", "shard.json", "catalog.json")):
    # The sharded example names the shard and catalog examples by size and SHA-256, and each
    # sharded entry has its catalog row.
    refs = docs["index-sharded.json"]["shards"]
    for name, ref in (("shard.json", refs["files"][docs["shard.json"]["shard"]]), ("catalog.json", refs["catalog"])):
        data = raw[name]
        match = ref["size"] == len(data) and ref["sha256"] == hashlib.sha256(data).hexdigest()
        report(match, f"examples/index-sharded.json names examples/{name}",
               "size and sha256" if match else f"expected size {len(data)} sha256 {hashlib.sha256(data).hexdigest()}")
    rows = {(r["id"], r["channel"]) for r in docs["catalog.json"]["packages"]}
    missing = [e["id"] for e in docs["shard.json"]["packages"] if (e["id"], e.get("channel", "stable")) not in rows]
    report(not missing, "examples/shard.json entries have catalog rows", ", ".join(missing) or "each one")


def threshold_met(data, signatures, key_ids, keys, threshold):
    """How many distinct keys of `key_ids` (public keys by id in `keys`) signed `data` validly,
    and whether that reaches `threshold`; an invalid signature by one of them is a failure."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    good = set()
    for s in signatures:
        if s["keyId"] in key_ids and s["keyId"] in keys:
            pub = Ed25519PublicKey.from_public_bytes(base64.b64decode(keys[s["keyId"]]))
            try:
                pub.verify(base64.b64decode(s["signature"]), data)
            except InvalidSignature:
                return 0, False
            good.add(s["keyId"])
    return len(good), len(good) >= threshold


if all(k in docs for k in ("root.json", "root.json.sig", "part.json", "index-delegated.json",
                           "index-delegated.json.sig")):
    # The delegation examples (manifests §18): root keys named by their ids, the root signed by
    # its root keys' threshold, the index by its index keys', and the index naming the root and
    # the part, whose team's signatures in the index verify over its bytes.
    root, index, part = docs["root.json"], docs["index-delegated.json"], docs["part.json"]
    keys = {k["keyId"]: k["key"] for k in root["keys"]}
    wrong = [k["keyId"] for k in root["keys"]
             if hashlib.sha256(base64.b64decode(k["key"])).hexdigest()[:16] != k["keyId"]]
    report(not wrong, "examples/root.json keyIds", ", ".join(wrong) or "each sha256(key)[:16]")
    # RootDocument.problem's rules that the schema cannot state (all but the overlap of patterns).
    roles = [("root role", root["roles"]["root"]), ("index role", root["roles"]["index"])]
    roles += [(f"team {t['name']}", t) for t in root["teams"]]
    names = [t["name"] for t in root["teams"]]
    wrong = [f"keys: {k} listed twice" for k in sorted(keys) if [x["keyId"] for x in root["keys"]].count(k) > 1]
    wrong += [f"{what}: {', '.join(r['keyIds'])} threshold {r['threshold']}" for what, r in roles
              if not set(r["keyIds"]) <= set(keys) or len(set(r["keyIds"])) != len(r["keyIds"])
              or r["threshold"] > len(r["keyIds"])]
    wrong += [f"team {n} listed twice" for n in sorted(set(names)) if names.count(n) > 1]
    report(not wrong, "examples/root.json roles and teams", "; ".join(wrong) or
           "keys known and named once, thresholds reachable, team names unique")
    try:
        n, ok = threshold_met(raw["root.json"], docs["root.json.sig"]["signatures"], root["roles"]["root"]["keyIds"],
                              keys, root["roles"]["root"]["threshold"])
        report(ok, "examples/root.json.sig verifies over examples/root.json", f"{n} root key(s)")
        n, ok = threshold_met(raw["index-delegated.json"], docs["index-delegated.json.sig"]["signatures"],
                              root["roles"]["index"]["keyIds"], keys, root["roles"]["index"]["threshold"])
        report(ok, "examples/index-delegated.json.sig verifies with the root's index keys", f"{n} index key(s)")
        named = {"version": root["version"], "size": len(raw["root.json"]),
                 "sha256": hashlib.sha256(raw["root.json"]).hexdigest()}
        report(index["delegations"]["root"] == named and docs["index-delegated.json.sig"].get("root") == named,
               "examples/index-delegated.json and its signature file name examples/root.json", f"root {root['version']}")
        named = {"size": len(raw["index-delegated.json"]), "sha256": hashlib.sha256(raw["index-delegated.json"]).hexdigest()}
        report(docs["index-delegated.json.sig"].get("index") == named,
               "examples/index-delegated.json.sig names examples/index-delegated.json", f"{named['size']} bytes")
        wrong = [r["part"]["path"] for r in index["delegations"]["parts"]
                 if r["part"]["path"] != f"parts/{r['team']}/{r['serial']}.json"]
        report(not wrong, "examples/index-delegated.json part paths", ", ".join(wrong) or "parts/<team>/<serial>.json")
        row = next((r for r in index["delegations"]["parts"] if r["team"] == part["team"]), None)
        team = next((t for t in root["teams"] if t["name"] == part["team"]), None)
        if row is None or team is None:
            report(False, "examples/index-delegated.json names examples/part.json", f"no row or team {part['team']}")
        else:
            data = raw["part.json"]
            report(row["part"]["size"] == len(data) and row["part"]["sha256"] == hashlib.sha256(data).hexdigest()
                   and row["serial"] == part["serial"], "examples/index-delegated.json names examples/part.json",
                   "size, sha256 and serial")
            n, ok = threshold_met(data, row["signatures"], team["keyIds"], keys, team["threshold"])
            report(ok, f"team {team['name']}'s signatures in the index verify over examples/part.json", f"{n} key(s)")
            # A pattern is [a-z0-9._*-] only, so fnmatchcase's `*` is the pattern's and nothing else applies.
            owners = {e["id"]: [t["name"] for t in root["teams"] if t["role"] == "release"
                                and any(fnmatch.fnmatchcase(e["id"], p) for p in t["packages"])] for e in part["packages"]}
            wrong = [f"{i}: {', '.join(o) or 'no team'}" for i, o in owners.items() if o != [team["name"]]]
            report(not wrong and team["role"] == "release", "examples/part.json entries owned by team " + team["name"],
                   "; ".join(wrong) or "each id matched by its patterns only")
            listed = [e for e in index["packages"] if e["id"] in {p["id"] for p in part["packages"]}]
            report(listed == part["packages"], "examples/index-delegated.json lists examples/part.json's entries",
                   "equal" if listed == part["packages"] else "they differ")
    except ImportError as e:
        report(False, "delegation example signatures", f"cannot be checked: {e}")

print(f"{failures} surprise(s)" if failures else "all manifests checks passed")
sys.exit(1 if failures else 0)
