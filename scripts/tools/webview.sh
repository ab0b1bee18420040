#!/usr/bin/env bash
# Opens a URL of a sandbox in a WebKitGTK view: installs WebKitGTK and Xvfb from Debian when
# missing, builds larder-webview (LARDER_WEBKITGTK=1, the targets built only on request) when
# needed, and runs it — under xvfb-run when there is no display. Every argument goes to the
# program; `scripts/webview --help` lists them:
#
#   scripts/webview --root SANDBOX [--page-health] [--ready-deadline S] [--upstream-scheme http|https]
#                   [--offline] [--scheme S]… [--memory-limit MB] [--max-terminations N]
#                   [--dump-dom] [--screenshot FILE.png] [--timing] [--loads N] [--allow-file-access]
#                   [--settle S] [--stay S] [--timeout S] URL
#
# LARDER_WEBVIEW_BIN: a built larder-webview to run instead of building one.
# Exit status: the program's (0, 1 when no page loaded or the sandbox cannot be read, 64 usage).
set -euo pipefail
# shellcheck source=../lib/common.sh
. "$(cd "$(dirname "$0")/.." && pwd)/lib/common.sh"

webview_bin() {
  if [ -n "${LARDER_WEBVIEW_BIN:-}" ]; then
    [ -x "$LARDER_WEBVIEW_BIN" ] || die "LARDER_WEBVIEW_BIN=$LARDER_WEBVIEW_BIN is not an executable"
    printf '%s\n' "$LARDER_WEBVIEW_BIN"
    return
  fi
  ensure_packages pkg-config libarchive-dev zlib1g-dev libzstd-dev libwebkitgtk-6.0-dev xvfb xauth
  LARDER_WEBKITGTK=1 swift_product_bin larder-webview debug
}

bin=$(webview_bin)
if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]; then
  exec "$bin" "$@"
fi
ensure_packages xvfb xauth
exec xvfb-run -a -s "-screen 0 1280x1024x24" "$bin" "$@"
