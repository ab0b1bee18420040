#!/usr/bin/env python3
"""Integration test of `larder init`, `plan` and `sync` against a real nginx from Debian.

Usage: scripts/integration/nginx-sync.py [--tls]

With --tls every scenario runs over https: the script makes a private certificate authority and
a server certificate for 127.0.0.1 with openssl, nginx listens with `ssl http2`, and larder
trusts the CA through LARDER_CA_FILE (the default of `--ca-file`); a sandbox that does not trust
it must fail with a certificate error and change nothing.

Publishes packages with `larder pack` / `larder revoke` into a temporary repository, serves it
with nginx (a foreground child on 127.0.0.1 and a free port, configured from
scripts/lib/larder_scripts/nginx.conf.template, with a JSON access log of every request: request
line, status, body_bytes_sent, Range, If-Range, If-None-Match, ETag, Content-Range), and checks what
larder asked for and what it did:

  1. first install: signature, index, gzipped file list and bundle fetched (200); doctor passes; status
     shows sample-app 1.0.0 active;
  2. no-change sync: exactly one request, GET /index.json.sig (unconditional, a few hundred
     bytes: it names the index it signs);
  3. an update that changes one file: signature, index, gzipped file list and ONE object; no bundle;
     the report says method objects and bytesFetched equals the object's size (and the log);
  4. resume: a 40 MB bundle served with limit_rate (files appear in staging/ while it downloads),
     the sync killed with SIGKILL once its .part file passes 25 %, the next sync resumes with
     `Range: bytes=N-` (and If-Range), answered 206; doctor and an independent hash check pass;
  5. revoke: the sync rolls back to 1.0.0; status shows 2.0.0 failed;
  6. minClientVersion (skipped as client-too-old, installed after re-init with a newer app
     version, device id kept) and channels (stable skips a beta package; a beta sandbox installs
     it);
  7. a republish within the same second as the previous one, with an index of the same length:
     nginx's ETag ("<mtime seconds>-<length>") does not change, and the next sync must still
     see the new index; and no publish stamps a file in the future (an honest clock);
  8. connection reuse: an update of 60 changed files of another package fetches 60 objects
     over at most 4 connections (HTTP/1.1; the transfer limit), one with HTTP/2 (--tls), and
     with --tls at most 4 TLS handshakes (nginx's $connection and $ssl_session_reused);
  9. updates by delta (deltas are made by pack; scenarios 3, 7 and 8 pack with --deltas 0 to
     test objects): the plan weighs delta, objects and bundle; the sync fetches the manifest and
     the patches only (nginx's log), under 1 % of the bundle; a corrupted patch on the server and
     a base altered on the device each fall back to that content's object; a crash (SIGKILL at
     each disk-changing call of the sync, `LARDER_CRASH_AT`) leaves the old or new version whole
     and the next sync finishes; a device four versions behind gets objects or the bundle, one
     three behind uses its own delta; every tree hashed here against its files.json;
 10. `larder verify URL` of the repository as nginx serves it exits 0 (--tls: through the
     private CA, from LARDER_CA_FILE), every delta checked.

Prints one line per check and ends with `nginx-sync: N passed, M failed`; exit 1 when any
check failed. Needs nginx (installs Debian's nginx-light when it is missing, as root or
through sudo, without starting the system nginx). Environment: LARDER_BIN (a built larder;
else `swift build` in this checkout), NGINX_SYNC_KEEP=1 (keep the work directory; after a
failure only nginx's config and logs are kept).
"""
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import larder_scripts as ls  # noqa: E402  (found through the line above)
from larder_scripts.nginx_server import Nginx, make_certificates  # noqa: E402
from larder_scripts import SetupError, say  # noqa: E402
from larder_scripts.nginx_sync.common import CHECKS, STARTED, check, published, show  # noqa: E402
from larder_scripts.nginx_sync.basics import (  # noqa: E402
    scenario_client_version_and_channels, scenario_first_install, scenario_no_change, scenario_objects_update,
    scenario_resume, scenario_revoke, scenario_same_second_republish)
from larder_scripts.nginx_sync.deltas import scenario_delta  # noqa: E402
from larder_scripts.nginx_sync.indexes import scenario_on_demand, scenario_sharded  # noqa: E402
from larder_scripts.nginx_sync.transport import (  # noqa: E402
    scenario_connection_reuse, scenario_untrusted, scenario_verify_url)

ls.NAME = "nginx-sync"


def main():
    started = STARTED
    tls_mode = "--tls" in sys.argv[1:]
    ls.NAME = "nginx-sync-tls" if tls_mode else "nginx-sync"
    larder = ls.Larder(ls.larder_binary(), timeout=60)
    nginx_bin = ls.ensure_tool("nginx", "nginx-light")
    work = ls.scratch_dir("larder-nginx.")
    keep = os.environ.get("NGINX_SYNC_KEEP") == "1"
    say("nginx-sync: work directory %s, larder %s, %s" % (work, larder.binary, subprocess.run(
        [nginx_bin, "-v"], stderr=subprocess.PIPE, text=True).stderr.strip()))
    repo = os.path.join(work, "repo")
    keys = os.path.join(work, "keys", "publisher")
    key, pub = keys + ".key", keys + ".pub"
    sb = os.path.join(work, "sb")
    sb2 = os.path.join(work, "sb-beta")
    os.makedirs(repo)
    nginx = Nginx(nginx_bin, work, repo)
    try:
        if tls_mode:
            nginx.tls = make_certificates(work)
            larder.env["LARDER_CA_FILE"] = nginx.tls[0]
        larder.must("keygen", "--out", keys)
        app1 = os.path.join(work, "src", "sample-app-1")
        shutil.copytree(ls.SAMPLE_APP, app1)
        larder.must("pack", app1, "--repo", repo, "--id", "sample-app", "--version", "1.0.0", "--key", key,
                    "--route", "https://app.example.com/")
        published(repo)
        nginx.start()
        say("nginx-sync: nginx pid %d serving %s on %s" % (nginx.proc.pid, repo, nginx.base))
        if tls_mode:
            scenario_untrusted(larder, nginx, work, pub)

        scenario_first_install(larder, nginx, repo, sb, pub)
        scenario_no_change(larder, nginx, sb)
        scenario_objects_update(larder, nginx, repo, sb, key, app1, work)
        scenario_resume(larder, nginx, repo, sb, key, work)
        scenario_revoke(larder, nginx, repo, sb, key)
        scenario_client_version_and_channels(larder, nginx, repo, sb, sb2, key, pub, work)

        scenario_same_second_republish(larder, nginx, repo, sb2, key, work)
        scenario_connection_reuse(larder, nginx, repo, key, pub, work)
        scenario_delta(larder, nginx, repo, key, pub, work)
        scenario_on_demand(larder, nginx, repo, key, pub, work)
        scenario_sharded(larder, nginx, repo, key, pub, work)

        entries = nginx.since(0)
        bad = [e for e in entries if e["status"] >= 400]
        check("no request in the whole run was answered 4xx/5xx", not bad, show(bad))
        scenario_verify_url(larder, nginx, pub)
    except SetupError as e:
        CHECKS.setup_failed(e)
    except KeyboardInterrupt:
        check("the script ran to its end", False, "interrupted")
    except Exception:
        check("the script ran to its end", False, traceback.format_exc())
    finally:
        nginx.stop()
        if nginx.proc is not None:
            check("nginx stopped", nginx.proc.poll() is not None)
    say("nginx-sync: %.1f s" % (time.time() - started))
    if keep:
        say("nginx-sync: kept %s" % work)
    elif CHECKS.failed == 0:
        shutil.rmtree(work, ignore_errors=True)
    else:
        # Keep what explains a failure (nginx's config and logs, the killed sync's output), not
        # the ~130 MB of repository and sandboxes (NGINX_SYNC_KEEP=1 keeps everything).
        for name in os.listdir(work):
            if name not in ("nginx", "killed-sync.out"):
                shutil.rmtree(os.path.join(work, name), ignore_errors=True)
        say("nginx-sync: kept %s/nginx (config, access.log, error.log)" % work)
    return CHECKS.finish()


if __name__ == "__main__":
    def on_signal(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        sys.exit(main())
    except SetupError as e:
        print("nginx-sync: " + str(e), file=sys.stderr)
        CHECKS.failed += 1
        say(CHECKS.summary())
        sys.exit(1)
