#!/usr/bin/env bash
# The README's Linux quick start, run as it is there (Sources/larder-quickstart/main.swift; a test
# checks the README holds the same code): one OfflinePackages object behind `larder serve`'s
# gateway, with headless Chromium as the web view. Nobody runs a larder command on the device.
#
#   1. On an empty sandbox, start() counts the launch and syncs at once: v1 is installed.
#   2. Chromium loads the page; its larder.ready() confirms v1 (an event says so).
#   3. With the app's veto in place (a file standing in for "on cellular"), background syncs are
#      skipped (events say so) and v2, published meanwhile, is not installed.
#   4. The veto lifted, the next background sync installs v2; the page's ready confirms it.
#   5. SIGTERM ends the program cleanly (exit 0).
# Usage: scripts/integration/quickstart.sh    (QUICKSTART_BIN: the built program; else built here)
set -euo pipefail
# shellcheck source=../lib/common.sh
. "$(cd "$(dirname "$0")/.." && pwd)/lib/common.sh"
larder=$(larder_bin debug)
quickstart=${QUICKSTART_BIN:-$(swift_product_bin larder-quickstart)}
chromium_path >/dev/null
start_work quickstart
fail_log=$work/app.log
host=app.larder.invalid
wait_for() { # pattern seconds
  for _ in $(seq $(($2 * 10))); do grep -qE "$1" app.log && return 0; sleep 0.1; done
  return 1
}
active() { "$larder" status --root sb --json | "$PYTHON" -c '
import json, sys
p = [p for p in json.load(sys.stdin)["packages"] if p["id"] == "sample-app"][0]
print(p["active"], p["health"])'; }

"$larder" keygen --out key >/dev/null
publish() { # version
  sample_app_copy "$1" "app-$1"
  "$larder" pack "app-$1" --repo repo --id sample-app --version "$1" --key key.key --route "https://$host/" >/dev/null
}
publish 1.0.0

# 1. Start on an empty sandbox, background sync every 2 s.
stdbuf -oL "$quickstart" "$work/sb" "file://$work/repo" key.pub 2 >app.log 2>app.err &
app=$!
pids+=("$app")
wait_for "^listening on http://127.0.0.1:[0-9]+" 60 || { cat app.err >&2; fail "the quick start did not listen"; }
port=$(sed -n 's/^listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' app.log | head -1)
wait_for "^launch counted" 30 || fail "no launch event"
wait_for "^synced serial [0-9]+: sample-app " 60 || fail "no sync at start"
[ "$(active)" = "1.0.0 pending" ] || fail "after the first sync: $(active)"
ok "start(): the launch counted, a sync at once installed v1 (pending)"

# 2. The page confirms v1.
line=$(visit_until v1 "$host" "$port" app.log "^health sample-app@1.0.0: " 60)
[[ $line == *"healthy → confirmed" ]] || fail "v1: '$line'"
[ "$(active)" = "1.0.0 confirmed" ] || fail "v1 not confirmed: $(active)"
ok "v1 confirmed by its page's ready signal: $line"

# 3. The app vetoes syncing; v2 is published meanwhile.
touch sb/.no-sync
skipped=$(grep -c "^sync skipped" app.log || true)
publish 2.0.0
for _ in $(seq 100); do
  [ "$(grep -c "^sync skipped" app.log || true)" -ge $((skipped + 2)) ] && break
  sleep 0.1
done
[ "$(grep -c "^sync skipped" app.log || true)" -ge $((skipped + 2)) ] || fail "no vetoed sync was reported"
[ "$(active)" = "1.0.0 confirmed" ] || fail "a sync ran despite the veto: $(active)"
ok "with the app's veto, background syncs are skipped (events say so) and v2 is not installed"

# 4. The veto lifted: the next background sync installs v2, whose page confirms it.
rm sb/.no-sync
for _ in $(seq 200); do [ "$(active)" = "2.0.0 pending" ] && break; sleep 0.1; done
[ "$(active)" = "2.0.0 pending" ] || fail "v2 was not installed by a background sync: $(active)"
line=$(visit_until v2 "$host" "$port" app.log "^health sample-app@2.0.0: " 60)
[[ $line == *"healthy → confirmed" ]] || fail "v2: '$line'"
dom=$(dump_dom v2-reload "$host" "$port")
grep -qF "Catalogue v2.0.0 — 5 items" <<<"$dom" || fail "the page does not show v2"
ok "the veto lifted, a background sync installed v2 and its page confirmed it: $line"

# 5. A clean stop.
kill -TERM "$app"
set +e
wait "$app"
code=$?
set -e
[ "$code" = 0 ] || fail "SIGTERM: exit $code"
ok "SIGTERM ends the program (exit 0)"
echo "quickstart: $checks checks passed"
