# Headless Chromium helpers for the page-health scripts (sourced after common.sh).
#
#   chromium_path                         Debian's chromium, or exit 1 naming bootstrap
#   visit_until NAME HOST PORT LOG PATTERN LIMIT
#       opens http://HOST/ in a headless Chromium (HOST mapped to 127.0.0.1:PORT, every other
#       host unreachable) that stays open until a line matching PATTERN appears in LOG after
#       this call (or LIMIT seconds pass); prints that line (empty when none came)
#   dump_dom NAME HOST PORT               loads http://HOST/ once and prints its DOM

chromium_path() {
  local c
  c=$(command -v chromium || command -v chromium-browser || true)
  [ -n "$c" ] || { echo "chromium is not installed (scripts/bootstrap installs it)" >&2; exit 1; }
  printf '%s\n' "$c"
}

_chromium_flags() { # profile-dir host port
  printf '%s\n' --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
    --disable-features=HttpsUpgrades,HttpsFirstBalancedModeAutoEnable --user-data-dir="$1" \
    "--host-resolver-rules=MAP $2 127.0.0.1:$3, MAP * ~NOTFOUND"
}

visit_until() {
  local name=$1 host=$2 port=$3 log=$4 pattern=$5 limit=$6 before line="" flags browser
  before=$(wc -l <"$log")
  mapfile -t flags < <(_chromium_flags "$PWD/profile-$name" "$host" "$port")
  "$(chromium_path)" "${flags[@]}" --remote-debugging-port=0 "http://$host/" >"$name.chromium.log" 2>&1 &
  browser=$!
  for _ in $(seq $((limit * 10))); do
    line=$(tail -n +"$((before + 1))" "$log" | grep -m1 -E "$pattern" || true)
    [ -n "$line" ] && break
    sleep 0.1
  done
  kill "$browser" 2>/dev/null || true
  wait "$browser" 2>/dev/null || true
  printf '%s\n' "$line"
}

dump_dom() {
  local flags
  mapfile -t flags < <(_chromium_flags "$PWD/profile-$1" "$2" "$3")
  timeout 120 "$(chromium_path)" "${flags[@]}" --virtual-time-budget=5000 --dump-dom "http://$2/" 2>"$1.chromium.log"
}
