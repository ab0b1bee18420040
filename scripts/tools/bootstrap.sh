#!/usr/bin/env bash
# Installs what Larder's build, demo and tests need on Debian, only what is missing.
# Usage: scripts/bootstrap [--for test|demo]   (idempotent; needs root or sudo to install)
#
# Debian packages, installed with apt-get (scripts/lib/common.sh ensure_packages):
#   always        pkg-config libarchive-dev zlib1g-dev libzstd-dev (the build: libarchive, zlib
#                 and libzstd through pkg-config)
#   --for demo    + python3 (the demo fetches a page through the gateway with it)
#   --for test    + libarchive-tools zip unzip gzip (the external zip tools whose archives Larder
#                 must accept), zstd (its --patch-from patches must apply, and ours with it),
#                 python3, nginx-light (the sync integration test), time, chromium
#                 (the browser end-to-end test), strace (resolving makes no system call), curl,
#                 varnish (the CDN edge of scripts/integration/edge.py), shellcheck and pyflakes3
#                 (the scripts' own gates, scripts/tools/lint.sh), libwebkitgtk-6.0-dev, xvfb and
#                 xauth (WebKitGTK under Xvfb: scripts/webview and scripts/integration/webkit.py),
#                 publicsuffix (the Public Suffix List the cookie bridge reads, manifests §17),
#                 postgresql (the telemetry collector's fleet store: scripts/integration/telemetry.py
#                 starts its own cluster on 127.0.0.1; the Debian service is not started);
#                 and python3-jsonschema python3-cryptography (scripts/tools/check-manifests.py: the
#                 schemas and the example signature), unless a python3 already imports both
# A working python3 command (a pyenv, say) stands for python3, and any nginx for nginx-light.
# No pip: Debian 12 refuses `pip install` outside a virtual environment (PEP 668), and its own
# packages serve. Nothing installed is started, and the nginx and Varnish services are disabled at
# boot: nginx-light would otherwise start a system nginx on port 80 (see ensure_packages).
set -euo pipefail
# shellcheck source=../lib/common.sh
. "$(cd "$(dirname "$0")/.." && pwd)/lib/common.sh"

purpose=${2:-test}
[ "${1:-}" = "--for" ] || purpose="test"

packages=(pkg-config libarchive-dev zlib1g-dev libzstd-dev)
case "$purpose" in
  demo) packages+=(python3) ;;
  test)
    packages+=(libarchive-tools zip unzip gzip zstd python3 nginx-light time chromium strace curl varnish
      shellcheck pyflakes3 libwebkitgtk-6.0-dev xvfb xauth publicsuffix postgresql)
    ;;
esac

wanted=()
for p in "${packages[@]}"; do
  case "$p" in
    python3) command -v python3 >/dev/null || wanted+=("$p") ;;
    # nginx-full or nginx-extras would be replaced by nginx-light: any nginx will do.
    nginx-light) command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || wanted+=("$p") ;;
    *) wanted+=("$p") ;;
  esac
done
if [ "$purpose" = test ] && ! choose_python; then
  wanted+=("${python_module_packages[@]}")
fi

ensure_packages ${wanted[@]+"${wanted[@]}"}

if [ "$purpose" = test ]; then
  choose_python || die "Debian's python3 does not import ${python_modules[*]} after installing ${python_module_packages[*]}"
fi
command -v swift >/dev/null || die "no Swift toolchain on PATH (Swift 6.x is required)"
