#!/usr/bin/env bash
# The scripts' own gates (scripts/test runs them first, before the build):
#
#   scripts/tools/lint.sh shell    shellcheck (Debian's) over every shell script under scripts/ and
#                                  .ci/run, following what each sources (scripts/.shellcheckrc)
#   scripts/tools/lint.sh python   pyflakes (Debian's pyflakes3) over every Python file under
#                                  scripts/: unused and undefined names, imports, syntax
#   scripts/tools/lint.sh layout   every script under scripts/ has the extension of its language
#                                  (.sh or .py) so that the linters and `duplicates` read it, but
#                                  the entry points (scripts/test, bench, bootstrap, demo,
#                                  verify-bundles, webview), each a wrapper of a few lines that execs a
#                                  script with one; and every program (#!) is executable
#   scripts/tools/lint.sh          all three
#
# A script is a file whose first line is `#!`, or that ends in .sh or .py (the libraries, which
# are sourced or imported). Prints each finding and one line per gate; exit 1 on any finding.
# The linters, Debian's shellcheck and pyflakes3, are installed when missing (as scripts/bootstrap
# does).
set -euo pipefail
# shellcheck source=../lib/common.sh
. "$(cd "$(dirname "$0")/.." && pwd)/lib/common.sh"
cd "$LARDER_CHECKOUT"

entry_points=(scripts/test scripts/bench scripts/bootstrap scripts/demo scripts/verify-bundles scripts/webview)

# Every script under scripts/, one a line, sorted (the fuzz seeds, data, and generated and built
# trees left out).
scripts() {
  local f
  find scripts \( -name __pycache__ -o -name '.build*' -o -path scripts/tools/fuzz-seeds \) -prune -o -type f -print |
    LC_ALL=C sort | while IFS= read -r f; do
      case "$f" in
        *.sh | *.py) printf '%s\n' "$f" ;;
        *) if [ "$(head -c 2 "$f" | tr -d '\0')" = '#!' ]; then printf '%s\n' "$f"; fi ;;
      esac
    done
}

# The scripts in language $1 (sh or python): by extension, or by the first line when there is none.
scripts_in() {
  local f lang
  while IFS= read -r f; do
    case "$f" in
      *.sh) lang="sh" ;;
      *.py) lang="python" ;;
      *) if head -n 1 "$f" | grep -q python; then lang="python"; else lang="sh"; fi ;;
    esac
    if [ "$lang" = "$1" ]; then printf '%s\n' "$f"; fi
  done < <(scripts)
}

shell_gate() {
  ensure_packages shellcheck
  local files
  mapfile -t files < <(scripts_in sh)
  files+=(.ci/run)
  if shellcheck --external-sources "${files[@]}"; then
    say "lint shell: shellcheck $(shellcheck --version | sed -n 's/^version: //p'): ${#files[@]} shell scripts clean"
  else
    warn "shellcheck found the problems above (in ${#files[@]} shell scripts)"
    return 1
  fi
}

python_gate() {
  ensure_packages pyflakes3
  local files
  mapfile -t files < <(scripts_in python)
  if pyflakes3 "${files[@]}"; then
    say "lint python: pyflakes $(pyflakes3 --version | cut -d' ' -f1): ${#files[@]} Python files clean"
  else
    warn "pyflakes found the problems above (in ${#files[@]} Python files)"
    return 1
  fi
}

layout_gate() {
  local f problems=0 target
  while IFS= read -r f; do
    if [ "$(head -c 2 "$f")" = '#!' ] && [ ! -x "$f" ]; then
      warn "$f: a program (#!) that is not executable"
      problems=$((problems + 1))
    fi
    case "$f" in
      *.sh | *.py) continue ;;
    esac
    if [[ " ${entry_points[*]} " != *" $f "* ]]; then
      warn "$f: a script without .sh or .py (the linters and duplicates read scripts by their extension)"
      problems=$((problems + 1))
      continue
    fi
    # shellcheck disable=SC2016 # the single quotes hold the wrapper's text, not expansions
    target=$(sed -n 's/^exec "$(dirname "$0")\/\([^"]*\)" "$@"$/\1/p' "$f")
    if [ "$(wc -l <"$f")" -gt 5 ] || [ -z "$target" ] || [ ! -x "scripts/$target" ]; then
      warn "$f: an entry point must be a wrapper of at most 5 lines ending in exec \"\$(dirname \"\$0\")/FOLDER/X.sh\" \"\$@\""
      problems=$((problems + 1))
    fi
  done < <(scripts)
  for f in "${entry_points[@]}"; do
    [ -f "$f" ] || { warn "$f: the entry point is missing"; problems=$((problems + 1)); }
  done
  if [ "$problems" -gt 0 ]; then
    warn "$problems problem(s) in the scripts' layout"
    return 1
  fi
  say "lint layout: $(scripts | wc -l) scripts, each with its extension but the ${#entry_points[@]} entry points, each a wrapper"
}

case "${1:-all}" in
  shell) shell_gate ;;
  python) python_gate ;;
  layout) layout_gate ;;
  all)
    status=0
    layout_gate || status=1
    shell_gate || status=1
    python_gate || status=1
    exit "$status"
    ;;
  *) die "usage: scripts/tools/lint.sh [shell|python|layout]" ;;
esac
