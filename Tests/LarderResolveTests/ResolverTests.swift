import Foundation
import LarderFileSystem
import LarderPublish
import LarderResolve
import LarderStore
import LarderTestSupport
import Synchronization
import SystemPackage
import Testing

@testable import LarderCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

let packageRoot = TestPaths.packageRoot

/// Reads a loader response's body to its end in small chunks.
func drain(_ r: LoadResponse, chunk: Int = 7) throws -> Data {
    var out = Data()
    while let c = try r.nextChunk(maxBytes: chunk) {
        #expect(c.count <= chunk)
        out.append(c)
    }
    return out
}

func response(_ result: LoadResult, _ context: String = "") -> LoadResponse? {
    if case .response(let r) = result { return r }
    Issue.record("expected a response \(context), got \(result)")
    return nil
}

/// Collects failure reports in memory.
final class RecordingReporter: FailureReporting, Sendable {
    private let items = Mutex<[String]>([])
    func report(package: PackageID, version: SemanticVersion, reason: String) {
        items.withLock { $0.append("\(package)@\(version): \(reason)") }
    }
    var reports: [String] { items.withLock { $0 } }
}

@Suite("Resolver, sessions and the resource loader")
struct ResolverTests {
    @Test func followsTheActiveVersionWithoutReload() throws {
        let env = try ResolveEnv()
        defer { env.cleanup() }
        try env.publish("1.0.0")
        try env.install("1.0.0")
        let resolver = try Resolver(root: env.root)
        guard case .local(let f) = resolver.resolve("https://app.example.com/data/catalog.json") else {
            Issue.record("expected a local file")
            return
        }
        #expect(f.version.description == "1.0.0" && f.mime == "application/json; charset=utf-8")
        let bytes = try Data(contentsOf: URL(fileURLWithPath: resolver.filePath(f).string))
        #expect(Int64(bytes.count) == f.length && "\"\(SHA256Digest.of(bytes).hex)\"" == f.etag)
        if case .passthrough = resolver.resolve("https://app.example.com/api/x") {} else { Issue.record("bypass") }
        let first = resolver.snapshot()
        // The generation word follows every state write.
        let word = try AtomicFile.read(SandboxLayout(root: env.root).generation)
        #expect(
            word.count == 8
                && word.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }.littleEndian == first.generation)
        // An update committed by another writer is noticed on the next call, no reload asked.
        try env.publish("2.0.0")
        try env.install("2.0.0")
        if case .local(let g) = resolver.resolve("larder://sample-app/data/catalog.json") {
            #expect(g.version.description == "2.0.0")
        } else {
            Issue.record("expected 2.0.0")
        }
        #expect(resolver.snapshot().generation > first.generation)
        // Without a change the snapshot object is reused (no rebuild).
        #expect(resolver.snapshot() === resolver.snapshot())
    }

    @Test("a rebuild reads only the file lists of packages whose version or settings changed")
    func rebuildReusesUnchangedPackages() throws {
        let env = try ResolveEnv()
        defer { env.cleanup() }
        try env.publish("1.0.0")
        try env.publish("1.0.0", id: "docs")
        try env.install("1.0.0")
        try env.install("1.0.0", id: "docs")
        let resolver = try Resolver(root: env.root)
        #expect(resolver.snapshot().listsRead == 2)
        // A state write that changes no version (a confirmation) reads no list.
        _ = try env.withSandbox { try $0.confirm(id: try packageID("sample-app")) }
        let confirmed = resolver.snapshot()
        #expect(confirmed.generation > 0 && confirmed.listsRead == 0)
        #expect(confirmed.versions[PackageID("sample-app")!]?.active == SemanticVersion("1.0.0"))
        guard case .local(let f) = resolver.resolve("https://app.example.com/docs/data/catalog.json") else {
            Issue.record("expected a local file")
            return
        }
        #expect(f.package.rawValue == "docs")
        // An update of one package (with a new index) reads that package's list only.
        try env.publish("2.0.0", id: "docs")
        try env.install("2.0.0", id: "docs")
        let updated = resolver.snapshot()
        #expect(updated.listsRead == 1)
        if case .local(let g) = resolver.resolve("https://app.example.com/docs/data/catalog.json") {
            #expect(g.version.description == "2.0.0")
        } else {
            Issue.record("expected docs 2.0.0")
        }
        if case .local(let h) = resolver.resolve("https://app.example.com/data/catalog.json") {
            #expect(h.package.rawValue == "sample-app" && h.version.description == "1.0.0")
        } else {
            Issue.record("expected sample-app 1.0.0")
        }
    }

    @Test("a one-shot resolver reads only the list of the package the URL routes to, and answers as a whole one")
    func oneShotReadsOneList() throws {
        let env = try ResolveEnv()
        defer { env.cleanup() }
        try env.publish("1.0.0")
        try env.publish("1.0.0", id: "docs")
        try env.install("1.0.0")
        try env.install("1.0.0", id: "docs")
        let whole = try Resolver(root: env.root)
        let urls = [
            "https://app.example.com/docs/data/catalog.json", "https://app.example.com/data/catalog.json",
            "https://app.example.com/docs/nothing-here.js", "larder://docs/index.html", "larder://nope/x",
            "https://elsewhere.example/", "https://app.example.com/api/x",
        ]
        for url in urls {
            let once = try Resolver(root: env.root, onlyFor: url)
            #expect(once.resolve(url) == whole.resolve(url), "\(url)")
            #expect(once.snapshot().partial && once.snapshot().listsRead <= 1, "\(url)")
        }
        #expect(try Resolver(root: env.root, onlyFor: "larder://docs/index.html").snapshot().listsRead == 1)
        #expect(try Resolver(root: env.root, onlyFor: "https://elsewhere.example/").snapshot().listsRead == 0)
        // A later whole snapshot reuses nothing from a partial one.
        let partialOne = try Resolver(root: env.root, onlyFor: "larder://sample-app/index.html")
        #expect(try partialOne.reload().listsRead == 2 && !partialOne.snapshot().partial)
        // A package whose list cannot be read is left out, as a whole build leaves it out: the
        // URL then routes to the package with the shorter prefix.
        let docsList = SandboxLayout(root: env.root).list(PackageID("docs")!, SemanticVersion("1.0.0")!)
        try SystemCalls.unlink(docsList)
        let url = "https://app.example.com/docs/data/catalog.json"
        let fresh = try Resolver(root: env.root)
        #expect(try Resolver(root: env.root, onlyFor: url).resolve(url) == fresh.resolve(url))
    }

    /// A snapshot's table takes the fast path for plain URLs of its packages (its file lists
    /// indexed as they are read) and answers every URL as the general path does.
    @Test("the fast path answers a sandbox's URLs as the general path does")
    func fastPathAgreesOnASandbox() throws {
        let env = try ResolveEnv()
        defer { env.cleanup() }
        try env.publish("1.0.0")
        try env.publish("1.0.0", id: "docs")
        try env.install("1.0.0")
        try env.install("1.0.0", id: "docs")
        let resolver = try Resolver(root: env.root)
        let table = resolver.snapshot().table
        func fast(_ url: String) -> Resolution? {
            var copy = url
            return copy.withUTF8 { table.fastResolve($0) }
        }
        let plain = [
            "https://app.example.com/data/catalog.json", "https://app.example.com/js/app.js?v=2",
            "https://app.example.com:443/css/app.css#x", "https://app.example.com/pages/about/about.css",
            "https://app.example.com/docs/data/catalog.json", "https://app.example.com/docs/js/app.js",
            // No route on this origin: the fast path's passthrough.
            "http://app.example.com/js/app.js",
        ]
        for url in plain {
            #expect(fast(url) != nil && fast(url) == table.resolveGeneral(url), "\(url)")
            #expect(resolver.resolve(url) == table.resolveGeneral(url), "\(url)")
        }
        let tricky = [
            "https://APP.example.com/data/catalog.json", "https://app.example.com/docs/../js/app.js",
            "https://app.example.com/docs/%2e%2E/js/app.js", "https://app.example.com//js/app.js",
            "https://app.example.com\\js\\app.js", "https://app.example.com/j\ts/app.js",
            "https://u@app.example.com/js/app.js", "https://[::1]/js/app.js", "https://app.example.com./js/app.js",
            "https://app.example.com", "https://app.example.com/", "https://app.example.com/docs",
            "https://app.example.com/pages/about", "https://app.example.com/api/x",
            "https://app.example.com/missing.js",
            "larder://sample-app/js/app.js", "larder://docs/index.html",
        ]
        for url in tricky {
            #expect(fast(url) == nil, "\(url)")
            #expect(resolver.resolve(url) == table.resolveGeneral(url), "\(url)")
        }
    }

    @Test func olderSandboxWithoutGenerationWordStillNoticesChanges() throws {
        let env = try ResolveEnv()
        defer { env.cleanup() }
        try env.publish("1.0.0")
        try env.publish("2.0.0")
        try env.install("1.0.0")
        try FileManager.default.removeItem(atPath: SandboxLayout(root: env.root).generation.string)
        let resolver = try Resolver(root: env.root)
        // A writer that does not publish the word (simulated: write, then remove the word).
        try env.install("2.0.0")
        try FileManager.default.removeItem(atPath: SandboxLayout(root: env.root).generation.string)
        usleep(20_000)  // past the 5 ms throttle
        if case .local(let g) = resolver.resolve("larder://sample-app/index.html") {
            #expect(g.version.description == "2.0.0")
        } else {
            Issue.record("expected 2.0.0")
        }
    }

    @Test func loaderAnswersEveryHeaderCase() throws {
        let env = try ResolveEnv()
        defer { env.cleanup() }
        try env.publish("1.0.0")
        try env.publish("1.0.0", id: "docs")
        try env.install("1.0.0")
        try env.install("1.0.0", id: "docs")
        let resolver = try Resolver(root: env.root)
        let loader = ResourceLoader(resolver: resolver)
        let onDisk = try Data(contentsOf: env.tree("sample-app", "1.0.0").appendingPathComponent("css/app.css"))
        let url = "https://app.example.com/css/app.css"
        guard let full = response(loader.load(LoadRequest(url: url))) else { return }
        #expect(full.status == 200 && full.header("Content-Length") == "\(onDisk.count)")
        #expect(
            full.header("Content-Type") == "text/css; charset=utf-8"
                && full.outcome == .local(package: PackageID("sample-app")!, version: SemanticVersion("1.0.0")!))
        #expect(try drain(full) == onDisk)
        guard let part = response(loader.load(LoadRequest(url: url, range: "bytes=10-19"))) else { return }
        #expect(part.status == 206 && part.header("Content-Range") == "bytes 10-19/\(onDisk.count)")
        #expect(try drain(part, chunk: 3) == onDisk[10..<20])
        guard let suffix = response(loader.load(LoadRequest(url: url, range: "bytes=-5"))) else { return }
        #expect(try drain(suffix) == onDisk.suffix(5))
        #expect(response(loader.load(LoadRequest(url: url, range: "bytes=\(onDisk.count)-")))?.status == 416)
        guard let head = response(loader.load(LoadRequest(method: .head, url: url))) else { return }
        #expect(head.status == 200 && head.header("Content-Length") == "\(onDisk.count)")
        #expect(try drain(head).isEmpty)
        let etag = try #require(full.header("ETag"))
        #expect(response(loader.load(LoadRequest(url: url, ifNoneMatch: etag)))?.status == 304)
        #expect(response(loader.load(LoadRequest(method: .post, url: url)))?.status == 405)
        // No package lists corsOrigins here: no page of another origin may read a file.
        #expect(
            response(loader.load(LoadRequest(url: "larder://sample-app/css/app.css", origin: "larder://other")))?
                .header("Access-Control-Allow-Origin") == nil)
        // local-only: a missing file is a 404 with a body, never an empty 200.
        guard let missing = response(loader.load(LoadRequest(url: "https://app.example.com/docs/nope.html"))) else {
            return
        }
        #expect(missing.status == 404)
        #expect(try !drain(missing).isEmpty)
        // local-then-network and bypass prefixes pass through.
        if case .passthrough = loader.load(LoadRequest(url: "https://app.example.com/nope.js")) {
        } else {
            Issue.record("passthrough")
        }
        if case .passthrough(let why) = loader.load(LoadRequest(url: "https://app.example.com/api/items")) {
            #expect(why.contains("bypass"))
        } else {
            Issue.record("bypass")
        }
        // Traversal never reaches the file system.
        for bad in [
            "https://app.example.com/..%2f..%2fstate.json", "larder://sample-app/%2e%2e/%2e%2e/state.json",
            "larder://sample-app/a%00b",
        ] {
            if case .response(let r) = loader.load(LoadRequest(url: bad)) { #expect(r.status == 404, "\(bad)") }
        }
    }

    @Test func missingFileIsServedFromTheFallbackAndReported() throws {
        let env = try ResolveEnv()
        defer { env.cleanup() }
        try env.publish("1.0.0")
        try env.publish("2.0.0")
        try env.install("1.0.0")
        try env.install("2.0.0")
        let resolver = try Resolver(root: env.root)
        let reporter = StoreFailureReporter(root: env.root, interval: 0)
        let loader = ResourceLoader(resolver: resolver, reporter: reporter)
        // v2 lost a file its list names, and another was truncated.
        try FileManager.default.removeItem(
            at: env.tree("sample-app", "2.0.0").appendingPathComponent("data/catalog.json"))
        let js = env.tree("sample-app", "2.0.0").appendingPathComponent("js/app.js")
        chmod(js.path, 0o644)
        truncate(js.path, 10)
        guard let r = response(loader.load(LoadRequest(url: "https://app.example.com/data/catalog.json"))) else {
            return
        }
        #expect(r.status == 200)
        #expect(
            r.outcome
                == .fallback(
                    package: PackageID("sample-app")!, version: SemanticVersion("1.0.0")!,
                    failed: SemanticVersion("2.0.0")!))
        #expect(String(decoding: try drain(r, chunk: 1 << 16), as: UTF8.self).contains("\"1.0.0\""))
        reporter.flush()
        var state = try SandboxReader(root: env.root).state()[PackageID("sample-app")!]
        #expect(state.failures == 1 && state.active?.description == "2.0.0")
        guard let t = response(loader.load(LoadRequest(url: "https://app.example.com/js/app.js"))) else { return }
        #expect(
            t.outcome
                == .fallback(
                    package: PackageID("sample-app")!, version: SemanticVersion("1.0.0")!,
                    failed: SemanticVersion("2.0.0")!))
        // The third failure of the pending 2.0.0 rolls it back (the standard policy).
        _ = loader.load(LoadRequest(url: "https://app.example.com/data/catalog.json"))
        reporter.flush()
        state = try SandboxReader(root: env.root).state()[PackageID("sample-app")!]
        #expect(state.active?.description == "1.0.0", "\(state)")
        #expect(state.hasFailed(SemanticVersion("2.0.0")!))
        // Now the active version serves it directly.
        #expect(
            response(loader.load(LoadRequest(url: "https://app.example.com/data/catalog.json")))?.outcome
                == .local(package: PackageID("sample-app")!, version: SemanticVersion("1.0.0")!))
    }

    @Test func missingFileWithoutFallbackPassesThrough() throws {
        let env = try ResolveEnv()
        defer { env.cleanup() }
        try env.publish("1.0.0")
        try env.install("1.0.0")
        let reporter = RecordingReporter()
        let loader = ResourceLoader(resolver: try Resolver(root: env.root), reporter: reporter)
        try FileManager.default.removeItem(at: env.tree("sample-app", "1.0.0").appendingPathComponent("img/logo.png"))
        guard case .passthrough(let why) = loader.load(LoadRequest(url: "larder://sample-app/img/logo.png")) else {
            Issue.record("expected passthrough")
            return
        }
        #expect(why.contains("img/logo.png") && why.contains("no other local version"))
        #expect(reporter.reports.count == 1)
    }

    @Test func sessionKeepsItsPinnedVersion() throws {
        let env = try ResolveEnv()
        defer { env.cleanup() }
        for v in ["1.0.0", "2.0.0", "3.0.0"] { try env.publish(v) }
        try env.install("1.0.0")
        let resolver = try Resolver(root: env.root)
        let session = try resolver.session(pinning: ["sample-app"])
        let loader = ResourceLoader(resolver: resolver)
        try env.install("2.0.0")
        _ = try env.withSandbox { try $0.confirm(id: try packageID("sample-app")) }
        try env.install("3.0.0")
        let gc = try env.withSandbox { try $0.gc(keep: 0) }
        #expect(gc.keptPinned == ["sample-app@1.0.0"])
        if case .local(let f) = session.resolve("https://app.example.com/data/catalog.json") {
            #expect(f.version.description == "1.0.0")
        } else {
            Issue.record("session: expected 1.0.0")
        }
        if case .local(let f) = resolver.resolve("https://app.example.com/data/catalog.json") {
            #expect(f.version.description == "3.0.0")
        } else {
            Issue.record("live: expected 3.0.0")
        }
        guard
            let r = response(
                loader.load(LoadRequest(url: "https://app.example.com/data/catalog.json"), session: session))
        else { return }
        #expect(String(decoding: try drain(r, chunk: 1 << 16), as: UTF8.self).contains("\"1.0.0\""))
        session.release()
        let after = try env.withSandbox { try $0.gc(keep: 0) }
        #expect(after.removed.contains("sample-app@1.0.0"), "\(after)")
    }
}
