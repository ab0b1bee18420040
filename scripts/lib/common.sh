# shellcheck shell=bash
# What Larder's shell scripts share: the one shell library. A script sources it by its own
# location:
#
#   . "$(cd "$(dirname "$0")/.." && pwd)/lib/common.sh"       (scripts/FOLDER/X.sh)
#
# and gets:
#   LARDER_CHECKOUT                 the repository root
#   LARDER_SCRIPT                   the script's name without .sh, which prefixes warn/die (set it
#                                   before sourcing to choose another)
#   PYTHON                          a Python 3 interpreter: $PYTHON, else python3; choose_python
#                                   makes it one that has python_modules
#   say / warn / die                a line on stdout / "<script>: ..." on stderr / the same, exit 1
#   larder_bin [debug|release]      the larder binary: $LARDER_BIN, else built from this checkout
#   swift_product_bin PRODUCT [debug|release]   builds one product and prints its path
#   swift_build [debug|release]     builds the whole package
#   swift_bin_dir [debug|release]   SwiftPM's bin directory
#   ensure_packages PKG...          installs the missing Debian packages (no service started)
#   ensure_python_modules           installs python_modules' Debian packages if no Python has them
#   python_with_modules             ensure_python_modules, then prints the interpreter chosen
#   scratch_dir PREFIX              a new directory on /dev/shm when writable, else $TMPDIR or /tmp
#   free_port                       a free TCP port on 127.0.0.1
#   serve_port LOG                  the port `larder serve` (writing LOG) listens on, once it does
#   start_work NAME                 an end-to-end test's work directory, removed on exit with the
#                                   processes in `pids`; ok / fail count and end its checks
#   sample_app_copy VERSION DIR     Examples/sample-app as VERSION
#   chromium_path, chromium_command, visit_until, dump_dom   headless Chromium (see below)
#
# Builds print the compiler's output on stderr as it comes, so stdout stays the script's result;
# a failed build stops the script with the compiler's errors above the last line.
# Scripts in Python get the same from the package scripts/lib/larder_scripts (which calls
# larder_bin and ensure_packages from here).

LARDER_CHECKOUT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LARDER_SCRIPT=${LARDER_SCRIPT:-$(basename "$0" .sh)}

say() { printf '%s\n' "$*"; }
warn() { printf '%s: %s\n' "$LARDER_SCRIPT" "$*" >&2; }
die() {
  warn "$@"
  exit 1
}

# ---- building

# Sets the caller's `flags` (declared local there) to the swift build flags of a mode.
_swift_flags() {
  case "${1:-debug}" in
    debug) flags=() ;;
    # Release builds link the Swift runtime and Foundation statically: a process starts in
    # about 15 ms instead of 24 (the dynamic loader's symbol lookups were most of it), which is
    # most of what a no-change sync or a resolve costs. Static FoundationNetworking links
    # libcurl, so release builds need its development files (swift_product_bin installs them).
    release) flags=(-c release --static-swift-stdlib) ;;
    *) die "unknown build mode '$1' (debug or release)" ;;
  esac
}

# The bin directory of a build in this checkout.
swift_bin_dir() {
  local flags
  _swift_flags "${1:-debug}"
  (cd "$LARDER_CHECKOUT" && swift build ${flags[@]+"${flags[@]}"} --show-bin-path) ||
    die "swift build --show-bin-path failed"
}

# Builds the whole package (every product and what the tests need), output on stderr.
swift_build() {
  local flags
  _swift_flags "${1:-debug}"
  (cd "$LARDER_CHECKOUT" && swift build ${flags[@]+"${flags[@]}"} >&2) ||
    die "swift build${flags[*]:+ ${flags[*]}} failed (the compiler's output is above)"
}

# Builds one product (output on stderr) and prints the path of its executable.
swift_product_bin() {
  local product=$1 mode=${2:-debug} flags
  _swift_flags "$mode"
  [ "$mode" != release ] || ensure_packages libcurl4-openssl-dev
  local cmd="swift build${flags[*]:+ ${flags[*]}} --product $product"
  warn "building $product ($cmd${_build_hint:-})"
  (cd "$LARDER_CHECKOUT" && swift build ${flags[@]+"${flags[@]}"} --product "$product" >&2) ||
    die "$cmd failed (the compiler's output is above)"
  local dir
  dir=$(swift_bin_dir "$mode") || exit 1
  printf '%s/%s\n' "$dir" "$product"
}

# The larder binary to run: $LARDER_BIN when set (it must be executable), else built here in the
# given mode (default debug). Prints its path.
larder_bin() {
  if [ -n "${LARDER_BIN:-}" ]; then
    [ -x "$LARDER_BIN" ] || die "LARDER_BIN=$LARDER_BIN is not an executable"
    printf '%s\n' "$LARDER_BIN"
    return
  fi
  local _build_hint="; set LARDER_BIN to use a built one"
  swift_product_bin larder "${1:-debug}"
}

# ---- Debian packages

# Installs with apt-get those of the named Debian packages dpkg does not list as installed, as
# root or through sudo. Nothing installed here starts a service: while apt-get runs,
# /usr/sbin/policy-rc.d answers 101 ("action forbidden") to every start request, unless such a
# policy already exists (a container's, or the administrator's), which is then left as it is.
# (Debian's nginx-light would otherwise start a system nginx on port 80 during the install, and
# the install would fail where port 80 is taken.) The services of boot_services that a package
# installed here brings are disabled at boot too: the scripts run nginx and Varnish themselves, in
# the foreground, on loopback ports. Everything the scripts need from Debian is installed through
# here.

# The Debian packages that enable a service at boot, each with its units.
boot_services=("nginx-common nginx.service" "varnish varnish.service varnishncsa.service")

# Whether dpkg lists the package $1 as installed.
deb_installed() {
  [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]
}

ensure_packages() {
  local missing=() p
  for p in "$@"; do
    deb_installed "$p" || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  command -v apt-get >/dev/null || die "apt-get not found; install ${missing[*]} by hand"
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || die "need root or sudo to install ${missing[*]}"
    sudo=sudo
  fi
  # The service packages there before this install: their units are the administrator's.
  local had=() entry
  for entry in "${boot_services[@]}"; do
    deb_installed "${entry%% *}" && had+=("${entry%% *}")
  done
  warn "installing ${missing[*]}"
  # A subshell, so that its traps (removing the temporary policy) are its own.
  (
    policy=/usr/sbin/policy-rc.d
    if [ ! -e "$policy" ]; then
      trap '$sudo rm -f "$policy"' EXIT
      trap 'exit 130' INT TERM HUP
      printf '#!/bin/sh\n# Written by Larder (scripts/lib/common.sh) for one apt-get install: start no service.\nexit 101\n' |
        $sudo tee "$policy" >/dev/null && $sudo chmod 755 "$policy" || exit 1
    fi
    apt=(${sudo:+"$sudo"} env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300)
    # apt-get's chatter (debconf's notes included) is shown only when it fails.
    log=$(mktemp)
    if "${apt[@]}" update -qq >"$log" 2>&1 &&
      "${apt[@]}" install -y -qq --no-install-recommends "${missing[@]}" >"$log" 2>&1; then
      rm -f "$log"
    else
      cat "$log" >&2
      rm -f "$log"
      exit 1
    fi
  ) || die "apt-get install ${missing[*]} failed"
  command -v systemctl >/dev/null || return 0
  local units
  for entry in "${boot_services[@]}"; do
    p=${entry%% *}
    if [[ " ${had[*]-} " == *" $p "* ]] || ! deb_installed "$p"; then continue; fi
    read -r -a units <<<"${entry#* }"
    $sudo systemctl disable --quiet "${units[@]}" 2>/dev/null || true
  done
}

# ---- Python

# The modules beyond the standard library that the scripts import (tools/check-manifests.py), and
# the Debian packages that provide them. No pip: Debian 12 refuses `pip install` outside a
# virtual environment (PEP 668).
python_modules=(jsonschema cryptography)
python_module_packages=(python3-jsonschema python3-cryptography)

# Whether the interpreter $1 imports every module in python_modules.
python_has_modules() {
  local imports
  imports=$(IFS=,; printf 'import %s' "${python_modules[*]}")
  [ -n "$1" ] && "$1" -c "$imports" >/dev/null 2>&1
}

# Sets and exports PYTHON: $PYTHON if it has python_modules, else python3 on PATH if it has
# them (a pyenv or a virtual environment may), else Debian's /usr/bin/python3 if it has them.
# When none has them, PYTHON is $PYTHON or python3 (enough for the standard library) and the
# status is 1.
choose_python() {
  local p
  for p in "${PYTHON:-}" "$(command -v python3 || true)" /usr/bin/python3; do
    if [ -x "$p" ] || command -v "$p" >/dev/null 2>&1; then
      if python_has_modules "$p"; then
        PYTHON=$(command -v "$p")
        export PYTHON
        return 0
      fi
    fi
  done
  PYTHON=${PYTHON:-python3}
  export PYTHON
  return 1
}

# Makes sure an interpreter with python_modules exists (installing python_module_packages for
# Debian's python3 when none has them) and sets PYTHON to it; dies naming what is missing.
ensure_python_modules() {
  choose_python && return 0
  ensure_packages "${python_module_packages[@]}"
  choose_python ||
    die "no Python 3 imports all of ${python_modules[*]} (python3 on PATH: $(command -v python3 || echo none)," \
      "/usr/bin/python3 after installing ${python_module_packages[*]}); run scripts/bootstrap"
}

# Prints the interpreter ensure_python_modules settles on (for the Python scripts:
# larder_scripts.python_with_modules).
python_with_modules() {
  ensure_python_modules
  printf '%s\n' "$PYTHON"
}

# Until a script needs python_modules (and calls choose_python or ensure_python_modules), any
# Python 3 will do.
PYTHON=${PYTHON:-python3}

# ---- places

# A new directory for scratch work: on /dev/shm when it is writable (tmpfs), else in $TMPDIR or
# /tmp. Prints its path.
scratch_dir() {
  local base=/dev/shm
  [ -w "$base" ] || base=${TMPDIR:-/tmp}
  mktemp -d "$base/$1.XXXXXX"
}

# A TCP port that was free on 127.0.0.1 a moment ago.
free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits up to 10 s for `larder serve`'s "listening on http://127.0.0.1:PORT" line in the log
# file $1, then prints PORT (nothing if it never came).
serve_port() {
  local _
  for _ in $(seq 100); do
    grep -q "^listening on" "$1" 2>/dev/null && break
    sleep 0.1
  done
  sed -n 's/^listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$1"
}

# ---- end-to-end tests in the shell (scripts/integration/*.sh)

# Makes a new work directory /tmp/larder-NAME.XXXXXX and goes into it. Sets `work`, `pids` (the
# background processes to end: `pids+=("$!")`) and `checks` (0); on exit the processes are ended
# and the directory removed, with the browser's profiles and temporary files in it.
start_work() {
  work=$(mktemp -d "/tmp/larder-$1.XXXXXX")
  pids=()
  checks=0
  trap _end_work EXIT
  cd "$work" || die "cannot enter $work"
}

_end_work() {
  local p
  for p in "${pids[@]+"${pids[@]}"}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}

# A passed check: "  ok: TEXT" on stdout, counted in `checks`.
ok() {
  checks=$((checks + 1))
  echo "  ok: $*"
}

# A failed check ends the script: "<script>: FAILED: TEXT" on stderr, then the last 30 lines of
# the file $fail_log names, when it is set and there.
fail() {
  warn "FAILED: $*"
  if [ -n "${fail_log:-}" ] && [ -f "$fail_log" ]; then tail -30 "$fail_log" >&2; fi
  exit 1
}

# Copies Examples/sample-app to DIR (replacing what is there), its data/catalog.json saying
# VERSION instead of 1.0.0.
sample_app_copy() {
  rm -rf "$2"
  cp -r "$LARDER_CHECKOUT/Examples/sample-app" "$2"
  sed -i "s/\"version\": \"1.0.0\"/\"version\": \"$1\"/" "$2/data/catalog.json"
}

# ---- headless Chromium (the browser tests; run in the test's work directory)
#
#   chromium_path                   Debian's chromium, or exit 1 naming bootstrap
#   chromium_command NAME HOST PORT sets the caller's `chromium_cmd` (declared local there) to the
#       command that runs headless Chromium with HOST mapped to 127.0.0.1:PORT and every other host
#       unreachable, its profile in ./profile-NAME and its temporary files in ./chromium-tmp (a
#       Chromium that is killed leaves an org.chromium.Chromium.* folder in $TMPDIR: this way it
#       goes with the work directory)
#   visit_until NAME HOST PORT LOG PATTERN LIMIT
#       opens http://HOST/ in a headless Chromium that stays open until a line matching PATTERN
#       appears in LOG after this call (or LIMIT seconds pass); prints that line (empty when none
#       came)
#   dump_dom NAME HOST PORT         loads http://HOST/ once and prints its DOM

chromium_path() {
  local c
  c=$(command -v chromium || command -v chromium-browser || true)
  [ -n "$c" ] || die "chromium is not installed (scripts/bootstrap installs it)"
  printf '%s\n' "$c"
}

chromium_command() {
  local tmp="$PWD/chromium-tmp"
  mkdir -p "$tmp"
  chromium_cmd=(env TMPDIR="$tmp" "$(chromium_path)" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage
    --no-first-run "--disable-features=HttpsUpgrades,HttpsFirstBalancedModeAutoEnable" --user-data-dir="$PWD/profile-$1"
    "--host-resolver-rules=MAP $2 127.0.0.1:$3, MAP * ~NOTFOUND")
}

visit_until() {
  local name=$1 host=$2 port=$3 log=$4 pattern=$5 limit=$6 before line="" browser chromium_cmd _
  before=$(wc -l <"$log")
  chromium_command "$name" "$host" "$port"
  "${chromium_cmd[@]}" --remote-debugging-port=0 "http://$host/" >"$name.chromium.log" 2>&1 &
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
  local chromium_cmd
  chromium_command "$1" "$2" "$3"
  timeout 120 "${chromium_cmd[@]}" --virtual-time-budget=5000 --dump-dom "http://$2/" 2>"$1.chromium.log"
}

# Whether FILE gets a line matching the grep PATTERN within 5 s: `larder serve` writes its line
# per request in batches, at most 20 ms after the request.
logged() {
  local pattern=$1 file=$2
  for _ in $(seq 50); do
    grep -q -- "$pattern" "$file" && return 0
    sleep 0.1
  done
  return 1
}
