#!/usr/bin/env bash
# Page health in a real browser: headless Chromium (Debian's `chromium`) loads the sample app
# through `larder serve --page-health`, which puts the page-health script in each page; the app
# calls larder.ready() once it has rendered. Nobody runs `larder confirm` or `larder rollback`.
#
#   1. v1 (healthy) is confirmed by its ready signal.
#   2. v2, whose script throws before it can signal ready, is rolled back on its own once the
#      deadline after its load event has passed (not before); a reload shows v1; `larder status`
#      (text and JSON) names the reason: the missed deadline and the error's text and source.
#      A ready signal for that page after its verdict is refused (404) and changes nothing.
#   3. v3 (healthy) is confirmed by its ready signal.
#   4. v4, slow but healthy, signals ready after 80 % of the deadline: confirmed, not rolled back.
#   5. hostile messages to the reserved path (not JSON, unknown event, over 64 KiB, unknown page)
#      are refused with 400/404/413 and change nothing.
# Usage: scripts/integration/page-health.sh    (LARDER_BIN: the larder binary; else built here)
set -euo pipefail
# shellcheck source=../lib/common.sh
. "$(cd "$(dirname "$0")/.." && pwd)/lib/common.sh"
larder=$(larder_bin debug)
chromium_path >/dev/null
start_work page-health
fail_log=$work/gateway.log
host=app.larder.invalid
deadline=10

"$larder" keygen --out key >/dev/null
publish() { # version variant(healthy|throws|slow)
  sample_app_copy "$1" "app-$1"
  case $2 in
    healthy) ;;
    throws) sed -i "1i throw new Error('boom in $1: the catalogue module is missing');" "app-$1/js/app.js" ;;
    slow)
      # Ready only after 80 % of the deadline, counted from the render.
      sed -i "s/window.larder.ready();/setTimeout(function () { window.larder.ready(); }, $((deadline * 800)));/" \
        "app-$1/js/app.js"
      grep -q "setTimeout(function () { window.larder.ready" "app-$1/js/app.js" || fail "the slow variant was not made"
      ;;
  esac
  "$larder" pack "app-$1" --repo repo --id sample-app --version "$1" --key key.key --route "https://$host/" >/dev/null
}
package_json() { "$larder" status --root sb --json | "$PYTHON" -c '
import json, sys
s = json.load(sys.stdin)
print(json.dumps([p for p in s["packages"] if p["id"] == "sample-app"][0]))'; }
field() { package_json | "$PYTHON" -c "import json, sys; p = json.load(sys.stdin); print($1)"; }

publish 1.0.0 healthy
"$larder" init --root sb --repo "file://$work/repo" --public-key key.pub >/dev/null
"$larder" sync --root sb >/dev/null

"$larder" serve --root sb --listen 127.0.0.1:0 --offline --page-health --ready-deadline "$deadline" \
  >gateway.log 2>gateway.err &
pids+=($!)
port=$(serve_port gateway.log)
[ -n "$port" ] || { cat gateway.err >&2; fail "the gateway did not start"; }
echo "gateway on 127.0.0.1:$port (ready deadline $deadline s)"

# Opens the page in a browser that stays until the gateway prints a verdict about VERSION (or
# LIMIT seconds pass); prints the verdict line.
visit() { # name version limit
  local verdict
  verdict=$(visit_until "$1" "$host" "$port" gateway.log "^health sample-app@$2: " "$3")
  [ -n "$verdict" ] || fail "$1: no verdict about sample-app@$2 within $3 s"
  echo "$verdict"
}
# Loads the page once more, as a user's reload, and prints its DOM.
reload_dom() { dump_dom "$1" "$host" "$port" || fail "$1: chromium exited non-zero"; }

# 1. v1: confirmed by its ready signal.
line=$(visit v1 1.0.0 60)
[[ $line == *"healthy → "* ]] || fail "v1: $line"
[ "$(field 'p["health"]')" = confirmed ] || fail "v1 is not confirmed"
grep -qE "^GET https://$host/ 200 sample-app@1.0.0 page-health " gateway.log || fail "v1: the document was not watched"
grep -qE "^POST http://$host/.larder/health\?page=[0-9a-f]+ 204 page-health ready" gateway.log ||
  fail "v1: the ready signal did not reach the gateway"
ok "v1: the page's ready signal reached the gateway through the injected script: $line"

# 2. v2 throws before it signals ready.
publish 2.0.0 throws
"$larder" sync --root sb >/dev/null
[ "$(field 'p["active"] + " " + p["health"]')" = "2.0.0 pending" ] || fail "v2 is not active and pending"
t0=$(date +%s.%N)
line=$(visit v2 2.0.0 $((deadline * 3 + 30)))
t1=$(date +%s.%N)
echo "    $line"
[[ $line == *"no ready signal within $deadline s after the page loaded"* ]] || fail "v2: the verdict does not name the deadline: $line"
[[ $line == *"boom in 2.0.0: the catalogue module is missing"* ]] || fail "v2: the verdict does not carry the error's text: $line"
[[ $line == *"/js/app.js:1"* ]] || fail "v2: the verdict does not name the error's source: $line"
[[ $line == *"→ rolled back to 1.0.0" ]] || fail "v2: not rolled back: $line"
"$PYTHON" -c "import sys; sys.exit(0 if $t1 - $t0 >= $deadline else 1)" ||
  fail "v2: the verdict came $("$PYTHON" -c "print(round($t1 - $t0, 1))") s after the page was opened, before the $deadline s deadline"
grep -qE "^POST http://$host/.larder/health\?page=[0-9a-f]+ 204 page-health error" gateway.log ||
  fail "v2: the script error was not forwarded"
ok "v2: rolled back on its own after the $deadline s deadline ($("$PYTHON" -c "print(round($t1 - $t0, 1))") s after opening)"
[ "$(field 'p["active"] + " " + p["health"]')" = "1.0.0 confirmed" ] || fail "v2: the state is not back on 1.0.0"
reason=$(field '[f["reason"] for f in p["failed"] if f["version"] == "2.0.0"][0]')
[[ $reason == *"page health: no ready signal within $deadline s"*"boom in 2.0.0"* ]] || fail "v2: status --json reason: $reason"
field '[h for h in p["history"] if h["event"] == "auto-rollback"][-1]["reason"]' | grep -q "boom in 2.0.0" ||
  fail "v2: the history's auto-rollback entry lacks the error text"
status_text=$("$larder" status --root sb)
grep -q "failed 2.0.0: page health: .*boom in 2.0.0" <<<"$status_text" || { echo "$status_text" >&2; fail "v2: the text status lacks the reason"; }
ok "v2: larder status names the reason: $reason"
reload_dom v2-reload >v2-reload.html
grep -qF "Catalogue v1.0.0 — 5 items" v2-reload.html || { cat v2-reload.html >&2; fail "v2: a reload does not show v1"; }
ok "v2: a reload shows v1"
token=$(sed -n "s/^POST http:\/\/$host\/.larder\/health?page=\([0-9a-f]*\) 204 page-health error.*/\1/p" gateway.log | tail -1)
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST --data '{"event":"ready"}' -H "Host: $host" \
  "http://127.0.0.1:$port/.larder/health?page=$token")
[ "$code" = 404 ] || fail "a late ready signal for v2's page answered $code"
[ "$(field 'p["active"] + " " + p["health"]')" = "1.0.0 confirmed" ] || fail "the late signal changed the state"
ok "a ready signal after v2's verdict is refused (404) and changes nothing"

# 3. v3, healthy: confirmed with no CLI call.
publish 3.0.0 healthy
"$larder" sync --root sb >/dev/null
[ "$(field 'p["active"] + " " + p["health"]')" = "3.0.0 pending" ] || fail "v3 is not active and pending"
line=$(visit v3 3.0.0 60)
[[ $line == *"healthy → confirmed" ]] || fail "v3: $line"
[ "$(field 'p["active"] + " " + p["health"]')" = "3.0.0 confirmed" ] || fail "v3 is not active and confirmed"
ok "v3: confirmed by its ready signal, no larder confirm: $line"

# 4. v4, slow but healthy.
publish 4.0.0 slow
"$larder" sync --root sb >/dev/null
t0=$(date +%s.%N)
line=$(visit v4 4.0.0 $((deadline * 3 + 30)))
t1=$(date +%s.%N)
[[ $line == *"healthy → confirmed" ]] || fail "v4 (ready after 80 % of the deadline): $line"
"$PYTHON" -c "import sys; sys.exit(0 if $t1 - $t0 >= $deadline * 0.8 else 1)" || fail "v4 signalled ready too early"
[ "$(field 'p["active"] + " " + p["health"]')" = "4.0.0 confirmed" ] || fail "v4 is not active and confirmed"
if grep -q "^health sample-app@4.0.0: failed" gateway.log; then fail "v4 was failed"; fi
ok "v4: ready after $("$PYTHON" -c "print(round($t1 - $t0, 1))") s (80 % of $deadline s): confirmed, not rolled back"

# 5. Hostile messages.
post() { # body-file page -> status code
  curl -s -o /dev/null -w '%{http_code}' -X POST --data-binary "@$1" -H "Host: $host" \
    "http://127.0.0.1:$port/.larder/health?page=$2"
}
printf 'not json' >bad.json
printf '{"event":"explode"}' >unknown.json
head -c 70000 /dev/zero | tr '\0' a >big.json
printf '{"event":"error","message":"x"}' >error.json
[ "$(post bad.json 0123)" = 400 ] || fail "a message that is not JSON was not refused with 400"
[ "$(post unknown.json 0123)" = 400 ] || fail "an unknown event was not refused with 400"
[ "$(post big.json 0123)" = 413 ] || fail "a 70 KB message was not refused with 413"
[ "$(post error.json 0123456789abcdef)" = 404 ] || fail "a message for an unknown page was not refused with 404"
grep -q "page-health message refused: unknown event \"explode\"" gateway.log || fail "the refusal is not logged with its reason"
[ "$(field 'p["active"] + " " + p["health"]')" = "4.0.0 confirmed" ] || fail "a hostile message changed the state"
ok "hostile messages: not JSON 400, unknown event 400, 70 KB 413, unknown page 404; the state unchanged"

echo "page-health: $checks checks passed"
