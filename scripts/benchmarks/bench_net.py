"""`scripts/bench --net`: the network rows, each next to its baseline in the same run, and the
HTTP engine chosen by them.

A real nginx from Debian serves a Larder repository over https on 127.0.0.1 (a private CA made
by openssl; HTTP/2 offered by ALPN, as a CDN does), configured from the integration tests'
nginx.conf.template, with a JSON access log that names each request's connection and whether
its TLS session was resumed. The repository holds two packages made from real trees nobody here
wrote (the wheels `scripts/bench` caches): `large`, the unpacked ansible wheel (~21,500 files),
and `web`, the share/jupyter tree of jupyterlab (418 files), published as 1.0.0 and as a 2.0.0
in which 200 files changed.

Rows (medians of RUNS, process start included on both sides):
  no-change sync     `larder sync` of an up-to-date sandbox: one request, for index.json.sig
                     (it names the index it signs); baseline curl's GET of the same file
  object update      `larder sync` of a sandbox at web 1.0.0 to 2.0.0, in which the 200 smallest
                     text files changed: 200 objects; baseline
                     `curl --parallel --parallel-max 4` of the same 200 URLs; connections and
                     TLS handshakes of each, read from nginx's log
  first sync, large  `larder sync --package large` into an empty sandbox; baselines `curl -o`
                     then `bsdtar -xf` of the same bundle, and `curl -o` alone; peak RSS
Each row is measured for every engine built: the release `larder` (AsyncHTTPClient over NIO on
Linux) and, unless --quick, the same source built with LARDER_URLSESSION=1 (URLSession over
FoundationNetworking and libcurl) into .build-urlsession/.

An emulated mobile link needs the kernel's netem qdisc; where `tc qdisc add ... netem` is
refused (this machine's kernel has no sch_netem), the rows are loopback only, and the table
says so.
"""
import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
import zipfile

import bench_install
import larder_scripts as ls
from larder_scripts import die, say
from larder_scripts.nginx_server import Nginx, make_certificates

BEGIN = "<!-- net:begin (scripts/bench --net writes this section) -->"
END = "<!-- net:end -->"
TITLE = "## Network (`scripts/bench --net`)"
CHANGED = 200
LINK_DELAY_MS = 40
LINK_RATE_MBIT = 20
SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def run(args, env=None, check=True):
    t = time.perf_counter()
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    dt = time.perf_counter() - t
    if check and p.returncode != 0:
        die("failed (exit %d): %s\n%s%s" % (p.returncode, " ".join(args), p.stdout[-2000:], p.stderr[-2000:]))
    return dt, p


def peak_rss(args, env):
    dt, p = run(["/usr/bin/time", "-v"] + args, env)
    for line in p.stderr.splitlines():
        if "Maximum resident set size" in line:
            return dt, int(line.split(":")[1]) / 1024
    die("/usr/bin/time -v printed no peak RSS")


def netem_available():
    """Whether this kernel offers netem: tried on the loopback of a throw-away network namespace."""
    ns = "larder-netem-probe-%d" % os.getpid()
    if not shutil.which("ip") or not shutil.which("tc"):
        return False, "iproute2's ip and tc are not installed"
    if subprocess.run(["ip", "netns", "add", ns], stderr=subprocess.DEVNULL).returncode != 0:
        return False, "network namespaces are not available (ip netns add failed)"
    try:
        p = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay",
                            "40ms"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode != 0:
            return False, "the kernel has no netem qdisc (`tc qdisc add dev lo root netem delay 40ms`: %s)" % (
                p.stdout.strip())
        return True, ""
    finally:
        subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)


def prepare_trees(work, large_wheel, web_wheel, pick_tree):
    large = os.path.join(work, "src-large")
    with zipfile.ZipFile(large_wheel) as z:
        z.extractall(large)
    unpacked = os.path.join(work, "web-wheel")
    with zipfile.ZipFile(web_wheel) as z:
        z.extractall(unpacked)
    web, _ = pick_tree(unpacked)
    return large, web


def change_files(tree, n):
    """Appends a line to the n smallest text files of the tree: a release that changed n files
    and few bytes, which a sync fetches as objects (with 16 KiB counted per request, n large
    files would cost more than the bundle)."""
    files = sorted((os.path.getsize(os.path.join(d, f)), os.path.join(d, f)) for d, _, fs in os.walk(tree) for f in fs
                   if f.endswith((".js", ".json", ".css", ".html", ".txt", ".svg", ".map")))
    if len(files) < n:
        die("the web tree has only %d text files; %d are needed" % (len(files), n))
    chosen = [path for _, path in files[:n]]
    for path in chosen:
        with open(path, "a") as f:
            f.write("\n/* larder bench 2.0.0 */\n")
    return len(chosen)


def entry_of(tree):
    return min((os.path.relpath(os.path.join(d, f), tree) for d, _, fs in os.walk(tree) for f in fs),
               key=lambda p: p.encode("utf-8", "surrogateescape"))


def index_entry(repo, pid):
    with open(os.path.join(repo, pid, "index.json")) as f:
        return next(e for e in json.load(f)["packages"] if e["id"] == pid)


def connections(entries):
    """(connections, TLS handshakes in full, protocols) of log entries."""
    first = {}
    for e in entries:
        first.setdefault(e["connection"], e)
    full = sum(1 for e in first.values() if e.get("ssl_reused") != "r")
    return len(first), full, sorted({e["protocol"] for e in entries})


def measure_engine(name, larder, nginx, work, runs, env, seed, large_runs=None):
    say("bench --net: engine %s (%s) over %s" % (name, larder, nginx.base))
    base = nginx.base
    pub = os.path.join(work, "k.pub")
    r = {"engine": name}

    def fresh(tag):
        sb = os.path.join(work, "sb-%s-%s" % (name, tag))
        shutil.rmtree(sb, ignore_errors=True)
        run([larder, "init", "--root", sb, "--repo", base + tag + "/", "--public-key", pub], env)
        return sb

    # Object update: a sandbox at web 1.0.0 (`seed`, made once, copied per run) syncs to 2.0.0.
    times, conns = [], []
    for i in range(runs + 1):
        sb = os.path.join(work, "sb-%s-update" % name)
        shutil.rmtree(sb, ignore_errors=True)
        shutil.copytree(seed, sb, symlinks=True)
        m = nginx.mark()
        dt, p = run([larder, "sync", "--root", sb, "--json"], env)
        log = nginx.since(m, settle=0.2)
        doc = json.loads(p.stdout)
        pk = next(x for x in doc["packages"] if x["id"] == "web")
        if pk["method"] != "objects" or pk["outcome"] != "done":
            die("the update of web did not go by objects: %s" % json.dumps(pk))
        objects = [e for e in log if "/objects/" in e["uri"]]
        if i == 0:
            r["object_urls"] = sorted(base + e["uri"].lstrip("/") for e in objects)
            r["objects"] = len(objects)
            continue
        times.append(dt)
        conns.append(connections(log))
    r["update_ms"] = 1000 * statistics.median(times)
    r["update_conns"] = max(c[0] for c in conns)
    r["update_full_handshakes"] = max(c[1] for c in conns)
    r["update_protocols"] = sorted({p for c in conns for p in c[2]})
    r["update_requests"] = len(log)

    # No-change sync of that sandbox, now at 2.0.0.
    times = []
    for i in range(runs + 1):
        m = nginx.mark()
        dt, p = run([larder, "sync", "--root", sb, "--json"], env)
        log = nginx.since(m, settle=0.1)
        # The first sync after an update plans once more (and records that all settled); from
        # then on a sync stops at its one request.
        if (i and not json.loads(p.stdout).get("upToDate")) or len(log) != 1 or log[0]["status"] != 200 \
                or not log[0]["uri"].endswith("/index.json.sig"):
            die("the no-change sync was not one request for index.json.sig: %s; %s" % (p.stdout[-400:], log))
        if i:
            times.append(dt)
    r["nochange_ms"] = 1000 * statistics.median(times)
    r["nochange_requests"] = len(log)

    # First sync of the large bundle.
    times, rss = [], []
    for i in range((large_runs or max(2, runs // 2)) + 1):
        sb = fresh("large")
        dt, mib = peak_rss([larder, "sync", "--root", sb], env)
        if i:
            times.append(dt)
            rss.append(mib)
        shutil.rmtree(sb, ignore_errors=True)
    r["large_s"] = statistics.median(times)
    r["large_mib"] = max(rss)
    say("  update %.0f ms (%d objects, %d requests over %d connection(s), %d full TLS handshake(s), %s); "
        "no-change %.1f ms; first sync of large %.2f s, %.0f MiB" % (
            r["update_ms"], r["objects"], r["update_requests"], r["update_conns"], r["update_full_handshakes"],
            "/".join(r["update_protocols"]), r["nochange_ms"], r["large_s"], r["large_mib"]))
    return r


def measure_baselines(nginx, repo, work, runs, urls, large_runs=None, immediate=False):
    """curl's figures against `nginx`; `immediate` opens curl's parallel connections at once
    (--parallel-immediate) rather than waiting for the first to learn whether it multiplexes: on
    the emulated link the wait costs curl a round trip with one transfer alone."""
    say("bench --net: baselines over %s (curl %s, bsdtar)" % (nginx.base, subprocess.run(
        ["curl", "--version"], stdout=subprocess.PIPE, text=True).stdout.split()[1]))
    # curl trusts what Larder trusts: the system's CAs and the private one (curl's default trust
    # is the system bundle; --cacert replaces it, so the two are joined into one file).
    ca = []
    if nginx.tls:
        bundle = os.path.join(work, "trust.pem")
        with open(bundle, "w") as out:
            for path in (SYSTEM_BUNDLE, nginx.tls[0]):
                if os.path.exists(path):
                    with open(path) as f:
                        out.write(f.read().rstrip("\n") + "\n")
        ca = ["--cacert", bundle]
    b = {"tls": bool(nginx.tls)}
    out = os.path.join(work, "curl-out")
    times, conns = [], []
    for i in range(runs + 1):
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        m = nginx.mark()
        dt, _ = run(["curl", "-s", "--fail"] + ca + ["--parallel", "--parallel-max", "4"] +
                    (["--parallel-immediate"] if immediate else []) + ["--output-dir", out,
                                                    "--remote-name-all"] + urls)
        log = nginx.since(m, settle=0.2)
        if i:
            times.append(dt)
            conns.append(connections(log))
    b["update_ms"] = 1000 * statistics.median(times)
    b["update_conns"] = max(c[0] for c in conns)
    b["update_full_handshakes"] = max(c[1] for c in conns)
    index = nginx.base + "web/index.json.sig"
    times = []
    for i in range(runs + 1):
        dt, p = run(["curl", "-s"] + ca + ["-o", "/dev/null", "-w", "%{http_code}", index])
        if p.stdout != "200":
            die("curl's GET of index.json.sig was answered %s, not 200" % p.stdout)
        if i:
            times.append(dt)
    b["nochange_ms"] = 1000 * statistics.median(times)
    if nginx.tls:
        # The same with only the private CA to load: what a TLS handshake costs without the trust store.
        times = []
        for i in range(runs + 1):
            dt, _ = run(["curl", "-s", "--cacert", nginx.tls[0], "-o", "/dev/null", index])
            if i:
                times.append(dt)
        b["nochange_ca_only_ms"] = 1000 * statistics.median(times)
    bundle = nginx.base + "large/" + index_entry(repo, "large")["bundle"]["path"]
    zip_path = os.path.join(work, "large.zip")
    both, alone = [], []
    for i in range((large_runs or max(2, runs // 2)) + 1):
        dest = os.path.join(work, "bsdtar-out")
        shutil.rmtree(dest, ignore_errors=True)
        os.makedirs(dest)
        t0 = time.perf_counter()
        run(["curl", "-s", "--fail"] + ca + ["-o", zip_path, bundle])
        t1 = time.perf_counter()
        run(["bsdtar", "-xf", zip_path, "-C", dest])
        t2 = time.perf_counter()
        if i:
            both.append(t2 - t0)
            alone.append(t1 - t0)
        shutil.rmtree(dest, ignore_errors=True)
    b["large_s"] = statistics.median(both)
    b["large_curl_s"] = statistics.median(alone)
    dest = os.path.join(work, "bsdtar-rss")
    os.makedirs(dest)
    _, b["large_mib"] = peak_rss(["bsdtar", "-xf", zip_path, "-C", dest], None)
    shutil.rmtree(dest, ignore_errors=True)
    say("  curl --parallel %.0f ms over %d connection(s); conditional GET %.1f ms; curl -o + bsdtar %.2f s "
        "(curl -o alone %.2f s; bsdtar %.0f MiB)" % (b["update_ms"], b["update_conns"], b["nochange_ms"],
                                                    b["large_s"], b["large_curl_s"], b["large_mib"]))
    return b


def table(rows, base, targets=True, link=False):
    """One table: a column per engine, then the baseline and the target (on the emulated link, the
    first sync's target is against `curl -o` alone: the download dominates)."""
    lines = ["| figure | " + " | ".join("Larder, %s" % e["engine"] for e in rows) + " | baseline | target |",
             "|" + "---|" * (3 + len(rows))]

    def row(label, cells, baseline, target):
        lines.append("| %s | %s | %s | %s |" % (label, " | ".join(cells), baseline, target if targets else ""))

    row("no-change sync: one request, index.json.sig (ms)",
        ["%.1f (%.1f×)" % (e["nochange_ms"], e["nochange_ms"] / base["nochange_ms"]) for e in rows],
        "curl GET of index.json.sig: %.1f ms%s" % (base["nochange_ms"], " (trusting the system's CAs and the private "
                                              "one, as Larder does)" if base["tls"] else ""), "≤ 2× curl")
    if base["tls"]:
        row("… against curl trusting only the private CA",
            ["%.1f×" % (e["nochange_ms"] / base["nochange_ca_only_ms"]) for e in rows],
            "%.1f ms (no trust store to load)" % base["nochange_ca_only_ms"], "")
    row("object update, %d changed files (ms)" % rows[0]["objects"],
        ["%.0f (%.2f×)" % (e["update_ms"], e["update_ms"] / base["update_ms"]) for e in rows],
        "curl --parallel-max 4: %.0f ms" % base["update_ms"], "≤ 1.2× curl")
    if base["tls"]:
        row("… connections / full TLS handshakes",
            ["%d / %d (%s)" % (e["update_conns"], e["update_full_handshakes"], "/".join(e["update_protocols"]))
             for e in rows],
            "curl: %d / %d" % (base["update_conns"], base["update_full_handshakes"]), "≤ 4 handshakes")
    else:
        row("… connections", ["%d (%s)" % (e["update_conns"], "/".join(e["update_protocols"])) for e in rows],
            "curl: %d" % base["update_conns"], "")
    row("first sync of the large bundle (s)",
        ["%.2f (%.2f×)" % (e["large_s"], e["large_s"] / base["large_s"]) for e in rows],
        "curl -o + bsdtar -xf: %.2f s" % base["large_s"], "" if link else "≤ 0.8× curl + bsdtar")
    row("… against `curl -o` alone", ["%.2f×" % (e["large_s"] / base["large_curl_s"]) for e in rows],
        "curl -o: %.2f s" % base["large_curl_s"], "≤ 1.1× curl -o" if link else "loopback: extraction-bound")
    row("… peak RSS (MiB)", ["%.0f" % e["large_mib"] for e in rows], "bsdtar: %.0f MiB" % base["large_mib"],
        "< 64 MiB")
    return lines


def write_benchmarks(lines):
    ls.write_section(TITLE, BEGIN, END, lines)
    say("bench --net: wrote BENCHMARKS.md")


class Via:
    """An nginx seen through the emulated link: the relay's address, nginx's log."""

    def __init__(self, nginx, port):
        self.nginx, self.port, self.tls = nginx, port, nginx.tls

    @property
    def base(self):
        return "%s://127.0.0.1:%d/" % ("https" if self.tls else "http", self.port)

    def mark(self):
        return self.nginx.mark()

    def since(self, mark, settle=0.1):
        return self.nginx.since(mark, settle=settle)


def main(engines, large_wheel, web_wheel, pick_tree, quick, runs, write, link=False):
    """Measures, prints, writes BENCHMARKS.md's section when `write`; returns the figures:
    {"tls": [engine rows], "tls_base": curl's, "http": [...], "http_base": ..., "link": {"engine", "base",
    "how"} or None, "link_note": why there is no link}. `link` adds the rows over the emulated link
    (https through link_relay.LinkRelay); `quick` skips the plain-http engine comparison."""
    for tool, pkg in (("curl", "curl"), ("bsdtar", "libarchive-tools"), ("/usr/bin/time", "time"),
                      ("openssl", "openssl")):
        ls.ensure_tool(tool, pkg)
    nginx_bin = ls.ensure_tool("nginx", "nginx-light")
    larder = engines[0][1]
    base_dir = os.environ.get("BENCH_DIR") or "/dev/shm"
    work = tempfile.mkdtemp(prefix="larder-bench-net.", dir=base_dir)
    repo = os.path.join(work, "repo")
    os.makedirs(repo)
    https = Nginx(nginx_bin, os.path.join(work, "https"), repo)
    http = Nginx(nginx_bin, os.path.join(work, "http"), repo)
    servers = [https] if quick else [https, http]
    ok, why = netem_available()
    relay = None
    how = ("a user-space relay on 127.0.0.1 in front of nginx (scripts/benchmarks/link_relay.py): %d ms each way, "
           "%g Mbit/s each way shared by all connections" % (LINK_DELAY_MS, LINK_RATE_MBIT)) + (
        "" if ok else ", because %s" % why)
    link_note = how if link else (
        "not measured (--quick)" if ok or quick else "No emulated link: %s; every row is loopback only." % why)
    out = {"link": None, "link_note": None if link else link_note}
    try:
        https.tls = make_certificates(work)
        env = ls.loopback_env()
        env["LARDER_CA_FILE"] = https.tls[0]
        key = os.path.join(work, "k")
        run([larder, "keygen", "--out", key])
        large, web = prepare_trees(work, large_wheel, web_wheel, pick_tree)
        run([larder, "pack", large, "--repo", os.path.join(repo, "large"), "--id", "large", "--version", "1.0.0",
             "--key", key + ".key", "--entry", entry_of(large)])
        run([larder, "pack", web, "--repo", os.path.join(repo, "web"), "--id", "web", "--version", "1.0.0",
             "--key", key + ".key", "--entry", entry_of(web)])
        seeds = {}
        fronts = list(servers)
        for server in servers:
            server.start()
            say("bench --net: nginx on %s (%s)" % (server.base, subprocess.run(
                [nginx_bin, "-v"], stderr=subprocess.PIPE, text=True).stderr.strip()))
        if link:
            from link_relay import LinkRelay
            relay = LinkRelay(https.port, delay_ms=LINK_DELAY_MS, rate_mbit=LINK_RATE_MBIT)
            relay.start()
            via = Via(https, relay.port)
            fronts.append(via)
            say("bench --net: the emulated link on %s: %s" % (via.base, how))
        for server in fronts:
            seed = seeds[server.base] = os.path.join(work, "seed-%d" % server.port)
            run([larder, "init", "--root", seed, "--repo", server.base + "web/", "--public-key", key + ".pub"], env)
            run([larder, "sync", "--root", seed], env)
        changed = change_files(web, CHANGED)
        # No deltas: this row measures an update by objects (the deltas bench has its own rows).
        run([larder, "pack", web, "--repo", os.path.join(repo, "web"), "--id", "web", "--version", "2.0.0",
             "--key", key + ".key", "--entry", entry_of(web), "--deltas", "0"])
        say("bench --net: web 2.0.0 changes %d files" % changed)
        tls_rows = [measure_engine(engines[0][0], larder, https, work, runs, env, seeds[https.base])]
        tls_base = measure_baselines(https, repo, work, runs, tls_rows[0]["object_urls"])
        out.update(tls=tls_rows, tls_base=tls_base)
        if link:
            n = max(2, runs // 2)
            e = measure_engine(engines[0][0], larder, via, work, n, env, seeds[via.base], large_runs=2)
            b = measure_baselines(via, repo, work, n, e["object_urls"], large_runs=2, immediate=True)
            out["link"] = {"engine": e, "base": b, "how": how}
        if not quick:
            http_rows = [measure_engine(name, binary, http, work, runs, env, seeds[http.base])
                         for name, binary in engines]
            http_base = measure_baselines(http, repo, work, runs, http_rows[0]["object_urls"])
            out.update(http=http_rows, http_base=http_base)
    finally:
        if relay:
            relay.stop()
        for server in servers:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    cpu = bench_install.cpu_model()
    machine = "%s, %d CPUs (%s), %s, load %.2f" % (platform.machine(), os.cpu_count() or 0, cpu,
                                                   time.strftime("%Y-%m-%d"), os.getloadavg()[0])
    command = "scripts/bench --net" + (" --quick" if quick else "") + (" -k %d" % runs if runs != 5 else "")
    lines = ["Machine: %s. Command: `%s`. Medians of %d runs (the first sync: %d), process start included on "
             "both sides; Larder and curl against the same nginx in the same run. %s" % (
                 machine, command, runs, max(2, runs // 2), "Emulated link: " + link_note if link else link_note), "",
             "**Over https** (a private CA; nginx offers HTTP/2 by ALPN, as a CDN does):", ""]
    lines += table(tls_rows, tls_base)
    if out["link"]:
        lines += ["", "**Over https on the emulated link** (medians of %d runs; the first sync: 2):" % max(2, runs // 2),
                  ""]
        lines += table([out["link"]["engine"]], out["link"]["base"], link=True)
    if not quick:
        lines += ["", "**The HTTP engine on Linux, over plain http** (FoundationNetworking's URLSession cannot be "
                  "given a private CA without changing the system's trust store, so the engines are compared "
                  "without TLS):", ""]
        lines += table(http_rows, http_base, targets=False)
    say()
    for l in lines:
        say(l)
    if write:
        write_benchmarks(lines)
    return out
