import Foundation
import LarderCore
import LarderTestSupport
import Testing

/// Whether `haystack` contains `needle` byte for byte (String.contains compares canonically
/// equivalent text as equal, which would hide an NFC/NFD difference).
func containsBytes(_ haystack: String, _ needle: String) -> Bool {
    let h = Array(haystack.utf8)
    let n = Array(needle.utf8)
    guard !n.isEmpty, h.count >= n.count else { return n.isEmpty }
    for i in 0...(h.count - n.count) where h[i] == n[0] && Array(h[i..<(i + n.count)]) == n { return true }
    return false
}

/// Every regular file under `root` with its SHA-256 ([:] when `root` does not exist), and every
/// directory (value "dir"), so that a refused command can be shown to have left no trace.
func snapshot(_ root: URL) -> [String: String] {
    var out: [String: String] = [:]
    let fm = FileManager.default
    guard let e = fm.enumerator(atPath: root.path) else { return out }
    while let rel = e.nextObject() as? String {
        // The publishers' lock file is created by any pack (it holds no repository data).
        if rel == ".larder-publish.lock" { continue }
        let url = root.appendingPathComponent(rel)
        var isDir: ObjCBool = false
        guard fm.fileExists(atPath: url.path, isDirectory: &isDir) else { continue }
        out[rel] = isDir.boolValue ? "dir" : ((try? sha256Hex(url)) ?? "unreadable")
    }
    return out
}

/// One refused pack: how to build the tree (and repository state), the arguments, and what the
/// message must name.
struct Rejection: Sendable, CustomTestStringConvertible {
    var name: String
    var id = "sample-app"
    var version = "1.0.0"
    var extra: [String] = []
    /// The expected error code, shown as `error [code]`.
    var code: String
    /// Texts the message must contain (compared byte for byte).
    var mentions: [String]
    /// Whether the message must also name the source directory.
    var mentionsSource = false
    /// Builds the source tree in the workspace (and may pre-pack); returns the directory to pack.
    var prepare: @Sendable (Workspace) throws -> URL = { ws in try copySampleApp(to: ws.dir) }

    var testDescription: String { name }
}

/// The sample app with an extra step applied to the copy.
private func sample(_ change: @escaping @Sendable (URL) throws -> Void) -> @Sendable (Workspace) throws -> URL {
    { ws in
        let src = try copySampleApp(to: ws.dir)
        try change(src)
        return src
    }
}

/// The sample app, packed once as `version` before the refused pack.
private func packedFirst(_ version: String) -> @Sendable (Workspace) throws -> URL {
    { ws in
        let src = try copySampleApp(to: ws.dir)
        try ws.packOK(src, version: version)
        return src
    }
}

/// A small tree: index.html plus whatever `change` adds.
private func small(_ change: @escaping @Sendable (URL) throws -> Void) -> @Sendable (Workspace) throws -> URL {
    { ws in
        let src = ws.dir.appendingPathComponent("small")
        try writeText("<!doctype html><p>hi</p>\n", to: src.appendingPathComponent("index.html"))
        try change(src)
        return src
    }
}

let longComponents = (0..<5).map { i in String(repeating: Character(UnicodeScalar(UInt8(0x61 + i))), count: 250) }

let rejections: [Rejection] = [
    Rejection(
        name: "a symbolic link", code: "symlink", mentions: ["css/link.css", "symbolic link"],
        prepare: sample { src in
            try FileManager.default.createSymbolicLink(
                atPath: src.appendingPathComponent("css/link.css").path, withDestinationPath: "app.css")
        }),
    Rejection(
        name: "a FIFO", code: "special-file", mentions: ["js/pipe", "FIFO"],
        prepare: sample { src in try makeFIFO(src.appendingPathComponent("js/pipe")) }),
    Rejection(
        name: "a name that is not UTF-8", code: "path-not-utf8", mentions: ["data/f\u{FFFD}.txt", "not valid UTF-8"],
        prepare: sample { src in
            try createRawFile([0x66, 0xFF, 0x2E, 0x74, 0x78, 0x74], in: src.appendingPathComponent("data"))
        }),
    // An NFD name is refused on its own, before any collision check can see its NFC twin.
    Rejection(
        name: "Café.txt (NFC) next to cafe\u{301}.txt (NFD)", code: "path-not-nfc",
        mentions: ["cafe\u{301}.txt", "NFC"],
        prepare: sample { src in
            try createRawFile("Caf\u{E9}.txt", in: src)
            try createRawFile("cafe\u{301}.txt", in: src)
        }),
    Rejection(
        name: "Café.txt next to café.txt (both NFC, case differs)", code: "name-collision",
        mentions: ["Caf\u{E9}.txt", "caf\u{E9}.txt", "differ only by case"],
        prepare: sample { src in
            try createRawFile("Caf\u{E9}.txt", in: src)
            try createRawFile("caf\u{E9}.txt", in: src)
        }),
    Rejection(
        name: "A.txt next to a.txt", code: "name-collision", mentions: ["docs/A.txt", "docs/a.txt"],
        prepare: sample { src in
            try writeText("upper\n", to: src.appendingPathComponent("docs/A.txt"))
            try writeText("lower\n", to: src.appendingPathComponent("docs/a.txt"))
        }),
    Rejection(
        name: "directories Img/ and img/", code: "name-collision", mentions: ["Img", "img"],
        prepare: sample { src in try writeText("x\n", to: src.appendingPathComponent("Img/other.png")) }),
    Rejection(
        name: "a name not in NFC", code: "path-not-nfc", mentions: ["notes/cafe\u{301}.txt"],
        prepare: sample { src in
            let notes = src.appendingPathComponent("notes")
            try FileManager.default.createDirectory(at: notes, withIntermediateDirectories: true)
            try createRawFile("cafe\u{301}.txt", in: notes)
        }),
    Rejection(
        name: "an empty tree (only an empty subdirectory)", code: "empty-tree", mentions: ["holds no files"],
        mentionsSource: true,
        prepare: { ws in
            let src = ws.dir.appendingPathComponent("empty")
            try FileManager.default.createDirectory(
                at: src.appendingPathComponent("sub"), withIntermediateDirectories: true)
            return src
        }),
    Rejection(name: "a bad id", id: "Bad_ID", code: "bad-id", mentions: ["\"Bad_ID\""]),
    Rejection(name: "a bad version", version: "v1.0", code: "bad-version", mentions: ["\"v1.0\""]),
    Rejection(
        name: "a bad channel", extra: ["--channel", "Beta"], code: "bad-channel", mentions: ["\"Beta\""]),
    Rejection(
        name: "a bad --min-client-version", extra: ["--min-client-version", "1.x"], code: "bad-version",
        mentions: ["\"1.x\""]),
    Rejection(name: "a rollout over 100", extra: ["--rollout", "101"], code: "bad-rollout", mentions: ["101"]),
    Rejection(
        name: "a bad dependency", extra: ["--depends", "shared-ui"], code: "bad-dependency", mentions: ["\"shared-ui\""]
    ),
    Rejection(
        name: "a version lower than the newest", version: "0.9.0", code: "version-not-newer",
        mentions: ["sample-app 0.9.0", "newest published version 1.0.0", "channel stable"],
        prepare: packedFirst("1.0.0")),
    Rejection(
        name: "a pre-release of the newest", version: "1.0.0-beta.1", code: "version-not-newer",
        mentions: ["sample-app 1.0.0-beta.1", "1.0.0 on channel stable"], prepare: packedFirst("1.0.0")),
    Rejection(
        name: "a version that exists", version: "1.0.0", code: "version-exists",
        mentions: ["sample-app 1.0.0 already exists"], prepare: packedFirst("1.0.0")),
    Rejection(
        name: "a version that exists, with build metadata", version: "1.0.0+build.7", code: "version-exists",
        mentions: ["sample-app 1.0.0"], prepare: packedFirst("1.0.0")),
    Rejection(name: "--max-files 3", extra: ["--max-files", "3"], code: "limit-files", mentions: ["limit 3"]),
    Rejection(
        name: "--max-total-size 100", extra: ["--max-total-size", "100"], code: "limit-total-size",
        mentions: ["limit 100"]),
    Rejection(
        name: "a path longer than 1024 bytes", code: "path-too-long",
        mentions: [longComponents[0] + "/" + longComponents[1], "(limit 1024)"],
        prepare: small { src in
            var dir = src
            for c in longComponents { dir = dir.appendingPathComponent(c) }
            try writeText("deep\n", to: dir.appendingPathComponent("f.txt"))
        }),
    Rejection(
        name: "a path deeper than 32 directories", code: "path-too-deep",
        mentions: [Array(repeating: "d", count: 33).joined(separator: "/"), "33 directories deep (limit 32)"],
        prepare: small { src in
            var dir = src
            for _ in 0..<33 { dir = dir.appendingPathComponent("d") }
            try writeText("deep\n", to: dir.appendingPathComponent("f.txt"))
        }),
    Rejection(
        name: "a missing entry file", extra: ["--entry", "nope.html"], code: "entry-missing",
        mentions: ["\"nope.html\""]),
    Rejection(name: "a bad route", extra: ["--route", "notaurl"], code: "bad-route", mentions: ["route \"notaurl\""]),
    Rejection(
        name: "a larder:// route", extra: ["--route", "larder://sample-app/"], code: "bad-route",
        mentions: ["larder://sample-app/"]),
    Rejection(
        name: "a source that is not a directory", code: "not-a-directory", mentions: ["index.html is not a directory"],
        prepare: { ws in
            let src = try copySampleApp(to: ws.dir)
            return src.appendingPathComponent("index.html")
        }),
]

@Suite("larder pack: refusals")
struct PackRejectionTests {
    @Test("refuses, names the offender and leaves the repository untouched", arguments: rejections)
    func refuses(_ c: Rejection) throws {
        try withWorkspace { ws in
            let src = try c.prepare(ws)
            let indexBefore = bytes(ws.index)
            let sigBefore = bytes(ws.signature)
            let repoBefore = snapshot(ws.repo)

            let r = try ws.pack(src, id: c.id, version: c.version, c.extra)
            #expect(r.status == 1, "\(r)")
            #expect(
                r.stderr.split(separator: "\n").contains { $0.hasPrefix("larder pack: error [\(c.code)]: ") }, "\(r)")
            for m in c.mentions { #expect(containsBytes(r.stderr, m), "stderr should name \(m): \(r)") }
            if c.mentionsSource { #expect(r.stderr.contains(src.path), "\(r)") }
            #expect(r.stdout.isEmpty, "\(r)")

            // Untouched: the same index bytes (absent for a fresh repository) and no other trace.
            #expect(bytes(ws.index) == indexBefore, "index.json changed")
            #expect(bytes(ws.signature) == sigBefore, "index.json.sig changed")
            #expect(snapshot(ws.repo) == repoBefore, "the repository gained or lost files")
            if indexBefore == nil { #expect(bytes(ws.index) == nil) }

            // --json: the same refusal as a document on stdout.
            let j = try ws.pack(src, id: c.id, version: c.version, c.extra + ["--json"])
            #expect(j.status == 1, "\(j)")
            let failure = try decode(FailureJSON.self, j)
            #expect(failure.ok == false)
            #expect(failure.error.code == c.code)
            for m in c.mentions { #expect(containsBytes(failure.error.message, m), "JSON message should name \(m)") }
            #expect(snapshot(ws.repo) == repoBefore, "the --json run changed the repository")
        }
    }

    @Test(
        "usage errors exit 64 and name the option",
        arguments: [
            (["--repo", "REPO", "--id", "sample-app"], "--version"),
            (["--repo", "REPO", "--id", "sample-app", "--version", "1.0.0", "--bogus"], "--bogus"),
            (["--repo", "REPO", "--id", "sample-app", "--version", "1.0.0", "--policy", "bogus"], "bogus"),
            (["--repo", "REPO", "--id", "sample-app", "--version", "1.0.0", "--max-files", "0"], "--max-files"),
            (["--repo", "REPO", "--id", "sample-app", "--version", "1.0.0", "--max-files", "50001"], "--max-files"),
            (
                ["--repo", "REPO", "--id", "sample-app", "--version", "1.0.0", "--max-total-size", "0"],
                "--max-total-size"
            ),
            (["--repo", "REPO", "--id", "sample-app", "--version", "1.0.0", "--ttl-days", "0"], "--ttl-days"),
            (["--repo", "REPO", "--id", "sample-app", "--version", "1.0.0", "--bypass", "api/"], "api/"),
        ])
    func usage(_ args: [String], _ mention: String) throws {
        try withWorkspace { ws in
            let src = try copySampleApp(to: ws.dir)
            let repo = ws.repo.path
            let r = try larder(["pack", src.path, "--key", ws.key.path] + args.map { $0 == "REPO" ? repo : $0 })
            #expect(r.status == 64, "\(r)")
            #expect(r.stderr.contains(mention), "\(r)")
            #expect(
                !FileManager.default.fileExists(atPath: ws.repo.path), "a usage error must not create the repository")
        }
    }

    // BUG (reported): `pack` has a `--version <SemVer>` option while the root command declares
    // `version:`, so ArgumentParser also treats `--version` as "print the tool's version". When a
    // required option is missing, the parse error is swallowed: it prints "0.1.0" and exits 0,
    // so a CI script that forgot --repo (or --id) believes the pack succeeded.
    @Test(
        "a missing --repo or --id is a usage error (exit 64) even though --version is given",
        arguments: [
            (["--id", "sample-app", "--version", "1.0.0"], "--repo"),
            (["--repo", "REPO", "--version", "1.0.0"], "--id"),
        ])
    func missingRequiredOptionBesideVersion(_ args: [String], _ mention: String) throws {
        try withWorkspace { ws in
            let src = try copySampleApp(to: ws.dir)
            let repo = ws.repo.path
            let r = try larder(["pack", src.path, "--key", ws.key.path] + args.map { $0 == "REPO" ? repo : $0 })
            #expect(!FileManager.default.fileExists(atPath: ws.repo.appendingPathComponent("index.json").path))
            #expect(r.status == 64, "\(r)")
            #expect(r.stderr.contains(mention), "\(r)")
        }
    }

    @Test("a bad key file fails with code key and names the file")
    func badKey() throws {
        try withWorkspace { ws in
            let src = try copySampleApp(to: ws.dir)
            let r = try larder([
                "pack", src.path, "--repo", ws.repo.path, "--id", "a", "--version", "1.0.0", "--key", ws.pub.path,
            ])
            #expect(r.status == 1, "\(r)")
            #expect(r.stderr.contains("error [key]"), "\(r)")
            #expect(r.stderr.contains(ws.pub.path), "\(r)")
            #expect(bytes(ws.index) == nil)
        }
    }

    @Test("a repository signed by another key is refused, index untouched")
    func foreignRepository() throws {
        try withWorkspace { ws in
            let src = try copySampleApp(to: ws.dir)
            try ws.packOK(src, version: "1.0.0")
            let before = snapshot(ws.repo)
            let other = ws.dir.appendingPathComponent("other")
            #expect(try larder(["keygen", "--out", other.path]).status == 0)
            try setCatalogVersion(src, "1.1.0")
            let r = try larder([
                "pack", src.path, "--repo", ws.repo.path, "--id", "sample-app", "--version", "1.1.0", "--key",
                other.path + ".key",
            ])
            #expect(r.status == 1, "\(r)")
            #expect(r.stderr.contains("error [index-untrusted]"), "\(r)")
            #expect(snapshot(ws.repo) == before)
        }
    }

    @Test("the limits are inclusive: depth 32 and a 1024-byte path pack and verify")
    func limitsInclusive() throws {
        try withWorkspace { ws in
            let src = ws.dir.appendingPathComponent("edge")
            try writeText("<!doctype html>\n", to: src.appendingPathComponent("index.html"))
            var dir = src
            for _ in 0..<31 { dir = dir.appendingPathComponent("d") }
            try writeText("32\n", to: dir.appendingPathComponent("f.txt"))
            let comps = (0..<4).map { _ in String(repeating: "p", count: 200) } + [String(repeating: "q", count: 220)]
            #expect(comps.joined(separator: "/").utf8.count == 1024)
            var long = src
            for c in comps.dropLast() { long = long.appendingPathComponent(c) }
            try writeText("1024\n", to: long.appendingPathComponent(comps.last!))

            let r = try ws.pack(src, id: "edge", version: "1.0.0", ["--json"])
            #expect(r.status == 0, "\(r)")
            #expect(try decode(PackJSON.self, r).fileCount == 3)
            let v = try ws.verify()
            #expect(v.status == 0, "\(v)")
        }
    }

    @Test("--max-files and --max-total-size at exactly the tree's size pass")
    func stricterLimitsAtTheEdge() throws {
        try withWorkspace { ws in
            let src = try copySampleApp(to: ws.dir)
            let probe = try decode(
                PackJSON.self,
                try ws.packOK(src, version: "1.0.0", repo: ws.dir.appendingPathComponent("probe"), ["--json"]))
            let r = try ws.pack(
                src, version: "1.0.0", ["--max-files", "\(probe.fileCount)", "--max-total-size", "\(probe.totalSize)"])
            #expect(r.status == 0, "\(r)")
        }
    }

    // Regression: pack used to check the index rules only after moving packages/ID/VERSION
    // into place, orphaning it, and reported index-untrusted instead of the rule.
    @Test("a dependency the index lacks is refused without leaving the version directory behind")
    func missingDependencyLeavesNoTrace() throws {
        try withWorkspace { ws in
            let src = try copySampleApp(to: ws.dir)
            let r = try ws.pack(src, version: "1.0.0", ["--depends", "shared-ui@^1.0.0"])
            #expect(r.status == 1, "\(r)")
            #expect(r.stderr.contains("shared-ui"), "\(r)")
            #expect(bytes(ws.index) == nil)
            #expect(r.stderr.contains("error [missing-dependency]"), "\(r)")
            #expect(
                !FileManager.default.fileExists(
                    atPath: ws.repo.appendingPathComponent("packages/sample-app/1.0.0").path))
            // Retrying without the bad dependency must work.
            let retry = try ws.pack(src, version: "1.0.0")
            #expect(retry.status == 0, "\(retry)")
        }
    }

    // Regression: an invalid --entry used to be reported as path-empty whatever was wrong.
    @Test("an entry with a .. component is refused naming the real problem")
    func entryWithDotDot() throws {
        try withWorkspace { ws in
            let src = try copySampleApp(to: ws.dir)
            let r = try ws.pack(src, version: "1.0.0", ["--entry", "../index.html"])
            #expect(r.status == 1, "\(r)")
            #expect(r.stderr.contains("../index.html"), "\(r)")
            #expect(bytes(ws.index) == nil)
            #expect(r.stderr.contains("error [path-dot-component]"), "\(r)")
        }
    }
}
