#!/usr/bin/env bash
# Passthrough offline: `larder serve` (forwarding, not --offline) in a network namespace with no
# route and no reachable resolver (`ip netns`, only loopback up), as a device with no network.
# A request the gateway forwards must fail with 502 naming the cause, in about the time the
# system takes to say so — measured against curl failing on its own in the same namespace —
# and never at a client timeout (it took 60 s before the forwarder stopped retrying connection
# attempts). Two causes: an unknown host (the resolver cannot be reached) and an address with no
# route. Prints the medians of RUNS tries each (default 5) and checks each answer came in under
# 5 s (a bound far above both figures, for a loaded machine).
#
# Usage: scripts/integration/offline-passthrough.sh [RUNS]   (LARDER_BIN; root: ip netns needs it)
set -euo pipefail
# shellcheck source=../lib/common.sh
. "$(cd "$(dirname "$0")/.." && pwd)/lib/common.sh"
runs=${1:-5}
[ "$(id -u)" = 0 ] || die "ip netns needs root"
ensure_packages iproute2 curl
larder=$(larder_bin debug)
start_work offline
ns="larder-offline-$$"
ip netns add "$ns"
trap 'ip netns del "$ns" 2>/dev/null || true; _end_work' EXIT
ip netns exec "$ns" ip link set lo up
fail_log=$work/gateway.log
mkdir sb
port=18$((RANDOM % 900 + 100))
ip netns exec "$ns" "$larder" serve --root sb --listen "127.0.0.1:$port" --upstream-scheme http >gateway.log 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do grep -q "listening on" gateway.log && break; sleep 0.1; done
grep -q "listening on" gateway.log || fail "the gateway did not start"

# Milliseconds a command takes (its output to $out).
timed() {
  local start end
  start=$(date +%s%N)
  ip netns exec "$ns" "$@" >"$out" 2>&1 || true
  end=$(date +%s%N)
  echo $(((end - start) / 1000000))
}
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

out=$work/out
printf '| request | gateway 502 (median ms) | curl alone (median ms) |\n|---|---|---|\n'
for target in "app.example.com/favicon.ico DNS" "10.200.0.1/favicon.ico unreachable"; do
  read -r url cause <<<"$target"
  gateway=() direct=()
  for _ in $(seq 1 "$runs"); do
    ms=$(timed curl -sS -m 70 -o "$work/body" -w '%{http_code}' -H "Host: ${url%%/*}" "http://127.0.0.1:$port/${url#*/}")
    code=$(cat "$out")
    [ "$code" = 502 ] || fail "$url: the gateway answered $code, not 502"
    grep -qi "$cause" "$work/body" || fail "$url: the 502 does not name the cause ($cause): $(cat "$work/body")"
    [ "$ms" -lt 5000 ] || fail "$url: the gateway took $ms ms to fail"
    gateway+=("$ms")
    direct+=("$(timed curl -sS -m 70 "http://$url")")
  done
  g=$(printf '%s\n' "${gateway[@]}" | median)
  d=$(printf '%s\n' "${direct[@]}" | median)
  printf '| %s (%s) | %s | %s |\n' "$url" "$cause" "$g" "$d"
  ok "$url: 502 naming the cause ($cause) in under 5 s, $runs times"
done
say "offline-passthrough: $checks checks passed"
