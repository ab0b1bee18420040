#!/usr/bin/env python3
"""Checks the module graph against the README's Layout table (between the module-graph markers):
  - every target's dependencies (from `swift package describe --type json`) are ones the table
    allows; a target missing from the table fails too;
  - only LarderArchive imports the C libraries (CArchive, CZlib, CZstd), and only LarderWebKitGTK
    imports WebKitGTK (CWebKitGTK);
  - only LarderGateway and LarderCollect (the telemetry collector) import Hummingbird (HTTPTypes, the HTTP value types — `HTTPRequest.Method`
    in the loader's, forwarder's and web-view driver's requests — goes wherever the table shows it);
  - only LarderFetchNIO and LarderGateway import AsyncHTTPClient and NIO (and LarderTestSupport,
    not a product, for the fault-injecting origin the test suites start); only
    LarderFetchURLSession imports FoundationNetworking;
  - each module's platform conditionals are in one file, a ladder ending in #error;
  - LarderResolve reaches neither LarderSync nor LarderFetch, even through another module.
Prints one line per check; exits 1 on any violation.

  scripts/tools/check-layout.py
"""
import json
import os
import re
import subprocess
import sys

CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.chdir(CHECKOUT)
# With the targets built only on request (LARDER_WEBKITGTK: WebKitGTK's glue and larder-webview).
described = subprocess.run(["swift", "package", "describe", "--type", "json"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True, env={**os.environ, "LARDER_WEBKITGTK": "1"})
if described.returncode != 0:
    sys.exit("check-layout: swift package describe --type json failed (exit %d)" % described.returncode)
desc = json.loads(described.stdout)
readme = open("README.md", encoding="utf-8").read()
m = re.search(r"<!-- module-graph[^>]*-->\n(.*?)<!-- end module-graph -->", readme, re.S)
if not m:
    sys.exit("check-layout: README.md has no module-graph table")
allowed = {}
for line in m.group(1).splitlines():
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) != 2 or cells[0] in ("module", "---") or set(cells[0]) <= set("- "):
        continue
    allowed[cells[0]] = {d.strip() for d in cells[1].split(",") if d.strip()}

problems = []
deps = {}
for t in desc["targets"]:
    if t.get("type") in ("test", "system-target"):
        continue
    name = t["name"]
    have = set(t.get("target_dependencies", [])) | set(t.get("product_dependencies", []))
    deps[name] = set(t.get("target_dependencies", []))
    if name not in allowed:
        problems.append(f"{name}: not in README's module-graph table")
        continue
    extra = sorted(have - allowed[name])
    if extra:
        problems.append(f"{name}: depends on {', '.join(extra)}, which README's module graph does not show")
print(f"ok   {len(deps)} product and executable targets checked against README's module graph"
      if not problems else f"FAIL module graph: {len(problems)} problem(s)")

def reach(start):
    seen, todo = set(), [start]
    while todo:
        for d in deps.get(todo.pop(), ()):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen

bad = sorted({"LarderSync", "LarderFetch"} & reach("LarderResolve"))
if bad:
    problems.append(f"LarderResolve reaches {', '.join(bad)}")
else:
    print("ok   LarderResolve reaches neither LarderSync nor LarderFetch")

def importers(modules):
    pat = re.compile(r"^\s*(?:@_exported\s+|@testable\s+)?import\s+(?:\w+\s+)?(" + "|".join(modules) + r")\b", re.M)
    found = {}
    for root, _, files in os.walk("Sources"):
        for f in files:
            if f.endswith(".swift"):
                path = os.path.join(root, f)
                for mod in pat.findall(open(path, encoding="utf-8").read()):
                    found.setdefault(path.split(os.sep)[1], set()).add(mod)
    return found

for modules, owners in ((["CArchive", "CZlib", "CZstd"], ["LarderArchive"]), (["CWebKitGTK"], ["LarderWebKitGTK"]),
                        (["Hummingbird"], ["LarderGateway", "LarderCollect"]),
                        (["AsyncHTTPClient", "NIOCore", "NIOHTTP1", "NIOPosix", "NIOSSL"], ["LarderFetchNIO", "LarderGateway", "LarderCollect", "LarderTestSupport", "larder-bench-nio"]),
                        (["SQLiteNIO", "PostgresNIO", "Mustache"], ["LarderCollect"]),
                        (["FoundationNetworking"], ["LarderFetchURLSession"])):
    owner = " and ".join([", ".join(owners[:-1]), owners[-1]] if len(owners) > 2 else owners)
    others = {k: v for k, v in importers(modules).items() if k not in owners}
    if others:
        for k, v in sorted(others.items()):
            problems.append(f"{k} imports {', '.join(sorted(v))}; only {owner} may")
    else:
        print(f"ok   only {owner} import{'s' if len(owners) == 1 else ''} {', '.join(modules)}")

# Platform conditionals: each module asks which platform it is built for in one file at most, and
# a ladder with more than one branch ends in `#error` for a platform it does not handle (a single
# `#if canImport(WebKit)` or `#if os(Linux)` around glue that exists on one platform only needs none).
PLATFORM = re.compile(r"^\s*#(?:if|elseif)\b.*\b(?:os\(|canImport\((?:Glibc|Darwin|Musl|WebKit|FoundationNetworking)\))", re.M)
by_module = {}
for root, _, files in os.walk("Sources"):
    for f in sorted(files):
        if f.endswith(".swift"):
            path = os.path.join(root, f)
            text = open(path, encoding="utf-8").read()
            if PLATFORM.search(text):
                by_module.setdefault(path.split(os.sep)[1], []).append((path, text))
spread = False
for module, found in sorted(by_module.items()):
    if len(found) > 1:
        spread = True
        problems.append(f"{module}: platform conditionals in {len(found)} files ({', '.join(p for p, _ in found)}); "
                        "gather them in one file")
    for path, text in found:
        ladders = len(re.findall(r"^\s*#elseif\b", text, re.M))
        if ladders and "#error" not in text:
            spread = True
            problems.append(f"{path}: a platform ladder (#if … #elseif) with no #error for a platform not handled")
if not spread:
    print(f"ok   platform conditionals in one file per module ({len(by_module)} modules have any)")

for p in problems:
    print(f"FAIL {p}")
sys.exit(1 if problems else 0)
