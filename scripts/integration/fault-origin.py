#!/usr/bin/env python3
"""A fault-injecting HTTP origin for Larder's sync tests (Python 3 standard library only).

Usage: fault-origin.py --root DIR [--host 127.0.0.1] [--other-host 127.0.0.2] [--port 0]
                       [--lifetime 600] [--parent-pid PID] [--quiet]

Serves the static repository tree under DIR on loopback, and prints one line on stdout once it
listens:

    PORT <n>

(then logs to stderr). With --other-host it also listens on that address with the same port and
the same tree, so a redirect "to another host" goes somewhere real and the test can see whether a
client followed it (GET /__log shows the address each request arrived on).

Healthy serving: GET and HEAD; an ETag (the SHA-256 of the content) on every file; If-None-Match
answered 304; single byte ranges ("bytes=A-B", "bytes=A-", "bytes=-N") answered 206 with
Content-Range, If-Range honoured (a validator that does not match gets the whole file with 200),
an unsatisfiable range answered 416. A path /lanes/NAME/REST is served as /REST: each test case
uses its own lane, so faults injected for one case never touch another running at the same time.

Control endpoint (on --host only; paths starting with /__ are never faulted):

    POST /__fault    a JSON rule, or a list of rules; answers {"ids": [...]}
    GET  /__faults   the rules, with how many requests each one hit ("applied") and has left
    POST /__reset    {"path-prefix": P} removes the rules (and log entries) under P; {} removes all;
                     a request under P that began before the reset and ends after it (a drip
                     the client abandoned, finishing its last sleep) is not logged either
    GET  /__log      the requests served: [{"host","method","path","range","if-range",
                     "if-none-match","status","fault","sent","declared"}...]; ?prefix=P filters
    POST /__shutdown stops the server

A rule: {"path-prefix": "/lanes/x/b/packages/", "fault": NAME, "count": 1, ...parameters}
("exact": true: that path only, not the paths it is a prefix of). The
first rule whose prefix the request path (without query) starts with, and that has requests
left, applies; "count" is how many requests get the fault before it heals (default 1; -1: until
reset). "only-range": true makes a rule apply only to requests carrying a Range header (the
default for range-ignore and bad-content-range); others pass through without using it up.

Faults and their parameters:

    truncate           real Content-Length; sends "bytes" of the body (default half) and closes
    length-more        declares Content-Length + "delta" (default 100), sends the body, closes
    length-less        declares Content-Length - "delta" (default 100), sends the whole body, closes
    range-ignore       a Range request gets 200 and the whole body
    bad-content-range  a Range request gets 206 starting "shift" bytes (default 7) after the
                       requested offset (or at 0 when that is past the end), honestly labelled;
                       "total" replaces the size after the slash of Content-Range
    flip               the byte at "offset" (default the middle of what is sent; negative: from
                       the end) is inverted
    drip               headers, then "rate" bytes per second (default 4) until done or the
                       client goes away
    stall              headers, then nothing for "seconds" (default 120), then closes
    status             answers "status" (default 500) with a short body; "retry-after" adds a
                       Retry-After header (default 1 for 429 and 503)
    redirect-loop      302 to the very same URL
    redirect-host      302 to the same path on --other-host (same port)
    redirect           302 to the same path on the same host with "?redirected=N" (healthy)
    extra              the file followed by "extra" bytes (default 64) of junk, Content-Length
                       matching what is sent ("no-length": true: no Content-Length, the end of
                       the body is the connection closing)
    serve-from         serves the path from the directory "dir" instead of the root (same
                       relative path, lane stripped); for replaying or substituting documents

The server stops by itself after --lifetime seconds (a watchdog thread; it ends the process even
if a handler is stuck), and within a second of --parent-pid disappearing.
"""
import argparse
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
from larder_scripts.fault_server import (  # noqa: E402  (found through the line above)
    CONFIG, SERVERS, STOP, Handler, Server, note, stop_servers)


def watchdog(lifetime, parent):
    end = time.time() + lifetime
    while time.time() < end and not STOP.is_set():
        time.sleep(0.5)
        if parent and not pid_alive(parent):
            note("parent %d is gone; stopping" % parent)
            break
    if not STOP.is_set():
        note("lifetime over; stopping")
    stop_servers()
    time.sleep(3)
    os._exit(0)  # even if a handler thread is stuck


def pid_alive(pid):
    """Whether `pid` still runs (a zombie does not; nor does a parent we were taken away from)."""
    if pid == ORIGINAL_PPID and os.getppid() != pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


ORIGINAL_PPID = os.getppid()


def bind(host, other, port):
    """Binds host (and other, on the same port); retries when the other address's port is taken."""
    for _ in range(20):
        main = Server((host, port), Handler)
        chosen = main.server_address[1]
        if not other:
            return main, None
        try:
            second = Server((other, chosen), Handler)
            return main, second
        except OSError as e:
            main.server_close()
            if port != 0:
                note("cannot listen on %s:%d (%s); no other host" % (other, chosen, e))
                return Server((host, port), Handler), None
    note("no port free on both %s and %s; no other host" % (host, other))
    return Server((host, 0), Handler), None


def main():
    ap = argparse.ArgumentParser(description="Fault-injecting HTTP origin for larder sync tests.")
    ap.add_argument("--root", required=True, help="the directory served")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--other-host", default="127.0.0.2", help="a second loopback address ('' for none)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--lifetime", type=float, default=600, help="seconds before the server stops by itself")
    ap.add_argument("--parent-pid", type=int, default=0, help="stop when this process is gone")
    ap.add_argument("--quiet", action="store_true", help="no request log on stderr")
    a = ap.parse_args()
    for h in (a.host, a.other_host):
        if h and not h.startswith("127."):
            ap.error("only loopback addresses (127.x.x.x) may be used: %s" % h)
    if not os.path.isdir(a.root):
        ap.error("--root %s is not a directory" % a.root)
    CONFIG.update(root=os.path.abspath(a.root), host=a.host, quiet=a.quiet)
    main_server, second = bind(a.host, a.other_host or None, a.port)
    CONFIG["port"] = main_server.server_address[1]
    CONFIG["other"] = second.server_address[0] if second else None
    SERVERS.append(main_server)
    if second:
        SERVERS.append(second)
    threading.Thread(target=watchdog, args=(a.lifetime, a.parent_pid), daemon=True).start()
    for s in SERVERS[1:]:
        threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    print("PORT %d" % CONFIG["port"], flush=True)
    note("serving %s on http://%s:%d/%s" % (
        CONFIG["root"], a.host, CONFIG["port"], " and http://%s:%d/" % (CONFIG["other"], CONFIG["port"]) if second else ""))
    try:
        main_server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    STOP.set()
    for s in SERVERS:
        s.server_close()


if __name__ == "__main__":
    main()
