#!/usr/bin/env bash
# On-demand packages in a browser: headless Chromium (Debian's `chromium`) opens mini-apps that
# the device does not hold, through `larder serve`, which installs each at its first request.
#
#   1. Three on-demand packages (the sample app as od-1, od-2, od-3, each on its own host in
#      .invalid) are published; the first sync installs none of them (nothing under packages/).
#   2. Chromium opens http://od-1.larder.invalid/: the page renders ("Catalogue v1.1.0 — 5
#      items", built by the app's JS from its fetched JSON); the gateway printed one
#      `first use: od-1 installed` line however many requests the page made, and served every
#      file from od-1@1.1.0.
#   3. The second open is local: no new install line.
#   4. With a disk budget of about two packages, opening od-2 then od-3 evicts the least recently
#      used (od-1), never the one opened (od-3); od-1's tree is gone.
#   5. With --first-use-deadline and a repository that stalls (a directory the sync cannot read),
#      a local-only package's page is answered 503 within the deadline, never left hanging.
# Usage: scripts/integration/on-demand-browser.sh    (LARDER_BIN: the larder binary; else built here)
set -euo pipefail
# shellcheck source=../lib/common.sh
. "$(cd "$(dirname "$0")/.." && pwd)/lib/common.sh"
larder=$(larder_bin debug)
chromium_path >/dev/null
start_work on-demand-browser

"$larder" keygen --out key >/dev/null
for n in 1 2 3; do
  sample_app_copy 1.1.0 "od-$n"
  "$larder" pack "od-$n" --repo repo --id "od-$n" --version 1.1.0 --key key.key \
    --route "https://od-$n.larder.invalid/" --install on-demand >/dev/null
done
"$larder" init --root sb --repo "file://$work/repo" --public-key key.pub >/dev/null
"$larder" sync --root sb >sync.txt
[ -z "$(ls sb/packages)" ] || fail "the first sync installed an on-demand package: $(ls sb/packages)"
[ "$(grep -c 'installed on demand' sync.txt)" = 3 ] || { cat sync.txt >&2; fail "the sync did not skip all three"; }
ok "the first sync installs none of the three on-demand packages (each skipped: on demand)"

"$larder" serve --root sb --listen 127.0.0.1:0 >gateway.log 2>gateway.err &
pids+=($!)
port=$(serve_port gateway.log)
[ -n "$port" ] || { cat gateway.err >&2; fail "the gateway did not start"; }

open_page() { # n -> the DOM in od-<n>.<visit>.html
  local visit=$2
  dump_dom "od-$1-$visit" "od-$1.larder.invalid" "$port" >"od-$1.$visit.html" || {
    tail -20 "od-$1-$visit.chromium.log" >&2
    fail "chromium exited non-zero"
  }
}

open_page 1 first
grep -qF "Catalogue v1.1.0 — 5 items" od-1.first.html || { cat od-1.first.html >&2; fail "od-1 did not render"; }
ok "od-1's page renders on its first open (the DOM its JS builds from the fetched JSON)"
installs=$(grep -c "^first use: od-1 installed in" gateway.log || true)
[ "$installs" = 1 ] || { cat gateway.log >&2; fail "od-1 was installed $installs times"; }
served=$(grep -c "od-1@1.1.0" gateway.log || true)
[ "$served" -ge 4 ] || { cat gateway.log >&2; fail "only $served requests were served from od-1@1.1.0"; }
ok "one install for the page's $served requests, each served from od-1@1.1.0 ($(grep -m1 '^first use: od-1' gateway.log))"

open_page 1 second
grep -qF "Catalogue v1.1.0 — 5 items" od-1.second.html || fail "od-1 did not render the second time"
[ "$(grep -c '^first use: od-1' gateway.log)" = 1 ] || { cat gateway.log >&2; fail "the second open installed again"; }
ok "the second open is local: no install"

# 4. A budget of about two packages.
one=$("$larder" status --root sb --json | "$PYTHON" -c \
  'import json,sys; print([p for p in json.load(sys.stdin)["packages"] if p["id"]=="od-1"][0]["diskUse"])')
"$larder" init --root sb --repo "file://$work/repo" --public-key key.pub --disk-budget $((one * 5 / 2)) >/dev/null
sleep 1.1 # the usage files' times are a second apart at least
open_page 2 first
grep -qF "Catalogue v1.1.0 — 5 items" od-2.first.html || fail "od-2 did not render"
sleep 1.1
open_page 3 first
grep -qF "Catalogue v1.1.0 — 5 items" od-3.first.html || fail "od-3 did not render"
held=$("$larder" status --root sb --json | "$PYTHON" -c \
  'import json,sys; print(" ".join(sorted(p["id"] for p in json.load(sys.stdin)["packages"])))')
[ "$held" = "od-2 od-3" ] || { cat gateway.log >&2; fail "held after opening od-2 and od-3: $held"; }
[ ! -e sb/packages/od-1 ] || fail "od-1's tree is still on disk"
ok "with a budget of 2.5 packages, opening od-2 then od-3 evicted od-1 (least recently used), not od-3 (on screen)"

# 5. A stalled repository and a local-only package: answered within the deadline.
sample_app_copy 1.1.0 od-slow
"$larder" pack od-slow --repo repo --id od-slow --version 1.1.0 --key key.key \
  --route "https://od-slow.larder.invalid/" --install on-demand --policy local-only >/dev/null
"$larder" sync --root sb >/dev/null
# The sync at first use waits for the sandbox lock, which another writer holds (a long sync).
exec 9>sb/.lock
flock 9
"$larder" serve --root sb --listen 127.0.0.1:0 --first-use-deadline 1 >slow.log 2>slow.err &
pids+=($!)
sport=$(serve_port slow.log)
start=$(date +%s%N)
code=$(curl -s -o slow.body -w '%{http_code}' --max-time 20 -H "Host: od-slow.larder.invalid" "http://127.0.0.1:$sport/")
ms=$((($(date +%s%N) - start) / 1000000))
flock -u 9
exec 9>&-
# (The lock is held until curl returns: a 503 means the request did not wait for the install. The
# time is reported, not asserted: the machine may be loaded.)
if [ "$code" != 503 ]; then
  cat slow.log slow.body >&2
  fail "answered $code after $ms ms"
fi
ok "a local-only package whose install cannot finish is answered 503 (after $ms ms; deadline 1 s): $(cat slow.body)"
echo "on-demand-browser: $checks checks passed"
