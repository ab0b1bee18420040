#!/usr/bin/env bash
# Browser end-to-end test: headless Chromium (Debian's `chromium`) loads the sample app by its
# production URL through `larder serve`, with the origin unreachable (the host is in .invalid, and
# every other host is mapped to NOTFOUND).
#
#   1. v1 is synced from a file:// repository; Chromium loads http://app.larder.invalid/ with
#      --host-resolver-rules mapping that host to the gateway; the DOM the app's JS builds from
#      its fetched JSON says "Catalogue v1.0.0 — 5 items" (checked with --dump-dom); the gateway
#      log shows every subresource (page, CSS, JS, image, font, JSON) served from the package;
#      a screenshot is saved as an artifact (artifacts/browser-v1.png).
#   2. v2 is published and synced while the gateway runs; a reload shows v2 (and its screenshot).
#   3. a file of v2 is deleted on disk: the page still renders (the JSON comes from v1, the
#      fallback), the gateway log says "fallback", and `larder status` records the failure.
#   4. the gateway forwards what no package serves (to a local origin), and answers 502 with
#      --offline.
#   5. hostile input: raw and encoded traversal never serves a sandbox file; a non-loopback
#      --listen exits 64; a corrupt state.json exits 1; the active version is unchanged.
# Usage: scripts/integration/browser.sh    (LARDER_BIN: the larder binary; else built here)
set -euo pipefail
# shellcheck source=../lib/common.sh
. "$(cd "$(dirname "$0")/.." && pwd)/lib/common.sh"
here=$LARDER_CHECKOUT
larder=$(larder_bin debug)
chromium_path >/dev/null
artifacts="$here/artifacts"
mkdir -p "$artifacts"
start_work browser
host=app.larder.invalid

"$larder" keygen --out key >/dev/null
publish() { # version
  sample_app_copy "$1" "app-$1"
  "$larder" pack "app-$1" --repo repo --id sample-app --version "$1" --key key.key \
    --route "https://$host/" --bypass /api/ >/dev/null
}
publish 1.0.0
"$larder" init --root sb --repo "file://$work/repo" --public-key key.pub >/dev/null
"$larder" sync --root sb >/dev/null

"$larder" serve --root sb --listen 127.0.0.1:0 --offline >gateway.log 2>gateway.err &
pids+=($!)
port=$(serve_port gateway.log)
[ -n "$port" ] || { cat gateway.err >&2; fail "the gateway did not start"; }
echo "gateway on 127.0.0.1:$port"

browse() { # name -> dom in $work/<name>.html, screenshot in artifacts/browser-<name>.png
  dump_dom "$1" "$host" "$port" >"$1.html" || {
    tail -20 "$1.chromium.log" >&2
    fail "chromium exited non-zero"
  }
  local chromium_cmd
  chromium_command "$1" "$host" "$port"
  timeout 120 "${chromium_cmd[@]}" --virtual-time-budget=5000 --window-size=900,700 \
    --screenshot="$artifacts/browser-$1.png" "http://$host/" >/dev/null 2>>"$1.chromium.log" ||
    fail "chromium could not take a screenshot"
  [ -s "$artifacts/browser-$1.png" ] || fail "no screenshot for $1"
}

expect_dom() { # name text
  grep -qF "$2" "$1.html" || { cat "$1.html" >&2; fail "$1: the page does not show '$2'"; }
  ok "$1: the DOM shows '$2'"
}

# 1. v1.
: >gateway.log.mark
browse v1
expect_dom v1 "Catalogue v1.0.0 — 5 items"
expect_dom v1 'data-version="1.0.0"'
grep -q 'class="item" data-id="flour"' v1.html || fail "v1: the catalogue items were not rendered"
ok "v1: the items rendered from data/catalog.json"
for path in / /css/app.css /js/app.js /img/logo.png /data/catalog.json /fonts/larder-sans.woff2; do
  grep -qE "^GET https://$host$path (200|304) sample-app@1.0.0 " gateway.log ||
    { cat gateway.log >&2; fail "v1: $path was not served from sample-app@1.0.0"; }
done
ok "v1: page, CSS, JS, image, font and JSON all came from sample-app@1.0.0 (gateway log)"
# (No `grep -q` after a pipe: with pipefail, its early exit can kill the writer with SIGPIPE and
# turn a match into a failure of the pipeline.)
if grep "$host" gateway.log | grep -v " sample-app@1.0.0 " >/dev/null; then
  grep "$host" gateway.log >&2
  fail "v1: a request was not served from the package"
fi
ok "v1: no request for $host left the package"
"$larder" confirm sample-app --root sb >/dev/null

# 2. v2, synced while the gateway runs.
publish 2.0.0
"$larder" sync --root sb >/dev/null
browse v2
expect_dom v2 "Catalogue v2.0.0 — 5 items"
grep -qE "^GET https://$host/data/catalog.json 200 sample-app@2.0.0 " gateway.log || fail "v2: catalog.json not from 2.0.0"
ok "v2: a reload after the sync is served from sample-app@2.0.0"

# 3. A file of v2 disappears.
rm "sb/packages/sample-app/2.0.0/data/catalog.json"
browse broken
expect_dom broken "Catalogue v1.0.0 — 5 items"
grep -qE "^GET https://$host/data/catalog.json 200 sample-app@1.0.0 fallback \(missing in 2.0.0\)" gateway.log ||
  { cat gateway.log >&2; fail "broken: catalog.json was not served from the fallback"; }
ok "broken: the page still renders; catalog.json came from the fallback 1.0.0"
failures=""
for _ in $(seq 50); do
  failures=$("$larder" status --root sb --json | "$PYTHON" -c '
import json, sys
s = json.load(sys.stdin)
p = [p for p in s["packages"] if p["id"] == "sample-app"][0]
print(p.get("failures", 0), p.get("active"), len([h for h in p.get("history", []) if h["event"] == "failure"]))')
  [ "${failures%% *}" != 0 ] && break
  sleep 0.1
done
[ "${failures%% *}" != 0 ] || fail "broken: larder status shows no failure ($failures)"
status_text=$("$larder" status --root sb) || fail "broken: larder status exited non-zero"
grep -qi "fail" <<<"$status_text" || fail "broken: the text status does not mention the failure"
ok "broken: larder status records the failure (failures, active, failure events: $failures)"

# 4. Passthrough: forwarded to a local origin, or 502 offline.
mkdir origin && echo "from the network" >origin/hello.txt
oport=$(free_port)
(cd origin && exec "$PYTHON" -m http.server "$oport" --bind 127.0.0.1 >/dev/null 2>&1) &
pids+=($!)
"$larder" serve --root sb --listen 127.0.0.1:0 --upstream-scheme http >forward.log 2>&1 &
pids+=($!)
fport=$(serve_port forward.log)
for _ in $(seq 100); do [ -n "$(curl -s "http://127.0.0.1:$oport/hello.txt" || true)" ] && break; sleep 0.1; done
body=$(curl -s -H "Host: 127.0.0.1:$oport" "http://127.0.0.1:$fport/hello.txt")
[ "$body" = "from the network" ] || { cat forward.log >&2; fail "forwarding: got '$body'"; }
logged "^GET http://127.0.0.1:$oport/hello.txt 200 passthrough" forward.log || { cat forward.log >&2; fail "forwarding not logged"; }
ok "a request no package serves is forwarded to the network and logged as passthrough"
# The forwarder shared with the WebKit driver: method, header fields and body go out as received;
# the answer's status, fields and a large body come back streamed.
eport=$(free_port)
cat >echo.py <<'PY'
import hashlib, http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        if self.path == "/big":
            out = bytes(range(256)) * 16384  # 4 MiB
        else:
            out = ("%s %s trace=%s connection-marker=%s body=%s" % (self.command, self.path, self.headers.get("X-Trace"),
                   self.headers.get("X-Larder-Gateway"), body.decode())).encode()
        self.send_response(201 if self.command == "POST" else 200)
        self.send_header("Content-Length", str(len(out)))
        self.send_header("X-Origin", "echo")
        self.end_headers()
        self.wfile.write(out)
    do_GET = do_POST = do_PUT = answer
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
"$PYTHON" echo.py "$eport" &
pids+=($!)
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$eport/x" && break; sleep 0.1; done
out=$(curl -s -D echo.headers -X POST --data 'name=flour' -H "X-Trace: t42" -H "Host: 127.0.0.1:$eport" "http://127.0.0.1:$fport/items?q=1")
[ "$out" = "POST /items?q=1 trace=t42 connection-marker=1 body=name=flour" ] || fail "forwarding a POST: got '$out'"
if ! grep -q "^HTTP/1.1 201" echo.headers || ! grep -qi "^x-origin: echo" echo.headers; then
  cat echo.headers >&2
  fail "forwarding: status or fields not relayed"
fi
ok "a POST no package serves is forwarded with its method, fields and body; status 201 and fields relayed"
want=$("$PYTHON" -c 'import hashlib; print(hashlib.sha256(bytes(range(256)) * 16384).hexdigest())')
got=$(curl -s -H "Host: 127.0.0.1:$eport" "http://127.0.0.1:$fport/big" | sha256sum | cut -d' ' -f1)
[ "$got" = "$want" ] || fail "forwarding a 4 MiB answer: the bytes differ"
ok "a 4 MiB answer is relayed intact (streamed)"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Host: $host" "http://127.0.0.1:$port/api/items")
[ "$code" = 502 ] || fail "offline: /api/items answered $code, not 502"
logged "^GET https://$host/api/items 502 passthrough (offline: .*bypass" gateway.log || fail "offline: not logged"
ok "offline: a bypass path is answered 502 and logged"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/sample-app/js/app.js")
[ "$code" = 200 ] || fail "larder:// form /<id>/<path> answered $code"
ok "the gateway's own address serves /<id>/<path> (larder:// form)"

# 5. Hostile input: traversal never leaves the package, a bad --listen and an unreadable state
#    fail with a clear error and a non-zero exit, and the active version stays as it was.
active_in_state() { "$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["packages"]["sample-app"]["active"])' sb/state.json; }
before=$(active_in_state)
for bad in "/../../state.json" "/%2e%2e/%2e%2e/state.json" "/..%2f..%2fstate.json" "/a%00b" "/a%5cb" "/sample-app/../../config.json"; do
  out=$(curl -s --path-as-is -H "Host: $host" -w ' HTTP%{http_code}' "http://127.0.0.1:$port$bad")
  if grep -q '"generation"\|"trustedKeys"\|"deviceId"' <<<"$out"; then fail "traversal: $bad leaked a sandbox file"; fi
done
ok "traversal attempts (raw and encoded ../, NUL, backslash) never serve a file outside the package"
set +e
"$larder" serve --root sb --listen 0.0.0.0:8080 >/dev/null 2>listen.err; code=$?
set -e
if [ "$code" != 64 ] || ! grep -q "loopback" listen.err; then
  fail "a non-loopback --listen gave exit $code: $(cat listen.err)"
fi
ok "a non-loopback --listen is refused (exit 64, names loopback)"
cp -r sb sb-corrupt && echo '{not json' >sb-corrupt/state.json
set +e
"$larder" serve --root sb-corrupt --listen 127.0.0.1:0 >/dev/null 2>corrupt.err; code=$?
set -e
if [ "$code" != 1 ] || ! grep -q "state" corrupt.err; then
  fail "a corrupt state.json gave exit $code: $(cat corrupt.err)"
fi
ok "serve on a corrupt state.json fails (exit 1): $(head -1 corrupt.err)"
after=$(active_in_state)
[ "$before" = "$after" ] || fail "the active version changed from $before to $after"
ok "the active version is still $after"

echo "browser: $checks checks passed; screenshots in $artifacts/browser-{v1,v2,broken}.png"
