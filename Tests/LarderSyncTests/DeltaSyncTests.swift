import Foundation
import LarderArchive
import LarderCore
import LarderFetch
import LarderFileSystem
import LarderStore
import LarderSync
import LarderTestSupport
import SystemPackage
import Testing

/// The sample app with two large generated chunks whose names carry a content hash, as a
/// bundler writes them: each release edits a line of each and renames it.
func chunkedApp(_ release: Int) -> @Sendable (URL) throws -> Void {
    { src in
        try SampleRepository.setCatalogVersion("1.\(release).0")(src)
        for n in 0..<2 {
            var lines: [String] = []
            var seed: UInt64 = UInt64(n + 1) &* 0x9E37_79B9_7F4A_7C15
            for i in 0..<2500 {
                seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                let word = String(seed >> 20, radix: 36)
                lines.append(
                    i == 100 * (release + 1)
                        ? "export const edited\(release) = \(release);" : "export const c\(n)_\(i) = \"\(word)\";")
            }
            let hash = String(format: "%08x", (release + 1) * 0x1234567 + n)
            try Data(lines.joined(separator: "\n").utf8).write(
                to: src.appendingPathComponent("js/chunk\(n).\(hash).js"))
        }
    }
}

@Suite("Sync by delta")
struct DeltaSyncTests {
    func env(releases: Int) throws -> SyncEnv {
        let env = try SyncEnv()
        for r in 0..<releases {
            try env.repository.publish("1.\(r).0", edit: chunkedApp(r), at: env.clock) { $0.deltaBases = 3 }
        }
        return env
    }

    func publish(_ env: SyncEnv, _ r: Int) throws {
        try env.repository.publish("1.\(r).0", edit: chunkedApp(r), at: env.clock) { $0.deltaBases = 3 }
    }

    /// The tree of the active version equals the release's list, file by file.
    func expectTreeMatches(_ env: SyncEnv, _ version: String) throws {
        let list = try ManifestCoding.decode(
            FileList.self, from: AtomicFile.read(env.repository.fileList("sample-app", version)), document: "list")
        let tree = SandboxLayout(root: env.root).tree(PackageID("sample-app")!, SemanticVersion(version)!)
        for f in list.files {
            let data = try AtomicFile.read(tree.appending(f.path.string))
            #expect(SHA256Digest.of(data) == f.sha256, "\(f.path)")
        }
    }

    @Test("an update by delta fetches the manifest and one patch file only: no file list, no object, no bundle")
    func patchesOnly() async throws {
        let env = try env(releases: 1)
        defer { env.cleanup() }
        try env.initialise()
        _ = try await env.sync()
        try publish(env, 1)
        let recording = RecordingTransport()
        let r = try await env.sync(transport: recording)
        let p = try #require(r.packages.first)
        #expect(p.method == .delta && p.outcome == .done, "\(r)")
        // Three contents change: the two chunks and data/catalog.json.
        #expect(p.delta?.patchesApplied == 3 && p.delta?.fallbacks == [])
        let urls = recording.calls.map {
            switch $0 {
            case .document(let u, _): u
            case .download(let u): u
            }
        }
        // The three patches lie in one file, fetched in one request.
        #expect(urls.filter { $0.contains("/patches/") }.count == 1, "\(urls)")
        #expect(urls.contains { $0.hasSuffix("/deltas/1.0.0.json.gz") })
        #expect(!urls.contains { $0.hasSuffix("files.json") || $0.hasSuffix("files.json.gz") }, "\(urls)")
        #expect(!urls.contains { $0.contains("/objects/") || $0.hasSuffix("bundle.zip") }, "\(urls)")
        // A few hundred bytes against a bundle of tens of kilobytes.
        #expect(p.bytesFetched + (p.metadataBytes ?? 0) < (p.bundleBytes ?? 0) / 20, "\(p)")
        #expect(try env.active() == "1.1.0")
        try expectTreeMatches(env, "1.1.0")
    }

    @Test("a damaged patch file on the server: its contents fall back to their objects; the tree is exact")
    func damagedPatch() async throws {
        let env = try env(releases: 1)
        defer { env.cleanup() }
        try env.initialise()
        _ = try await env.sync()
        try publish(env, 1)
        // Flip a byte of every patch (its size stays: the transport's hash check refuses it).
        let patches = env.repo.appendingPathComponent("patches")
        for case let file as URL in FileManager.default.enumerator(at: patches, includingPropertiesForKeys: nil)!
        where !file.hasDirectoryPath {
            var d = try Data(contentsOf: file)
            d[d.count / 2] ^= 0x40
            try d.write(to: file)
        }
        let r = try await env.sync()
        let p = try #require(r.packages.first)
        #expect(p.outcome == .done && p.method == .delta, "\(r)")
        #expect(p.delta?.fallbacks.count == 3 && p.delta?.fallbacks.allSatisfy { $0.to == .object } == true)
        #expect(
            p.delta?.fallbacks.first?.reason.contains("could not be fetched") == true, "\(String(describing: p.delta))")
        try expectTreeMatches(env, "1.1.0")
    }

    @Test("a patch file cut off mid-transfer is resumed with Range from where it stopped: nothing falls back")
    func resumedPatchFile() async throws {
        let env = try env(releases: 1)
        defer { env.cleanup() }
        let origin = try await FaultOrigin.start(serving: env.repo, otherHost: nil)
        _ = try SyncConfig.initialise(
            root: env.root, repository: origin.base + "/", keys: [env.key.publicKey], channel: "stable",
            appVersion: SemanticVersion(1, 0, 0), allowInsecureHTTP: true)
        do {
            _ = try await Syncer(root: env.root, setup: SyncSetup(engine: .tested)).sync()
            try publish(env, 1)
            let file = try #require(DeltaManifestFixture.read(env, to: "1.1.0", from: "1.0.0").patchFile)
            let cut = Int(file.size / 2)
            origin.inject(.truncate(after: cut), at: "/" + file.path)
            let r = try await Syncer(root: env.root, setup: SyncSetup(engine: .tested)).sync()
            let p = try #require(r.packages.first)
            #expect(p.method == .delta && p.outcome == .done && p.delta?.fallbacks == [], "\(r)")
            #expect(p.delta?.patchesApplied == 3)
            let asked = origin.requests(under: "/" + file.path)
            #expect(asked.count == 2 && asked.first?.range == nil, "\(asked)")
            #expect(asked.last?.range == "bytes=\(cut)-" && asked.last?.status == 206, "\(asked)")
            #expect(origin.requests(under: "/objects/").isEmpty)
            try expectTreeMatches(env, "1.1.0")
        } catch {
            await origin.stop()
            throw error
        }
        await origin.stop()
    }

    @Test("a base altered on the device's disk falls back to the object; the patch is not trusted")
    func alteredBase() async throws {
        let env = try env(releases: 1)
        defer { env.cleanup() }
        try env.initialise()
        _ = try await env.sync()
        try publish(env, 1)
        // Damage one chunk of the active tree in place (its size kept).
        let tree = SandboxLayout(root: env.root).tree(PackageID("sample-app")!, SemanticVersion("1.0.0")!)
        let js = try FileManager.default.contentsOfDirectory(atPath: tree.appending("js").string).filter {
            $0.hasPrefix("chunk0.")
        }
        let victim = URL(fileURLWithPath: tree.appending("js").appending(try #require(js.first)).string)
        var d = try Data(contentsOf: victim)
        d[10] ^= 0x01
        try? FileManager.default.removeItem(at: victim)
        try d.write(to: victim)
        let r = try await env.sync()
        let p = try #require(r.packages.first)
        #expect(p.outcome == .done, "\(r)")
        #expect(p.delta?.fallbacks.count == 1, "\(String(describing: p.delta))")
        #expect(p.delta?.fallbacks.first?.reason.contains("altered") == true)
        #expect(p.delta?.patchesApplied == 2)
        try expectTreeMatches(env, "1.1.0")
    }

    @Test("the patch file and a patched content's object both failing: the package falls back to the bundle")
    func toBundle() async throws {
        let env = try env(releases: 1)
        defer { env.cleanup() }
        try env.initialise()
        _ = try await env.sync()
        try publish(env, 1)
        let manifest = try DeltaManifestFixture.read(env, to: "1.1.0", from: "1.0.0")
        let target = try #require(manifest.patches.first)
        let file = try #require(manifest.patchFile)
        var failing: [String: FetchError] = [file.path: .status(url: file.path, code: 503)]
        failing[RepositoryLayout.objectPath(manifest.upsert[target.target].sha256)] = .status(url: "object", code: 404)
        let r = try await env.sync(transport: FailingTransport(failing: failing, forwardingTo: FileTransport()))
        let p = try #require(r.packages.first)
        #expect(p.outcome == .done && p.method == .bundle, "\(r)")
        // The patch file's three contents fell back; the one whose object failed too, to the bundle.
        let bundled = manifest.upsert[target.target].sha256
        #expect(p.delta?.fallbacks.count == 3, "\(String(describing: p.delta))")
        #expect(p.delta?.fallbacks.filter { $0.to == .bundle }.map(\.content) == [bundled])
        try expectTreeMatches(env, "1.1.0")
    }

    @Test("a device three versions behind uses its own base; one four behind gets objects or the bundle")
    func behind() async throws {
        let env = try env(releases: 1)
        defer { env.cleanup() }
        try env.initialise()
        _ = try await env.sync()
        // A second device on the same repository, also on 1.0.0.
        let other = FilePath(env.dir.appendingPathComponent("sandbox-2").path)
        _ = try SyncConfig.initialise(
            root: other, repository: env.repo.absoluteString, keys: [env.key.publicKey], channel: "stable",
            appVersion: SemanticVersion(1, 0, 0), allowInsecureHTTP: false)
        _ = try await Syncer(root: other, setup: SyncSetup(engine: .tested)).sync()
        for r in 1...3 { try publish(env, r) }
        // 1.3.0 has deltas from 1.2.0, 1.1.0 and 1.0.0: the first device, on 1.0.0, uses the last.
        let r = try await env.sync()
        #expect(r.packages.first?.method == .delta && r.packages.first?.outcome == .done, "\(r)")
        #expect(r.packages.first?.delta?.patchesApplied == 3)
        try expectTreeMatches(env, "1.3.0")
        // 1.4.0 has deltas from 1.3.0, 1.2.0, 1.1.0: the second device, four behind, has none.
        try publish(env, 4)
        let index = try ManifestCoding.decode(
            RepositoryIndex.self, from: AtomicFile.read(FilePath(env.repo.appendingPathComponent("index.json").path)),
            document: "index")
        #expect(index.packages.first?.deltas?.map(\.from.description) == ["1.3.0", "1.2.0", "1.1.0"])
        let r2 = try await Syncer(root: other, setup: SyncSetup(engine: .tested)).sync()
        let p = try #require(r2.packages.first)
        #expect(p.outcome == .done && (p.method == .objects || p.method == .bundle), "\(r2)")
        #expect(try SandboxReader(root: other).state().packages["sample-app"]?.active == SemanticVersion("1.4.0"))
    }
}

extension DeltaSyncTests {
    @Test("a release that only renames files moves no content bytes: the manifest alone")
    func renameOnly() async throws {
        let env = try env(releases: 1)
        defer { env.cleanup() }
        try env.initialise()
        _ = try await env.sync()
        // 1.1.0: the same contents under new names (the chunks renamed, the catalogue moved).
        try env.repository.publish(
            "1.1.0",
            edit: { src in
                try chunkedApp(0)(src)
                let fm = FileManager.default
                for name in try fm.contentsOfDirectory(atPath: src.appendingPathComponent("js").path)
                where name.hasPrefix("chunk") {
                    try fm.moveItem(
                        at: src.appendingPathComponent("js/\(name)"),
                        to: src.appendingPathComponent("js/renamed-\(name)"))
                }
                try fm.moveItem(
                    at: src.appendingPathComponent("data/catalog.json"),
                    to: src.appendingPathComponent("data/catalogue.json"))
            }, at: env.clock
        ) { $0.deltaBases = 3 }
        let manifest = try DeltaManifestFixture.read(env, to: "1.1.0", from: "1.0.0")
        #expect(manifest.patches.isEmpty && manifest.objects.isEmpty && !manifest.remove.isEmpty)
        let recording = RecordingTransport()
        let r = try await env.sync(transport: recording)
        let p = try #require(r.packages.first)
        #expect(p.outcome == .done && p.bytesFetched == 0, "\(r)")
        let downloads = recording.calls.compactMap { if case .download(let u) = $0 { u } else { nil } }
        #expect(downloads.isEmpty, "\(downloads)")
        try expectTreeMatches(env, "1.1.0")
    }
}

/// Reading a published delta manifest (gzipped JSON) in tests.
enum DeltaManifestFixture {
    static func read(_ env: SyncEnv, to: String, from: String) throws -> DeltaManifest {
        let rel = RepositoryLayout.deltaPath(
            PackageID("sample-app")!, from: SemanticVersion(from)!, to: SemanticVersion(to)!)
        let gz = try AtomicFile.read(FilePath(env.repo.appendingPathComponent(rel).path))
        return try ManifestCoding.decode(
            DeltaManifest.self, from: try BytePipeline.standard.decodeDocument(gz, limit: 16 << 20), document: rel)
    }
}
