import Crypto
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

/// Encrypted versions (manifests §16) published by the real publisher and synced over file://:
/// installed and updated with a recipient key, refused with their own codes without one, and
/// nothing in the repository a reader without the key could use.
@Suite("Sync of encrypted versions")
struct EncryptedSyncTests {
    let device = RecipientKey()
    let other = RecipientKey()

    /// Publishes release `release` of the chunked app, encrypted to `recipients` (in the clear
    /// when empty).
    @discardableResult
    func publish(
        _ env: SyncEnv, _ release: Int, to recipients: [RecipientKey], holding: [RecipientKey] = [],
        edit: (@Sendable (URL) throws -> Void)? = nil
    ) throws -> PackReport {
        try env.repository.publish("1.\(release).0", edit: edit ?? chunkedApp(release), at: env.clock) {
            $0.encryptTo = recipients.map(\.publicKey)
            $0.recipientKeys = holding
            $0.deltaBases = 3
        }
    }

    func sync(_ env: SyncEnv, keys: [RecipientKey]) async throws(SyncError) -> SyncReport {
        var o = SyncSetup(engine: .tested)
        let now = env.clock
        o.clock = { now }
        o.recipientKeys = keys
        return try await Syncer(root: env.root, setup: o).sync()
    }

    /// Edits the repository's index and signs it again with a higher serial.
    func resign(_ env: SyncEnv, _ edit: (inout RepositoryIndex) throws -> Void) throws {
        let url = env.repo.appendingPathComponent("index.json")
        var index = try ManifestCoding.decode(RepositoryIndex.self, from: Data(contentsOf: url), document: "index")
        try edit(&index)
        index.serial += 1
        let bytes = try ManifestCoding.encode(index)
        let copy = env.repo.appendingPathComponent(RepositoryLayout.indexCopyPath(SHA256Digest.of(bytes)))
        try FileManager.default.createDirectory(at: copy.deletingLastPathComponent(), withIntermediateDirectories: true)
        try bytes.write(to: copy)
        try bytes.write(to: url)
        try ManifestCoding.encode(IndexSignature.sign(bytes, with: [env.key])).write(
            to: env.repo.appendingPathComponent("index.json.sig"))
    }

    /// Every regular file under `url`, with its bytes.
    func files(under url: URL) throws -> [(String, Data)] {
        let names = FileManager.default.enumerator(atPath: url.path)?.compactMap { $0 as? String } ?? []
        return try names.compactMap { rel in
            var isDir: ObjCBool = false
            guard FileManager.default.fileExists(atPath: url.path + "/" + rel, isDirectory: &isDir), !isDir.boolValue
            else { return nil }
            return (rel, try Data(contentsOf: url.appendingPathComponent(rel)))
        }
    }

    /// The list the sandbox keeps for the installed `version`.
    func installedList(_ env: SyncEnv, _ version: String) throws -> FileList {
        let path = SandboxLayout(root: env.root).list(PackageID("sample-app")!, SemanticVersion(version)!)
        return try ManifestCoding.decode(FileList.self, from: AtomicFile.read(path), document: "list")
    }

    /// Checks that `id`@`version`'s installed tree is exactly its published list.
    func expectInstalled(_ env: SyncEnv, _ version: String, list: FileList) throws {
        let tree = SandboxLayout(root: env.root).tree(PackageID("sample-app")!, SemanticVersion(version)!)
        for f in list.files {
            #expect(SHA256Digest.of(try AtomicFile.read(tree.appending(f.path.string))) == f.sha256, "\(f.path)")
        }
    }

    @Test("install, update by objects, a second recipient; no plaintext, zip, gzip or file name in the repository")
    func endToEnd() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try publish(env, 0, to: [device, other])
        try env.initialise()
        let first = try await sync(env, keys: [device])
        let installed = try #require(first.packages.first)
        // By bundle, opened segment by segment and extracted as it arrived.
        #expect(installed.outcome == .done && installed.method == .bundle && installed.streamed == true, "\(first)")
        #expect(try env.active() == "1.0.0")
        let list0 = try installedList(env, "1.0.0")
        #expect(list0.files.allSatisfy { $0.sealed != nil })
        try expectInstalled(env, "1.0.0", list: list0)

        // 1.1.0 changes the catalogue only: an update by objects fetches that one content.
        try publish(env, 1, to: [device, other]) {
            try chunkedApp(0)($0)
            try SampleRepository.setCatalogVersion("1.1.0")($0)
        }
        let update = try await sync(env, keys: [device])
        let updated = try #require(update.packages.first)
        #expect(updated.outcome == .done && updated.method == .objects, "\(update)")
        #expect(updated.bytesFetched < (updated.bundleBytes ?? 0) / 20, "\(updated)")
        #expect(try env.active() == "1.1.0")
        let list1 = try installedList(env, "1.1.0")
        try expectInstalled(env, "1.1.0", list: list1)

        // The other recipient installs it too, from scratch, by its own key.
        let secondRoot = FilePath(env.dir.appendingPathComponent("second").path)
        _ = try SyncConfig.initialise(
            root: secondRoot, repository: env.repo.absoluteString, keys: [env.key.publicKey], channel: "stable",
            appVersion: SemanticVersion(1, 0, 0), allowInsecureHTTP: false)
        var o = SyncSetup(engine: .tested)
        let now = env.clock
        o.clock = { now }
        o.recipientKeys = [other]
        let r = try await Syncer(root: secondRoot, setup: o).sync()
        #expect(r.packages.first?.outcome == .done, "\(r)")
        #expect(try SandboxReader(root: secondRoot).state().packages["sample-app"]?.active?.description == "1.1.0")

        // Nothing the repository serves reveals the package: no zip or gzip stream, none of its
        // file names or contents, and the lists a reader without the key sees are markers.
        var known: [Data] = []
        for f in list1.files {
            known.append(Data(f.path.string.utf8))
            let content = try AtomicFile.read(
                SandboxLayout(root: env.root).tree(PackageID("sample-app")!, SemanticVersion("1.1.0")!)
                    .appending(f.path.string))
            if content.count >= 32 { known.append(content[content.count / 2..<content.count / 2 + 32]) }
        }
        known.append(Data("export const".utf8))
        // The index names the entry file (index.html) in the clear, as the format doc says.
        let entry = Data("index.html".utf8)
        for (path, data) in try files(under: env.repo) {
            #expect(data.range(of: Data([0x50, 0x4B, 0x03, 0x04])) == nil, "a zip signature in \(path)")
            #expect(data.prefix(2) != Data([0x1F, 0x8B]), "a gzip stream in \(path)")
            for k in known where k != entry {
                #expect(data.range(of: k) == nil, "\(path) holds \(String(decoding: k, as: UTF8.self))")
            }
        }
        let marker = try Data(contentsOf: env.repo.appendingPathComponent("packages/sample-app/1.1.0/files.json"))
        #expect(throws: ManifestError.self) {
            try ManifestCoding.decode(FileList.self, from: marker, document: "files.json")
        }
    }

    @Test(
        "no key, another recipient's key, a wrapped key that is not ours, a tampered bundle: each its own code, 1.0.0 kept"
    )
    func refusals() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try publish(env, 0, to: [])
        try env.initialise()
        #expect(try await sync(env, keys: []).packages.first?.outcome == .done)
        try publish(env, 1, to: [device])

        func attempt(_ keys: [RecipientKey]) async throws -> PackageResult {
            let r = try await sync(env, keys: keys)
            #expect(try env.active() == "1.0.0")
            let staged = SandboxLayout(root: env.root).tree(PackageID("sample-app")!, SemanticVersion("1.1.0")!)
            #expect(!AtomicFile.exists(staged), "nothing of 1.1.0 is written")
            // No opened bytes are left in downloads/ either.
            let downloads = (try? SystemCalls.listDirectory(SandboxLayout(root: env.root).downloads)) ?? []
            #expect(!downloads.contains { $0.string.hasSuffix(".open") }, "\(downloads)")
            return try #require(r.packages.first)
        }
        #expect(try await attempt([]).code == "recipient-key-missing")
        #expect(try await attempt([other]).code == "not-a-recipient")

        // The entry's wrapped key is replaced by one made for `other`, under our key id.
        try resign(env) { index in
            let i = try #require(index.packages.firstIndex { $0.version == SemanticVersion("1.1.0")! })
            let info = Encryption.keyInfo(index.packages[i].id, index.packages[i].version)
            var forged = try ContentKeys.wrap(SymmetricKey(size: .bits256), to: [other.publicKey], info: info)[0]
            forged.keyId = device.keyId
            index.packages[i].encryption?.recipients = [forged]
        }
        #expect(try await attempt([device]).code == "recipient-key-wrong")

        // A scheme this build does not know: the version is refused by name, nothing opened.
        try resign(env) { index in
            let i = try #require(index.packages.firstIndex { $0.version == SemanticVersion("1.1.0")! })
            index.packages[i].encryption?.scheme = "larder-seal-9"
        }
        let unknown = try await attempt([device])
        #expect(unknown.code == "encryption-scheme" && unknown.reason.contains("larder-seal-9"), "\(unknown)")
    }

    @Test("a tampered sealed bundle or object is refused by its digest before it is opened; 1.0.0 kept")
    func tampered() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try publish(env, 0, to: [device])
        try env.initialise()
        #expect(try await sync(env, keys: [device]).packages.first?.outcome == .done)
        let before = Set(try files(under: env.repo).map(\.0))
        try publish(env, 1, to: [device])
        // Every blob 1.1.0 added: its sealed objects, bundle and list, one byte flipped in each
        // but the list (which the sync needs to go on).
        for (path, data) in try files(under: env.repo)
        where !before.contains(path) && (path.hasPrefix("objects/") || path.hasSuffix("bundle.sealed")) {
            var d = data
            d[d.count / 2] ^= 0x01
            try d.write(to: env.repo.appendingPathComponent(path))
        }
        let r = try await sync(env, keys: [device])
        let p = try #require(r.packages.first)
        #expect(p.outcome == .failed && p.code == "hash-mismatch", "\(r)")
        #expect(try env.active() == "1.0.0")
    }

    @Test("a device that does not know encryption meets the marker: refused as a newer file list, nothing installed")
    func olderDevice() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try publish(env, 0, to: [])
        try env.initialise()
        #expect(try await sync(env, keys: []).packages.first?.outcome == .done)
        try publish(env, 1, to: [device])
        // What an older device reads: the entry without the member it does not know.
        try resign(env) { index in
            for i in index.packages.indices { index.packages[i].encryption = nil }
        }
        let r = try await sync(env, keys: [device])
        let p = try #require(r.packages.first)
        #expect(p.outcome == .failed && p.code == "file-list-schema", "\(r)")
        #expect(p.reason.contains("schemaVersion 2"), "\(r)")
        #expect(try env.active() == "1.0.0")
    }

    @Test(
        "update by delta: patches made over the contents, the patch file sealed once; none without the publisher's key; a tampered sealed patch file falls back to the objects",
        arguments: [false, true])
    func delta(tampered: Bool) async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        let publisherKey = RecipientKey()
        try await installedFirst(env, publisher: publisherKey)
        // A publisher that cannot open 1.0.0 makes no delta from it.
        let blind = try publish(env, 1, to: [device, publisherKey])
        #expect(blind.deltas.isEmpty, "\(blind.deltas)")
        let packed = try publish(env, 2, to: [device, publisherKey], holding: [publisherKey])
        // From 1.1.0 (the version it replaces) and 1.0.0 (the base of 1.1.0's deltas: none).
        #expect(packed.deltas.count == 1 && (packed.deltas.first?.patches ?? 0) > 0, "\(packed.deltas)")
        #expect(packed.deltas.first?.manifest.path.hasSuffix(".sealed") == true)
        // The device holds 1.0.0 and the delta is from 1.1.0: it updates by objects.
        let r = try await sync(env, keys: [device])
        #expect(r.packages.first?.outcome == .done, "\(r)")
        #expect(try env.active() == "1.2.0")

        let second = try publish(env, 3, to: [device, publisherKey], holding: [publisherKey])
        #expect((second.deltas.first?.patches ?? 0) > 0, "\(second.deltas)")
        // Sealed with 1.2.0's content key (same recipients, a key the publisher holds): the
        // contents they share are the same sealed objects.
        #expect(second.objectsReused > 0 && second.objectsWritten < second.fileCount, "\(second)")
        if tampered {
            // A byte of every sealed patch file flipped on the server (its size kept).
            for (path, data) in try files(under: env.repo) where path.hasPrefix("patches/") {
                var d = data
                d[d.count / 2] ^= 0x40
                try d.write(to: env.repo.appendingPathComponent(path))
            }
        }
        let update = try await sync(env, keys: [device])
        let byDelta = try #require(update.packages.first)
        #expect(byDelta.outcome == .done && byDelta.method == .delta, "\(update)")
        if tampered {
            // Refused by its digest before it is opened: each content it patches comes as its object.
            let fallbacks = byDelta.delta?.fallbacks ?? []
            #expect(!fallbacks.isEmpty && fallbacks.allSatisfy { $0.to == .object }, "\(byDelta)")
            #expect(byDelta.delta?.patchesApplied == 0, "\(byDelta)")
        } else {
            #expect((byDelta.delta?.patchesApplied ?? 0) > 0 && byDelta.delta?.fallbacks == [], "\(byDelta)")
        }
        // The list was built from the delta, not fetched: the metadata is the manifest alone.
        let sealedList = try #require(
            ManifestCoding.decode(
                RepositoryIndex.self, from: Data(contentsOf: env.repo.appendingPathComponent("index.json")),
                document: "index"
            ).packages.first?.encryption?.files)
        #expect((byDelta.metadataBytes ?? 0) < sealedList.size, "\(byDelta) \(sealedList)")
        #expect(try env.active() == "1.3.0")
        try expectInstalled(env, "1.3.0", list: try installedList(env, "1.3.0"))
        // Patches and manifests are sealed like the rest: no zstd frame in the clear.
        for (path, data) in try files(under: env.repo) where path.hasPrefix("patches/") || path.contains("/deltas/") {
            #expect(data.range(of: Data([0x28, 0xB5, 0x2F, 0xFD])) == nil, "a zstd frame in \(path)")
            #expect(data.prefix(4) == Data("LRDE".utf8), "\(path) is not sealed")
        }
        // Each patch file is sealed once, whole: its patches, one header and a tag per 64 KiB.
        let made = (packed.deltas + second.deltas).filter { $0.patches > 0 }
        let patchFiles = try files(under: env.repo).filter { $0.0.hasPrefix("patches/") }
        #expect(
            patchFiles.count == made.count
                && Set(patchFiles.map { Int64($0.1.count) })
                    == Set(made.map { SegmentedSeal.sealedSize($0.patchBytes) }),
            "\(made)")
    }

    /// A repository with 1.0.0 encrypted to the device and `publisher`, and a device that installed it.
    func installedFirst(_ env: SyncEnv, publisher: RecipientKey) async throws {
        try publish(env, 0, to: [device, publisher])
        try env.initialise()
        #expect(try await sync(env, keys: [device]).packages.first?.outcome == .done)
    }

    /// The index's entry and its sealed delta manifest from `from`, opened with `key`.
    func sealedDelta(_ env: SyncEnv, from: String, key: RecipientKey) throws -> (PackageEntry, DeltaManifest, FileList)
    {
        let index = try ManifestCoding.decode(
            RepositoryIndex.self, from: Data(contentsOf: env.repo.appendingPathComponent("index.json")),
            document: "index")
        let entry = try #require(index.packages.first)
        let encryption = try #require(entry.encryption)
        let pipeline = try BytePipeline.standard.sealed(for: entry, encryption, keys: [key])
        let ref = try #require(entry.deltas?.first { $0.from.description == from })
        let manifest = try ManifestCoding.decode(
            DeltaManifest.self,
            from: pipeline.decodeDocument(
                Data(contentsOf: env.repo.appendingPathComponent(ref.manifest.path)), limit: 1 << 24),
            document: "delta")
        let list = try ManifestCoding.decode(
            FileList.self,
            from: pipeline.decodeDocument(
                Data(contentsOf: env.repo.appendingPathComponent(encryption.files.path)), limit: 1 << 24),
            document: "list")
        return (entry, manifest, list)
    }

    @Test(
        "an encrypted delta names only the objects it fetches; across a new content key it carries only what changed; the device builds the list without the sealed names"
    )
    func deltaNames() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        let publisherKey = RecipientKey()
        try await installedFirst(env, publisher: publisherKey)
        try publish(env, 1, to: [device, publisherKey], holding: [publisherKey])
        let (_, manifest, list) = try sealedDelta(env, from: "1.0.0", key: publisherKey)
        let objects = Set(manifest.objects)
        #expect(!manifest.patches.isEmpty, "\(manifest)")
        // Each entry the delta fetches as an object is named as the sealed list names it; no other is.
        let named = Dictionary(list.files.map { ($0.path, $0) }, uniquingKeysWith: { a, _ in a })
        for (i, f) in manifest.upsert.enumerated() {
            if objects.contains(i) {
                #expect(f == named[f.path], "\(f.path)")
            } else {
                #expect(f.sealed == nil && f.packed == nil && f == named[f.path]?.contentOnly, "\(f.path)")
            }
        }
        let update = try await sync(env, keys: [device])
        let byDelta = try #require(update.packages.first)
        #expect(byDelta.outcome == .done && byDelta.method == .delta && byDelta.delta?.fallbacks == [], "\(update)")
        let built = try installedList(env, "1.1.0")
        #expect(built.contentOnly == list.contentOnly)
        try expectInstalled(env, "1.1.0", list: list)

        // New recipients, so a new content key: every sealed name changes, the contents do not.
        try publish(env, 2, to: [device, other, publisherKey], holding: [publisherKey])
        let (_, rotated, list2) = try sealedDelta(env, from: "1.1.0", key: publisherKey)
        let changed = DeltaManifest.changes(from: list.contentOnly, to: list2.contentOnly).upsert
        #expect(Set(list2.files.compactMap(\.sealed)).isDisjoint(with: Set(list.files.compactMap(\.sealed))))
        #expect(!changed.isEmpty && rotated.upsert.count == changed.count && changed.count < list2.files.count)
        let after = try await sync(env, keys: [device])
        let second = try #require(after.packages.first)
        #expect(second.outcome == .done && second.method == .delta && second.delta?.fallbacks == [], "\(after)")
        try expectInstalled(env, "1.2.0", list: list2)
        #expect(try installedList(env, "1.2.0").contentOnly == list2.contentOnly)
    }

    @Test(
        "a plan by objects over a list built from an encrypted delta fetches the sealed list for the objects' names; a sealed list that is not its signed digest fails the package, 1.1.0 kept",
        arguments: [false, true])
    func objectsNamedFromSealedList(damagedList: Bool) async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        let publisherKey = RecipientKey()
        // Incompressible bytes: x, and y (x with a third of it replaced).
        func noise(_ n: Int, seed: UInt8) -> Data {
            var out = Data()
            var block = Data(SHA256.hash(data: Data([seed])))
            while out.count < n {
                out += block
                block = Data(SHA256.hash(data: block))
            }
            return out.prefix(n)
        }
        let x = noise(192 * 1024, seed: 1)
        var y = x
        y.replaceSubrange(64 * 1024..<128 * 1024, with: noise(64 * 1024, seed: 2))
        let app = { (release: Int, big: Data) -> @Sendable (URL) throws -> Void in
            { src in
                try SampleRepository.setCatalogVersion("1.\(release).0")(src)
                try big.write(to: src.appendingPathComponent("big.bin"))
            }
        }
        try publish(env, 0, to: [device, publisherKey], holding: [publisherKey], edit: app(0, x))
        try env.initialise()
        #expect(try await sync(env, keys: [device]).packages.first?.outcome == .done)
        try publish(env, 1, to: [device, publisherKey], holding: [publisherKey], edit: app(1, y))
        #expect(try await sync(env, keys: [device]).packages.first?.method == .delta)
        // 1.2.0 goes back to x, which the device still holds (1.0.0 is kept for rollback): its
        // delta from 1.1.0 patches x from y, a patch file larger than the one small content left.
        try publish(env, 2, to: [device, publisherKey], holding: [publisherKey], edit: app(2, x))
        let (entry, manifest, list) = try sealedDelta(env, from: "1.1.0", key: publisherKey)
        #expect((manifest.patchFile?.size ?? 0) > 32 * 1024, "\(manifest)")
        if damagedList {
            // A byte of the sealed list flipped on the server (its size kept): the names cannot be had.
            let url = env.repo.appendingPathComponent(try #require(entry.encryption?.files.path))
            let good = try Data(contentsOf: url)
            var bad = good
            bad[bad.count / 2] ^= 0x40
            try bad.write(to: url)
            let refused = try #require(try await sync(env, keys: [device]).packages.first)
            #expect(refused.outcome == .failed && refused.code == "file-list-mismatch", "\(refused)")
            #expect(try env.active() == "1.1.0")
            try good.write(to: url)
        }
        let r = try await sync(env, keys: [device])
        let objects = try #require(r.packages.first)
        #expect(objects.outcome == .done && objects.method == .objects, "\(r)")
        // The delta's manifest, then the sealed list the objects' names come from.
        let manifestSize = try #require(entry.deltas?.first { $0.from.description == "1.1.0" }?.manifest.size)
        #expect(objects.metadataBytes == manifestSize + (entry.encryption?.files.size ?? 0), "\(objects)")
        #expect(try env.active() == "1.2.0")
        try expectInstalled(env, "1.2.0", list: list)
    }

    @Test(
        "a failed patch whose object the encrypted delta does not name, and a sealed list that is not its signed digest: the package falls back to its bundle"
    )
    func unnamedFallbackToBundle() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        let publisherKey = RecipientKey()
        try await installedFirst(env, publisher: publisherKey)
        try publish(env, 1, to: [device, publisherKey], holding: [publisherKey])
        let (entry, manifest, list) = try sealedDelta(env, from: "1.0.0", key: publisherKey)
        #expect(!manifest.patches.isEmpty, "\(manifest)")
        // A byte of the patch file and of the sealed list flipped on the server (sizes kept).
        let listPath = try #require(entry.encryption?.files.path)
        for (path, data) in try files(under: env.repo) where path.hasPrefix("patches/") || path == listPath {
            var d = data
            d[d.count / 2] ^= 0x40
            try d.write(to: env.repo.appendingPathComponent(path))
        }
        let r = try await sync(env, keys: [device])
        let got = try #require(r.packages.first)
        let fallbacks = got.delta?.fallbacks ?? []
        #expect(got.outcome == .done && got.method == .bundle, "\(r)")
        #expect(!fallbacks.isEmpty && fallbacks.allSatisfy { $0.to == .bundle }, "\(got)")
        #expect(try env.active() == "1.1.0")
        try expectInstalled(env, "1.1.0", list: list)
    }

    @Test("rewrap: the content keys wrapped for a new recipient set, no content written again")
    func rewrap() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        let publisherKey = RecipientKey()
        try publish(env, 0, to: [device, publisherKey])
        let before = try files(under: env.repo).filter { !$0.0.hasPrefix("index") }
        let report = try Publisher(key: env.key, now: { env.clock }).rewrap(
            to: [other.publicKey, publisherKey.publicKey], holding: [publisherKey],
            repository: FilePath(env.repo.path))
        #expect(report.versions == ["sample-app@1.0.0"] && report.recipients.contains(other.keyId), "\(report)")
        // Only the index pair (and its copy) changed.
        let after = try files(under: env.repo).filter { !$0.0.hasPrefix("index") }
        #expect(after.map(\.0) == before.map(\.0) && zip(after, before).allSatisfy { $0.1 == $1.1 })
        try env.initialise()
        #expect(try await sync(env, keys: [device]).packages.first?.code == "not-a-recipient")
        #expect(try await sync(env, keys: [other]).packages.first?.outcome == .done)
        // The next version gets a new content key (the one `device` held is never used again);
        // the one after shares that new key (same recipients): its unchanged contents' objects too.
        let rotated = try publish(env, 1, to: [other, publisherKey], holding: [publisherKey])
        #expect(rotated.objectsReused == 0, "\(rotated)")
        let kept = try publish(env, 2, to: [other, publisherKey], holding: [publisherKey])
        #expect(kept.objectsReused > 0, "\(kept)")
        // Without a key that opens the content key, nothing is published.
        #expect(throws: PublishError.self) {
            try Publisher(key: env.key, now: { env.clock }).rewrap(
                to: [device.publicKey], holding: [device], repository: FilePath(env.repo.path))
        }
    }

    @Test("a sealed bundle cut off mid-transfer is resumed with Range from where it stopped, then opened")
    func resumedSealedBundle() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try publish(env, 0, to: [device])
        let origin = try await FaultOrigin.start(serving: env.repo, otherHost: nil)
        do {
            _ = try SyncConfig.initialise(
                root: env.root, repository: origin.base + "/", keys: [env.key.publicKey], channel: "stable",
                appVersion: SemanticVersion(1, 0, 0), allowInsecureHTTP: true)
            let index = try ManifestCoding.decode(
                RepositoryIndex.self, from: Data(contentsOf: env.repo.appendingPathComponent("index.json")),
                document: "index")
            let bundle = try #require(index.packages.first?.bundle)
            let cut = Int(bundle.size / 2)
            origin.inject(.truncate(after: cut), at: "/" + bundle.path)
            var o = SyncSetup(engine: .tested)
            o.recipientKeys = [device]
            let again = try await Syncer(root: env.root, setup: o).sync()
            let p = try #require(again.packages.first)
            #expect(p.outcome == .done && p.method == .bundle, "\(again)")
            let asked = origin.requests(under: "/" + bundle.path)
            // Resumed from what reached the disk before the cut (at most the cut), not from zero.
            let from = asked.last?.range.flatMap { Int($0.dropFirst(6).dropLast()) } ?? 0
            #expect(asked.count == 2 && from > 0 && from <= cut && asked.last?.status == 206, "\(asked)")
            try expectInstalled(env, "1.0.0", list: try installedList(env, "1.0.0"))
        } catch {
            await origin.stop()
            throw error
        }
        await origin.stop()
    }

    @Test("a sealed blob round trip through the pipeline: every kind opens with its own binding only")
    func pipelineBinding() throws {
        let key = SymmetricKey(size: .bits256)
        let id = PackageID("sample-app")!
        let a = BytePipeline.standard.sealed(key: key, id: id, version: SemanticVersion("1.0.0")!)
        let b = BytePipeline.standard.sealed(key: key, id: id, version: SemanticVersion("1.0.1")!)
        let json = Data(String(repeating: "{\"a\": 1}\n", count: 20_000).utf8)
        let stored = try a.encodeDocument(json)
        #expect(try a.decodeDocument(stored, limit: Int64(json.count)) == json)
        #expect(throws: BlobError.self) { try b.decodeDocument(stored, limit: Int64(json.count)) }
        #expect(throws: BlobError.self) { try BytePipeline.standard.decodeDocument(stored, limit: Int64(json.count)) }
    }
}
