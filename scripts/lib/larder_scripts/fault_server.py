"""The fault-injecting HTTP origin's server (scripts/integration/fault-origin.py runs it; its
docstring is the reference for the control endpoint, the rules and the faults): the rule table,
the request log and the handler that serves the repository tree with the faults applied."""
import hashlib
import http.server
import json
import mimetypes
import os
import re
import socket
import sys
import threading
import time
import urllib.parse

LOCK = threading.Lock()
RULES = []  # dicts; guarded by LOCK
LOG = []  # dicts; guarded by LOCK
RESETS = {}  # path prefix -> time of its last reset; guarded by LOCK
NEXT_ID = [1]
STOP = threading.Event()
ETAGS = {}  # (path, mtime_ns, size) -> etag; guarded by LOCK
CONFIG = {"root": ".", "host": "127.0.0.1", "other": None, "port": 0, "quiet": False}

JUNK = bytes((i * 37 + 11) & 0xFF for i in range(251))
RANGE_FAULTS = {"range-ignore", "bad-content-range"}
FAULTS = {
    "truncate", "length-more", "length-less", "range-ignore", "bad-content-range", "flip", "drip", "stall",
    "status", "redirect-loop", "redirect-host", "redirect", "extra", "serve-from",
}


def note(msg):
    if not CONFIG["quiet"]:
        sys.stderr.write("fault-origin: %s\n" % msg)
        sys.stderr.flush()


def lane_strip(path):
    """/lanes/NAME/REST -> /REST."""
    m = re.match(r"^/lanes/[^/]+(/.*)$", path)
    return m.group(1) if m else path


def resolve(root, path):
    """The file under `root` for a URL path, or None (no traversal, no directories)."""
    rel = urllib.parse.unquote(lane_strip(path)).lstrip("/")
    if not rel or "\x00" in rel:
        return None
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return None
    full = os.path.realpath(os.path.join(root, *parts))
    base = os.path.realpath(root)
    if not full.startswith(base + os.sep) or not os.path.isfile(full):
        return None
    return full


def etag_of(full):
    st = os.stat(full)
    key = (full, st.st_mtime_ns, st.st_size)
    with LOCK:
        tag = ETAGS.get(key)
    if tag is None:
        h = hashlib.sha256()
        with open(full, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 16), b""):
                h.update(chunk)
        tag = '"%s"' % h.hexdigest()[:40]
        with LOCK:
            ETAGS[key] = tag
    return tag


def parse_range(header, size):
    """One byte range -> (start, end inclusive); None if absent or malformed; 'bad' if
    unsatisfiable."""
    if not header:
        return None
    m = re.match(r"^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$", header)
    if not m or (m.group(1) == "" and m.group(2) == ""):
        return None
    a, b = m.group(1), m.group(2)
    if a == "":
        n = int(b)
        if n == 0:
            return "bad"
        return (max(0, size - n), size - 1)
    start = int(a)
    end = int(b) if b else size - 1
    if start >= size or end < start:
        return "bad"
    return (start, min(end, size - 1))


def pick_rule(path, has_range):
    """The rule that applies to this request (its count used up by one), or None."""
    with LOCK:
        for r in RULES:
            if not path.startswith(r["path-prefix"]) or (r.get("exact") and path != r["path-prefix"]):
                continue
            if r["left"] == 0:
                continue
            if r.get("only-range", r["fault"] in RANGE_FAULTS) and not has_range:
                continue
            if r["left"] > 0:
                r["left"] -= 1
            r["applied"] += 1
            return dict(r)
    return None


def add_rule(spec):
    if not isinstance(spec, dict):
        raise ValueError("a rule is a JSON object")
    prefix = spec.get("path-prefix")
    fault = spec.get("fault")
    if not isinstance(prefix, str) or not prefix.startswith("/"):
        raise ValueError('"path-prefix" must be a path starting with /')
    if prefix.startswith("/__"):
        raise ValueError("the control endpoint cannot be faulted")
    if fault not in FAULTS:
        raise ValueError('"fault" must be one of: %s' % ", ".join(sorted(FAULTS)))
    count = spec.get("count", 1)
    if not isinstance(count, int) or count == 0 or count < -1:
        raise ValueError('"count" must be a positive integer, or -1 for until reset')
    if fault == "serve-from" and not os.path.isdir(str(spec.get("dir", ""))):
        raise ValueError('serve-from needs "dir", an existing directory')
    rule = dict(spec)
    rule["count"] = count
    rule["left"] = count
    rule["applied"] = 0
    with LOCK:
        rule["id"] = NEXT_ID[0]
        NEXT_ID[0] += 1
        RULES.append(rule)
    return rule["id"]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fault-origin/1"
    timeout = 300  # an idle keep-alive connection does not hold a thread forever

    def log_message(self, fmt, *args):
        if not CONFIG["quiet"]:
            sys.stderr.write("fault-origin: %s %s\n" % (self.local_host(), fmt % args))

    def local_host(self):
        try:
            return self.connection.getsockname()[0]
        except OSError:
            return "?"

    # ---- plumbing

    def record(self, status, fault=None, sent=0, declared=None):
        entry = {
            "t": time.time(),
            "host": self.local_host(),
            "method": self.command,
            "path": self.path,
            "range": self.headers.get("Range"),
            "if-range": self.headers.get("If-Range"),
            "if-none-match": self.headers.get("If-None-Match"),
            "status": status,
            "fault": fault,
            "sent": sent,
            "declared": declared,
        }
        with LOCK:
            began = getattr(self, "began", entry["t"])
            if not any(self.path.startswith(p) and began < t for p, t in RESETS.items()):
                LOG.append(entry)

    def send_json(self, status, value):
        body = (json.dumps(value, indent=1, sort_keys=True) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def write(self, data):
        """Writes and flushes; False when the client went away."""
        try:
            self.wfile.write(data)
            self.wfile.flush()
            return True
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, OSError):
            self.close_connection = True
            return False

    def client_gone(self):
        """Whether the peer closed its side (readable with nothing to read)."""
        import select

        try:
            r, _, _ = select.select([self.connection], [], [], 0)
            if not r:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def gone_within(self, seconds):
        """Waits up to `seconds`; True as soon as the peer closes its side (so that the request
        is recorded when the client abandons it, not at the next tick)."""
        import select

        deadline = time.time() + seconds
        while True:
            left = deadline - time.time()
            if left <= 0:
                return False
            try:
                r, _, _ = select.select([self.connection], [], [], left)
            except OSError:
                return True
            if r:
                if self.client_gone():
                    return True
                time.sleep(max(0.0, deadline - time.time()))  # readable with data: no close to wait for
                return False

    def hard_close(self):
        """Ends the connection now, with no more bytes."""
        self.close_connection = True
        try:
            self.wfile.flush()
        except OSError:
            pass
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # ---- control

    def control(self):
        parsed = urllib.parse.urlsplit(self.path)
        if self.local_host() != CONFIG["host"]:
            return self.send_json(404, {"error": "no control endpoint on this address"})
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        try:
            body = json.loads(raw.decode() or "null")
        except ValueError:
            return self.send_json(400, {"error": "the body is not JSON"})
        route = (self.command, parsed.path)
        if route == ("POST", "/__fault"):
            specs = body if isinstance(body, list) else [body]
            try:
                ids = [add_rule(s) for s in specs]
            except ValueError as e:
                return self.send_json(400, {"error": str(e)})
            note("rules added: %s" % json.dumps(specs))
            return self.send_json(200, {"ids": ids})
        if route == ("GET", "/__faults"):
            with LOCK:
                rules = [dict(r) for r in RULES]
            return self.send_json(200, rules)
        if route == ("POST", "/__reset"):
            prefix = (body or {}).get("path-prefix", "") if isinstance(body, dict) else ""
            with LOCK:
                RULES[:] = [r for r in RULES if not r["path-prefix"].startswith(prefix)]
                LOG[:] = [e for e in LOG if not e["path"].startswith(prefix)]
                RESETS[prefix] = time.time()
            return self.send_json(200, {"reset": prefix})
        if route == ("GET", "/__log"):
            q = urllib.parse.parse_qs(parsed.query)
            prefix = q.get("prefix", [""])[0]
            with LOCK:
                entries = [dict(e) for e in LOG if e["path"].startswith(prefix)]
            return self.send_json(200, entries)
        if route == ("POST", "/__shutdown"):
            self.send_json(200, {"stopping": True})
            threading.Thread(target=stop_servers, daemon=True).start()
            return None
        return self.send_json(404, {"error": "unknown control request %s %s" % route})

    # ---- serving

    def do_POST(self):
        if self.path.startswith("/__"):
            return self.control()
        self.send_error(405)

    def do_HEAD(self):
        self.began = time.time()
        self.serve(head=True)

    def do_GET(self):
        self.began = time.time()
        if self.path.startswith("/__"):
            return self.control()
        self.serve(head=False)

    def serve(self, head):
        path = urllib.parse.urlsplit(self.path).path
        rng_header = self.headers.get("Range")
        rule = pick_rule(path, rng_header is not None)
        fault = rule["fault"] if rule else None
        root = CONFIG["root"]
        if fault == "serve-from":
            root = rule["dir"]
        elif fault == "status":
            return self.fault_status(rule)
        elif fault in ("redirect-loop", "redirect-host", "redirect"):
            return self.fault_redirect(rule)

        full = resolve(root, path)
        if full is None:
            body = b"not found\n"
            self.send_response(404)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head:
                self.write(body)
            return self.record(404, fault)
        with open(full, "rb") as f:
            data = f.read()
        size = len(data)
        tag = etag_of(full)

        inm = self.headers.get("If-None-Match")
        if inm is not None and fault is None and (inm.strip() == "*" or tag in [t.strip() for t in inm.split(",")]):
            self.send_response(304)
            self.send_header("ETag", tag)
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            return self.record(304, fault)

        status = 200
        start, end = 0, size - 1
        rng = parse_range(rng_header, size) if size > 0 else ("bad" if rng_header else None)
        if_range = self.headers.get("If-Range")
        if rng is not None and if_range is not None and if_range.strip() != tag:
            rng = None  # the validator changed: the whole file
        if fault == "range-ignore":
            rng = None
        if rng == "bad":
            self.send_response(416)
            self.send_header("Content-Range", "bytes */%d" % size)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return self.record(416, fault)
        if rng is not None:
            status = 206
            start, end = rng
            if fault == "bad-content-range":
                shift = int(rule.get("shift", 7 if "total" not in rule else 0))
                start = start + shift if start + shift < size else 0
                end = max(end, start)
        body = data[start:end + 1]
        if fault == "extra":
            n = int(rule.get("extra", 64))
            body = body + (JUNK * (n // len(JUNK) + 1))[:n]
        if fault == "flip" and body:
            off = int(rule.get("offset", len(body) // 2))
            off = off + len(body) if off < 0 else off
            off = min(max(off, 0), len(body) - 1)
            body = body[:off] + bytes([body[off] ^ 0xFF]) + body[off + 1:]

        declared = len(body)
        if fault == "length-more":
            declared = len(body) + int(rule.get("delta", 100))
        elif fault == "length-less":
            declared = max(0, len(body) - int(rule.get("delta", 100)))

        self.send_response(status)
        ctype = mimetypes.guess_type(full)[0] or "application/octet-stream"
        if full.endswith(".json") or full.endswith(".sig"):
            ctype = "application/json"
        self.send_header("Content-Type", ctype)
        if not (fault == "extra" and rule.get("no-length")):
            self.send_header("Content-Length", str(declared))
        self.send_header("ETag", tag)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Cache-Control", "no-cache")
        if status == 206:
            total = int(rule.get("total", size)) if fault == "bad-content-range" else size
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, start + len(body) - 1 if body else start, total))
        unlabelled = fault == "extra" and rule.get("no-length")
        if fault in ("truncate", "length-more", "length-less", "stall", "drip") or unlabelled:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if head:
            return self.record(status, fault, 0, declared)

        if fault == "truncate":
            n = int(rule.get("bytes", len(body) // 2))
            sent = len(body[:n]) if self.write(body[:n]) else 0
            self.hard_close()
            return self.record(status, fault, sent, declared)
        if fault == "stall":
            self.wfile.flush()
            deadline = time.time() + float(rule.get("seconds", 120))
            while time.time() < deadline and not STOP.is_set() and not self.client_gone():
                time.sleep(0.2)
            self.hard_close()
            return self.record(status, fault, 0, declared)
        if fault == "drip":
            rate = max(1, int(rule.get("rate", 4)))
            sent = 0
            while sent < len(body) and not STOP.is_set():
                if not self.write(body[sent:sent + rate]):
                    break
                sent += len(body[sent:sent + rate])
                if sent < len(body) and self.gone_within(1.0):
                    break
            self.hard_close()
            return self.record(status, fault, sent, declared)
        ok = self.write(body)
        if fault in ("length-more", "length-less") or unlabelled:
            self.hard_close()
        return self.record(status, fault, len(body) if ok else 0, declared)

    def fault_status(self, rule):
        code = int(rule.get("status", 500))
        body = ("fault-origin: injected %d\n" % code).encode()
        self.send_response(code)
        retry = rule.get("retry-after", 1 if code in (429, 503) else None)
        if retry is not None:
            self.send_header("Retry-After", str(retry))
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.write(body)
        self.record(code, "status")

    def fault_redirect(self, rule):
        fault = rule["fault"]
        port = CONFIG["port"]
        if fault == "redirect-loop":
            location = "http://%s:%d%s" % (self.local_host(), port, self.path)
        elif fault == "redirect-host":
            other = CONFIG["other"] or "127.0.0.2"
            location = "http://%s:%d%s" % (other, port, self.path)
        else:
            parsed = urllib.parse.urlsplit(self.path)
            location = "http://%s:%d%s?redirected=%d" % (self.local_host(), port, parsed.path, rule["applied"])
        body = b"moved\n"
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.write(body)
        self.record(302, fault)


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False


SERVERS = []


def stop_servers():
    STOP.set()
    for s in SERVERS:
        try:
            s.shutdown()
        except Exception:
            pass
