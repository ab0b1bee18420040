"""`larder serve` against nginx: the same files, over HTTP/1.1 keep-alive on 127.0.0.1.

The tree is packed (`larder pack --route http://bench.invalid/`), synced into a sandbox from a
file:// repository, and served twice:
  larder   `larder serve --offline` on the sandbox; requests carry `Host: bench.invalid`, so they
           take the route a browser's page load takes (the package's route, then its file list,
           then the installed file). Its per-request log line goes to /dev/null (it cannot be
           turned off). Package hits are answered on the connection's event loop (the default).
  task     the same with `--task-responder`: every request answered from a Swift task through
           Hummingbird, as before the event-loop responder (one hop per request from NIO's event
           loop to Swift concurrency's threads and back); the side-by-side row.
  nio      larder-bench-nio (when given): a static file server written directly on SwiftNIO —
           NIO's HTTP/1 codec, one event loop per CPU, per request open, fstat, one read (or
           sendfile above 64 KiB), close, as nginx does; no Hummingbird, no resolver. What
           SwiftNIO itself reaches on this machine: the gateway's gap to nginx splits into what
           NIO costs and what Larder adds.
  nginx    Debian's nginx (nginx-light), a minimal configuration written here: root = the
           installed version directory (the very files larder serves), worker_processes = the
           number of CPUs, access_log off, sendfile on, keepalive_requests high enough that
           wrk's connections are never closed by nginx (Hummingbird has no such limit),
           /etc/nginx/mime.types for Content-Type. Same Host header.

Two files of the tree are measured: the text file (js, css, json, ...) nearest ~2 KB and the one
nearest ~100 KB (a file of that size is written into the copy of the tree before packing when
none is near). curl first checks that every server answers 200 with the same bytes. Then, after
a warm-up of each server, `wrk -t2 -c32 -dNs --latency` runs against each, alternating
(larder, task, nginx, nio, larder, task, nginx, nio, ...; medians of the rounds). Per run: requests/s and p99 latency
from wrk's output, and the server's CPU time per request: utime + stime of its process (nginx:
master and workers) from /proc/PID/stat before and after, over wrk's request count.

wrk runs on the same machine and competes with the server for the CPUs; both servers suffer it
alike. The figures are loopback only: no TLS, no network.
"""
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

import larder_scripts as ls
from larder_scripts import die, say
from larder_scripts.nginx_server import Nginx

HOST = "bench.invalid"
PACKAGE = "web"
THREADS, CONNECTIONS = 2, 32
TEXT = (".js", ".css", ".json", ".html", ".svg", ".txt", ".map", ".md")
TARGETS = (("2k", 2048), ("100k", 100 * 1024))
TICK = os.sysconf("SC_CLK_TCK")

# nginx.conf for the bench, rendered by nginx_server.Nginx (its placeholders: @USER@, @PREFIX@,
# @PORT@, @REPO@, @GENERATION@); WORKERS is filled in before that.
NGINX_CONF = """
@USER@
worker_processes WORKERS;
pid @PREFIX@/nginx.pid;
error_log @PREFIX@/error.log warn;

events {
    worker_connections 1024;
}

http {
    access_log off;
    include /etc/nginx/mime.types;
    default_type application/octet-stream;

    client_body_temp_path @PREFIX@/client_body_temp;
    proxy_temp_path       @PREFIX@/proxy_temp;
    fastcgi_temp_path     @PREFIX@/fastcgi_temp;
    uwsgi_temp_path       @PREFIX@/uwsgi_temp;
    scgi_temp_path        @PREFIX@/scgi_temp;

    sendfile on;
    keepalive_timeout 65;
    keepalive_requests 100000000;
    etag on;
    gzip off;

    server {
        listen 127.0.0.1:@PORT@;
        server_name localhost;
        root @REPO@;
        location / {
            try_files $uri =404;
        }
        location = /__generation {
            default_type text/plain;
            return 200 "@GENERATION@";
        }
    }
}
"""


def run(args, env=None):
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if p.returncode != 0:
        die("failed (exit %d): %s\n%s%s" % (p.returncode, " ".join(args), p.stdout[-2000:], p.stderr[-2000:]))
    return p.stdout


def files_of(tree):
    return sorted(os.path.relpath(os.path.join(d, f), tree) for d, _, fs in os.walk(tree) for f in fs)


def url_safe(rel):
    return all(c.isascii() and (c.isalnum() or c in "._-/") for c in rel)


def pick(tree, target):
    """The text file whose size is nearest `target` (within half to twice it), or a new one of
    exactly that size written into the tree."""
    near = [(abs(os.path.getsize(os.path.join(tree, r)) - target), r) for r in files_of(tree)
            if r.endswith(TEXT) and url_safe(r) and target / 2 <= os.path.getsize(os.path.join(tree, r)) <= target * 2]
    if near:
        return min(near)[1]
    rel = "larder-bench-%d.txt" % target
    line = b"larder serve bench: a line of text, as a page's script or stylesheet would hold.\n"
    with open(os.path.join(tree, rel), "wb") as f:
        f.write((line * (target // len(line) + 1))[:target])
    return rel


def entry_of(tree):
    rels = files_of(tree)
    return "index.html" if "index.html" in rels else min(rels, key=lambda p: p.encode("utf-8", "surrogateescape"))


def publish(larder, work, tree):
    """Copies the tree (files may be added), picks the files, packs, syncs: (the installed
    version directory, {label: relative path})."""
    src = os.path.join(work, "tree")
    shutil.copytree(tree, src, symlinks=True)
    chosen = {label: pick(src, target) for label, target in TARGETS}
    key, repo, sandbox = (os.path.join(work, n) for n in ("k", "repo", "sandbox"))
    env = ls.loopback_env()
    run([larder, "keygen", "--out", key], env)
    run([larder, "pack", src, "--repo", repo, "--id", PACKAGE, "--version", "1.0.0", "--key", key + ".key",
         "--entry", entry_of(src), "--route", "http://%s/" % HOST], env)
    run([larder, "init", "--root", sandbox, "--repo", "file://%s/" % repo, "--public-key", key + ".pub"], env)
    run([larder, "sync", "--root", sandbox], env)
    installed = os.path.join(sandbox, "packages", PACKAGE, "1.0.0")
    for rel in chosen.values():
        if not os.path.isfile(os.path.join(installed, rel)):
            die("the sync did not install %s under %s" % (rel, installed))
    return sandbox, installed, chosen


def fetch(url, out):
    """curl's GET with the bench's Host header: (status, body bytes)."""
    code = subprocess.run(["curl", "-s", "--noproxy", "*", "-H", "Host: " + HOST, "-o", out, "-w", "%{http_code}",
                           url], stdout=subprocess.PIPE, text=True).stdout
    data = b""
    if os.path.exists(out):
        with open(out, "rb") as f:
            data = f.read()
    return code, data


class Serve:
    """`larder serve --offline` (and `extra` options) on a port picked here, its output to /dev/null."""

    def __init__(self, larder, sandbox, probe, work, extra=()):
        self.larder, self.sandbox, self.probe, self.work, self.extra = larder, sandbox, probe, work, list(extra)
        self.proc = None
        self.port = None

    @property
    def base(self):
        return "http://127.0.0.1:%d/" % self.port

    def command(self):
        return [self.larder, "serve", "--root", self.sandbox, "--listen", "127.0.0.1:%d" % self.port,
                "--offline"] + self.extra

    def start(self):
        err = os.path.join(self.work, "serve.err")
        for attempt in range(5):
            self.port = ls.free_port()
            with open(err, "ab") as e:
                self.proc = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL,
                                             stderr=e, stdin=subprocess.DEVNULL, env=ls.loopback_env())
            deadline = time.time() + 10
            while time.time() < deadline and self.proc.poll() is None:
                if fetch(self.base + self.probe, os.path.join(self.work, "probe"))[0] == "200":
                    return
                time.sleep(0.05)
            self.stop()
        with open(err, errors="replace") as f:
            die("larder serve did not start:\n" + f.read()[-2000:])

    def pids(self):
        return [self.proc.pid]

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)


class NIOBaseline(Serve):
    """larder-bench-nio ROOT PORT: a static file server written directly on SwiftNIO, serving
    the installed version directory (Sources/larder-bench-nio/main.swift)."""

    def __init__(self, binary, root, probe, work):
        Serve.__init__(self, binary, root, probe, work)

    def command(self):
        return [self.larder, self.sandbox, str(self.port)]


class BenchNginx(Nginx):
    def pids(self):
        return [self.proc.pid] + self.workers()


def cpu_seconds(pids):
    """utime + stime of the processes (all their threads), in seconds."""
    total = 0
    for pid in pids:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of stat(5)
    return total / TICK


def to_ms(text):
    for unit, scale in (("us", 1e-3), ("ms", 1.0), ("s", 1e3), ("m", 6e4)):
        if text.endswith(unit):
            return float(text[:-len(unit)]) * scale
    die("wrk printed a latency without a known unit: %r" % text)


def parse_wrk(out):
    """{rps, p99_ms, requests, errors} from wrk --latency's output."""
    r = {"errors": 0}
    for line in out.splitlines():
        words = line.split()
        if line.startswith("Requests/sec:"):
            r["rps"] = float(words[1])
        elif words[:1] == ["99%"]:
            r["p99_ms"] = to_ms(words[1])
        elif " requests in " in line:
            r["requests"] = int(words[0])
        elif line.lstrip().startswith(("Non-2xx", "Socket errors")):
            r["errors"] += sum(int(w.strip(",")) for w in words if w.strip(",").isdigit())
    if not {"rps", "p99_ms", "requests"} <= set(r):
        die("could not read wrk's output:\n" + out)
    return r


def wrk(wrk_bin, url, seconds, pids=()):
    cmd = [wrk_bin, "-t%d" % THREADS, "-c%d" % CONNECTIONS, "-d%ds" % seconds, "--latency", "-H", "Host: " + HOST,
           url]
    before = cpu_seconds(pids)
    out = run(cmd)
    r = parse_wrk(out)
    r["cpu_us_per_req"] = 1e6 * (cpu_seconds(pids) - before) / max(1, r["requests"])
    if r["errors"]:
        die("wrk saw %d errors or non-2xx answers from %s:\n%s" % (r["errors"], url, out))
    return r


def check_same(servers, chosen, work):
    """Both servers answer 200 with the installed file's bytes."""
    for label, rel in chosen.items():
        with open(os.path.join(servers["nginx"].repo, rel), "rb") as f:
            want = f.read()
        for name, server in servers.items():
            code, body = fetch(server.base + rel, os.path.join(work, "check-%s-%s" % (name, label)))
            if code != "200" or body != want:
                die("%s answered %s with %d bytes for /%s, not 200 with the file's %d" % (
                    name, code, len(body), rel, len(want)))


def measure(larder, work, tree, duration=10, quick=False, nio=None):
    """Packs and syncs `tree`, serves it by `larder serve` (both responders) and by nginx, and
    runs wrk against each for a ~2 KB and a ~100 KB file. Returns {"2k": {...}, "100k": {...}, "wrk": ...,
    "nginx_workers": ...}."""
    wrk_bin = ls.ensure_tool("wrk", "wrk")
    nginx_bin = ls.ensure_tool("nginx", "nginx-light")
    ls.ensure_tool("curl", "curl")
    larder = os.path.abspath(larder)
    work = os.path.abspath(work)
    os.makedirs(work, exist_ok=True)
    sandbox, installed, chosen = publish(larder, work, os.path.abspath(tree))
    workers = os.cpu_count() or 1
    template = os.path.join(work, "nginx-bench.conf.template")
    with open(template, "w") as f:
        f.write(NGINX_CONF.replace("WORKERS", str(workers)))
    servers = {"larder": Serve(larder, sandbox, chosen["2k"], work),
               "task": Serve(larder, sandbox, chosen["2k"], work, ["--task-responder"]),
               "nginx": BenchNginx(nginx_bin, work, installed, template)}
    if nio:
        servers["nio"] = NIOBaseline(os.path.abspath(nio), installed, chosen["2k"], work)
    rounds = 1 if quick else 3
    warm = 1 if quick else 2
    runs = {(label, name): [] for label in chosen for name in servers}
    try:
        for name, server in servers.items():
            server.start()
            say("bench serve: %s on %s" % (name, server.base))
        check_same(servers, chosen, work)
        for label, rel in chosen.items():
            for name, server in servers.items():
                wrk(wrk_bin, server.base + rel, warm)
            for i in range(rounds):
                for name, server in servers.items():
                    r = wrk(wrk_bin, server.base + rel, duration, server.pids())
                    runs[label, name].append(r)
                    say("bench serve: %s /%s (%s) %s: %.0f req/s, p99 %.2f ms, %.1f µs CPU/request" % (
                        label, rel, os.path.getsize(os.path.join(installed, rel)), name, r["rps"], r["p99_ms"],
                        r["cpu_us_per_req"]))
    finally:
        for server in servers.values():
            server.stop()
    result = {"wrk": "wrk -t%d -c%d -d%ds" % (THREADS, CONNECTIONS, duration), "nginx_workers": workers,
              "rounds": rounds}
    for label, rel in chosen.items():
        row = {"path": rel, "bytes": os.path.getsize(os.path.join(installed, rel))}
        for name in servers:
            for key, out in (("rps", "rps"), ("p99_ms", "p99_ms"), ("cpu_us_per_req", "cpu_us_per_req")):
                row["%s_%s" % (name, out)] = statistics.median(r[key] for r in runs[label, name])
        result[label] = row
    return result


if __name__ == "__main__":
    ls.NAME = "bench_serve"
    if len(sys.argv) not in (3, 4, 5):
        die("usage: bench_serve.py LARDER TREE [SECONDS [LARDER_BENCH_NIO]]")
    scratch = ls.scratch_dir("larder-bench-serve.", "BENCH_DIR", shm=True)
    try:
        doc = measure(sys.argv[1], scratch, sys.argv[2], duration=int(sys.argv[3]) if len(sys.argv) >= 4 else 10,
                      nio=sys.argv[4] if len(sys.argv) == 5 else None)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for k, v in doc.items():
        say("%s: %s" % (k, v))
