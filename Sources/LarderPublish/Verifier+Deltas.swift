import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import SystemPackage

/// A package's gzipped list and deltas: each rebuilds, from the base version's list, exactly the
/// list the index signs.
extension Verifier {
    /// The gzipped list: its size and hash, and it inflates to the list's exact bytes.
    func checkGzippedList(
        _ gz: BlobRef, _ entry: PackageEntry, layout: RepositoryLayout, problem: (ReasonCode, String?, String) -> Void
    ) {
        guard gz.path == RepositoryLayout.fileListGzipPath(entry.id, entry.version) else {
            problem(
                "delta-path", gz.path,
                "the gzipped list is not at \(RepositoryLayout.fileListGzipPath(entry.id, entry.version))")
            return
        }
        guard let data = checkBlob(gz, layout: layout, problem: problem) else { return }
        guard let inflated = try? pipeline.decodeDocument(data, limit: entry.files.size),
            Int64(inflated.count) == entry.files.size, SHA256Digest.of(inflated) == entry.files.sha256
        else {
            problem("file-list-gzip-mismatch", gz.path, "does not inflate to the file list the index declares")
            return
        }
    }

    /// A delta: its manifest (size, hash, schema, the versions it joins), the list it rebuilds
    /// from the base's list equals the target's, every content it needs has a source, the patch
    /// file has its size and hash at its content address, and each patch in it applied to its
    /// base gives its target.
    func checkDelta(
        _ ref: DeltaRef, _ entry: PackageEntry, target: FileList, layout: RepositoryLayout,
        problem: (ReasonCode, String?, String) -> Void
    ) {
        let path = ref.manifest.path
        guard path == RepositoryLayout.deltaPath(entry.id, from: ref.from, to: entry.version) else {
            problem(
                "delta-path", path,
                "the delta from \(ref.from) is not at \(RepositoryLayout.deltaPath(entry.id, from: ref.from, to: entry.version))"
            )
            return
        }
        guard let gz = checkBlob(ref.manifest, layout: layout, problem: problem) else { return }
        let manifest: DeltaManifest
        do {
            manifest = try ManifestCoding.decode(
                DeltaManifest.self, from: pipeline.decodeDocument(gz, limit: Int64(ManifestCoding.maxDocumentBytes)),
                document: path)
        } catch let e as ManifestError {
            problem(e.code(or: "delta-schema"), path, e.description)
            return
        } catch {
            problem("delta-schema", path, "\(error)")
            return
        }
        guard manifest.id == entry.id, manifest.from == ref.from, manifest.to == entry.version,
            manifest.files == entry.files
        else {
            problem(
                "delta-mismatch", path,
                "the manifest is \(manifest.id) \(manifest.from) → \(manifest.to), not \(entry.id) \(ref.from) → \(entry.version) with its file list"
            )
            return
        }
        let baseRel = RepositoryLayout.fileListPath(entry.id, ref.from)
        guard let baseData = try? AtomicFile.read(layout.resolve(baseRel), limit: ManifestCoding.maxDocumentBytes),
            let base = try? ManifestCoding.decode(FileList.self, from: baseData, document: baseRel)
        else {
            problem(
                "delta-base-missing", baseRel, "the file list of the base version \(ref.from) is missing or unreadable")
            return
        }
        let delta: ResolvedDelta
        switch manifest.resolve(from: base) {
        case .failure(let why):
            problem("delta-list", path, why.description)
            return
        case .success(let d):
            delta = d
            let bytes = try? ManifestCoding.encode(d.list)
            if bytes.map({ Int64($0.count) == entry.files.size && SHA256Digest.of($0) == entry.files.sha256 }) != true {
                problem(
                    "delta-list", path, "the list it builds from \(ref.from)'s is not \(entry.version)'s signed list")
            }
        }
        if let gap = delta.covers(target, holding: Set(base.files.map(\.sha256))) {
            problem("delta-incomplete", path, gap.description)
        }
        guard let fileRef = delta.patchFile else {
            if !delta.patches.isEmpty { problem("delta-schema", path, "it has patches but no patch file") }
            return
        }
        guard fileRef.path == RepositoryLayout.patchPath(fileRef.sha256) else {
            problem("delta-path", fileRef.path, "the patch file is not at its content address")
            return
        }
        guard let file = checkBlob(fileRef, layout: layout, problem: problem) else { return }
        let sizes = Dictionary(base.files.map { ($0.sha256, $0.size) }, uniquingKeysWith: { a, _ in a })
        for (i, p) in delta.patches.enumerated() {
            let at = "\(fileRef.path) (patch \(i), bytes \(p.offset)–\(p.offset + p.length))"
            let baseObject = layout.resolve(RepositoryLayout.objectPath(p.base))
            guard let size = sizes[p.base], let content = try? pipeline.decodeObject(file: baseObject, limit: size)
            else {
                problem("delta-base-missing", at, "the object of its base \(p.base.hex.prefix(12))… cannot be read")
                continue
            }
            let patch = file.subdata(in: Int(p.offset)..<Int(p.offset + p.length))
            do {
                let result = try pipeline.applyPatch(patch, base: content, limit: p.size)
                if Int64(result.count) != p.size || SHA256Digest.of(result) != p.target {
                    problem(
                        "delta-patch", at, "applied to its base it does not give its target \(p.target.hex.prefix(12))…"
                    )
                }
            } catch {
                problem("delta-patch", at, "it does not apply to its base: \(error)")
            }
        }
    }

}
