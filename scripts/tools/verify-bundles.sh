#!/usr/bin/env bash
# CI gate: fails the pipeline when a repository (or bundle) does not verify.
# Usage: scripts/verify-bundles PATH [PATH...] [--public-key FILE]... [--json]
#   PATH   a repository directory (with index.json) or a bundle .zip
# Uses `larder` from $LARDER_BIN, else from PATH, else builds it from this checkout.
# Exit: 0 all clean, 1 problems found, 64 usage.
set -euo pipefail
# shellcheck source=../lib/common.sh
. "$(cd "$(dirname "$0")/.." && pwd)/lib/common.sh"

paths=()
opts=()
while [ $# -gt 0 ]; do
  case "$1" in
    --public-key) [ $# -ge 2 ] || { warn "--public-key needs a file"; exit 64; }
                  opts+=(--public-key "$2"); shift 2 ;;
    --json|--skip-signature) opts+=("$1"); shift ;;
    -h|--help) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) warn "unknown option $1"; exit 64 ;;
    *) paths+=("$1"); shift ;;
  esac
done
[ ${#paths[@]} -gt 0 ] || { echo "usage: scripts/verify-bundles PATH [PATH...] [--public-key FILE]..." >&2; exit 64; }

# A CI machine may have larder installed: it comes before building one.
if [ -z "${LARDER_BIN:-}" ] && command -v larder >/dev/null; then
  larder=$(command -v larder)
else
  larder=$(larder_bin debug)
fi

status=0
for p in "${paths[@]}"; do
  set +e
  "$larder" verify "$p" ${opts[@]+"${opts[@]}"}
  rc=$?
  set -e
  case $rc in
    0) ;;
    1) status=1 ;;
    *) exit "$rc" ;;
  esac
done
exit $status
