#!/usr/bin/env bash
# The main job on an embedded default: publish the sample app (Examples/sample-app) into a
# file:// repository with a throwaway key and verify it; sync it into a local sandbox, sync
# again (nothing moves), publish a v2 and sync (only the changed content moves), revoke it and
# sync (the device rolls back) — printing each step and ending with the sandbox's status.
# It ends by serving the sandbox through `larder serve` for a moment (one page fetched through the
# gateway) and resolving URLs of the sample app; with --serve it then leaves the gateway running
# in the foreground and prints the address to open.
#
# Usage: scripts/demo [--serve [PORT]]   (work directory: $LARDER_DEMO_DIR, else a new /tmp/larder-demo.*;
#        larder: $LARDER_BIN, else built here, the compiler's output on stderr)
set -euo pipefail
# shellcheck source=../lib/common.sh
. "$(cd "$(dirname "$0")/.." && pwd)/lib/common.sh"
cd "$LARDER_CHECKOUT"
serve=""
serve_port=8080
if [ "${1:-}" = --serve ]; then
  serve=1
  serve_port=${2:-8080}
fi

scripts/bootstrap --for demo
if [ -z "${LARDER_BIN:-}" ]; then
  echo "== building larder (the compiler's output is on stderr; the first build takes minutes)"
fi
larder=$(larder_bin debug)
echo "larder: $larder"

work=${LARDER_DEMO_DIR:-$(mktemp -d /tmp/larder-demo.XXXXXX)}
rm -rf "$work"
mkdir -p "$work"
repo="$work/repo"
sandbox="$work/sandbox"
n=0
step() { n=$((n + 1)); echo; echo "== step $n: $*"; }
note() { printf '   %s\n' "$@"; }  # a remark on what a command printed, one argument a line

echo "work directory: $work"
echo "repository:     file://$repo"
echo "sandbox:        $sandbox"

step "make a throwaway signing key"
"$larder" keygen --out "$work/keys/publisher"

step "pack the sample app as sample-app 1.0.0"
"$larder" pack Examples/sample-app --repo "$repo" --id sample-app --version 1.0.0 \
  --key "$work/keys/publisher.key" --route https://app.example.com/ --bypass /api/

step "verify the repository as a CI gate would"
"$larder" verify "$repo" --public-key "$work/keys/publisher.pub"

step "packing is deterministic: the same tree into a scratch repository gives the same bundle"
"$larder" pack Examples/sample-app --repo "$work/scratch-repo" --id sample-app --version 1.0.0 \
  --key "$work/keys/publisher.key" --route https://app.example.com/ >/dev/null
a=$(sha256sum "$repo/packages/sample-app/1.0.0/bundle.zip" | cut -d' ' -f1)
b=$(sha256sum "$work/scratch-repo/packages/sample-app/1.0.0/bundle.zip" | cut -d' ' -f1)
echo "bundle sha256 $a"
echo "bundle sha256 $b"
[ "$a" = "$b" ] || { echo "demo: the two bundles differ" >&2; exit 1; }
echo "identical"

step "point a local sandbox at the repository (config: repository, trusted key, device id)"
"$larder" init --root "$sandbox" --repo "file://$repo" --public-key "$work/keys/publisher.pub" --app-version 1.0.0

step "plan, then sync: first install (index and signature checked, bundle fetched and verified)"
"$larder" plan --root "$sandbox"
note "(plan: the bytes each package would fetch — via a bundle, the size of its zip file; via" \
  " objects, the uncompressed size of the files the sandbox lacks, an upper bound since objects" \
  " are stored gzip-compressed; 'bundle' is the whole zip's size, for comparison)"
"$larder" sync --root "$sandbox"
note "(sync: 'fetched' counts the bytes received for the bundle or the objects — on HTTP the bytes" \
  " on the wire, here the bytes read from the file:// repository; the index and the file lists" \
  " are not counted)"

step "a second sync with nothing new: the index is unchanged, nothing is fetched"
"$larder" sync --root "$sandbox"

step "the app reports 1.0.0 healthy"
"$larder" confirm sample-app --root "$sandbox"

step "resolve URLs of the sample app to local files (no lock, no network)"
"$larder" resolve https://app.example.com/ --root "$sandbox"
"$larder" resolve "https://app.example.com/data/catalog.json?fresh=1" --root "$sandbox"
"$larder" resolve https://app.example.com/api/items --root "$sandbox"

step "publish sample-app 2.0.0 (one data file changed: only its object is new)"
sample_app_copy 2.0.0 "$work/app-v2"
"$larder" pack "$work/app-v2" --repo "$repo" --id sample-app --version 2.0.0 \
  --key "$work/keys/publisher.key" --route https://app.example.com/ --bypass /api/

step "sync: the update moves only the changed content (bytes received against the full bundle)"
"$larder" plan --root "$sandbox"
"$larder" sync --root "$sandbox"
note "(the plan counts the changed file uncompressed; the sync received its gzip-compressed object)"

step "every installed version verifies file by file"
"$larder" doctor --root "$sandbox"

step "server-side rollback: revoke 2.0.0 and re-sign the index"
"$larder" revoke sample-app 2.0.0 --repo "$repo" --key "$work/keys/publisher.key"
"$larder" verify "$repo" --public-key "$work/keys/publisher.pub"

step "sync: the device rolls back off the revoked 2.0.0 to 1.0.0"
"$larder" sync --root "$sandbox"
"$larder" resolve https://app.example.com/data/catalog.json --root "$sandbox"

step "larder serve: the HTTP gateway a browser loads the app through (one request, then stopped)"
"$larder" serve --root "$sandbox" --listen 127.0.0.1:0 --offline >"$work/serve.log" 2>&1 &
gateway=$!
port=$(serve_port "$work/serve.log")
[ -n "$port" ] || { cat "$work/serve.log" >&2; die "larder serve did not start"; }
"$PYTHON" - "$port" <<'PY'
import http.client, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
c.request("GET", "/data/catalog.json", headers={"Host": "app.example.com"})
r = c.getresponse()
body = r.read()
print(f"GET http://app.example.com/data/catalog.json via the gateway: {r.status}, {len(body)} bytes, "
      f"served by {r.getheader('X-Larder-Outcome')}")
PY
kill "$gateway"
wait "$gateway" 2>/dev/null || true
echo "gateway log:"
sed 's/^/  /' "$work/serve.log"

step "the sandbox's status and history"
"$larder" status --root "$sandbox"
"$larder" status --root "$sandbox" --json > "$work/status.json"
echo "(the same as JSON: $work/status.json)"

step "resolve URLs of the sample app (what a web view's requests map to now)"
for url in https://app.example.com/ https://app.example.com/js/app.js "https://app.example.com/data/catalog.json?v=2" \
  larder://sample-app/img/logo.png https://app.example.com/pages/about/ https://app.example.com/api/items; do
  echo "\$ larder resolve $url"
  "$larder" resolve "$url" --root "$sandbox"
done

echo
echo "demo finished; the repository is in $repo, the sandbox in $sandbox"
if [ -n "$serve" ]; then
  echo
  echo "== serving the sandbox: open the app with"
  echo "   chromium --host-resolver-rules='MAP app.example.com 127.0.0.1:$serve_port' http://app.example.com/"
  echo "   or fetch http://127.0.0.1:$serve_port/sample-app/ (the larder:// form); Ctrl-C stops it"
  exec "$larder" serve --root "$sandbox" --listen "127.0.0.1:$serve_port"
fi
