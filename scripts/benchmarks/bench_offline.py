"""`scripts/bench --offline`: how fast a forwarded request fails with no network, beside curl.

Runs scripts/integration/offline-passthrough.sh with the release build and RUNS tries per cause
(default 9): `larder serve` in a network namespace with only loopback up (`ip netns`, root), a
forwarded request for an unknown host (the resolver cannot be reached) and for an address with no
route, each answered 502 naming the cause; the medians beside curl failing on its own in the same
namespace. The target (issue 29): about a second at most, near curl's own time; before the
forwarder stopped retrying connection attempts it took 60 s.
"""
import os
import subprocess
import time

import larder_scripts as ls
from larder_scripts import die

TITLE = "## A forwarded request with no network (`scripts/bench --offline`)"
BEGIN = "<!-- bench-offline:begin -->"
END = "<!-- bench-offline:end -->"


def main(larder, runs, write):
    script = os.path.join(ls.CHECKOUT, "scripts", "integration", "offline-passthrough.sh")
    p = subprocess.run([script, str(runs)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=dict(os.environ, LARDER_BIN=larder))
    if p.returncode != 0:
        die("offline-passthrough.sh failed (exit %d):\n%s" % (p.returncode, p.stdout[-3000:]))
    rows = [line for line in p.stdout.splitlines() if line.startswith("|")]
    if len(rows) < 4:
        die("offline-passthrough.sh printed no table:\n%s" % p.stdout[-3000:])
    machine = "%d CPUs, %s" % (os.cpu_count() or 0, " ".join(os.uname()[0:3:2]))
    lines = ["", "Run on %s, %s. Command: `scripts/bench --offline` (root: `ip netns`), %d tries per row, "
             "release build." % (machine, time.strftime("%Y-%m-%d"), runs), ""] + rows + [
        "", "Each row: `larder serve` (forwarding, not `--offline`) in a network namespace with only loopback up "
        "answers a request it must forward with 502 naming the cause (DNS error, unreachable); curl alone asks the "
        "same in the same namespace. Target: about a second at most, near curl's time (before, 60 s).", ""]
    ls.show_section(TITLE, BEGIN, END, lines, write, "--offline")
    return 0
