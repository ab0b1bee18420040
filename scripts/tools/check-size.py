#!/usr/bin/env python3
"""The size and concurrency gate (issue 48, "Gates that keep it"): counts, in Sources/, what the
structure targets limit and fails when a count is over its limit:
  - public declarations in the product modules (a line that declares something `public` or `open`,
    extensions excepted), the app's line;
  - functions (func, init, subscripts and accessors with a body) over 60 lines, brace to brace;
  - files over 400 lines;
  - `@unchecked Sendable` conformances, each of which must have a reason on its line or the next;
  - lock idioms other than `Synchronization.Mutex`: `NSLock`, `NSRecursiveLock`, `NSCondition`,
    `pthread_mutex`, `os_unfair_lock`, a hand-made `Locked` wrapper, and `Thread` (threads made by
    hand; `BlockingWork` in Sources/LarderCore/Concurrency.swift gives blocking work a dispatch
    queue of its own) — in every file, Concurrency.swift included;
  - and, in scripts/, files over 600 lines (Python, shell, and the entry points without an
    extension; a subject's scenarios go in scripts/lib/larder_scripts/ beside the shared library).
Each limit is a ratchet at the count the tree had when the gate came (it may go down, never up),
printed with the structure issue's target; lower a limit in LIMITS when a count falls. Function
bodies are measured after string literals and comments are blanked, so a brace in a string does
not count.

  scripts/tools/check-size.py [--list]   (--list: every function and file over its length)
"""
import os
import re
import sys

CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Modules an app links (the product's, not the tools', tests' or benches').
PRODUCT = {"Larder", "LarderArchive", "LarderCore", "LarderFetch", "LarderFetchNIO", "LarderFetchURLSession",
           "LarderFileSystem", "LarderGateway", "LarderPublish", "LarderResolve", "LarderStore", "LarderSync",
           "LarderWebKit", "LarderWebKitGTK", "LarderWebView"}
# name: (limit now, the structure issue's target)
LIMITS = {
    "public declarations in the product modules": (551, 600),
    "functions over 60 lines": (9, 9),
    "files over 400 lines": (4, 6),
    "@unchecked Sendable": (15, 15),
    "@unchecked Sendable without a reason": (0, 0),
    "lock idioms other than Mutex (NSLock, NSCondition, Locked, Thread, pthread_mutex, os_unfair_lock)": (0, 0),
    "scripts over 600 lines": (0, 0),
}

STRING = re.compile(r'"""(?:.|\n)*?"""|"(?:\\.|[^"\\\n])*"')
COMMENT = re.compile(r"//[^\n]*|/\*(?:.|\n)*?\*/")
FUNC = re.compile(r"^\s*(?:@\w+(?:\([^)]*\))?\s+)*(?:(?:public|package|private|fileprivate|internal|open|static|"
                  r"class|final|override|mutating|nonisolated|convenience|required|@\w+)\s+)*"
                  r"(?:func\s+\S+|init[?!]?\s*[(<]|subscript\s*[(<])", re.M)
PUBLIC = re.compile(r"^\s*(?:@\w+(?:\([^)]*\))?\s+)*(?:public|open)\s+(?!extension\b|import\b)", re.M)
LOCKS = re.compile(r"\bNSLock\b|\bNSRecursiveLock\b|\bNSCondition\b|\bpthread_mutex_t\b|\bos_unfair_lock\b|"
                   r"\bLocked\s*[<(]|\bThread\s*\(|\bThread\.detachNewThread|\bThread\.sleep")


def blank(text):
    """`text` with string literals and comments replaced by spaces (newlines kept)."""
    def keep_lines(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    return COMMENT.sub(keep_lines, STRING.sub(keep_lines, text))


def long_functions(path, text, limit=60):
    """(line, length) of each function in `text` whose body spans more than `limit` lines."""
    code = blank(text)
    out = []
    for m in FUNC.finditer(code):
        start = code.find("{", m.end())
        # A protocol requirement or a declaration without a body: another declaration, or the end
        # of the enclosing type, comes before any brace.
        if start < 0 or re.search(r"\}|\n\s*(?:\S+\s+)*(?:var|let|case|func|init|subscript|typealias)\b",
                                  code[m.end():start]):
            continue
        depth = 0
        for i in range(start, len(code)):
            if code[i] == "{":
                depth += 1
            elif code[i] == "}":
                depth -= 1
                if depth == 0:
                    # The declaration's own line (the pattern's leading blanks may span lines).
                    first = code.count("\n", 0, m.start() + len(m.group(0)) - len(m.group(0).lstrip())) + 1
                    last = code.count("\n", 0, i) + 1
                    if last - first + 1 > limit:
                        out.append((first, last - first + 1))
                    break
    return out


def main():
    listing = "--list" in sys.argv[1:]
    counts = dict.fromkeys(LIMITS, 0)
    details = {k: [] for k in LIMITS}
    for root, _, files in os.walk(os.path.join(CHECKOUT, "Sources")):
        for f in sorted(files):
            if not f.endswith(".swift"):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, CHECKOUT)
            module = rel.split(os.sep)[1]
            text = open(path, encoding="utf-8").read()
            code = blank(text)
            lines = text.count("\n") + (0 if text.endswith("\n") else 1)
            if module in PRODUCT:
                counts["public declarations in the product modules"] += len(PUBLIC.findall(code))
            for line, length in long_functions(path, text):
                counts["functions over 60 lines"] += 1
                details["functions over 60 lines"].append("%s:%d (%d lines)" % (rel, line, length))
            if lines > 400:
                counts["files over 400 lines"] += 1
                details["files over 400 lines"].append("%s (%d lines)" % (rel, lines))
            source_lines = text.split("\n")
            for i, line in enumerate(source_lines):
                if "@unchecked Sendable" in blank(line):
                    counts["@unchecked Sendable"] += 1
                    reason = "//" in line or (i + 1 < len(source_lines) and "// @unchecked" in source_lines[i + 1])
                    if not reason:
                        counts["@unchecked Sendable without a reason"] += 1
                        details["@unchecked Sendable without a reason"].append("%s:%d" % (rel, i + 1))
            for m in LOCKS.finditer(code):
                key = "lock idioms other than Mutex (NSLock, NSCondition, Locked, Thread, pthread_mutex, os_unfair_lock)"
                counts[key] += 1
                details[key].append("%s:%d %s" % (rel, code.count("\n", 0, m.start()) + 1, m.group(0)))
    for root, _, files in os.walk(os.path.join(CHECKOUT, "scripts")):
        for f in sorted(files):
            path = os.path.join(root, f)
            if f.endswith((".pyc", ".template")) or "__pycache__" in path:
                continue
            try:
                lines = open(path, encoding="utf-8").read().count("\n")
            except UnicodeDecodeError:
                continue  # a binary fixture is not a script
            if lines > 600:
                counts["scripts over 600 lines"] += 1
                details["scripts over 600 lines"].append("%s (%d lines)" % (os.path.relpath(path, CHECKOUT), lines))
    failed = False
    for name, (limit, target) in LIMITS.items():
        n = counts[name]
        over = n > limit
        failed = failed or over
        print("%s %s: %d (limit %d; target %d%s)" % ("FAIL" if over else "ok  ", name, n, limit, target,
                                                     ", met" if n <= target else ""))
        if (listing or over) and details[name]:
            for d in details[name]:
                print("       " + d)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
