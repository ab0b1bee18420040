// The publisher side of the scale benchmark (scripts/bench --scale): writes a repository of many
// small packages in one signed index, through `Publisher.pack(batch:)` (one serial for the whole
// release, so making 10,000 packages costs 10,000 packs, not 10,000 index rewrites).
//
// Usage: larder-bench-scale REPO KEYFILE --packages N [--files F] [--version V] [--only I] [--on-demand] [--sharded]
//          [--teams T]
//        larder-bench-scale --after-sync ROOT URL
//
// `--after-sync` is the app's side, in one process: a resolver opened on the sandbox resolves URL
// (its first snapshot: cold), then a sync runs (the repository has an update), then the same
// resolver resolves URL again — the first resolve after a sync, including the snapshot rebuild.
// Prints one JSON line: coldMs, afterSyncMs, listsRead (by the rebuild), syncSeconds.
//   Each package `pkg-NNNNN` holds F files (default 10: an entry page, scripts, styles, an
//   image and data, 0.3–3 KB each, distinct per package and version) and routes
//   https://pkg-NNNNN.bench.example/. `--only I` packs just package number I (an update of one
//   package); sources are written under REPO/../scale-src and removed afterwards.
//   `--teams T` delegates the repository (manifests §18) after the first pack: KEYFILE becomes the
//   root and index key, T teams each own the packages of every T-th decade (`pkg-0012*` …), with
//   their keys written beside KEYFILE as `team-<t>.key`, and each claims its packages; with
//   `--only I` the package is packed by its team's key and the index composed with KEYFILE.
import Foundation
import LarderCore
import LarderFetchNIO
import LarderFileSystem
import LarderPublish
import LarderResolve
import LarderStore
import LarderSync
import SystemPackage

/// Ends with exit status `status` and `message` on stderr.
func fail(_ message: String, status: Int32 = 1) -> Never {
    FileHandle.standardError.write(Data("larder-bench-scale: \(message)\n".utf8))
    exit(status)
}

let args = CommandLine.arguments

/// Milliseconds since `start`.
func millis(since start: ContinuousClock.Instant) -> Double {
    let d = ContinuousClock.now - start
    return Double(d.components.seconds) * 1000 + Double(d.components.attoseconds) / 1e15
}

if args.count == 4, args[1] == "--after-sync" {
    let root = FilePath(args[2])
    let url = args[3]
    let start = ContinuousClock.now
    // The app's shape: one handoff shared by its resolver and its syncs (as OfflinePackages does).
    let handoff = ServingHandoff()
    let resolver: Resolver
    do { resolver = try Resolver(root: root, handoff: handoff) } catch { fail("\(error)") }
    guard case .local = resolver.resolve(url) else { fail("\(url) does not resolve to a local file") }
    let cold = millis(since: start)
    let syncStart = ContinuousClock.now
    do {
        var setup = SyncSetup(engine: .nio)
        setup.handoff = handoff
        let report = try await Syncer(root: root, setup: setup).sync()
        if report.hasFailures { fail("the sync had failures") }
    } catch { fail("\(error)") }
    let syncMillis = millis(since: syncStart)
    let after = ContinuousClock.now
    guard case .local = resolver.resolve(url) else { fail("\(url) does not resolve after the sync") }
    let afterSync = millis(since: after)
    print(
        "{\"coldMs\": \(cold), \"afterSyncMs\": \(afterSync), \"listsRead\": \(resolver.snapshot().listsRead), "
            + "\"syncSeconds\": \(syncMillis / 1000)}")
    exit(0)
}

guard args.count >= 3 else {
    fail("usage: larder-bench-scale REPO KEYFILE --packages N [--files F] [--version V] [--only I]", status: 64)
}
func option(_ name: String) -> String? {
    args.firstIndex(of: name).flatMap { $0 + 1 < args.count ? args[$0 + 1] : nil }
}
let repo = FilePath(args[1])
let packages = option("--packages").flatMap(Int.init) ?? 100
let files = max(2, option("--files").flatMap(Int.init) ?? 10)
let version = option("--version") ?? "1.0.0"
let only = option("--only").flatMap(Int.init)
/// `--on-demand`: every package is packed with `install: on-demand` (devices fetch them at first use).
let onDemand = args.contains("--on-demand")
/// `--sharded`: the index keeps the on-demand entries in shards (`pack --index-layout sharded`).
let sharded = args.contains("--sharded")

let key: PrivateKey
do { key = try PublisherKeys.loadPrivateKey(FilePath(args[2])) } catch { fail("\(error)") }

func id(_ p: Int) -> String { String(format: "pkg-%05d", p) }

/// The relative path and text of file `j` of package `p` at `version`.
func file(_ p: Int, _ j: Int) -> (String, String) {
    let stamp = "\(id(p)) \(version) file \(j)"
    let filler = String(repeating: "\(stamp) lorem ipsum dolor sit amet; ", count: 8 + (p * 7 + j * 13) % 64)
    switch j {
    case 0:
        return (
            "index.html", "<!doctype html><title>\(stamp)</title><script src=js/app.js></script>\n<p>\(filler)</p>\n"
        )
    case 1: return ("js/app.js", "console.log(\"\(stamp)\");\n// \(filler)\n")
    default:
        switch j % 4 {
        case 0: return ("css/style-\(j).css", "/* \(filler) */ body { margin: \(j)px }\n")
        case 1: return ("js/chunk-\(j).js", "export const v\(j) = \"\(stamp)\"; // \(filler)\n")
        case 2: return ("img/icon-\(j).svg", "<svg xmlns='http://www.w3.org/2000/svg'><desc>\(filler)</desc></svg>\n")
        default: return ("data/item-\(j).json", "{\"id\": \"\(stamp)\", \"text\": \"\(filler)\"}\n")
        }
    }
}

let sources = repo.parentPath.joined("scale-src")
try? SystemCalls.removeTree(sources)
var requests: [PackRequest] = []
for p in only.map({ [$0] }) ?? Array(0..<packages) {
    let dir = sources.joined(id(p))
    for j in 0..<files {
        let (rel, text) = file(p, j)
        let path = dir.joined(rel)
        do {
            try AtomicFile.makeDirectories(path.parentPath)
            try AtomicFile.write(Data(text.utf8), to: path)
        } catch { fail("writing \(path): \(error)") }
    }
    var request = PackRequest(source: dir, repository: repo, id: id(p), version: version)
    request.routes = ["https://\(id(p)).bench.example/"]
    if onDemand { request.install = InstallPolicy(mode: .onDemand) }
    requests.append(request)
}
/// `--teams T`: the number of delegated teams (0: one key signs everything).
let teams = option("--teams").flatMap(Int.init) ?? 0
let keyDir = FilePath(args[2]).parentPath
func teamOf(_ p: Int) -> Int { (p / 10) % teams }
func teamKeyPath(_ t: Int) -> FilePath { keyDir.joined("team-\(t)") }
do {
    var publisher = Publisher(key: key)
    if teams > 0, let only {
        publisher = Publisher(
            key: try PublisherKeys.loadPrivateKey(FilePath(teamKeyPath(teamOf(only)).string + ".key")))
        publisher.indexKeys = [key]
    }
    if sharded { publisher.indexLayout = .sharded }
    let reports = try publisher.pack(batch: requests)
    print("packed \(reports.count) package(s) of \(files) files, serial \(reports.first?.serial ?? 0)")
    if teams > 0, only == nil {
        // Every team with its key and its decades, then each claims what is already published.
        for t in 0..<teams {
            _ = try? SystemCalls.unlink(FilePath(teamKeyPath(t).string + ".key"))
            _ = try? SystemCalls.unlink(FilePath(teamKeyPath(t).string + ".pub"))
            _ = try PublisherKeys.generate(out: teamKeyPath(t))
            let decades = stride(from: t, to: (packages + 9) / 10, by: teams)
            let patterns = decades.compactMap { PackagePattern(String(id($0 * 10).dropLast()) + "*") }
            let pub = try PublisherKeys.loadPublicKey(FilePath(teamKeyPath(t).string + ".pub"))
            _ = try Publisher(key: key).delegateAdd(
                TeamRequest(name: "team-\(t)", publicKeys: [pub], patterns: patterns), repository: repo)
        }
        var composed = false
        for t in 0..<teams {
            var team = Publisher(key: try PublisherKeys.loadPrivateKey(FilePath(teamKeyPath(t).string + ".key")))
            team.indexKeys = [key]
            composed = try team.claim(repository: repo).composed
        }
        guard composed else { fail("the delegated index was not composed") }
        print("delegated to \(teams) teams")
    }
} catch { fail("\(error)") }
try? SystemCalls.removeTree(sources)
