#!/usr/bin/env bash
# Peak resident memory of `larder sync` of one large bundle, and of one twice as large, over
# file:// and over HTTP (python3 -m http.server on 127.0.0.1). Target: under 64 MB, and doubling
# the bundle adds less than 10 %. Reports; fails only if a sync fails.
# Usage: scripts/benchmarks/bench-memory.sh [MIB]   (default 160; the second bundle is twice that)
set -euo pipefail
# shellcheck source=../lib/common.sh
. "$(cd "$(dirname "$0")/.." && pwd)/lib/common.sh"
mib=${1:-160}
larder=$(larder_bin release)
[ -x /usr/bin/time ] || ensure_packages time
work=$(scratch_dir larder-mem)
server=""
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$work"' EXIT
cd "$work"
"$larder" keygen --out k >/dev/null
for size in "$mib" $((mib * 2)); do
  "$PYTHON" - "$size" <<'PY'
import os, sys
n = int(sys.argv[1])
d = f"tree-{n}"
os.makedirs(f"{d}/data", exist_ok=True)
open(f"{d}/index.html", "w").write("<h1>big</h1>\n")
for i in range(n):
    with open(f"{d}/data/blob{i:04}.bin", "wb") as f:
        f.write(os.urandom(1 << 20))
PY
  "$larder" pack "tree-$size" --repo "repo-$size" --id big --version 1.0.0 --key k.key >/dev/null
  rm -rf "tree-$size"
done
port=$(free_port)
"$PYTHON" -m http.server "$port" --bind 127.0.0.1 >/dev/null 2>&1 &
server=$!
sleep 0.5
declare -A rss
for proto in file http; do
  for size in "$mib" $((mib * 2)); do
    url="file://$work/repo-$size"
    [ "$proto" = http ] && url="http://127.0.0.1:$port/repo-$size"
    rm -rf "sb-$proto-$size"
    "$larder" init --root "sb-$proto-$size" --repo "$url" --public-key k.pub >/dev/null
    out=$(/usr/bin/time -v "$larder" sync --root "sb-$proto-$size" 2>&1) || { echo "$out" >&2; echo "bench-memory: sync failed" >&2; exit 1; }
    kb=$(grep "Maximum resident" <<<"$out" | awk '{print $NF}')
    rss[$proto-$size]=$kb
    printf '%-5s %4d MiB bundle: peak RSS %6.1f MiB\n' "$proto" "$size" "$(echo "$kb/1024" | bc -l)"
  done
done
echo "---- summary ----"
for proto in file http; do
  a=${rss[$proto-$mib]}; b=${rss[$proto-$((mib * 2))]}
  "$PYTHON" -c "
a,b=$a,$b
print(f'$proto: {a/1024:.1f} MiB for $mib MiB, {b/1024:.1f} MiB for $((mib*2)) MiB: +{(b-a)*100/a:.1f} % (targets: < 64 MB: {\"met\" if max(a,b)*1024 < 64e6 else \"MISSED\"}; doubling < 10 %: {\"met\" if (b-a)*100/a < 10 else \"MISSED\"})')"
done
