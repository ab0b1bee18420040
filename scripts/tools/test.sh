#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test: the scripts' own gates (shellcheck,
# pyflakes, every script with its extension), the Swift suites (unit, and CLI through the built
# binary), the checks of the code and formats, and the end-to-end tests.
# Usage: scripts/test   (the program behind it is scripts/tools/test.sh)
set -euo pipefail
# shellcheck source=../lib/common.sh
. "$(cd "$(dirname "$0")/.." && pwd)/lib/common.sh"
cd "$LARDER_CHECKOUT"

scripts/bootstrap --for test
# The interpreter bootstrap made sure of (python3, else Debian's), for this script and the ones
# it runs.
choose_python || die "no Python 3 imports ${python_modules[*]} after scripts/bootstrap"

passed=0
failed=0
step() {
  local name=$1 started=$SECONDS
  shift
  echo "-- $name"
  if "$@"; then
    passed=$((passed + 1))
    echo "-- $((SECONDS - started)) s: $name"
  else
    echo "FAILED ($((SECONDS - started)) s): $name" >&2
    failed=$((failed + 1))
  fi
}
work=$(mktemp -d /tmp/larder-test.XXXXXX)
swift_test_pid=
# (The kill of a lane that has already ended fails; under set -e that would make the exit
# status 1 after an all-green run, hence `|| true`.)
trap '[ -z "$swift_test_pid" ] || kill -- "-$swift_test_pid" 2>/dev/null || true; rm -rf "$work"' EXIT

echo "== scripts"
step "scripts: each with the extension of its language (.sh, .py) but the six entry points, thin wrappers" \
  scripts/tools/lint.sh layout
step "shell scripts: shellcheck clean" scripts/tools/lint.sh shell
step "Python scripts: pyflakes clean" scripts/tools/lint.sh python
# The static gates, before any build: they fail in a minute or two.
step "format: swift format lint --strict clean (120 columns, no force unwraps, public API documented)" scripts/tools/check-format.sh
step "layout: module graph as README shows it, C and Hummingbird imports confined" scripts/tools/check-layout.py
step "size and concurrency: public declarations, functions over 60 lines, files over 400 lines, @unchecked Sendable and lock idioms within their limits" scripts/tools/check-size.py
step "system calls: every file-system call in Sources/ goes through LarderFileSystem's funnel" scripts/tools/check-syscalls.sh
step "manifests: schemas, examples and invalid examples" scripts/tools/check-manifests.py
if [ "$failed" -gt 0 ]; then
  echo "static gates: $failed failed; nothing is built (fix them first)" >&2
  exit 1
fi

echo "== build"
# One debug build, products and test bundles, shared by every step below (a release build only
# where a figure needs one: scripts/bench, not here).
started=$SECONDS
(swift build --build-tests >&2) || die "swift build --build-tests failed (the compiler's output is above)"
echo "-- $((SECONDS - started)) s: swift build --build-tests"
bin=$(swift_bin_dir debug)
export LARDER_BIN="$bin/larder" FAULT_ORIGIN_BIN="$bin/larder-fault-origin"

# Two lanes side by side for the steps that measure no time (each on scratch directories and
# ports of its own): in the background the Swift suites and then the reliability classes that
# measure no time; in the foreground the rest. The steps that measure time — deadlines, kills
# drawn over an unloaded run, stalls, a browser's loads — run after both, with the machine to
# themselves.
echo "== in the background: swift test, then the untimed reliability classes; beside them the other steps that measure no time"
background_started=$SECONDS
untimed_reliability="reliability (GUARANTEES.md), two of the classes that measure no time: crashes at the Nth system call of 11 commands (eviction, first-use fetch, a sync onto a sharded index and an encrypted sync included), 165 runs with a failing system call and a read-only sandbox"
background_lane() {
  local started=$SECONDS status=0
  # The test bundle run directly, as `swift test --skip-build` runs it: SwiftPM would hold the
  # build directory's lock for the whole run, and the steps beside it call SwiftPM.
  "$bin/LarderPackageTests.xctest" --testing-library swift-testing >"$work/swift-test.log" 2>&1 || status=$?
  echo "$status $((SECONDS - started))" >"$work/swift-test.status"
  # The fetch suite once more, over the other engine (URLSession through FoundationNetworking):
  # one suite both engines pass.
  started=$SECONDS
  status=0
  LARDER_TEST_ENGINE=urlsession "$bin/LarderPackageTests.xctest" --testing-library swift-testing \
    --filter LarderFetchTests >"$work/fetch-urlsession.log" 2>&1 || status=$?
  echo "$status $((SECONDS - started))" >"$work/fetch-urlsession.status"
  started=$SECONDS
  status=0
  env RELIABILITY_LANES=1 scripts/integration/reliability.py --untimed --only "Nth system call" --only "I/O errors" \
    >"$work/reliability-untimed.log" 2>&1 || status=$?
  echo "$status $((SECONDS - started))" >"$work/reliability-untimed.status"
}
# In a process group of its own (job control on for this one job), so that the EXIT trap stops
# the lane and whatever it runs at once.
set -m
background_lane &
swift_test_pid=$!
set +m

step "docs: the DocC catalog (getting started, page health) builds with no warning" scripts/tools/check-docs.sh
step "demo runs to its end" env LARDER_DEMO_DIR="$work/demo" scripts/demo
step "verify-bundles passes the demo repository" \
  scripts/verify-bundles "$work/demo/repo" --public-key "$work/demo/keys/publisher.pub"
corrupt() {
  cp -r "$work/demo/repo" "$work/corrupt"
  local bundle
  # The bundle the index names (older versions are no longer in the index).
  bundle="$work/corrupt/$("$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["packages"][0]["bundle"]["path"])' "$work/corrupt/index.json")"
  printf 'X' | dd of="$bundle" bs=1 seek=100 conv=notrunc status=none
  local out
  if out=$(scripts/verify-bundles "$work/corrupt" --public-key "$work/demo/keys/publisher.pub" 2>&1); then
    echo "verify-bundles passed a corrupted repository" >&2
    return 1
  fi
  grep -q "hash-mismatch" <<<"$out" && grep -q "bundle.zip" <<<"$out"
}
step "verify-bundles fails a corrupted repository, naming the bundle" corrupt
step "sync against nginx: install, one-request no-change, objects-only update, Range resume, revoke, channels, same-second republish, updates by delta with every fallback and crashes, on-demand packages and a sharded index" scripts/integration/nginx-sync.py
step "sync against nginx over https (private CA, HTTP/2): every nginx scenario, an untrusted CA refused, 60 objects over one connection" scripts/integration/nginx-sync.py --tls
# The other untimed classes here, so that the two lanes end at about the same time.
step "reliability (GUARANTEES.md), the other classes that measure no time: power-cut disk states, a full disk (42 cases), 43 hostile archives on 3 paths" \
  env RELIABILITY_LANES=1 scripts/integration/reliability.py --untimed --skip "Nth system call" --skip "I/O errors"
step "fuzz targets: every committed seed and hostile archive replayed through the four libFuzzer targets" scripts/tools/fuzz.sh --replay
step "publishing through a CDN edge (Varnish before nginx): releases published while devices sync, index and signature cached apart, no failure" scripts/integration/edge.py
step "delegations over nginx and a Varnish edge: four teams, migration from one key, alone and at once, key and root rotations, shards and encryption, eight hostile refusals with their codes" scripts/integration/delegations.py
step "encrypted packages over nginx and a Varnish edge: install, update by delta, rollback, refusals with their codes, verify with and without the key, no plaintext in the repository or the edge's cache" scripts/integration/encrypted.py
step "release telemetry over nginx, SQLite and PostgreSQL: a fleet's sandboxes sync with telemetry on, a broken release rolls back by page health in Chromium on part of it, both stores' reports match what the sandboxes did, --fail-if gates, the HTML report renders, hostile batches refused" scripts/integration/telemetry.py
step "resolve makes no system call (strace over a pass of 1,000 resolves, with a control)" env BENCH_BIN="$bin/larder-bench-resolve" scripts/benchmarks/bench-resolve.sh --check-syscalls-only

echo "== the background lane (waiting for it)"
wait "$swift_test_pid" || true
swift_test_pid=
# Each background step's output, then its line, as `step` prints them.
background_step() {
  local name=$1 log=$2 status_file=$3 status=1 seconds=0
  echo "-- $name"
  cat "$log" 2>/dev/null || true
  [ -f "$status_file" ] && read -r status seconds <"$status_file"
  if [ "$status" -eq 0 ]; then
    passed=$((passed + 1))
    echo "-- $seconds s: $name (in the background lane)"
  else
    echo "FAILED ($seconds s): $name" >&2
    failed=$((failed + 1))
  fi
}
background_step "swift test" "$work/swift-test.log" "$work/swift-test.status"
background_step "the fetch suite (LarderFetchTests) over URLSession, the engine of Apple platforms, as over AsyncHTTPClient above" \
  "$work/fetch-urlsession.log" "$work/fetch-urlsession.status"
background_step "$untimed_reliability" "$work/reliability-untimed.log" "$work/reliability-untimed.status"
echo "-- $((SECONDS - background_started)) s: both lanes of the steps that measure no time"

echo "== the steps that measure time, one at a time"
step "reliability (GUARANTEES.md), the classes that measure time: kill -9 of install (50) and sync (20) at random moments, 58 origin faults, 200 URLs against Chromium" \
  scripts/integration/reliability.py --timed
step "browser: headless Chromium loads the sample app through larder serve (v1, v2, fallback)" scripts/integration/browser.sh
step "on-demand packages in Chromium: installed at first open through larder serve, evicted by a budget, 503 past the deadline" scripts/integration/on-demand-browser.sh
step "offline passthrough: in a network namespace with no route and no resolver, a forwarded request fails with 502 naming the cause, as fast as curl fails there" scripts/integration/offline-passthrough.sh
step "cookies through larder serve in Chromium: a forwarded 302 with two Set-Cookie fields relayed, stored and followed by the browser; HttpOnly kept from script" \
  scripts/integration/browser-cookies.sh
step "WebKitGTK under Xvfb (scripts/webview): the sample app from larder://, cookies through a 302 (HttpOnly kept from script), a forwarded POST body, a killed web process reloaded with no rollback, a throwing and a memory-hungry release rolled back" \
  scripts/integration/webkit.py
step "isolation between packages in WebKitGTK and Chromium (three packages, one data directory per engine): each page sees only its own cookies and files, CORS only as the signed corsOrigins says, networkHosts refuses other hosts, cookie rules, persistence across a restart, health from the main frame only" \
  scripts/integration/isolation.py
step "page health in Chromium: a page that throws before ready is rolled back after the deadline, healthy and slow pages confirmed by their ready signal" scripts/integration/page-health.sh
step "the README's Linux quick start (OfflinePackages behind the gateway) with Chromium: launch, sync, veto, background sync, confirmations" env QUICKSTART_BIN="$bin/larder-quickstart" scripts/integration/quickstart.sh
echo
echo "scripts, swift test and integration: $passed passed, $failed failed ($SECONDS s in all)"
[ "$failed" -eq 0 ]
