#!/usr/bin/env bash
# The cost of resolving a URL (release build): Resolver.resolve over 10,000 files in 200
# packages, against baselines measured in the same run on the same URLs (Foundation URL parsing
# plus one Dictionary lookup; and component access on already parsed URLs plus one lookup).
# Target: at most 1.0x the first baseline (scripts/bench puts it in its table). Then one pass
# under strace shows the resolve path makes no system call.
# Usage: scripts/benchmarks/bench-resolve.sh [--check-syscalls-only]
#        (BENCH_BIN: a larder-bench-resolve binary)
set -euo pipefail
# shellcheck source=../lib/common.sh
. "$(cd "$(dirname "$0")/.." && pwd)/lib/common.sh"
bench=${BENCH_BIN:-}
[ -n "$bench" ] || bench=$(swift_product_bin larder-bench-resolve release)
work=$(scratch_dir larder-bench-resolve)
trap 'rm -rf "$work"' EXIT

size=()
if [ "${1:-}" != --check-syscalls-only ]; then
  "$bench" "$work/w"
else
  # The claim does not depend on the size; 20 packages keep this quick in a debug build.
  size=(--packages 20)
  "$bench" "$work/w" --setup-only "${size[@]}"
fi

command -v strace >/dev/null || die "strace is not installed (scripts/bootstrap installs it)"
strace -f -qq -o "$work/trace" "$bench" "$work/w" --markers "${size[@]+"${size[@]}"}" >"$work/stdout" 2>"$work/stderr"
cat "$work/stdout"
"$PYTHON" - "$work/trace" <<'PY'
import re, sys
lines = open(sys.argv[1]).read().splitlines()
begin = next(i for i, l in enumerate(lines) if 'BENCH-BEGIN' in l)
end = next(i for i, l in enumerate(lines) if 'BENCH-END' in l)
pid = lines[begin].split()[0]
inside = [l for l in lines[begin + 1:end] if l.split()[0] == pid]
cb = next(i for i, l in enumerate(lines) if 'CONTROL-BEGIN' in l)
ce = next(i for i, l in enumerate(lines) if 'CONTROL-END' in l)
control = [l for l in lines[cb + 1:ce] if l.split()[0] == pid]
print(f"strace: {len(inside)} system calls by the resolving thread during one pass of resolves")
print(f"strace: {len(control)} system calls by the same thread rebuilding the snapshot (the control: the method sees them)")
for l in inside[:10]:
    print("  " + l)
sys.exit(1 if inside or not control else 0)
PY
