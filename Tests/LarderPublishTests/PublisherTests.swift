import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import LarderPublish
import LarderTestSupport
import SystemPackage
import Testing

/// The package root, found from this file's path.
let packageRoot = TestPaths.packageRoot

/// A temporary workspace with a copy of the sample app, a key and a repository path.
struct Workspace {
    let temporary: TemporaryDirectory
    let root: URL
    let key = PrivateKey()

    init() throws {
        temporary = try TemporaryDirectory("publish")
        root = temporary.url
        try FileManager.default.copyItem(at: TestPaths.sampleApp, to: app)
    }

    var app: URL { root.appendingPathComponent("app") }
    var repo: URL { root.appendingPathComponent("repo") }
    var repoPath: FilePath { FilePath(repo.path) }

    func request(_ version: String, id: String = "sample-app", source: URL? = nil) -> PackRequest {
        var r = PackRequest(source: FilePath((source ?? app).path), repository: repoPath, id: id, version: version)
        r.routes = ["https://app.example.com/"]
        return r
    }

    func publisher(at date: Date = Date()) -> Publisher { Publisher(key: key, now: { date }) }

    func data(_ rel: String) throws -> Data { try Data(contentsOf: repo.appendingPathComponent(rel)) }

    func write(_ rel: String, _ text: String, in base: URL? = nil) throws {
        let url = (base ?? app).appendingPathComponent(rel)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(text.utf8).write(to: url)
    }

    func index() throws -> RepositoryIndex {
        try ManifestCoding.decode(RepositoryIndex.self, from: data("index.json"), document: "index.json")
    }

    /// Re-signs an edited index with the repository key (and keeps its copy, as `pack` does), so
    /// that a test isolates one corruption.
    func resign(_ index: RepositoryIndex) throws {
        let bytes = try ManifestCoding.encode(index)
        let copy = repo.appendingPathComponent(RepositoryLayout.indexCopyPath(SHA256Digest.of(bytes)))
        try bytes.write(to: copy)
        try bytes.write(to: repo.appendingPathComponent("index.json"))
        try ManifestCoding.encode(IndexSignature.sign(bytes, with: [key])).write(
            to: repo.appendingPathComponent("index.json.sig"))
    }

    func verify() -> VerifyReport { Verifier(trustedKeys: [key.publicKey]).verifyRepository(repoPath) }

    func cleanup() { temporary.remove() }
}

@Suite("Publisher")
struct PublisherTests {
    @Test func packThenVerify() throws {
        let ws = try Workspace()
        defer { ws.cleanup() }
        let report = try ws.publisher().pack(ws.request("1.0.0"))
        #expect(report.serial == 1)
        #expect(report.fileCount == 9)
        #expect(report.objectsWritten == 9 && report.objectsReused == 0)
        let v = ws.verify()
        #expect(v.ok, "\(v.problems)")
        #expect(v.packagesChecked == 1 && v.filesChecked == 9 && v.objectsChecked == 9)
        // The file list and bundle agree with the report and the index.
        let idx = try ws.index()
        #expect(idx.packages.first?.bundle == report.bundle)
        #expect(SHA256Digest.of(try ws.data(report.bundle.path)) == report.bundle.sha256)
    }

    @Test func determinismAcrossRepositories() throws {
        let ws = try Workspace()
        defer { ws.cleanup() }
        let a = try ws.publisher().pack(ws.request("1.0.0"))
        for name in try FileManager.default.subpathsOfDirectory(atPath: ws.app.path) {
            try? FileManager.default.setAttributes(
                [.modificationDate: Date(timeIntervalSince1970: 99)],
                ofItemAtPath: ws.app.appendingPathComponent(name).path)
        }
        var other = ws.request("1.0.0")
        other.repository = FilePath(ws.root.appendingPathComponent("repo2").path)
        let b = try ws.publisher(at: Date(timeIntervalSinceNow: 3600)).pack(other)
        #expect(a.bundle.sha256 == b.bundle.sha256)
        #expect(a.fileList.sha256 == b.fileList.sha256)
    }

    @Test func objectsAreShared() throws {
        let ws = try Workspace()
        defer { ws.cleanup() }
        _ = try ws.publisher().pack(ws.request("1.0.0"))
        try ws.write("data/catalog.json", "{\"version\": \"1.1.0\", \"items\": []}\n")
        // A renamed but unchanged file costs nothing either.
        try FileManager.default.moveItem(
            at: ws.app.appendingPathComponent("js/app.js"), to: ws.app.appendingPathComponent("js/app.3f9a.js"))
        try ws.write(
            "index.html",
            String(decoding: try Data(contentsOf: ws.app.appendingPathComponent("index.html")), as: UTF8.self)
                .replacingOccurrences(of: "js/app.js", with: "js/app.3f9a.js"))
        let r = try ws.publisher().pack(ws.request("1.1.0"))
        #expect(r.serial == 2)
        #expect(r.objectsWritten == 2, "catalog.json and index.html changed")
        #expect(r.objectsReused == 7)
        #expect(ws.verify().ok)
    }

    @Test func refusals() throws {
        let ws = try Workspace()
        defer { ws.cleanup() }
        let p = ws.publisher()
        _ = try p.pack(ws.request("1.0.0"))
        let before = try ws.data("index.json")
        #expect(throws: PublishError.versionExists(id: "sample-app", version: "1.0.0")) {
            try p.pack(ws.request("1.0.0"))
        }
        #expect(
            throws: PublishError.versionNotNewer(id: "sample-app", version: "0.9.0", newest: "1.0.0", channel: "stable")
        ) {
            try p.pack(ws.request("0.9.0"))
        }
        #expect(
            throws: PublishError.versionNotNewer(
                id: "sample-app", version: "1.0.0-rc.1", newest: "1.0.0", channel: "stable")
        ) {
            try p.pack(ws.request("1.0.0-rc.1"))
        }
        #expect(throws: PublishError.badID("Bad_ID")) { try p.pack(ws.request("1.0.0", id: "Bad_ID")) }
        #expect(throws: PublishError.badVersion("v2")) { try p.pack(ws.request("v2")) }
        var noEntry = ws.request("2.0.0")
        noEntry.entry = "nope.html"
        #expect(throws: PublishError.entryMissing("nope.html")) { try p.pack(noEntry) }
        var few = ws.request("2.0.0")
        few.limits.maxFiles = 3
        #expect(throws: PublishError.tooManyFiles(count: 4, limit: 3)) { try p.pack(few) }
        // Another channel has its own ordering.
        var beta = ws.request("0.9.0-beta.1")
        beta.channel = "beta"
        let betaReport = try p.pack(beta)
        #expect(betaReport.serial == 2)
        // A key other than the repository's cannot publish over its index.
        #expect(throws: PublishError.self) { try Publisher(key: PrivateKey()).pack(ws.request("3.0.0")) }
        let after = try ws.index()
        #expect(after.serial == 2)
        #expect(try ManifestCoding.decode(RepositoryIndex.self, from: before, document: "i").serial == 1)
    }

    @Test func treeRefusals() throws {
        let ws = try Workspace()
        defer { ws.cleanup() }
        let p = ws.publisher()
        let link = ws.app.appendingPathComponent("img/link.png")
        try FileManager.default.createSymbolicLink(atPath: link.path, withDestinationPath: "logo.png")
        #expect(throws: PublishError.symlink(path: "img/link.png")) { try p.pack(ws.request("1.0.0")) }
        try FileManager.default.removeItem(at: link)
        try ws.write("Data/Catalog.JSON", "{}")
        #expect(throws: PublishError.self) { try p.pack(ws.request("1.0.0")) }
        try FileManager.default.removeItem(at: ws.app.appendingPathComponent("Data"))
        let empty = ws.root.appendingPathComponent("empty/sub")
        try FileManager.default.createDirectory(at: empty, withIntermediateDirectories: true)
        #expect(throws: PublishError.emptyTree(empty.deletingLastPathComponent().path)) {
            try p.pack(ws.request("1.0.0", source: empty.deletingLastPathComponent()))
        }
        // Nothing was published by any of these.
        #expect(!FileManager.default.fileExists(atPath: ws.repo.appendingPathComponent("index.json").path))
        #expect(try ws.publisher().pack(ws.request("1.0.0")).serial == 1)
    }

    @Test func revoke() throws {
        let ws = try Workspace()
        defer { ws.cleanup() }
        let p = ws.publisher()
        _ = try p.pack(ws.request("1.0.0"))
        try ws.write("data/catalog.json", "{\"version\": \"1.1.0\", \"items\": []}\n")
        _ = try p.pack(ws.request("1.1.0"))
        let r = try p.revoke(id: "sample-app", version: "1.1.0", repository: ws.repoPath)
        #expect(r.serial == 3)
        #expect(try ws.index().packages.first?.revoked.map(\.description) == ["1.1.0"])
        #expect(ws.verify().ok)
        #expect(throws: PublishError.alreadyRevoked(id: "sample-app", version: "1.1.0")) {
            try p.revoke(id: "sample-app", version: "1.1.0", repository: ws.repoPath)
        }
        #expect(throws: PublishError.unknownVersion(id: "sample-app", version: "9.9.9")) {
            try p.revoke(id: "sample-app", version: "9.9.9", repository: ws.repoPath)
        }
        // The revoked list survives the next pack.
        try ws.write("data/catalog.json", "{\"version\": \"1.2.0\", \"items\": []}\n")
        _ = try p.pack(ws.request("1.2.0"))
        #expect(try ws.index().packages.first?.revoked.map(\.description) == ["1.1.0"])
    }

    /// Every publication signs a signature file that names its index, keeps an immutable copy of
    /// that index under its SHA-256 (the last `keptIndexCopies`), and leaves honest times: no
    /// file is stamped in the future, however quickly publications follow each other.
    @Test func signatureNamesItsIndexAndCopiesAreKept() throws {
        let ws = try Workspace()
        defer { ws.cleanup() }
        var names: [IndexName] = []
        for i in 0..<(Publisher.keptIndexCopies + 3) {
            try ws.write("data/catalog.json", "{\"version\": \"1.0.\(i)\", \"items\": []}\n")
            _ = try ws.publisher().pack(ws.request("1.0.\(i)"))
            let index = try Data(contentsOf: ws.repo.appendingPathComponent("index.json"))
            let sig = try ManifestCoding.decode(
                SignatureFile.self, from: try Data(contentsOf: ws.repo.appendingPathComponent("index.json.sig")),
                document: "sig")
            let named = try #require(sig.index)
            #expect(named.names(index), "publication \(i)")
            let copy = ws.repo.appendingPathComponent(RepositoryLayout.indexCopyPath(named.sha256))
            #expect(try Data(contentsOf: copy) == index)
            names.append(named)
            for file in ["index.json", "index.json.sig", RepositoryLayout.indexCopyPath(named.sha256)] {
                let m = try #require(
                    FileManager.default.attributesOfItem(atPath: ws.repo.appendingPathComponent(file).path)[
                        .modificationDate] as? Date)
                #expect(m.timeIntervalSinceNow < 1, "\(file) is stamped in the future (\(m))")
            }
        }
        let kept = try FileManager.default.contentsOfDirectory(atPath: ws.repo.appendingPathComponent("indexes").path)
        #expect(kept.count == Publisher.keptIndexCopies, "\(kept)")
        #expect(kept.contains(names.last!.sha256.hex + ".json"))
    }

    /// The upload order: every immutable file, then the index, then its signature last; a copy
    /// made in that order verifies, a second one copies only what changed, and a repository with
    /// a publication pending is refused.
    @Test func uploadOrder() throws {
        let ws = try Workspace()
        defer { ws.cleanup() }
        _ = try ws.publisher().pack(ws.request("1.0.0"))
        let steps = try UploadOrder.plan(ws.repoPath)
        #expect(steps.suffix(2).map(\.path) == ["index.json", "index.json.sig"])
        #expect(steps.suffix(2).map(\.phase) == [.index, .signature])
        let immutable = steps.dropLast(2)
        #expect(immutable.allSatisfy { $0.phase == .immutable })
        #expect(
            immutable.contains { $0.path.hasPrefix("objects/") } && immutable.contains { $0.path.hasPrefix("indexes/") }
        )
        #expect(
            immutable.contains { $0.path.hasSuffix("/bundle.zip") }
                && immutable.contains { $0.path.hasSuffix("/files.json") })
        #expect(!steps.contains { $0.path.contains(".larder-publish.lock") })

        let target = ws.temporary.appending("served")
        let first = try UploadOrder.perform(ws.repoPath, to: FilePath(target.path))
        #expect(first.copied == steps.map(\.path) && first.skipped == 0)
        let copy = Verifier(trustedKeys: [ws.key.publicKey]).verifyRepository(FilePath(target.path))
        #expect(copy.ok, "\(copy.problems)")

        try ws.write("data/catalog.json", "{\"version\": \"1.1.0\", \"items\": []}\n")
        _ = try ws.publisher().pack(ws.request("1.1.0"))
        let second = try UploadOrder.perform(ws.repoPath, to: FilePath(target.path))
        #expect(second.skipped == steps.count - 2, "\(second)")
        #expect(second.copied.suffix(2) == ["index.json", "index.json.sig"])
        #expect(second.copied.contains { $0.hasPrefix("packages/sample-app/1.1.0/") })
        #expect(Verifier(trustedKeys: [ws.key.publicKey]).verifyRepository(FilePath(target.path)).ok)

        try Data("{}".utf8).write(to: ws.repo.appendingPathComponent("index.json.pending"))
        #expect(throws: PublishError.publicationPending(path: ws.repoPath.appending("index.json.pending").string)) {
            try UploadOrder.plan(ws.repoPath)
        }
    }

    /// One publisher at a time: a second one waits for the lock, then gives up naming the holder.
    @Test func publishersTakeTurns() throws {
        let ws = try Workspace()
        defer { ws.cleanup() }
        _ = try ws.publisher().pack(ws.request("1.0.0"))
        let held = try FileLock(path: FilePath(ws.repo.appendingPathComponent(".larder-publish.lock").path), timeout: 1)
        var p = ws.publisher()
        p.lockTimeout = 0.3
        #expect(throws: PublishError.busy(holderPID: getpid())) {
            try p.revoke(id: "sample-app", version: "1.0.0", repository: ws.repoPath)
        }
        held.unlock()
        #expect(try p.revoke(id: "sample-app", version: "1.0.0", repository: ws.repoPath).serial == 2)
    }

    /// A crash between writing the pending pair and renaming it: the next run completes it.
    @Test func interruptedPublicationIsCompleted() throws {
        let ws = try Workspace()
        defer { ws.cleanup() }
        let p = ws.publisher()
        _ = try p.pack(ws.request("1.0.0"))
        // Simulate: a revoke wrote index.json.pending + index.json.sig.pending, renamed only the signature.
        var idx = try ws.index()
        idx.serial = 2
        idx.packages[0].revoked = [try #require(SemanticVersion("1.0.0"))]
        let bytes = try ManifestCoding.encode(idx)
        try bytes.write(to: ws.repo.appendingPathComponent("index.json.pending"))
        try ManifestCoding.encode(IndexSignature.sign(bytes, with: [ws.key])).write(
            to: ws.repo.appendingPathComponent("index.json.sig"))
        // Right now the repository does not verify (old index, new signature), and verify says why.
        let broken = ws.verify()
        #expect(broken.problems.map(\.code).contains("signature-invalid"))
        #expect(broken.problems.map(\.code).contains("publication-interrupted"))
        // The next publisher run completes the interrupted one first.
        try ws.write("data/catalog.json", "{\"version\": \"1.1.0\", \"items\": []}\n")
        let r = try p.pack(ws.request("1.1.0"))
        #expect(r.serial == 3)
        #expect(try ws.index().packages.first?.revoked.map(\.description) == ["1.0.0"])
        #expect(ws.verify().ok)
        #expect(!FileManager.default.fileExists(atPath: ws.repo.appendingPathComponent("index.json.pending").path))
    }

    /// A pending pair that does not verify is discarded, never published.
    @Test func forgedPendingIsDiscarded() throws {
        let ws = try Workspace()
        defer { ws.cleanup() }
        let p = ws.publisher()
        _ = try p.pack(ws.request("1.0.0"))
        var idx = try ws.index()
        idx.serial = 50
        let bytes = try ManifestCoding.encode(idx)
        try bytes.write(to: ws.repo.appendingPathComponent("index.json.pending"))
        try ManifestCoding.encode(IndexSignature.sign(bytes, with: [PrivateKey()])).write(
            to: ws.repo.appendingPathComponent("index.json.sig.pending"))
        try ws.write("data/catalog.json", "{\"version\": \"1.1.0\", \"items\": []}\n")
        #expect(try p.pack(ws.request("1.1.0")).serial == 2)
    }

    /// A crashed pack leaves a staging directory; it is never published and is cleaned later.
    @Test func staleStagingIsRemoved() throws {
        let ws = try Workspace()
        defer { ws.cleanup() }
        let stale = ws.repo.appendingPathComponent("packages/sample-app/.1.0.0.staging-1-2")
        try FileManager.default.createDirectory(at: stale, withIntermediateDirectories: true)
        try Data("half".utf8).write(to: stale.appendingPathComponent("bundle.zip"))
        _ = try ws.publisher().pack(ws.request("1.0.0"))
        #expect(!FileManager.default.fileExists(atPath: stale.path))
        #expect(ws.verify().ok)
    }
}

@Suite("Verifier findings")
struct VerifierTests {
    func published() throws -> Workspace {
        let ws = try Workspace()
        _ = try ws.publisher().pack(ws.request("1.0.0"))
        return ws
    }

    func codes(_ r: VerifyReport) -> [String] { r.problems.map(\.code.rawValue) }

    @Test func flippedByteInBundle() throws {
        let ws = try published()
        defer { ws.cleanup() }
        let url = ws.repo.appendingPathComponent("packages/sample-app/1.0.0/bundle.zip")
        var d = try Data(contentsOf: url)
        d[d.count / 2] ^= 0x40
        try d.write(to: url)
        let r = ws.verify()
        #expect(codes(r) == ["hash-mismatch"])
        #expect(r.problems.first?.file == "packages/sample-app/1.0.0/bundle.zip")
        #expect(r.problems.first?.package == "sample-app" && r.problems.first?.version == "1.0.0")
    }

    @Test func fileListEntryRemoved() throws {
        let ws = try published()
        defer { ws.cleanup() }
        let rel = "packages/sample-app/1.0.0/files.json"
        var list = try ManifestCoding.decode(FileList.self, from: ws.data(rel), document: rel)
        list.files.removeAll { $0.path.string == "img/logo.png" }
        let bytes = try ManifestCoding.encode(list)
        try bytes.write(to: ws.repo.appendingPathComponent(rel))
        var idx = try ws.index()
        idx.packages[0].files = BlobRef(path: rel, size: Int64(bytes.count), sha256: SHA256Digest.of(bytes))
        // The edited list has no gzipped copy: the re-signed index names none.
        idx.packages[0].filesGzip = nil
        try ws.resign(idx)
        let r = ws.verify()
        #expect(codes(r) == ["bundle-extra-file"])
        #expect(r.problems.first?.file == "img/logo.png")
    }

    @Test func untrustedAndEditedIndex() throws {
        let ws = try published()
        defer { ws.cleanup() }
        let other = Verifier(trustedKeys: [PrivateKey().publicKey]).verifyRepository(ws.repoPath)
        #expect(codes(other) == ["signature-untrusted"])
        let url = ws.repo.appendingPathComponent("index.json")
        let text = String(decoding: try Data(contentsOf: url), as: UTF8.self).replacingOccurrences(
            of: "\"percent\" : 100", with: "\"percent\" : 10")
        try Data(text.utf8).write(to: url)
        // The signature names the bytes it signed: these are others (torn), and do not verify.
        #expect(codes(ws.verify()) == ["index-torn", "signature-invalid"])
    }

    @Test func expiredAndMissingSignature() throws {
        let ws = try Workspace()
        defer { ws.cleanup() }
        _ = try ws.publisher(at: Date(timeIntervalSinceNow: -90 * 24 * 3600)).pack(ws.request("1.0.0"))
        #expect(codes(ws.verify()) == ["index-expired"])
        try FileManager.default.removeItem(at: ws.repo.appendingPathComponent("index.json.sig"))
        #expect(codes(ws.verify()).contains("signature-missing"))
    }

    @Test func bundleWithTraversal() throws {
        let ws = try published()
        defer { ws.cleanup() }
        let bundle = ws.repo.appendingPathComponent("packages/sample-app/1.0.0/bundle.zip")
        let script =
            "import zipfile,sys\nwith zipfile.ZipFile(sys.argv[1],'w') as z:\n z.writestr('index.html','<h1>x</h1>')\n z.writestr('../x','escape')\n"
        try runTool("python3", ["-c", script, bundle.path])
        let d = try Data(contentsOf: bundle)
        var idx = try ws.index()
        idx.packages[0].bundle = BlobRef(
            path: idx.packages[0].bundle.path, size: Int64(d.count), sha256: SHA256Digest.of(d))
        try ws.resign(idx)
        let r = ws.verify()
        #expect(codes(r).contains("path-dot-component"))
        #expect(r.problems.contains { $0.message.contains("../x") })
        let single = Verifier(trustedKeys: []).verifyBundle(FilePath(bundle.path))
        #expect(codes(single) == ["path-dot-component"])
    }

    @Test func missingAndAlteredObjects() throws {
        let ws = try published()
        defer { ws.cleanup() }
        let list = try ManifestCoding.decode(
            FileList.self, from: ws.data("packages/sample-app/1.0.0/files.json"), document: "f")
        let first = RepositoryLayout.objectPath(list.files[0].sha256)
        let second = RepositoryLayout.objectPath(list.files[1].sha256)
        try FileManager.default.removeItem(at: ws.repo.appendingPathComponent(first))
        // Replace the second by a valid gzip of other content.
        let other = ws.root.appendingPathComponent("other.txt")
        try Data("not the original".utf8).write(to: other)
        try FileManager.default.removeItem(at: ws.repo.appendingPathComponent(second))
        _ = try BytePipeline.standard.encodeObject(
            file: FilePath(other.path), to: FilePath(ws.repo.appendingPathComponent(second).path))
        let r = ws.verify()
        #expect(Set(codes(r)) == ["object-missing", "object-corrupt"])
        #expect(r.problems.contains { $0.file == first && $0.code == "object-missing" })
        #expect(r.problems.contains { $0.file == second && $0.code == "object-corrupt" })
    }

    @Test func brokenRelativeLink() throws {
        let ws = try Workspace()
        defer { ws.cleanup() }
        let html = String(decoding: try Data(contentsOf: ws.app.appendingPathComponent("index.html")), as: UTF8.self)
            .replacingOccurrences(of: "</head>", with: "<link rel=\"stylesheet\" href=\"css/missing.css\"></head>")
        try ws.write("index.html", html)
        try ws.write("css/extra.css", "@import url(\"../../outside.css\");\n.a { background: url(../img/nope.png) }\n")
        _ = try ws.publisher().pack(ws.request("1.0.0"))
        let r = ws.verify()
        #expect(
            r.problems.contains {
                $0.code == "link-broken" && $0.file == "index.html" && $0.message.contains("css/missing.css")
            })
        #expect(
            r.problems.contains {
                $0.code == "link-broken" && $0.file == "css/extra.css" && $0.message.contains("img/nope.png")
            })
        #expect(r.problems.contains { $0.code == "link-escapes" && $0.file == "css/extra.css" })
        #expect(r.problems.count == 3, "\(r.problems)")
    }

    @Test func routeConflictAndMissingDependency() throws {
        let ws = try Workspace()
        defer { ws.cleanup() }
        let p = ws.publisher()
        var shared = ws.request("1.0.0", id: "shared-ui")
        shared.routes = ["https://ui.example.com/"]
        _ = try p.pack(shared)
        var app = ws.request("1.0.0")
        app.dependencies = ["shared-ui@^1.0.0"]
        _ = try p.pack(app)
        #expect(ws.verify().ok)
        // Tamper (and re-sign): a route claimed twice and a dependency on nothing.
        var idx = try ws.index()
        idx.packages[1].routes = ["https://APP.example.com:443/"]
        idx.packages[0].dependencies = [
            Dependency(id: try #require(PackageID("ghost")), range: try #require(VersionRange("*")))
        ]
        try ws.resign(idx)
        #expect(Set(codes(ws.verify())) == ["route-conflict", "route-not-normalised", "missing-dependency"])
        // pack refuses to create a conflicting route in the first place.
        var clash = ws.request("1.0.0", id: "other")
        clash.routes = ["https://ui.example.com/"]
        #expect(throws: PublishError.self) { try Publisher(key: ws.key).pack(clash) }
    }
}
