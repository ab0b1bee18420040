#!/usr/bin/env bash
# Fuzzes one target with libFuzzer for SECONDS: index (index, signature and file-list decoders,
# index rules, signature check), zip (structure check and strict reader), url (BrowserURL, route
# parsing, the route table's resolve; checks that reading a URL twice changes nothing more), or
# range (the resource loader's Range and If-None-Match handling; checks that a body range stays
# inside the file). Sources/larder-fuzz holds the targets.
#
# Usage: scripts/tools/fuzz.sh TARGET SECONDS   (not run by scripts/test)
#        scripts/tools/fuzz.sh --replay         (replays every seed and saved crash through a
#                                               plain build; scripts/test runs this)
#
# The fuzzing build goes to .build-fuzz (swift build -Xswiftc -sanitize=fuzzer,address
# -Xswiftc -DLARDER_FUZZ), the corpus to .fuzz/TARGET (seeded from scripts/tools/fuzz-seeds/TARGET,
# and for zip from scripts/fixtures/make-zips.py), and crashing inputs to .fuzz/TARGET-crashes:
# copy one into scripts/tools/fuzz-seeds/TARGET once it is fixed, so the replay keeps it fixed.
# Prints libFuzzer's final stats (executions, coverage) and `fuzz TARGET: N crash(es)`; exit 1 on
# any. The targets run with TMPDIR in a scratch directory removed on exit (the zip target writes
# each input to $TMPDIR/larder-fuzz-PID.zip).
set -euo pipefail
# shellcheck source=../lib/common.sh
. "$(cd "$(dirname "$0")/.." && pwd)/lib/common.sh"
cd "$LARDER_CHECKOUT"
targets=(index zip url range)

seed_zip() {
  local dir=$1
  mkdir -p "$dir"
  "${PYTHON:-python3}" scripts/fixtures/make-zips.py "$dir" >/dev/null
}

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

if [ "${1:-}" = "--replay" ]; then
  (swift build --product larder-fuzz >&2) || die "swift build --product larder-fuzz failed"
  bin=$(swift_bin_dir debug)/larder-fuzz
  for t in "${targets[@]}"; do
    files=()
    if [ -d "scripts/tools/fuzz-seeds/$t" ]; then
      mapfile -t files < <(find "scripts/tools/fuzz-seeds/$t" -type f | sort)
    fi
    if [ "$t" = zip ]; then
      seed_zip "$scratch/zip"
      mapfile -t -O "${#files[@]}" files < <(find "$scratch/zip" -type f | sort)
    fi
    [ "${#files[@]}" -gt 0 ] || die "no seeds for $t"
    TMPDIR=$scratch "$bin" "$t" "${files[@]}"
  done
  exit 0
fi

target=${1:-}
seconds=${2:-}
if [[ " ${targets[*]} " != *" $target "* ]] || [[ ! "$seconds" =~ ^[0-9]+$ ]]; then
  die "usage: scripts/tools/fuzz.sh TARGET SECONDS (TARGET: ${targets[*]}) | scripts/tools/fuzz.sh --replay"
fi
say "fuzz $target: building with -sanitize=fuzzer,address into .build-fuzz"
(swift build --build-path .build-fuzz --product larder-fuzz -Xswiftc -sanitize=fuzzer,address \
  -Xswiftc -DLARDER_FUZZ >&2) || die "the fuzzing build failed (the compiler's output is above)"
bin=.build-fuzz/debug/larder-fuzz
corpus=.fuzz/$target
crashes=.fuzz/$target-crashes
mkdir -p "$corpus" "$crashes"
if [ -d "scripts/tools/fuzz-seeds/$target" ]; then
  cp -n scripts/tools/fuzz-seeds/"$target"/* "$corpus"/ 2>/dev/null || true
fi
[ "$target" != zip ] || seed_zip "$corpus"
log=.fuzz/$target.log
set +e
TMPDIR=$scratch LARDER_FUZZ_TARGET=$target ASAN_OPTIONS=detect_leaks=0 SWIFT_BACKTRACE=enable=no \
  "$bin" "$corpus" -max_total_time="$seconds" -artifact_prefix="$crashes/" -print_final_stats=1 -timeout=10 \
  -rss_limit_mb=2048 -max_len=65536 >"$log" 2>&1
rc=$?
set -e
grep -E "^stat::|cov: " "$log" | tail -12
found=$(find "$crashes" -type f | wc -l)
say "fuzz $target: ${seconds} s, exit $rc, $found crash(es) saved in $crashes (log: $log)"
[ "$found" -eq 0 ] && [ "$rc" -eq 0 ]
