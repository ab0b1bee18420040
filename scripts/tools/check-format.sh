#!/usr/bin/env bash
# Checks the code against the committed .swift-format (the swift-format bundled with the
# toolchain, `swift format`).
#
#   scripts/tools/check-format.sh                        lint Sources, Tests and Package.swift, strictly
#   scripts/tools/check-format.sh --count-only [PATH...] count force unwraps and undocumented public
#                                               declarations in PATH (default: Sources)
#   scripts/tools/check-format.sh --count-only --list [PATH...]   the same, with each finding's location
#
# The lint runs `swift format lint --strict` over Sources and Package.swift with .swift-format,
# and over Tests with Tests/.swift-format (the same, less the library-code rules: force unwraps
# and documented public API); it prints every finding (file:line:column: [Rule] message) on
# stderr, a count per rule, and exits 1 when there is any finding.
#
# --count-only never fails on findings; it prints, for the given files and directories:
#   - force unwraps: swift-format's NeverForceUnwrap (`x!`, `as!`), NeverUseForceTry (`try!`) and
#     NeverUseImplicitlyUnwrappedOptionals (`T!`) findings;
#   - undocumented public declarations: AllPublicDeclarationsHaveDocumentation findings;
#   - a cross-check by grep: every line declaring something `public` or `open` (extensions
#     excepted), and those without a `///` (or `/** */`) comment above them or above their
#     attributes.
#
# Exit status: 0 clean (or --count-only), 1 findings, 64 usage.
set -euo pipefail

# shellcheck source=../lib/common.sh
. "$(cd "$(dirname "$0")/.." && pwd)/lib/common.sh"
cd "$LARDER_CHECKOUT"

usage() {
    sed -n '5,8p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 64
}

count_only=0
list=0
paths=()
while (($#)); do
    case "$1" in
        --count-only) count_only=1 ;;
        --list) list=1 ;;
        -h | --help) usage ;;
        -*) echo "check-format: unknown option $1" >&2; usage ;;
        *) paths+=("$1") ;;
    esac
    shift
done
if ((!count_only)) && { ((list)) || ((${#paths[@]})); }; then
    echo "check-format: --list and paths go with --count-only" >&2
    usage
fi

if ! swift format --version >/dev/null 2>&1; then
    echo "check-format: 'swift format' is not available (it comes with Swift 6 toolchains)" >&2
    exit 1
fi

# Counts the findings of `swift format lint` (read on stdin) per rule, busiest first.
per_rule() {
    grep -o 'warning: \[[A-Za-z]*\]\|error: \[[A-Za-z]*\]' | sed 's/.*\[\(.*\)\]/\1/' | sort | uniq -c | sort -rn || true
}

if ((!count_only)); then
    findings="$(mktemp)"
    trap 'rm -f "$findings"' EXIT
    status=0
    # Sources and the manifest by the root configuration; Tests by Tests/.swift-format, the same
    # but for the rules that are about library code (no force unwraps, documented public API).
    swift format lint --strict --configuration .swift-format --recursive Sources Package.swift \
        2>"$findings" || status=$?
    swift format lint --strict --configuration Tests/.swift-format --recursive Tests \
        2>>"$findings" || status=$?
    cat "$findings" >&2
    total=$(grep -c ': \(warning\|error\): ' "$findings" || true)
    if ((status == 0 && total == 0)); then
        echo "check-format: clean"
        exit 0
    fi
    echo "check-format: $total findings" >&2
    per_rule <"$findings" >&2
    exit 1
fi

((${#paths[@]})) || paths=(Sources)
lint="$(mktemp)"
trap 'rm -f "$lint"' EXIT
swift format lint --configuration .swift-format --recursive "${paths[@]}" 2>"$lint" || true

unwraps=$(grep -c '\[\(NeverForceUnwrap\|NeverUseForceTry\|NeverUseImplicitlyUnwrappedOptionals\)\]' "$lint" || true)
undocumented=$(grep -c '\[AllPublicDeclarationsHaveDocumentation\]' "$lint" || true)

# The grep cross-check: a declaration line is one whose modifiers (after any attributes) include
# `public` or `open`; it is documented when the nearest line above that is not an attribute ends
# a `///` or `/** */` comment.
grepped="$(
    # shellcheck disable=SC2016 # the single quotes hold an awk program
    find "${paths[@]}" -name '*.swift' -type f | LC_ALL=C sort | xargs awk '
        function isdecl(s) {
            return s ~ /^[ \t]*((@[A-Za-z_][A-Za-z0-9_.]*(\([^)]*\))?|final|static|class|override|nonisolated|convenience|required|indirect|mutating|nonmutating|lazy|dynamic|private\(set\)|fileprivate\(set\)|internal\(set\))[ \t]+)*(public|open)[ \t]+/ \
                && s !~ /(^|[ \t])extension[ \t]/
        }
        FNR == 1 { doc = 0; inblock = 0 }
        {
            line = $0
            if (isdecl(line)) {
                total++
                if (!doc) { missing++; print "undocumented " FILENAME ":" FNR ": " line }
            }
            if (line ~ /^[ \t]*\/\/\//) doc = 1
            else if (inblock) { if (line ~ /\*\//) { inblock = 0; doc = 1 } }
            else if (line ~ /^[ \t]*\/\*\*/) { if (line ~ /\*\//) doc = 1; else inblock = 1 }
            else if (line ~ /^[ \t]*@[A-Za-z_]/ && line !~ /(^|[ \t])(func|var|let|init|subscript|struct|class|enum|protocol|actor|typealias|case|deinit)([ \t(<]|$)/) { }
            else doc = 0
        }
        END { print "totals " total + 0 " " missing + 0 }
    '
)"
read -r _ declared grep_missing <<<"$(grep '^totals ' <<<"$grepped")"

echo "paths: ${paths[*]}"
echo "force unwraps (NeverForceUnwrap, NeverUseForceTry, NeverUseImplicitlyUnwrappedOptionals): $unwraps"
echo "undocumented public declarations (AllPublicDeclarationsHaveDocumentation): $undocumented"
echo "public declarations by grep: $declared, without a doc comment: $grep_missing"
if ((list)); then
    grep '\[\(NeverForceUnwrap\|NeverUseForceTry\|NeverUseImplicitlyUnwrappedOptionals\|AllPublicDeclarationsHaveDocumentation\)\]' "$lint" || true
    grep '^undocumented ' <<<"$grepped" | sed 's/^undocumented /grep: /' || true
fi
