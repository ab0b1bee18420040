#!/usr/bin/env bash
# Builds the DocC catalog of the app-facing library (Sources/Larder/Larder.docc: overview,
# getting started, the page-health protocol, and the `Larder` module's symbols) with
# `swift package generate-documentation --warnings-as-errors`: an unresolved link or any other
# DocC warning fails it. (SwiftPM's notes about a dependency's unhandled CMakeLists.txt files
# are not DocC's and are not ours.)
#
#   scripts/tools/check-docs.sh     the archive lands in .build/plugins/Swift-DocC/outputs/Larder.doccarchive
set -euo pipefail
# shellcheck source=../lib/common.sh
. "$(cd "$(dirname "$0")/.." && pwd)/lib/common.sh"
cd "$LARDER_CHECKOUT"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! swift package generate-documentation --target Larder --warnings-as-errors >"$log" 2>&1; then
  grep -E "warning|error" "$log" | grep -v "CMakeLists" >&2 || tail -20 "$log" >&2
  echo "check-docs: FAILED (the DocC output is above)" >&2
  exit 1
fi
echo "check-docs: the Larder DocC catalog builds with no warning ($(grep -c '' Sources/Larder/Larder.docc/*.md | awk -F: '{s += $2} END {print s}') lines of articles)"
