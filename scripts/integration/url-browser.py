#!/usr/bin/env python3
"""The resolver reads a raw URL as the browser would request it, checked against a real browser.

Generates URL strings from a small grammar (case in scheme and host, an internationalised host
in Unicode or ASCII form, default ports, `\\` for `/`, tabs and newlines, empty segments, `.` and
`..` in their `%2e` spellings, segments that climb above a route, queries and fragments), asks
headless Chromium (Debian's `chromium`) what each one is as a URL (`new URL(s).href`, the WHATWG
URL standard), and checks that `larder resolve` gives the raw string and the browser's form the
same answer (the same file of the same package, or both not local). The sandbox has the sample
app under https://app.example.com/ and a second package under https://bücher.example/shop/
(stored, as every route is, in its ASCII form).

Prints one line per disagreement and `url-browser: N passed, M failed`; exit 1 on any. The
strings come from a seeded generator (URL_BROWSER_SEED, default 12; URL_BROWSER_COUNT, default
200). Environment: LARDER_BIN.
"""
import html
import json
import os
import random
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import larder_scripts as ls  # noqa: E402  (found through the line above)
from larder_scripts import SetupError, say  # noqa: E402

ls.NAME = "url-browser"
CHECKS = ls.Checks()

HOSTS = ["app.example.com", "APP.Example.COM", "app.example.com:443", "b\u00fccher.example", "B\u00dcCHER.example",
         "xn--bcher-kva.example", "other.example"]
TARGETS = ["index.html", "css/app.css", "js/app.js", "pages/about/index.html", "pages/about/", "data/catalog.json",
           "img/logo.png", "shop/css/app.css", "shop/", "shop/x", ""]
DOT = [".", "%2e", "%2E"]
DOTDOT = ["..", "%2e%2e", ".%2E", "%2e.", "%2E%2E"]
SEGMENTS = ["css", "app.css", "js", "app.js", "pages", "about", "index.html", "shop", "data", "catalog.json", "",
            ".", "..", "%2e", "%2E%2e", ".%2E", "%2e.", "x", "img", "logo.png"]


def generate(rng, count):
    out = set()
    while len(out) < count:
        scheme = rng.choice(["https", "HTTPS", "https"])
        host = rng.choice(HOSTS)
        sep = lambda: "\\" if rng.random() < 0.15 else "/"  # noqa: E731
        if rng.random() < 0.7:
            # A real file's path, on a host that routes to its package, with noise that a browser
            # removes: a detour (x/..), a `.`, an empty segment popped by `..`, in any spelling.
            target = rng.choice(TARGETS)
            host = rng.choice(HOSTS[3:6] if target.startswith("shop") else HOSTS[:3])
            segments = target.split("/")
            for _ in range(rng.randint(1, 3)):
                at = rng.randint(0, len(segments))
                segments[at:at] = rng.choice([["x", rng.choice(DOTDOT)], [rng.choice(DOT)], ["x", "", rng.choice(DOTDOT),
                                                                                          rng.choice(DOTDOT)]])
            path = "".join(sep() + seg for seg in segments)
        else:
            path = "".join(sep() + rng.choice(SEGMENTS) for _ in range(rng.randint(0, 6)))
        if rng.random() < 0.1:
            cut = rng.randint(0, len(path))
            path = path[:cut] + rng.choice(["\t", "\n", "\r"]) + path[cut:]
        tail = rng.choice(["", "", "", "?v=1", "#top", "?a=/../b"])
        url = "%s://%s%s%s" % (scheme, host, path, tail)
        if rng.random() < 0.05:
            url = " " + url + " "
        out.add(url)
    return sorted(out)


def browser_forms(urls, work):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        raise SetupError("chromium is not installed (scripts/bootstrap installs it)")
    page = os.path.join(work, "urls.html")
    with open(page, "w") as f:
        f.write("<!doctype html><meta charset=utf-8><pre id=out></pre><script>\nconst input = %s;\n"
                "document.getElementById('out').textContent = JSON.stringify(input.map(s => {\n"
                "  try { return new URL(s).href; } catch (e) { return null; } }));\n</script>\n" % json.dumps(urls))
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             "--user-data-dir=" + os.path.join(work, "profile")]
    # Chromium's own temporary folders (org.chromium.Chromium.*, left behind when it is killed) go
    # into the work directory too, which is removed at the end.
    tmp = os.path.join(work, "chromium-tmp")
    os.makedirs(tmp, exist_ok=True)
    p = subprocess.run([chromium] + flags + ["--dump-dom", "file://" + page], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120, env=dict(os.environ, TMPDIR=tmp))
    start, end = p.stdout.find('<pre id="out">'), p.stdout.find("</pre>")
    if p.returncode != 0 or start < 0 or end < 0:
        raise SetupError("chromium did not evaluate the page (exit %d): %s" % (p.returncode, p.stderr[-500:]))
    forms = json.loads(html.unescape(p.stdout[start + len('<pre id="out">'):end]))
    if len(forms) != len(urls):
        raise SetupError("chromium answered %d URLs for %d" % (len(forms), len(urls)))
    return forms


def answer(larder, root, url):
    rc, doc, r = larder.json("resolve", url, "--root", root)
    if rc != 0 or doc is None:
        return "error: exit %d %s" % (rc, r.stderr.strip()[-200:])
    if doc.get("outcome") == "local":
        return "local %s %s" % (doc.get("package"), doc.get("path"))
    return doc.get("outcome") or "?"


def main():
    started = time.time()
    larder = ls.Larder(ls.larder_binary(), timeout=60)
    work = ls.scratch_dir("larder-url-browser.")
    try:
        keys = os.path.join(work, "keys", "publisher")
        larder.must("keygen", "--out", keys)
        repo = os.path.join(work, "repo")
        larder.must("pack", ls.SAMPLE_APP, "--repo", repo, "--id", "sample-app", "--version", "1.0.0", "--key",
                    keys + ".key", "--route", "https://app.example.com/")
        shop = os.path.join(work, "shop")
        os.makedirs(os.path.join(shop, "css"))
        for name, text in (("index.html", "<p>shop</p>"), ("css/app.css", "p{}"), ("x", "x")):
            with open(os.path.join(shop, name), "w") as f:
                f.write(text)
        larder.must("pack", shop, "--repo", repo, "--id", "shop", "--version", "1.0.0", "--key", keys + ".key",
                    "--route", "https://b\u00fccher.example/shop/")
        root = os.path.join(work, "sb")
        larder.must("init", "--root", root, "--repo", "file://" + repo, "--public-key", keys + ".pub")
        larder.must("sync", "--root", root)
        seed = int(os.environ.get("URL_BROWSER_SEED", "12"))
        urls = generate(random.Random(seed), int(os.environ.get("URL_BROWSER_COUNT", "200")))
        forms = browser_forms(urls, work)
        local = 0
        for raw, href in zip(urls, forms):
            if href is None:
                continue  # the browser refuses it: there is no request to compare with
            ours, theirs = answer(larder, root, raw), answer(larder, root, href)
            local += theirs.startswith("local")
            if ours == theirs:
                CHECKS.passed += 1  # one line per disagreement only
            else:
                CHECKS.check("%r → %s" % (raw, href), False, "raw: %s; browser's form: %s" % (ours, theirs))
        say("url-browser: %d URLs (seed %d), %d the browser refuses, %d served locally in the browser's form"
            % (len(urls), seed, forms.count(None), local))
        CHECKS.check("most URLs reach a package (the grammar is not vacuous): %d of %d" % (local, len(urls)),
                     local >= len(urls) // 3)
    except SetupError as e:
        CHECKS.setup_failed(e)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return CHECKS.finish(started)


if __name__ == "__main__":
    sys.exit(main())
