import Foundation
import LarderArchive
import LarderCore
import LarderFetch
import LarderFileSystem
import LarderPublish
import LarderStore
import LarderSync
import LarderTestSupport
import SystemPackage
import Testing

/// The byte pipeline is the one seam between blobs and files: a repository published with
/// another encoding (every kind masked, as encryption will be) is verified, installed by bundle,
/// updated by objects and by delta with that pipeline, and is nothing a standard device installs.
@Suite("Sync through another byte pipeline")
struct PipelineSyncTests {
    let masked = MaskingCodec.pipeline

    func publish(_ env: SyncEnv, _ release: Int, deltas: Int) throws {
        try env.repository.publish(
            "1.\(release).0", edit: chunkedApp(release), at: env.clock, configure: { $0.deltaBases = deltas },
            publisher: { $0.pipeline = masked })
    }

    func sync(_ env: SyncEnv, _ pipeline: BytePipeline) async throws(SyncError) -> SyncReport {
        var o = SyncSetup(engine: .tested)
        let now = env.clock
        o.clock = { now }
        o.pipeline = pipeline
        return try await Syncer(root: env.root, setup: o).sync()
    }

    /// Every file the repository serves, with the bytes it holds.
    func servedFiles(_ env: SyncEnv) throws -> [(String, Data)] {
        let root = env.repo.path
        let files = FileManager.default.enumerator(atPath: root)?.compactMap { $0 as? String } ?? []
        return try files.compactMap { rel in
            var isDir: ObjCBool = false
            guard FileManager.default.fileExists(atPath: root + "/" + rel, isDirectory: &isDir), !isDir.boolValue
            else { return nil }
            return (rel, try Data(contentsOf: URL(fileURLWithPath: root + "/" + rel)))
        }
    }

    @Test("masked end to end: verify, install, update by delta; no zip or gzip stream in the repository")
    func maskedEndToEnd() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try publish(env, 0, deltas: 0)
        try publish(env, 1, deltas: 3)
        for (path, data) in try servedFiles(env)
        where path.hasSuffix(".zip") || path.contains("objects/")
            || path.contains("patches/") || path.hasSuffix(".gz")
        {
            #expect(
                data.prefix(4) != Data([0x50, 0x4B, 0x03, 0x04]) && data.prefix(2) != Data([0x1F, 0x8B]), "\(path)")
        }
        var verifier = Verifier(trustedKeys: [env.key.publicKey])
        verifier.pipeline = masked
        let verified = verifier.verifyRepository(FilePath(env.repo.path))
        #expect(verified.problems.isEmpty, "\(verified.problems)")
        // Read as standard blobs, the same repository is damaged: the objects do not inflate.
        let standard = Verifier(trustedKeys: [env.key.publicKey]).verifyRepository(FilePath(env.repo.path))
        #expect(standard.problems.contains { $0.code == "object-corrupt" || $0.code == "object-bad" }, "\(standard)")

        try env.initialise()
        // The index says 1.1.0; install it by bundle (no streamed extraction for a masked zip).
        let first = try await sync(env, masked)
        let installed = try #require(first.packages.first)
        #expect(installed.outcome == .done && installed.method == .bundle && installed.streamed == false, "\(first)")
        #expect(try env.active() == "1.1.0")

        try publish(env, 2, deltas: 3)
        let update = try await sync(env, masked)
        let byDelta = try #require(update.packages.first)
        #expect(byDelta.outcome == .done && byDelta.method == .delta, "\(update)")
        #expect((byDelta.delta?.patchesApplied ?? 0) > 0 && byDelta.delta?.fallbacks == [], "\(byDelta)")
        #expect(try env.active() == "1.2.0")
        let list = try ManifestCoding.decode(
            FileList.self, from: AtomicFile.read(env.repository.fileList("sample-app", "1.2.0")), document: "list")
        let tree = SandboxLayout(root: env.root).tree(PackageID("sample-app")!, SemanticVersion("1.2.0")!)
        for f in list.files {
            #expect(SHA256Digest.of(try AtomicFile.read(tree.appending(f.path.string))) == f.sha256, "\(f.path)")
        }
    }

    @Test("a standard device refuses a masked repository's bundle with the archive's code, installing nothing")
    func standardDeviceRefuses() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try publish(env, 0, deltas: 0)
        try env.initialise()
        let r = try await sync(env, .standard)
        let p = try #require(r.packages.first)
        #expect(p.outcome == .failed && p.code != nil, "\(r)")
        #expect(try env.active() == nil)
    }
}
