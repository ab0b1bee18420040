import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import SystemPackage

/// An encrypted version (manifests §16). Without a recipient key: the layout, the marker, and
/// every sealed blob the index names (the bundle, the list, the delta manifests) by size,
/// SHA-256 and header. With one: the list opened, each object's sealed bytes and content, the
/// bundle opened and read by the strict reader against the list, and each delta manifest
/// opened and checked to lead to that list.
extension Verifier {
    func verifySealed(
        _ entry: PackageEntry, _ encryption: Encryption, layout: RepositoryLayout, report: inout VerifyReport,
        objects: inout [SHA256Digest: Bool]
    ) {
        let id = entry.id.rawValue
        let v = entry.version.description
        func problem(_ code: ReasonCode, _ file: String?, _ message: String) {
            report.problems.append(VerifyProblem(code: code, package: id, version: v, file: file, message: message))
        }
        report.encryptedChecked += 1
        guard entry.bundle.path == RepositoryLayout.sealedBundlePath(entry.id, entry.version),
            entry.files.path == RepositoryLayout.fileListPath(entry.id, entry.version),
            encryption.files.path == RepositoryLayout.sealedListPath(entry.id, entry.version),
            encryption.scheme == Encryption.scheme
        else { return }

        // The marker older devices refuse, exactly.
        if let marker = checkBlob(entry.files, layout: layout, problem: problem),
            (try? Encryption.marker(entry.id, entry.version)) != marker
        {
            problem(
                "marker-bad", entry.files.path, "not the marker of an encrypted version (schemaVersion 2, no files)")
        }
        let padded = encryption.padding == Encryption.padme
        let sealedList = checkBlob(encryption.files, layout: layout, problem: problem)
        if let sealedList {
            checkHeader(sealedList.prefix(SegmentedSeal.headerSize), encryption.files.path, padded: padded, problem)
        }
        let bundleOK = checkBlobOnDisk(entry.bundle, layout: layout, problem: problem)
        if bundleOK {
            checkHeader(readPrefix(layout.resolve(entry.bundle.path)), entry.bundle.path, padded: padded, problem)
        }
        var manifests: [(DeltaRef, Data)] = []
        for ref in entry.deltas ?? [] {
            report.deltasChecked += 1
            guard ref.manifest.path == RepositoryLayout.sealedDeltaPath(entry.id, from: ref.from, to: entry.version)
            else {
                problem("bad-layout", ref.manifest.path, "an encrypted version's delta is not at its sealed path")
                continue
            }
            if let data = checkBlob(ref.manifest, layout: layout, problem: problem) {
                checkHeader(data.prefix(SegmentedSeal.headerSize), ref.manifest.path, padded: padded, problem)
                manifests.append((ref, data))
            }
        }

        // The rest needs the content key.
        guard !recipientKeys.isEmpty, let sealedList else { return }
        let sealed: BytePipeline
        do { sealed = try pipeline.sealed(for: entry, encryption, keys: recipientKeys) } catch {
            problem(error.code, nil, error.description)
            return
        }
        report.encryptedOpened += 1
        let list: FileList
        let listBytes: Data
        do {
            listBytes = try sealed.decodeDocument(sealedList, limit: Int64(ManifestCoding.maxDocumentBytes))
            list = try ManifestCoding.decode(FileList.self, from: listBytes, document: encryption.files.path)
        } catch {
            problem("sealed-bad", encryption.files.path, "the sealed list does not open: \(error)")
            return
        }
        if list.id != entry.id || list.version != entry.version {
            problem("file-list-mismatch", encryption.files.path, "the file list is for \(list.id) \(list.version)")
        }
        if let f = list.files.first(where: { $0.sealed == nil || $0.packed == nil }) {
            problem("file-list-mismatch", encryption.files.path, "\(f.path) names no sealed object")
            return
        }
        report.filesChecked += list.files.count
        if !list.files.contains(where: { $0.path.string == entry.entry }) {
            problem("entry-missing", entry.entry, "the entry file \(quoted(entry.entry)) is not in the package")
        }
        checkObjects(list, pipeline: sealed, layout: layout, objects: &objects, problem: problem)
        if bundleOK {
            var collector = TextCollector()
            do {
                let listing = try sealed.withZip(of: layout.resolve(entry.bundle.path), limit: limits.maxTotalBytes) {
                    (zip) throws(ArchiveError) in try ZipReader(limits: limits).read(zip, into: &collector)
                }
                compare(listing.files, list, bundle: entry.bundle.path, problem: problem)
                checkLinks(collector.texts, files: listing.files, entryName: entry.entry, problem: problem)
            } catch {
                problem(error.code, entry.bundle.path, "bundle rejected once opened: \(error)")
            }
        }
        // A delta names the list by its contents (no objects' names or sizes), and each object it
        // fetches as the list names it.
        let contentForm = Result { try ManifestCoding.encode(list.contentOnly) }
        let named = Dictionary(list.files.map { ($0.path, $0) }, uniquingKeysWith: { a, _ in a })
        for (ref, data) in manifests {
            do {
                let json = try sealed.decodeDocument(data, limit: Int64(ManifestCoding.maxDocumentBytes))
                let m = try ManifestCoding.decode(DeltaManifest.self, from: json, document: ref.manifest.path)
                let contents = try contentForm.get()
                guard m.id == entry.id, m.from == ref.from, m.to == entry.version,
                    m.files.size == Int64(contents.count), m.files.sha256 == SHA256Digest.of(contents)
                else {
                    problem(
                        "delta-mismatch", ref.manifest.path, "the delta does not lead from \(ref.from) to this list")
                    continue
                }
                for o in m.objects {
                    guard m.upsert.indices.contains(o), let f = named[m.upsert[o].path], f == m.upsert[o] else {
                        problem(
                            "delta-mismatch", ref.manifest.path,
                            "object \(o) of the delta is not named as the list names it")
                        break
                    }
                }
                if let patchFile = m.patchFile { _ = checkBlobOnDisk(patchFile, layout: layout, problem: problem) }
            } catch {
                problem("sealed-bad", ref.manifest.path, "the sealed delta manifest does not open: \(error)")
            }
        }
    }

    /// A sealed blob's header: the magic, version 1 or 2, a segment size in range, known flags;
    /// padded exactly when the version's `padding` says so (`sealed-padding`).
    func checkHeader(
        _ header: Data, _ path: String, padded: Bool, _ problem: (ReasonCode, String?, String) -> Void
    ) {
        let parsed: SealHeader
        do { parsed = try SealHeader(parsing: [UInt8](header)) } catch {
            problem("sealed-bad", path, "not a sealed blob (no LRDE version 1 or 2 header): \(error)")
            return
        }
        if parsed.padded != padded {
            problem(
                "sealed-padding", path,
                padded
                    ? "not padded, in a version whose padding is padme" : "padded, in a version packed without padding")
        }
    }

    /// The first bytes of a file (its sealed header).
    func readPrefix(_ path: FilePath) -> Data {
        (try? AtomicFile.read(path, offset: 0, length: SegmentedSeal.headerSize)) ?? Data()
    }
}

extension SealError {
    /// The code a verify problem or a sync failure gives this error.
    package var code: ReasonCode {
        switch self {
        case .noRecipient: "not-a-recipient"
        case .wrongKey: "recipient-key-wrong"
        case .header, .segment, .truncated, .trailing, .padding: "sealed-bad"
        }
    }
}
