// The resolve benchmark (run by scripts/benchmarks/bench-resolve.sh, release build): the cost of
// `Resolver.resolve` per URL over 10,000 files in 200 packages, next to baselines measured in the
// same run on the same URLs:
//   - parse+lookup: Foundation `URL(string:)`, its host and path, and one Dictionary lookup;
//   - lookup only:  host and path of an already parsed URL, and one Dictionary lookup.
// With `--markers` it writes BENCH-BEGIN / BENCH-END to stderr around one pass of resolves, so
// that `strace` can show the pass makes no system call.
//
// Usage: larder-bench-resolve WORKDIR [--rounds N] [--packages N] [--markers | --setup-only]
import Foundation
import LarderCore
import LarderFileSystem
import LarderResolve
import LarderStore
import SystemPackage

let args = CommandLine.arguments
guard args.count >= 2 else {
    FileHandle.standardError.write(Data("usage: larder-bench-resolve WORKDIR [--rounds N] [--markers]\n".utf8))
    exit(64)
}
let work = FilePath(args[1])
let rounds = args.firstIndex(of: "--rounds").flatMap { Int(args[$0 + 1]) } ?? 7
let markers = args.contains("--markers")
let packageCount = args.firstIndex(of: "--packages").flatMap { Int(args[$0 + 1]) } ?? 200
let filesPerPackage = 50

/// Paths of one package: an entry page and assets at several depths.
func paths(_ p: Int) -> [String] {
    var out = ["index.html"]
    for j in 1..<filesPerPackage {
        switch j % 5 {
        case 0: out.append("assets/js/chunk-\(p)-\(j).js")
        case 1: out.append("assets/css/style-\(j).css")
        case 2: out.append("img/icons/icon-\(j).png")
        case 3: out.append("pages/section-\(j % 7)/page-\(j).html")
        default: out.append("data/item-\(j).json")
        }
    }
    return out
}

func id(_ p: Int) -> String { String(format: "pkg-%03d", p) }

/// Ends the benchmark with exit status 1 and `message` on stderr (a generated name or URL that
/// does not parse is a bug of this program, not a result).
func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("bench-resolve: \(message)\n".utf8))
    exit(1)
}

/// Half the packages live under a shared CDN host, half on their own host.
func base(_ p: Int) -> String { p % 2 == 0 ? "https://cdn.example.com/\(id(p))/" : "https://\(id(p)).example.com/" }

let root = work.joined("sandbox")
if !AtomicFile.exists(root.joined("state.json")) {
    try? SystemCalls.removeTree(work)
    let sandbox = try Sandbox.open(root)
    var entries: [PackageEntry] = []
    for p in 0..<packageCount {
        guard let packageID = PackageID(id(p)) else { fail("\(id(p)) is not a package id") }
        guard let version = SemanticVersion("1.0.\(p)") else { fail("1.0.\(p) is not a version") }
        let staging = try sandbox.makeStagingArea(id: packageID, version: version)
        var files: [FileEntry] = []
        for path in paths(p) {
            let data = Data("\(id(p)) \(path)\n".utf8)
            let file = staging.tree.joined(path)
            try SystemCalls.makeDirectories(file.parentPath)
            try SystemCalls.writeFile(data, to: file)
            guard let relative = RelativePath(path) else { fail("\(path) is not a relative path") }
            files.append(FileEntry(path: relative, size: Int64(data.count), sha256: SHA256Digest.of(data)))
        }
        let list = FileList(id: packageID, version: version, files: files)
        _ = try sandbox.install(assembled: staging, list: list, activate: true)
        let blob = BlobRef(path: "unused", size: 1, sha256: SHA256Digest.of(Data()))
        entries.append(
            PackageEntry(
                id: list.id, version: list.version, routes: [base(p)], policy: Policy(bypass: ["/api/"]), bundle: blob,
                files: blob))
    }
    let index = RepositoryIndex(serial: 1, expires: Date().addingTimeInterval(86400 * 365), packages: entries)
    try SystemCalls.writeFile(ManifestCoding.encode(index), to: SandboxLayout(root: root).acceptedIndex)
    sandbox.close()
}

if args.contains("--setup-only") { exit(0) }

// The URLs: every file once (a tenth with a query string), in a fixed shuffled order.
var urls: [String] = []
var keys: [String: Int] = [:]
for p in 0..<packageCount {
    for (j, path) in paths(p).enumerated() {
        urls.append(base(p) + path + (j % 10 == 0 ? "?v=\(j)" : ""))
    }
}
// A fixed shuffle (by each URL's SHA-256), so that packages interleave as in a real page load.
urls = urls.map { ($0, SHA256Digest.of(Data($0.utf8)).hex) }.sorted { $0.1 < $1.1 }.map(\.0)
let parsed = urls.map { url -> URL in
    guard let u = URL(string: url) else { fail("\(url) is not a URL") }
    return u
}
for (i, u) in parsed.enumerated() { keys[(u.host ?? "") + u.path] = i }

let resolver = try Resolver(root: root)
// Correctness first: every URL resolves to its file.
var wrong = 0
for u in urls {
    guard case .local(let f) = resolver.resolve(u), u.contains(f.path.string) else {
        wrong += 1
        continue
    }
}
guard wrong == 0 else {
    FileHandle.standardError.write(Data("bench-resolve: \(wrong) URLs did not resolve to their file\n".utf8))
    exit(1)
}

func nanos() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

/// The best (lowest) time per URL of `rounds` passes over all URLs, in nanoseconds.
@MainActor func measure(_ body: () -> Int) -> (Double, Int) {
    var best = Double.infinity
    var sink = 0
    for _ in 0..<rounds {
        let t0 = nanos()
        sink &+= body()
        let t1 = nanos()
        best = min(best, Double(t1 - t0) / Double(urls.count))
    }
    return (best, sink)
}

if markers {
    // One pass between markers; strace shows whether anything between them is a system call.
    var sink = 0
    // Each marker is one write(2) of bytes made beforehand, so nothing else runs between them.
    let (begin, end) = (Array("BENCH-BEGIN\n".utf8), Array("BENCH-END\n".utf8))
    let (controlBegin, controlEnd) = (Array("CONTROL-BEGIN\n".utf8), Array("CONTROL-END\n".utf8))
    func marker(_ bytes: [UInt8]) { try? SystemCalls.writeAll(.standardError, contentsOf: bytes, path: "/dev/stderr") }
    marker(begin)
    for u in urls { if case .local(let f) = resolver.resolve(u) { sink &+= Int(f.length) } }
    marker(end)
    // A control: rebuilding the snapshot reads files, so the same method must see system calls.
    marker(controlBegin)
    _ = try? resolver.reload()
    marker(controlEnd)
    print("markers pass done: \(urls.count) URLs (\(sink))")
    exit(0)
}

let ours = measure {
    var n = 0
    for u in urls { if case .local(let f) = resolver.resolve(u) { n &+= Int(f.length) } }
    return n
}
let parseAndLookup = measure {
    var n = 0
    for u in urls {
        guard let url = URL(string: u) else { continue }
        if let i = keys[(url.host ?? "") + url.path] { n &+= i }
    }
    return n
}
let lookupOnly = measure {
    var n = 0
    for url in parsed { if let i = keys[(url.host ?? "") + url.path] { n &+= i } }
    return n
}
print(
    "resolve benchmark: \(urls.count) URLs, \(packageCount) packages, \(packageCount * filesPerPackage) files, best of \(rounds) passes"
)
print(String(format: "  Resolver.resolve(String)                        %7.0f ns/URL", ours.0))
print(
    String(
        format: "  baseline URL(string:) + host/path + Dictionary   %7.0f ns/URL   ratio %.2f", parseAndLookup.0,
        ours.0 / parseAndLookup.0))
print(
    String(
        format: "  baseline parsed URL host/path + Dictionary       %7.0f ns/URL   ratio %.2f", lookupOnly.0,
        ours.0 / lookupOnly.0))
print("  (checksums \(ours.1 != 0), \(parseAndLookup.1 == lookupOnly.1))")
