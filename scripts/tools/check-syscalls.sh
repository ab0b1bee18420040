#!/usr/bin/env bash
# Fails when Swift code in Sources/ touches the file system without going through the funnel
# (LarderFileSystem's `SystemCalls`, which retries EINTR, keeps errno in a typed error and is
# where tests inject faults). Prints each offending file:line and the count.
#
# Usage: scripts/tools/check-syscalls.sh [--count] [--root DIR]
#   --count     print only the number of offending lines (exit status as without it)
#   --root DIR  check DIR/Sources instead of this checkout's (e.g. another worktree)
# Exit: 0 none found, 1 some found, 64 usage.
#
# What counts (one line counts once, whatever it holds):
#   libc         a C file-system call, bare (`open(`, `pread(`, `var st = stat()` …) or qualified
#                (`Glibc.close(`); not a method call (`x.read(`, `self.open(`), a call with no
#                argument (`close()`), or a declaration (`func read(`, `case symlink(`). So a
#                method named like a C call is called as `self.read(…)` / `Self.read(…)`
#   FileManager  `FileManager.default` or `FileManager()`
#   swift-system `FileDescriptor.open(`: its descriptor methods bypass the funnel
#   Foundation   file I/O through Foundation: `FileHandle(forReadingAtPath:` and friends,
#                `Data(contentsOf:`, `String(contentsOfFile:`, `.write(to:`, `write(toFile:`,
#                `.contents(atPath:`
# Where: every *.swift under Sources/ except Sources/LarderFileSystem/Syscalls.swift, the
# funnel's one helper file (the rest of LarderFileSystem is held to the same rule), and
# Sources/LarderTestSupport and Sources/larder-fault-origin (the fault-injecting origin the
# integration tests start, over LarderTestSupport), which are test code (fixtures, temporary
# directories, an origin's directory) kept out of the products, held to Tests/' rules. Comments (after `//`) and the insides of one-line string
# literals are ignored; C files are not read.
#
# Calls that are not file-system calls are allowed and not matched at all: isatty, getpid,
# kill, usleep, clock_gettime, exit, dlsym/malloc_trim, uselocale, strerror, and
# `FileHandle.standardOutput/standardError.write` (the terminal, not a file).
set -euo pipefail

# shellcheck source=../lib/common.sh
. "$(cd "$(dirname "$0")/.." && pwd)/lib/common.sh"
root=$LARDER_CHECKOUT
count_only=0
usage() { sed -n '6,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
        --count) count_only=1 ;;
        --root)
            [ $# -ge 2 ] || { usage >&2; exit 64; }
            root="$2"
            shift
            ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; exit 64 ;;
    esac
    shift
done
[ -d "$root/Sources" ] || { echo "check-syscalls: no Sources/ under $root" >&2; exit 64; }

# Allowed exceptions: file (relative to the root), an ERE the line must match, and why.
# Keep this list short; each entry is a call that cannot or need not go through the funnel.
exceptions=$(
    cat <<'EOF'
Sources/LarderStore/Pins.swift	String\(contentsOfFile: "/proc/	reads the kernel's /proc/<pid>/stat, not a file of Larder's (no fault to inject)
Sources/LarderStore/StagingArea.swift	try read\(&extractor\)	a closure parameter named read, not read(2)
Sources/larder-quickstart/main.swift	FileManager\.default\.fileExists	the README's quick start: the app's own veto check, not Larder's I/O
EOF
)

cd "$root"
found=$(
    # shellcheck disable=SC2016 # the single quotes hold an awk program
    find Sources -name '*.swift' ! -path 'Sources/LarderFileSystem/Syscalls.swift' \
        ! -path 'Sources/LarderTestSupport/*' ! -path 'Sources/larder-fault-origin/*' -print0 | sort -z |
        xargs -0 awk -v exceptions="$exceptions" '
        BEGIN {
            calls = "open|openat|creat|close|read|pread|readv|write|pwrite|writev|fsync|fdatasync|syncfs|" \
                "rename|renameat|unlink|unlinkat|link|linkat|symlink|readlink|mkdir|mkdirat|rmdir|stat|lstat|fstat|" \
                "fstatat|truncate|ftruncate|flock|fcntl|lseek|mmap|munmap|opendir|fdopendir|readdir|closedir|" \
                "utimensat|futimens|chmod|fchmod|access|realpath|dup|dup2|posix_fallocate|sendfile|copy_file_range"
            bare = "(^|[^.A-Za-z0-9_])(" calls ")\\("
            qualified = "(Glibc|Darwin|Musl)\\.(" calls ")\\("
            foundation = "FileHandle\\((forReadingAtPath|forWritingAtPath|forUpdatingAtPath|forReadingFrom|" \
                "forWritingTo|forUpdating):|Data\\(contentsOf:|String\\(contentsOf(File)?:|\\.write\\(to:|" \
                "write\\(toFile:|\\.contents\\(atPath:"
            n = split(exceptions, rows, "\n")
            for (i = 1; i <= n; i++) {
                split(rows[i], f, "\t")
                exFile[i] = f[1]; exPattern[i] = f[2]
            }
            exCount = n
        }
        {
            code = $0
            gsub(/"([^"\\]|\\.)*"/, "\"\"", code)   # one-line string literals
            sub(/\/\/.*/, "", code)                  # comments
            calling = code
            gsub(/stat\(\)/, "stat(0)", calling)      # the C struct, kept: it is there for a C call
            gsub(/[A-Za-z_][A-Za-z0-9_]*\(\)/, "", calling)  # no argument: a Swift method, not a C call
            gsub(/(func|case)[ \t]+[A-Za-z_][A-Za-z0-9_]*\(/, "", calling)  # declarations
            kind = ""
            if (calling ~ bare || code ~ qualified) kind = "libc"
            else if (code ~ /FileManager\.default|FileManager\(\)/) kind = "FileManager"
            else if (code ~ /FileDescriptor\.open\(/) kind = "swift-system"
            else if (code ~ foundation) kind = "Foundation"
            if (kind == "") next
            for (i = 1; i <= exCount; i++) if (FILENAME == exFile[i] && $0 ~ exPattern[i]) next
            text = $0
            sub(/^[ \t]+/, "", text)
            printf "%s:%d: %s: %s\n", FILENAME, FNR, kind, text
        }'
)
count=0
[ -z "$found" ] || count=$(printf '%s\n' "$found" | wc -l | tr -d ' ')

if [ "$count_only" = 1 ]; then
    echo "$count"
else
    [ -z "$found" ] || printf '%s\n' "$found"
    if [ "$count" = 0 ]; then
        echo "check-syscalls: every file-system call in Sources/ goes through LarderFileSystem's funnel"
    else
        echo "check-syscalls: $count line(s) call the file system outside LarderFileSystem's funnel (SystemCalls)" >&2
    fi
fi
[ "$count" = 0 ]
