"""Varnish from Debian as a foreground child on 127.0.0.1: a CDN edge in front of an origin, for
scripts/integration/edge.py and `scripts/bench --edge`. The VCL is Examples/cdn/edge.vcl with its
backend's port replaced by the origin's; the cache lives in memory (or in a file when told), and a
restart empties it."""
import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request

import larder_scripts as ls
from larder_scripts import SetupError

VCL = os.path.join(ls.CHECKOUT, "Examples", "cdn", "edge.vcl")
NO_PROXY_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Varnish:
    def __init__(self, work, origin_port, memory="256m", storage=None):
        self.binary = ls.ensure_tool("varnishd", "varnish")
        self.stat_binary = ls.ensure_tool("varnishstat", "varnish")
        self.dir = os.path.join(work, "varnish")
        os.makedirs(self.dir, exist_ok=True)
        self.vcl = os.path.join(self.dir, "edge.vcl")
        with open(VCL) as f:
            text = f.read()
        text, n = re.subn(r'\.port = "\d+";', '.port = "%d";' % origin_port, text)
        if n != 1:
            raise SetupError("Examples/cdn/edge.vcl has no single backend port to replace")
        with open(self.vcl, "w") as f:
            f.write(text)
        self.memory = memory
        # Varnish's -s argument: memory unless told (a `file,PATH,SIZE` cache can be read after).
        self.storage = storage or "malloc," + memory
        self.port = None
        self.proc = None
        self.output = os.path.join(self.dir, "varnishd.out")

    @property
    def base(self):
        return "http://127.0.0.1:%d/" % self.port

    @property
    def instance(self):
        return os.path.join(self.dir, "instance")

    def start(self, port=None):
        """Starts varnishd (an empty cache) on `port` (else a free one) and waits until it answers."""
        for attempt in range(5 if port is None else 1):
            self.port = port or ls.free_port()
            shutil.rmtree(self.instance, ignore_errors=True)
            out = open(self.output, "ab")
            self.proc = subprocess.Popen(
                [self.binary, "-F", "-n", self.instance, "-a", "127.0.0.1:%d" % self.port, "-f", self.vcl,
                 "-s", self.storage, "-T", "none", "-p", "thread_pool_min=50",
                 # Counters flushed after every request, so that a request is counted when answered.
                 "-p", "thread_stats_rate=1"]
                # As root, varnishd would switch to its own user, which cannot read a private
                # work directory: no jail (a test edge on loopback).
                + (["-j", "none"] if os.geteuid() == 0 else []),
                stdout=out, stderr=out, stdin=subprocess.DEVNULL)
            out.close()
            deadline = time.time() + 20
            while time.time() < deadline and self.proc.poll() is None:
                if self.answers():
                    return
                time.sleep(0.1)
            self.stop()
        with open(self.output, errors="replace") as f:
            raise SetupError("varnishd did not start:\n" + f.read()[-2000:])

    def answers(self):
        try:
            with NO_PROXY_OPENER.open(self.base + "__edge_probe", timeout=1):
                return True
        except urllib.error.HTTPError:
            return True  # any HTTP answer (the origin's 404) means the edge is up
        except Exception:
            return False

    def restart(self):
        """An empty cache, as after an edge's purge; the same address."""
        self.stop()
        self.start(self.port)

    def counters(self):
        """MAIN counters: client requests, hits, misses, passes, backend requests, body bytes."""
        p = subprocess.run([self.stat_binary, "-n", self.instance, "-1", "-j"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=30)
        if p.returncode != 0:
            raise SetupError("varnishstat failed: " + p.stderr.strip())
        doc = json.loads(p.stdout)
        counters = doc.get("counters", doc)
        out = {}
        for name in ("client_req", "cache_hit", "cache_miss", "cache_hitpass", "s_pass", "backend_req",
                     "s_resp_bodybytes", "s_resp_hdrbytes"):
            c = counters.get("MAIN." + name)
            out[name] = int(c["value"]) if c else 0
        return out

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
