"""nginx from Debian as a foreground child on 127.0.0.1, for the integration tests and the bench:
a configuration rendered from a template (nginx.conf.template beside this file, the default, documents
its placeholders), optional TLS with a private CA made here by openssl, reloads, and the JSON access
log read back."""
import grp
import json
import os
import pwd
import signal
import ssl
import subprocess
import time
import urllib.request

import larder_scripts as ls
from larder_scripts import SetupError


NO_PROXY_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nginx.conf.template")


class Nginx:
    def __init__(self, binary, work, repo, template=TEMPLATE, tls=None, include=None):
        self.binary = binary
        self.include = include  # a file of directives for the server block, or None
        self.template = template
        self.tls = tls  # (ca.pem, server.pem, server.key) or None
        self.prefix = os.path.join(work, "nginx")
        os.makedirs(self.prefix, exist_ok=True)
        self.repo = repo
        self.conf = os.path.join(self.prefix, "nginx.conf")
        self.log = os.path.join(self.prefix, "access.log")
        self.output = os.path.join(self.prefix, "nginx.out")
        self.generation = 0
        self.port = None
        self.proc = None

    @property
    def base(self):
        return "%s://127.0.0.1:%d/" % ("https" if self.tls else "http", self.port)

    def render(self, limit_rate):
        self.generation += 1
        user = ""
        if os.geteuid() == 0:
            user = "user %s %s;" % (pwd.getpwuid(os.geteuid()).pw_name, grp.getgrgid(os.getegid()).gr_name)
        with open(self.template) as f:
            text = f.read()
        for k, v in {"USER": user, "PREFIX": self.prefix, "PORT": str(self.port), "REPO": self.repo,
                     "ACCESS_LOG": self.log, "LIMIT_RATE": limit_rate, "GENERATION": str(self.generation),
                     "LISTEN": "ssl http2" if self.tls else "",
                     "INCLUDE": "include %s;" % self.include if self.include else "",
                     "TLS": "ssl_certificate %s; ssl_certificate_key %s;" % self.tls[1:] if self.tls else ""}.items():
            text = text.replace("@%s@" % k, v)
        if "@" in "".join(l for l in text.splitlines() if not l.lstrip().startswith("#")):
            raise SetupError("nginx.conf.template has a placeholder the script does not know")
        with open(self.conf, "w") as f:
            f.write(text)

    def answered_generation(self):
        try:
            opener = NO_PROXY_OPENER
            if self.tls:
                opener = urllib.request.build_opener(
                    urllib.request.ProxyHandler({}),
                    urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=self.tls[0])))
            with opener.open(self.base + "__generation", timeout=1) as r:
                return int(r.read().decode())
        except Exception:
            return None

    def start(self, limit_rate="0"):
        for attempt in range(5):
            self.port = ls.free_port()
            self.render(limit_rate)
            out = open(self.output, "ab")
            self.proc = subprocess.Popen([self.binary, "-c", self.conf, "-p", self.prefix + "/", "-g", "daemon off;"],
                                         stdout=out, stderr=out, stdin=subprocess.DEVNULL)
            out.close()
            deadline = time.time() + 5
            while time.time() < deadline and self.proc.poll() is None:
                if self.answered_generation() == self.generation:
                    return
                time.sleep(0.05)
            self.stop()
        with open(self.output, errors="replace") as f:
            raise SetupError("nginx did not start:\n" + f.read()[-2000:])

    def reload(self, limit_rate):
        """Re-renders the config, sends SIGHUP, and waits until the new workers answer."""
        self.render(limit_rate)
        self.proc.send_signal(signal.SIGHUP)
        deadline = time.time() + 10
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SetupError("nginx exited during a reload")
            if self.answered_generation() == self.generation:
                return
            time.sleep(0.05)
        raise SetupError("nginx did not take the new configuration within 10 s")

    def workers(self):
        try:
            with open("/proc/%d/task/%d/children" % (self.proc.pid, self.proc.pid)) as f:
                return [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            return []

    def stop(self):
        """Graceful shutdown (SIGQUIT), then fast (SIGTERM), then SIGKILL of the master and of
        the workers it had (orphaned workers would keep the port)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGQUIT, 5), (signal.SIGTERM, 3)):
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                pass
        workers = self.workers()
        self.proc.kill()
        self.proc.wait(timeout=5)
        for w in workers:
            try:
                os.kill(w, signal.SIGKILL)
            except OSError:
                pass

    def mark(self):
        """The access log's current end."""
        time.sleep(0.05)
        return os.path.getsize(self.log) if os.path.exists(self.log) else 0

    def since(self, mark, settle=0.3):
        """Log entries after `mark`, once the log stopped growing (nginx writes a request's line
        when it finalises the request, which can be just after the client saw the last byte)."""
        last = -1
        stable_since = time.time()
        while True:
            size = os.path.getsize(self.log) if os.path.exists(self.log) else 0
            if size != last:
                last = size
                stable_since = time.time()
            elif time.time() - stable_since >= settle:
                break
            time.sleep(0.05)
        with open(self.log, "rb") as f:
            f.seek(mark)
            data = f.read().decode("utf-8", errors="replace")
        return [json.loads(line) for line in data.splitlines() if line.strip()]


    def wait_for(self, mark, predicate, timeout=10):
        """Log entries after `mark` once one satisfies `predicate` (or the timeout passed)."""
        deadline = time.time() + timeout
        while True:
            entries = self.since(mark, settle=0.1)
            if any(predicate(e) for e in entries) or time.time() > deadline:
                return entries


def make_certificates(work):
    """A private CA and a server certificate for 127.0.0.1 and localhost that it signed:
    (ca.pem, server.pem, server.key)."""
    openssl = ls.ensure_tool("openssl", "openssl")
    d = os.path.join(work, "tls")
    os.makedirs(d)
    ca_key, ca, key, csr, cert, ext = (os.path.join(d, n) for n in (
        "ca.key", "ca.pem", "server.key", "server.csr", "server.pem", "server.ext"))
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    steps = [
        [openssl, "req", "-x509"] + ec + ["-keyout", ca_key, "-out", ca, "-days", "2", "-subj", "/CN=Larder test CA",
         "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        [openssl, "req"] + ec + ["-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1"],
        [openssl, "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert,
         "-days", "2", "-extfile", ext],
    ]
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
                "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n")
    for cmd in steps:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode != 0:
            raise SetupError("openssl failed: %s\n%s" % (" ".join(cmd), p.stdout))
    return ca, cert, key
