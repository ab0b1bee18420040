import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import SystemPackage

import struct Crypto.SymmetricKey

/// Pack of an encrypted version (manifests §16): the same tree, bundle and list as a version in
/// the clear, every blob sealed with a content key of the version's own.
extension Publisher {
    /// Stages an encrypted version: a new content key wrapped for `request.encryptTo`; the bundle
    /// sealed (`bundle.sealed`), the list gzipped and sealed (`files.sealed`), each content's
    /// object gzipped and sealed and named by the SHA-256 of its sealed bytes, and the marker
    /// `files.json` that devices without encryption refuse; `encryption.json` (the wrapped keys,
    /// for later packs); and deltas from `bases`, patches made over the contents and sealed
    /// one by one, the manifest sealed.
    func stageSealed(
        _ request: PackRequest, _ v: ValidatedRequest, _ tree: SourceTree, staging: FilePath, layout: RepositoryLayout,
        bases: [DeltaBase], previous: PackageEntry?
    ) throws(PublishError) -> StagedVersion {
        let key = reusableKey(previous, request, layout) ?? SymmetricKey(size: .bits256)
        let sealed = pipeline.sealed(key: key, id: v.id, version: v.version, padded: request.pad)
        let recipients: [WrappedKey]
        do {
            recipients = try ContentKeys.wrap(key, to: request.encryptTo, info: Encryption.keyInfo(v.id, v.version))
        } catch {
            throw .encryption("the content key could not be wrapped: \(error)")
        }

        let bundleFile = staging.joined("bundle.sealed")
        let fileList = try writeBundle(request, v, tree, to: bundleFile, pipeline: sealed)

        let objects = try writeSealedObjects(
            fileList, sources: tree.files.map(\.source), pipeline: sealed, staging: staging, layout: layout)
        var listed = fileList
        for i in listed.files.indices {
            let name = objects.names[listed.files[i].sha256]
            listed.files[i].sealed = name?.sha256
            listed.files[i].packed = name?.size
        }
        let listData = try encode(listed)
        let sealedList: Data
        do { sealedList = try sealed.encodeDocument(listData) } catch {
            throw .encryption("the file list could not be sealed: \(error)")
        }
        let marker: Data
        do { marker = try Encryption.marker(v.id, v.version) } catch {
            throw .encryption("the marker could not be encoded: \(error)")
        }
        let listRef = BlobRef(
            path: RepositoryLayout.sealedListPath(v.id, v.version), size: Int64(sealedList.count),
            sha256: SHA256Digest.of(sealedList))
        let encryption = Encryption(
            files: listRef, recipients: recipients, padding: request.pad ? Encryption.padme : nil)
        let encryptionData = try encode(encryption)
        try io { () throws(FileSystemError) in
            try AtomicFile.write(sealedList, to: staging.joined("files.sealed"))
            try AtomicFile.write(marker, to: staging.joined("files.json"))
            try AtomicFile.write(encryptionData, to: staging.joined("encryption.json"))
        }
        // A delta names the list it leads to by its contents (the opened list without the
        // objects' names and sizes): a device checks the list it builds against it before using
        // the delta's patches, and has the names of only the objects the delta fetches.
        let contentData = try encode(listed.contentOnly)
        let builder = DeltaBuilder(
            layout: layout, target: listed,
            targetRef: BlobRef(
                path: listRef.path, size: Int64(contentData.count), sha256: SHA256Digest.of(contentData)),
            sources: Dictionary(
                zip(fileList.files.map(\.sha256), tree.files.map(\.source)), uniquingKeysWith: { a, _ in a }),
            staging: staging, pipeline: sealed)
        var deltas: [DeltaReport] = []
        var deltaRefs: [DeltaRef] = []
        for base in bases {
            let (ref, report) = try builder.build(from: base)
            deltaRefs.append(ref)
            deltas.append(report)
        }
        let bundleRef = BlobRef(
            path: RepositoryLayout.sealedBundlePath(v.id, v.version), size: try fileSize(bundleFile),
            sha256: try digest(of: bundleFile))
        let markerRef = BlobRef(
            path: RepositoryLayout.fileListPath(v.id, v.version), size: Int64(marker.count),
            sha256: SHA256Digest.of(marker))
        return StagedVersion(
            id: v.id, version: v.version, staging: staging,
            versionDir: layout.resolve(RepositoryLayout.versionPath(v.id, v.version)), bundle: bundleRef,
            fileList: markerRef, fileCount: fileList.files.count, totalSize: fileList.totalSize,
            objects: (objects.written, objects.reused, objects.bytes), filesGzip: nil, deltas: deltas,
            deltaRefs: deltaRefs,
            encryption: encryption)
    }

    /// The content key of `previous` (the version the new one replaces on its channel), to seal
    /// the new version with: so that the contents they share are the same sealed objects, and an
    /// update moves only what changed. Only when a key of `request.recipientKeys` opens it and
    /// the recipients are the same as those it was packed for and is wrapped for now: a key a
    /// removed (or rewrapped-away) recipient held is never used again. Else nil: a new key.
    func reusableKey(_ previous: PackageEntry?, _ request: PackRequest, _ layout: RepositoryLayout) -> SymmetricKey? {
        guard let previous, let encryption = previous.encryption, !request.recipientKeys.isEmpty else { return nil }
        let wanted = Set(request.encryptTo.map(ContentKeys.keyID))
        guard Set(encryption.recipients.map(\.keyId)) == wanted,
            let data = try? AtomicFile.read(
                layout.resolve(RepositoryLayout.encryptionPath(previous.id, previous.version))),
            let packed = try? ManifestCoding.decode(Encryption.self, from: data, document: "encryption.json"),
            Set(packed.recipients.map(\.keyId)) == wanted
        else { return nil }
        let info = Encryption.keyInfo(previous.id, previous.version)
        for k in request.recipientKeys {
            if let key = try? k.unwrap(encryption.recipients, info: info) { return key }
        }
        return nil
    }

    /// Writes each distinct content of `fileList` as a sealed object named by its sealed bytes'
    /// SHA-256 (the same content under the same content key is the same bytes: one already there
    /// is kept).
    func writeSealedObjects(
        _ fileList: FileList, sources: [FilePath], pipeline sealed: BytePipeline, staging: FilePath,
        layout: RepositoryLayout
    ) throws(PublishError) -> (
        written: Int, reused: Int, bytes: Int64, names: [SHA256Digest: (sha256: SHA256Digest, size: Int64)]
    ) {
        var names: [SHA256Digest: (sha256: SHA256Digest, size: Int64)] = [:]
        var bytes: Int64 = 0
        var written = 0
        var reused = 0
        let temp = staging.joined("object.sealed")
        for (file, source) in zip(fileList.files, sources) where names[file.sha256] == nil {
            let result: EncodedBlob
            do { result = try sealed.encodeObject(file: source, to: temp) } catch {
                if case .io(let e) = error { throw .io(e) }
                throw .compression(path: source.string, detail: error.description)
            }
            guard result.size == file.size, result.sha256 == file.sha256 else {
                throw .changedWhilePacking(path: file.path.string)
            }
            let name = try digest(of: temp)
            let objectPath = layout.resolve(RepositoryLayout.objectPath(name))
            names[file.sha256] = (name, result.storedSize)
            if AtomicFile.exists(objectPath), (try? fileSize(objectPath)) == result.storedSize {
                reused += 1
                continue
            }
            try io { () throws(FileSystemError) in
                try AtomicFile.makeDirectories(objectPath.parentPath)
                try SystemCalls.rename(temp, to: objectPath)
            }
            written += 1
            bytes += result.storedSize
        }
        try? SystemCalls.unlink(temp)
        return (written, reused, bytes, names)
    }
}
