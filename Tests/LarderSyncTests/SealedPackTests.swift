import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import LarderPublish
import LarderStore
import LarderSync
import LarderTestSupport
import SystemPackage
import Testing

/// What `pack` seals (manifests §16, issue 47): padded versions (`--pad`) that devices install
/// exactly, and no delta in the clear from an encrypted base.
@Suite("Sealed packs: padding and clear deltas")
struct SealedPackTests {
    let device = RecipientKey()

    @discardableResult
    func publish(
        _ env: SyncEnv, _ release: Int, to recipients: [RecipientKey], holding: [RecipientKey] = [], pad: Bool = false
    ) throws -> PackReport {
        try env.repository.publish("1.\(release).0", edit: chunkedApp(release), at: env.clock) {
            $0.encryptTo = recipients.map(\.publicKey)
            $0.recipientKeys = holding
            $0.deltaBases = 3
            $0.pad = pad
        }
    }

    func sync(_ env: SyncEnv) async throws(SyncError) -> SyncReport {
        var o = SyncSetup(engine: .tested)
        let now = env.clock
        o.clock = { now }
        o.recipientKeys = [device]
        return try await Syncer(root: env.root, setup: o).sync()
    }

    func index(_ env: SyncEnv) throws -> RepositoryIndex {
        try ManifestCoding.decode(
            RepositoryIndex.self, from: Data(contentsOf: env.repo.appendingPathComponent("index.json")),
            document: "index")
    }

    /// The stored form under the seal of the blob at `rel` (opened as a device opens it).
    func opened(_ env: SyncEnv, _ pipeline: BytePipeline, _ kind: BlobKind, _ rel: String) throws -> Data {
        let out = FilePath(env.dir.appendingPathComponent("opened").path)
        try pipeline.unseal(kind, env.repository.path.appending(rel), to: out, limit: 1 << 30)
        defer { try? SystemCalls.unlink(out) }
        return try AtomicFile.read(out)
    }

    /// The version's sealed list, opened.
    func openedList(_ env: SyncEnv, _ pipeline: BytePipeline, _ encryption: Encryption) throws -> FileList {
        let stored = try AtomicFile.read(env.repository.path.appending(encryption.files.path))
        return try ManifestCoding.decode(
            FileList.self, from: pipeline.decodeDocument(stored, limit: 1 << 24), document: "list")
    }

    /// The installed tree of `version` is exactly `list`: every file's bytes, and no other file.
    func expectTree(_ env: SyncEnv, _ version: String, _ list: FileList) throws {
        let tree = SandboxLayout(root: env.root).tree(PackageID("sample-app")!, SemanticVersion(version)!)
        for f in list.files {
            #expect(SHA256Digest.of(try AtomicFile.read(tree.appending(f.path.string))) == f.sha256, "\(f.path)")
        }
        let names = FileManager.default.enumerator(atPath: tree.string)?.compactMap { $0 as? String } ?? []
        let files = names.filter { name in
            var dir: ObjCBool = false
            return FileManager.default.fileExists(atPath: tree.string + "/" + name, isDirectory: &dir) && !dir.boolValue
        }
        #expect(Set(files) == Set(list.files.map(\.path.string)))
    }

    @Test(
        "a padded version: every sealed size is Padmé of the unpadded one; a device installs it, then updates by delta")
    func paddedVersionSyncs() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try publish(env, 0, to: [device], pad: true)
        let entry = try #require(try index(env).packages.first)
        let encryption = try #require(entry.encryption)
        #expect(encryption.padding == Encryption.padme)
        let pipeline = try BytePipeline.standard.sealed(for: entry, encryption, keys: [device])
        // The bundle and the list: Padmé of what they would be sealed with their length and no padding.
        let zip = try opened(env, pipeline, .bundle, entry.bundle.path)
        #expect(zip.prefix(2) == Data("PK".utf8))
        #expect(entry.bundle.size == SegmentedSeal.paddedSealedSize(Int64(zip.count)))
        #expect(entry.bundle.size == Padme.padded(SegmentedSeal.sealedSize(Int64(zip.count) + 8)))
        let listGzip = try opened(env, pipeline, .document, encryption.files.path)
        #expect(encryption.files.size == SegmentedSeal.paddedSealedSize(Int64(listGzip.count)))
        let list = try openedList(env, pipeline, encryption)
        // Each object: Padmé of its gzip sealed, as the list says.
        for f in list.files {
            let name = try #require(f.sealed)
            let rel = RepositoryLayout.objectPath(name)
            let gzip = try opened(env, pipeline.forObject(f.sha256), .object, rel)
            let size = try #require(f.packed)
            #expect(size == SegmentedSeal.paddedSealedSize(Int64(gzip.count)), "\(f.path)")
            #expect(Int64(try AtomicFile.read(env.repository.path.appending(rel)).count) == size, "\(f.path)")
            #expect(Padme.padded(size) == size, "\(f.path)")
        }
        try env.initialise()
        let first = try await sync(env)
        #expect(first.packages.first?.outcome == .done, "\(first)")
        try expectTree(env, "1.0.0", list)

        // 1.1.0, padded, by delta from 1.0.0 (its patch file padded too).
        let second = try publish(env, 1, to: [device], holding: [device], pad: true)
        #expect((second.deltas.first?.patches ?? 0) > 0, "\(second.deltas)")
        for (path, size) in try sealedFiles(env) { #expect(Padme.padded(size) == size, "\(path): \(size)") }
        let update = try await sync(env)
        let byDelta = try #require(update.packages.first)
        #expect(byDelta.outcome == .done && byDelta.method == .delta && byDelta.delta?.fallbacks == [], "\(update)")
        #expect((byDelta.delta?.patchesApplied ?? 0) > 0, "\(byDelta)")
        let entry1 = try #require(try index(env).packages.first)
        let enc1 = try #require(entry1.encryption)
        let p1 = try BytePipeline.standard.sealed(for: entry1, enc1, keys: [device])
        let list1 = try openedList(env, p1, enc1)
        try expectTree(env, "1.1.0", list1)
        // verify with the key opens and checks everything: no problem.
        var verifier = Verifier(trustedKeys: [env.key.publicKey])
        verifier.recipientKeys = [device]
        let report = verifier.verifyRepository(env.repository.path)
        #expect(report.problems.isEmpty && report.encryptedChecked == 1, "\(report.problems)")
    }

    /// Every sealed file of the repository (objects, patch files, sealed bundles, lists and manifests) and its size.
    func sealedFiles(_ env: SyncEnv) throws -> [(String, Int64)] {
        let names = FileManager.default.enumerator(atPath: env.repo.path)?.compactMap { $0 as? String } ?? []
        return try names.compactMap { rel in
            let url = env.repo.appendingPathComponent(rel)
            guard rel.hasPrefix("objects/") || rel.hasPrefix("patches/") || rel.hasSuffix(".sealed") else { return nil }
            var dir: ObjCBool = false
            guard FileManager.default.fileExists(atPath: url.path, isDirectory: &dir), !dir.boolValue else {
                return nil
            }
            return (rel, Int64(try Data(contentsOf: url).count))
        }
    }

    @Test("--pad without --encrypt-to is refused before anything is written")
    func padNeedsEncryption() throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        #expect(throws: PublishError.padWithoutEncryption) { try publish(env, 0, to: [], pad: true) }
        #expect(!FileManager.default.fileExists(atPath: env.repo.appendingPathComponent("index.json").path))
    }

    @Test("a version in the clear gets no delta from an encrypted base, even when the publisher holds its key")
    func noClearDeltaFromSealedBase() throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try publish(env, 0, to: [device], holding: [device])
        let clear = try publish(env, 1, to: [], holding: [device])
        #expect(clear.deltas.isEmpty, "\(clear.deltas)")
        let entry = try #require(try index(env).packages.first)
        #expect(entry.encryption == nil && entry.deltas == nil)
        let deltas = env.repo.appendingPathComponent("packages/sample-app/1.1.0/deltas")
        #expect(!FileManager.default.fileExists(atPath: deltas.path))
        // The next clear version has its delta from the clear one, and still none from 1.0.0.
        let next = try publish(env, 2, to: [], holding: [device])
        #expect(next.deltas.map(\.from) == ["1.1.0"])
        // An encrypted version may still have a delta from a clear base (nothing of it is secret).
        let sealed = try publish(env, 3, to: [device], holding: [device])
        #expect(sealed.deltas.map(\.from) == ["1.2.0", "1.1.0"])
    }
}
