#!/usr/bin/env bash
# The concurrency suites under ThreadSanitizer: `swift test --sanitize=thread` (a build of its
# own in .build-tsan) on the suites where threads meet — resolver threads while other processes
# install, activate and collect (ConcurrencyTests), sessions and snapshot swaps (ResolverTests),
# bundles extracted while they download and parallel transfers (StreamedExtractionTests,
# SyncTests), two syncs at once (TwoSyncsTests), the writers' lock (LockTests), the streamed zip
# reader's pipeline (StreamingReadTests), batched state commits (BatchedCommitTests), a resolver
# rebuilding from what an in-process sync hands it (ServingHandoffTests).
# A data race TSan reports fails the run (TSAN_OPTIONS halt_on_error=1). The tests run with
# tsan-mutex.c preloaded, which shows TSan the locking of Synchronization.Mutex's contended path
# (in an uninstrumented library on Linux; without it every access a contended Mutex guards is
# reported as a race); it suppresses nothing else.
#
# Usage: scripts/integration/tsan-test.sh   (in `scripts/integration/reliability.py --soak`; not in
#                                           scripts/test: the instrumented build takes minutes)
# Prints swift test's lines and `tsan-test: N passed, M failed` (tests).
set -euo pipefail
# shellcheck source=../lib/common.sh
. "$(cd "$(dirname "$0")/.." && pwd)/lib/common.sh"
cd "$LARDER_CHECKOUT"
suites='ConcurrencyTests|ResolverTests|StreamedExtractionTests|SyncTests|TwoSyncsTests|LockTests|StreamingReadTests|BatchedCommitTests|ServingHandoffTests'
say "tsan-test: building with -sanitize=thread into .build-tsan"
(swift build --build-path .build-tsan --sanitize=thread --build-tests >&2) ||
  die "the ThreadSanitizer build failed (the compiler's output is above)"
shim=$PWD/.build-tsan/tsan-mutex.so
clang -shared -fPIC -fdollars-in-identifiers -O1 scripts/integration/tsan-mutex.c -o "$shim" ||
  die "the Mutex shim for ThreadSanitizer did not build (clang, from the Swift toolchain)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
# The larder the CLI-driving suites run is the instrumented one beside the tests.
LARDER_BIN=$PWD/.build-tsan/debug/larder TSAN_OPTIONS="halt_on_error=1 ${TSAN_OPTIONS:-}" LD_PRELOAD="$shim" \
  swift test --build-path .build-tsan --sanitize=thread --skip-build --filter "$suites" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
passed=$(grep -c '^✔ Test .* passed' "$log" || true)
failed=$(grep -c '^✘ Test .* failed' "$log" || true)
races=$(grep -c 'WARNING: ThreadSanitizer' "$log" || true)
[ "$races" = 0 ] || warn "ThreadSanitizer reported $races race(s) (above)"
if [ "$rc" != 0 ] && [ "$failed" = 0 ]; then failed=1; fi
failed=$((failed + races))
say "tsan-test: $passed passed, $failed failed"
[ "$failed" = 0 ]
