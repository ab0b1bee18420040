#!/usr/bin/env bash
# Cookies and redirects through `larder serve`, in headless Chromium, against a real origin:
# the gateway relays a forwarded 3xx with its fields instead of following it, and each
# `Set-Cookie` field apart, so the browser stores the cookies and follows the redirect itself.
#
# Everything runs in a network namespace (`ip netns`, root) whose hosts file
# (/etc/netns/NAME/hosts, which `ip netns exec` mounts over /etc/hosts) names the origin:
# app.test is 127.0.0.1, where a Python origin listens on port 80. Chromium maps app.test to the
# gateway (--host-resolver-rules); the gateway forwards what the package bypasses (/api/) to
# http://app.test/, the origin.
#
#   1. the page (from the package) fetches /api/login: the origin answers 302 to /api/home with
#      an HttpOnly cookie and a script-visible one (two Set-Cookie fields); Chromium follows it
#      and gets the landing page, whose request carried both cookies;
#   2. document.cookie shows the script-visible cookie only; a later request carries both plus
#      one the page's script set;
#   3. the gateway's log shows the 302 relayed (not followed) and the landing request forwarded.
#
# Usage: scripts/integration/browser-cookies.sh   (LARDER_BIN: the larder binary; root)
set -euo pipefail
# shellcheck source=../lib/common.sh
. "$(cd "$(dirname "$0")/.." && pwd)/lib/common.sh"
[ "$(id -u)" = 0 ] || die "ip netns needs root"
ensure_packages iproute2
larder=$(larder_bin debug)
chromium_path >/dev/null
choose_python || die "no python3"
start_work browser-cookies
ns="larder-cookies-$$"
mkdir -p "/etc/netns/$ns"
printf '127.0.0.1 localhost app.test\n' >"/etc/netns/$ns/hosts"
ip netns add "$ns"
trap 'ip netns del "$ns" 2>/dev/null || true; rm -rf "/etc/netns/$ns"; _end_work' EXIT
ip netns exec "$ns" ip link set lo up

cat >origin.py <<'EOF'
import http.server, json, sys, threading
LOG = threading.Lock()
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        # One whole line per request, under a lock: the server answers on several threads, and
        # print()'s pieces from two of them interleaved ("GETGET /favicon.ico") in a run.
        with LOG:
            sys.stdout.write("%s %s %s\n" % (self.command, self.path, self.headers.get("Cookie", "")))
            sys.stdout.flush()
    def reply(self, status, doc, extra=()):
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        cookie = self.headers.get("Cookie", "")
        if self.path == "/api/login":
            self.reply(302, {"moved": True}, [("Location", "/api/home"),
                                              ("Set-Cookie", "sid=s3cret; Path=/; HttpOnly"),
                                              ("Set-Cookie", "theme=dark; Path=/")])
        else:
            self.reply(200, {"path": self.path, "cookie": cookie})
http.server.ThreadingHTTPServer(("127.0.0.1", 80), H).serve_forever()
EOF
ip netns exec "$ns" "$PYTHON" origin.py >origin.log 2>&1 &
pids+=($!)

"$larder" keygen --out key >/dev/null
sample_app_copy 1.0.0 app
cat >app/cookies.html <<'EOF'
<!doctype html>
<html><head><meta charset="utf-8"></head><body><pre id="out">running</pre><script>
(async function () {
  var out = {};
  try {
    var login = await fetch('/api/login');
    out.login = { status: login.status, redirected: login.redirected, body: await login.json() };
    document.cookie = 'page=script; Path=/';
    out.documentCookie = document.cookie;
    out.whoami = await (await fetch('/api/whoami')).json();
  } catch (e) { out.error = String(e); }
  document.getElementById('out').textContent = JSON.stringify(out);
})();
</script></body></html>
EOF
"$larder" pack app --repo repo --id sample-app --version 1.0.0 --key key.key --route "https://app.test/" \
  --bypass /api/ >/dev/null
"$larder" init --root sb --repo "file://$work/repo" --public-key key.pub >/dev/null
"$larder" sync --root sb >/dev/null
port=18$((RANDOM % 900 + 100))
ip netns exec "$ns" "$larder" serve --root sb --listen "127.0.0.1:$port" --upstream-scheme http >gateway.log 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do grep -q "listening on" gateway.log && break; sleep 0.1; done
grep -q "listening on" gateway.log || { cat gateway.log >&2; fail "the gateway did not start"; }

tmp="$PWD/chromium-tmp"
mkdir -p "$tmp"
ip netns exec "$ns" env TMPDIR="$tmp" timeout 120 "$(chromium_path)" --headless --no-sandbox --disable-gpu \
  --disable-dev-shm-usage --no-first-run "--disable-features=HttpsUpgrades,HttpsFirstBalancedModeAutoEnable" \
  --user-data-dir="$PWD/profile" "--host-resolver-rules=MAP app.test 127.0.0.1:$port, MAP * ~NOTFOUND" \
  --virtual-time-budget=5000 --dump-dom "http://app.test/cookies.html" >dom.html 2>chromium.log ||
  { tail -20 chromium.log >&2; fail "chromium exited non-zero"; }
result=$(sed -n 's:.*<pre id="out">\(.*\)</pre>.*:\1:p' dom.html | sed 's/&amp;/\&/g; s/&lt;/</g; s/&gt;/>/g')
[ -n "$result" ] || { cat dom.html >&2; fail "the page left no result"; }
field() { "$PYTHON" -c 'import json,sys; d=json.loads(sys.argv[1]); print(eval(sys.argv[2], {}, {"d": d}))' "$result" "$1"; }
details() { printf 'page: %s\n--- gateway\n%s\n--- origin\n%s\n' "$result" "$(cat gateway.log)" "$(cat origin.log)" >&2; }

if [ "$(field 'd["login"]["status"]')" != 200 ] || [ "$(field 'd["login"]["redirected"]')" != True ] ||
  [ "$(field 'd["login"]["body"]["path"]')" != /api/home ]; then
  details
  fail "the 302 was not followed by the browser"
fi
logged "^GET http://app.test/api/login 302 passthrough" gateway.log || { details; fail "the gateway did not relay the 302"; }
grep -q "^GET /api/home .*sid=s3cret.*theme=dark\|^GET /api/home .*theme=dark.*sid=s3cret" origin.log ||
  { details; fail "the landing request did not carry both cookies of the 302"; }
ok "a forwarded 302 reaches Chromium with its two Set-Cookie fields apart; Chromium stores both and follows it"
seen=$(field 'd["documentCookie"]')
case "$seen" in *theme=dark*page=script* | *page=script*theme=dark*) ;; *) details; fail "document.cookie: $seen" ;; esac
case "$seen" in *sid*) details; fail "document.cookie shows the HttpOnly cookie: $seen" ;; esac
ok "document.cookie shows the script-visible cookies, not the HttpOnly one"
who=$(field 'd["whoami"]["cookie"]')
for c in sid=s3cret theme=dark page=script; do
  case "$who" in *"$c"*) ;; *) details; fail "a later request lacks $c: $who" ;; esac
done
ok "a later forwarded request carries the HttpOnly cookie, the 302's other one and the script's"
say "browser-cookies: $checks checks passed"
