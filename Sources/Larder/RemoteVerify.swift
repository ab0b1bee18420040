import Foundation
import LarderArchive
import LarderCore
import LarderFetch
import LarderFileSystem
import LarderPublish
import SystemPackage

extension Larder {
    /// Verifies a repository as a server serves it (`larder verify https://…`, a post-deploy
    /// check): downloads what a device could ask for — the signature file, the index, the index
    /// copy the signature names, a sharded index's shards and catalog, and every file list, bundle
    /// and object the index names — into
    /// `scratch`, exactly as served (sizes capped by what the index declares, nothing trusted),
    /// then runs every check of `Verifier.verifyRepository` on that copy. What could not be
    /// fetched is a problem with the fetch error's code (`http-status`, `connection`, …) naming
    /// the path.
    package static func verifyRemoteRepository(
        _ base: URL, verifier: Verifier, transport: any Transport, scratch: FilePath
    ) async -> VerifyReport {
        var copy = RemoteCopy(base: base, transport: transport, scratch: scratch, recipientKeys: verifier.recipientKeys)
        let maxIndex = ManifestCoding.maxDocumentBytes
        guard let sig = await copy.document(RepositoryLayout.signatureName, maxBytes: 1 << 16),
            let index = await copy.document(RepositoryLayout.indexName, maxBytes: maxIndex)
        else {
            var report = VerifyReport(kind: "repository", path: base.absoluteString)
            report.problems = copy.problems
            return report
        }
        let signature = try? ManifestCoding.decode(SignatureFile.self, from: sig, document: "sig")
        if let named = signature?.index {
            _ = await copy.document(RepositoryLayout.indexCopyPath(named.sha256), maxBytes: maxIndex)
        }
        if let root = signature?.root, root.version <= 4096 {
            // A delegated repository (manifests §18): every root from 1, as a device may walk them.
            for v in 1...max(1, root.version) {
                _ = await copy.document(RootName.path(version: v), maxBytes: 1 << 20)
                _ = await copy.document(RootName.path(version: v) + ".sig", maxBytes: 1 << 16)
            }
        }
        if let decoded = try? ManifestCoding.decode(RepositoryIndex.self, from: index, document: "index") {
            // Only a part at its own path (a team name is a package id's grammar: no `/`, no `..`).
            for row in decoded.delegations?.parts ?? []
            where PackageID.isValid(row.team) && row.part.path == TeamPart.path(team: row.team, serial: row.serial)
                && copy.seen.insert(row.part.path).inserted
            {
                _ = await copy.document(row.part.path, maxBytes: Int(min(max(row.part.size, 0), Int64(maxIndex))))
            }
            var entries = decoded.packages
            if let refs = decoded.shards {
                // Every shard and the catalog (the verifier checks them against the index).
                for ref in refs.files + [refs.catalog] where copy.seen.insert(ref.path).inserted {
                    let bytes = await copy.document(ref.path, maxBytes: Int(min(ref.size, Int64(maxIndex))))
                    if let bytes,
                        let shard = try? ManifestCoding.decode(IndexShard.self, from: bytes, document: ref.path)
                    {
                        entries += shard.packages
                    }
                }
            }
            for entry in entries { await copy.package(entry) }
            copy.problems += await download(copy.downloads, base: base, transport: transport, scratch: scratch)
        }
        var report = verifier.verifyRepository(scratch)
        report.path = base.absoluteString
        // A file that could not be fetched is reported once, as the fetch failure.
        let failed = Set(copy.problems.compactMap(\.file))
        report.problems.removeAll { p in p.file.map { failed.contains($0) } ?? false }
        report.problems = copy.problems + report.problems
        return report
    }

    /// The copy of a served repository being made: documents fetched at once, the larger files
    /// listed for `download`, and what could not be fetched.
    private struct RemoteCopy {
        let base: URL
        let transport: any Transport
        let scratch: FilePath
        /// Keys that open encrypted versions (their lists name the objects to fetch).
        let recipientKeys: [RecipientKey]
        var problems: [VerifyProblem] = []
        /// Paths to download, each with its size limit.
        var downloads: [(String, Int64)] = []
        var seen = Set<String>()

        /// Fetches a document into the copy; nil (and a problem) when it cannot be fetched.
        mutating func document(_ path: String, maxBytes: Int) async -> Data? {
            guard let target = Larder.remoteTarget(path, in: scratch) else {
                problems.append(Larder.unsafePath(path))
                return nil
            }
            do throws(FetchError) {
                let doc = try await transport.document(base.appendingPathComponent(path), etag: nil, maxBytes: maxBytes)
                try? AtomicFile.makeDirectories(target.parentPath)
                try? AtomicFile.write(doc.data, to: target, durable: false)
                return doc.data
            } catch {
                problems.append(VerifyProblem(code: error.code, file: path, message: "\(error)"))
                return nil
            }
        }

        /// A package: its bundle, its list (fetched now) and every object it names, its gzipped
        /// list, and its deltas.
        mutating func package(_ entry: PackageEntry) async {
            let maxIndex = ManifestCoding.maxDocumentBytes
            downloads.append((entry.bundle.path, entry.bundle.size))
            if let encryption = entry.encryption {
                await sealedPackage(entry, encryption)
                return
            }
            guard let listBytes = await document(entry.files.path, maxBytes: maxIndex),
                let list = try? ManifestCoding.decode(FileList.self, from: listBytes, document: "files.json")
            else { return }
            for file in list.files {
                let path = RepositoryLayout.objectPath(file.sha256)
                // An object is gzip: never larger than its content by more than gzip's framing.
                if seen.insert(path).inserted { downloads.append((path, file.size + file.size / 100 + 1024)) }
            }
            if let gz = entry.filesGzip { downloads.append((gz.path, gz.size)) }
            for ref in entry.deltas ?? [] { await delta(ref, of: entry) }
        }

        /// An encrypted version: its marker, sealed list and delta manifests; with a key that
        /// opens it, its objects and patch files too.
        mutating func sealedPackage(_ entry: PackageEntry, _ encryption: Encryption) async {
            let maxIndex = ManifestCoding.maxDocumentBytes
            _ = await document(entry.files.path, maxBytes: Int(min(entry.files.size, Int64(maxIndex))))
            let sealedList = await document(
                encryption.files.path, maxBytes: Int(min(encryption.files.size, Int64(maxIndex))))
            var manifests: [Data] = []
            for ref in entry.deltas ?? [] {
                if let m = await document(ref.manifest.path, maxBytes: Int(min(ref.manifest.size, Int64(maxIndex)))) {
                    manifests.append(m)
                }
            }
            guard let sealedList,
                let pipeline = try? BytePipeline.standard.sealed(for: entry, encryption, keys: recipientKeys),
                let json = try? pipeline.decodeDocument(sealedList, limit: Int64(maxIndex)),
                let list = try? ManifestCoding.decode(FileList.self, from: json, document: "files.sealed")
            else { return }
            for file in list.files {
                let path = RepositoryLayout.objectPath(file.objectName)
                if seen.insert(path).inserted { downloads.append((path, file.packed ?? 0)) }
            }
            for m in manifests {
                guard let json = try? pipeline.decodeDocument(m, limit: Int64(maxIndex)),
                    let manifest = try? ManifestCoding.decode(DeltaManifest.self, from: json, document: "delta"),
                    let file = manifest.patchFile, seen.insert(file.path).inserted
                else { continue }
                downloads.append((file.path, file.size))
            }
        }

        /// A delta: its manifest, the base's list, the patch file and every base content's object.
        mutating func delta(_ ref: DeltaRef, of entry: PackageEntry) async {
            let maxIndex = ManifestCoding.maxDocumentBytes
            guard let gz = await document(ref.manifest.path, maxBytes: Int(min(ref.manifest.size, Int64(maxIndex)))),
                let json = try? BytePipeline.standard.decodeDocument(gz, limit: Int64(maxIndex)),
                let manifest = try? ManifestCoding.decode(DeltaManifest.self, from: json, document: "delta")
            else { return }
            // The base's list names the patches' bases; it is read here (once) to know them.
            let baseList = RepositoryLayout.fileListPath(entry.id, ref.from)
            let cached = try? AtomicFile.read(scratch.joined(baseList), limit: maxIndex)
            guard
                let baseBytes = seen.insert(baseList).inserted ? await document(baseList, maxBytes: maxIndex) : cached,
                let base = try? ManifestCoding.decode(FileList.self, from: baseBytes, document: baseList),
                case .success(let delta) = manifest.resolve(from: base)
            else { return }
            if let file = delta.patchFile, seen.insert(file.path).inserted { downloads.append((file.path, file.size)) }
            for patch in delta.patches {
                let base = RepositoryLayout.objectPath(patch.base)
                if seen.insert(base).inserted { downloads.append((base, Int64(BinaryPatch.maxFileSize) + (1 << 20))) }
            }
        }
    }

    /// Where a repository path is copied: inside `scratch`, or nil for a path a hostile index
    /// could use to leave it (absolute, `..`, or anything else the path rules refuse).
    static func remoteTarget(_ path: String, in scratch: FilePath) -> FilePath? {
        guard case .success = RelativePath.validate(path) else { return nil }
        return scratch.joined(path)
    }

    /// The problem of a path `target` refused: nothing is fetched for it.
    static func unsafePath(_ path: String) -> VerifyProblem {
        VerifyProblem(
            code: "unsafe-path", file: path,
            message: "the index names \(quoted(path)), which is not a relative path inside the repository; not fetched")
    }

    /// Downloads `files` (path, size limit) four at a time; the failures as problems.
    private static func download(
        _ files: [(String, Int64)], base: URL, transport: any Transport, scratch: FilePath
    ) async -> [VerifyProblem] {
        await withTaskGroup(of: VerifyProblem?.self) { group in
            var next = 0
            var problems: [VerifyProblem] = []
            func start() {
                guard next < files.count else { return }
                let (path, limit) = files[next]
                next += 1
                group.addTask {
                    guard let target = Larder.remoteTarget(path, in: scratch) else { return Larder.unsafePath(path) }
                    try? AtomicFile.makeDirectories(target.parentPath)
                    do throws(FetchError) {
                        try await transport.download(
                            base.appendingPathComponent(path), to: target,
                            expecting: Expectation(size: nil, limit: limit, sha256: nil), progress: nil, watch: nil)
                        return nil
                    } catch {
                        return VerifyProblem(code: error.code, file: path, message: "\(error)")
                    }
                }
            }
            for _ in 0..<4 { start() }
            while let result = await group.next() {
                if let p = result { problems.append(p) }
                start()
            }
            return problems.sorted { ($0.file ?? "") < ($1.file ?? "") }
        }
    }
}
