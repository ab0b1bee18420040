import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import SystemPackage

/// One problem `verify` found. `code` is stable; `package`, `version` and `file` locate it.
public struct VerifyProblem: Sendable, Codable, Equatable, CustomStringConvertible {
    /// A stable machine-readable code, like `index-serial` or the archive reader's code.
    public var code: String
    /// The package id concerned, if any.
    public var package: String?
    /// The version concerned (of `package`), if any.
    public var version: String?
    /// Repository-relative path of the document, or the path inside a bundle.
    public var file: String?
    /// What is wrong, in a sentence for a person.
    public var message: String

    /// Creates a problem.
    public init(code: String, package: String? = nil, version: String? = nil, file: String? = nil, message: String) {
        self.code = code
        self.package = package
        self.version = version
        self.file = file
        self.message = message
    }

    /// `<package>@<version> <file>: [<code>] <message>`, leaving out the parts that are not known.
    public var description: String {
        var location: [String] = []
        if let p = package { location.append(version.map { "\(p)@\($0)" } ?? p) }
        if let f = file { location.append(f) }
        return (location.isEmpty ? "" : location.joined(separator: " ") + ": ") + "[\(code)] \(message)"
    }
}

/// The outcome of `verify`: every problem, and what was looked at.
public struct VerifyReport: Sendable, Codable, Equatable {
    /// `repository` or `bundle`.
    public var kind: String
    /// The repository root or bundle file verified.
    public var path: String
    /// The index's serial, once the index was read (repositories only).
    public var serial: UInt64?
    /// The id of the trusted key whose signature verified, when the signature was checked and valid.
    public var signedBy: String?
    /// Whether the index signature was checked (false with --skip-signature, and for bundles).
    public var signatureChecked = false
    /// Index entries checked (one per package and channel), or 1 for a bundle.
    public var packagesChecked: Int
    /// Files named by the file lists checked, or the files in the bundle.
    public var filesChecked: Int
    /// Delta manifests checked (repositories only).
    public var deltasChecked = 0
    /// Distinct objects checked (repositories only).
    public var objectsChecked: Int
    /// Every problem found, in the order found; empty when all is well.
    public var problems: [VerifyProblem]
    /// Whether nothing was found.
    public var ok: Bool { problems.isEmpty }

    /// An empty report: nothing checked, nothing found yet.
    public init(kind: String, path: String) {
        self.kind = kind
        self.path = path
        packagesChecked = 0
        filesChecked = 0
        objectsChecked = 0
        problems = []
    }

    enum CodingKeys: String, CodingKey {
        case kind, path, serial, signedBy, signatureChecked, packagesChecked, filesChecked, objectsChecked, problems, ok
    }

    /// Encodes every field and `ok`, so the JSON output carries the verdict.
    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(kind, forKey: .kind)
        try c.encode(path, forKey: .path)
        try c.encodeIfPresent(serial, forKey: .serial)
        try c.encodeIfPresent(signedBy, forKey: .signedBy)
        try c.encode(signatureChecked, forKey: .signatureChecked)
        try c.encode(packagesChecked, forKey: .packagesChecked)
        try c.encode(filesChecked, forKey: .filesChecked)
        try c.encode(objectsChecked, forKey: .objectsChecked)
        try c.encode(problems, forKey: .problems)
        try c.encode(ok, forKey: .ok)
    }

    /// Decodes a report (`ok` follows from `problems`); a missing `signatureChecked` is false.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        kind = try c.decode(String.self, forKey: .kind)
        path = try c.decode(String.self, forKey: .path)
        serial = try c.decodeIfPresent(UInt64.self, forKey: .serial)
        signedBy = try c.decodeIfPresent(String.self, forKey: .signedBy)
        signatureChecked = try c.decodeIfPresent(Bool.self, forKey: .signatureChecked) ?? false
        packagesChecked = try c.decode(Int.self, forKey: .packagesChecked)
        filesChecked = try c.decode(Int.self, forKey: .filesChecked)
        objectsChecked = try c.decode(Int.self, forKey: .objectsChecked)
        problems = try c.decode([VerifyProblem].self, forKey: .problems)
    }

}

/// The CI gate: checks a repository or a single bundle the way a device will, and more.
public struct Verifier: Sendable {
    /// Keys whose signature on the index is accepted.
    public var trustedKeys: [PublicKey]
    /// Skip the signature check (structure only); `verify` without keys must say so.
    public var checkSignature: Bool
    /// The limits bundles are read with; an object may inflate to at most `maxFileBytes`.
    public var limits: TreeLimits
    let now: @Sendable () -> Date

    /// Creates a verifier.
    public init(
        trustedKeys: [PublicKey], checkSignature: Bool = true, limits: TreeLimits = .standard,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.trustedKeys = trustedKeys
        self.checkSignature = checkSignature
        self.limits = limits
        self.now = now
    }

    // MARK: repository

    /// Verifies the repository at `root`: signature, schema, serial and expiry, index rules, and
    /// every bundle, file list and object the index names.
    public func verifyRepository(_ root: FilePath) -> VerifyReport {
        let layout = RepositoryLayout(root: root)
        var report = VerifyReport(kind: "repository", path: root.string)
        func problem(
            _ code: String, _ message: String, package: String? = nil, version: String? = nil, file: String? = nil
        ) {
            report.problems.append(
                VerifyProblem(code: code, package: package, version: version, file: file, message: message))
        }
        for pending in [RepositoryLayout.indexName, RepositoryLayout.signatureName] {
            if AtomicFile.exists(root.appending(pending + RepositoryLayout.pendingSuffix)) {
                problem(
                    "publication-interrupted",
                    "a pack or revoke was interrupted; run it again to complete or discard it",
                    file: pending + RepositoryLayout.pendingSuffix)
            }
        }
        guard let indexBytes = try? AtomicFile.read(layout.index, limit: ManifestCoding.maxDocumentBytes + 1) else {
            problem("index-missing", "cannot read \(RepositoryLayout.indexName)", file: RepositoryLayout.indexName)
            return report
        }
        report.signatureChecked = checkSignature
        if checkSignature {
            do {
                let sigBytes = try AtomicFile.read(layout.signature, limit: 1 << 20)
                let sig = try ManifestCoding.decode(
                    SignatureFile.self, from: sigBytes, document: RepositoryLayout.signatureName)
                checkIndexName(sig.index, indexBytes, layout: layout) { problem($0, $1, file: $2) }
                report.signedBy = try IndexSignature.verify(indexBytes, signatures: sig, trusted: trustedKeys)
            } catch let e as SigningError {
                let code = if case .invalidSignature = e { "signature-invalid" } else { "signature-untrusted" }
                problem(code, e.description, file: RepositoryLayout.signatureName)
            } catch let e as FileSystemError {
                problem(
                    "signature-missing", "cannot read \(RepositoryLayout.signatureName): \(e.errno)",
                    file: RepositoryLayout.signatureName)
            } catch {
                problem("signature-malformed", "\(error)", file: RepositoryLayout.signatureName)
            }
        }
        let index: RepositoryIndex
        do {
            index = try ManifestCoding.decode(
                RepositoryIndex.self, from: indexBytes, document: RepositoryLayout.indexName)
        } catch {
            problem("index-schema", error.description, file: RepositoryLayout.indexName)
            return report
        }
        report.serial = index.serial
        if index.serial == 0 {
            problem(
                "index-serial", "serial is 0; the first published index has serial 1", file: RepositoryLayout.indexName)
        }
        if index.expires <= now() {
            problem(
                "index-expired",
                "the index expired at \(ManifestCoding.formatRFC3339(index.expires)); re-sign it (any pack or revoke does)",
                file: RepositoryLayout.indexName)
        }
        for issue in IndexRules.issues(index) {
            problem(
                issue.code, issue.message, package: issue.package, version: issue.version,
                file: RepositoryLayout.indexName)
        }
        var checkedObjects: [SHA256Digest: Bool] = [:]
        for entry in index.packages {
            report.packagesChecked += 1
            verifyPackage(entry, layout: layout, report: &report, objects: &checkedObjects)
        }
        report.objectsChecked = checkedObjects.count
        return report
    }

    private func verifyPackage(
        _ entry: PackageEntry, layout: RepositoryLayout, report: inout VerifyReport, objects: inout [SHA256Digest: Bool]
    ) {
        let id = entry.id.rawValue
        let v = entry.version.description
        func problem(_ code: String, _ file: String?, _ message: String) {
            report.problems.append(VerifyProblem(code: code, package: id, version: v, file: file, message: message))
        }
        // Paths from the index are used only when they match the layout (IndexRules reports others).
        guard entry.bundle.path == RepositoryLayout.bundlePath(entry.id, entry.version),
            entry.files.path == RepositoryLayout.fileListPath(entry.id, entry.version)
        else { return }

        // The file list.
        var fileList: FileList?
        if let data = checkBlob(entry.files, layout: layout, problem: problem) {
            do {
                let list = try ManifestCoding.decode(FileList.self, from: data, document: entry.files.path)
                if list.id != entry.id || list.version != entry.version {
                    problem("file-list-mismatch", entry.files.path, "the file list is for \(list.id) \(list.version)")
                }
                fileList = list
            } catch {
                problem("file-list-schema", entry.files.path, error.description)
            }
        }

        // The bundle: present, declared size and hash, strict reader, same tree as the list.
        let bundlePath = layout.resolve(entry.bundle.path)
        var collector = TextCollector()
        var listing: ArchiveListing?
        if checkBlobOnDisk(entry.bundle, layout: layout, problem: problem) {
            do {
                listing = try ZipReader(limits: limits).read(bundlePath, into: &collector)
            } catch {
                problem(error.code, entry.bundle.path, "bundle rejected by the archive reader: \(error)")
            }
        }
        if let list = fileList {
            report.filesChecked += list.files.count
            if let listing {
                compare(listing.files, list, bundle: entry.bundle.path, problem: problem)
            }
            if !list.files.contains(where: { $0.path.string == entry.entry }) {
                problem("entry-missing", entry.entry, "the entry file \(quoted(entry.entry)) is not in the package")
            }
            for file in list.files {
                let objectRel = RepositoryLayout.objectPath(file.sha256)
                if let ok = objects[file.sha256] {
                    if !ok {
                        problem("object-bad", objectRel, "object for \(file.path) is missing or corrupt (see above)")
                    }
                    continue
                }
                let objectPath = layout.resolve(objectRel)
                guard AtomicFile.exists(objectPath) else {
                    objects[file.sha256] = false
                    problem("object-missing", objectRel, "no object for \(file.path) (\(file.sha256))")
                    continue
                }
                do {
                    let got = try Gzip.digestOfInflated(objectPath, limit: limits.maxFileBytes)
                    let ok = got.sha256 == file.sha256 && got.size == file.size
                    objects[file.sha256] = ok
                    if !ok {
                        problem(
                            "object-corrupt", objectRel,
                            "inflates to \(got.size) bytes with sha256 \(got.sha256), expected \(file.size) bytes for \(file.path)"
                        )
                    }
                } catch {
                    objects[file.sha256] = false
                    problem("object-corrupt", objectRel, "cannot inflate the object for \(file.path): \(error)")
                }
            }
            // Links are checked against what the bundle really holds (the list is compared above).
            checkLinks(collector.texts, files: listing?.files ?? list.files, entryName: entry.entry, problem: problem)
        }
        if let gz = entry.filesGzip { checkGzippedList(gz, entry, layout: layout, problem: problem) }
        if let list = fileList {
            for ref in entry.deltas ?? [] {
                report.deltasChecked += 1
                checkDelta(ref, entry, target: list, layout: layout, problem: problem)
            }
        }
    }

    /// The gzipped list: its size and hash, and it inflates to the list's exact bytes.
    private func checkGzippedList(
        _ gz: BlobRef, _ entry: PackageEntry, layout: RepositoryLayout, problem: (String, String?, String) -> Void
    ) {
        guard gz.path == RepositoryLayout.fileListGzipPath(entry.id, entry.version) else {
            problem(
                "delta-path", gz.path,
                "the gzipped list is not at \(RepositoryLayout.fileListGzipPath(entry.id, entry.version))")
            return
        }
        guard let data = checkBlob(gz, layout: layout, problem: problem) else { return }
        guard let inflated = try? Gzip.inflated(data, limit: entry.files.size),
            Int64(inflated.count) == entry.files.size, SHA256Digest.of(inflated) == entry.files.sha256
        else {
            problem("file-list-gzip-mismatch", gz.path, "does not inflate to the file list the index declares")
            return
        }
    }

    /// A delta: its manifest (size, hash, schema, the versions it joins), the list it rebuilds
    /// from the base's list equals the target's, every content it needs has a source, and each
    /// patch — its own size and hash — applied to its base gives its target.
    private func checkDelta(
        _ ref: DeltaRef, _ entry: PackageEntry, target: FileList, layout: RepositoryLayout,
        problem: (String, String?, String) -> Void
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
                DeltaManifest.self, from: Gzip.inflated(gz, limit: Int64(ManifestCoding.maxDocumentBytes)),
                document: path)
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
        switch manifest.rebuild(from: base) {
        case .failure(let why):
            problem("delta-list", path, why.description)
        case .success(let rebuilt):
            let bytes = try? ManifestCoding.encode(rebuilt)
            if bytes.map({ Int64($0.count) == entry.files.size && SHA256Digest.of($0) == entry.files.sha256 }) != true {
                problem(
                    "delta-list", path, "the list it builds from \(ref.from)'s is not \(entry.version)'s signed list")
            }
        }
        if let gap = manifest.covers(target, holding: Set(base.files.map(\.sha256))) {
            problem("delta-incomplete", path, gap.description)
        }
        let sizes = Dictionary(base.files.map { ($0.sha256, $0.size) }, uniquingKeysWith: { a, _ in a })
        for p in manifest.patches {
            guard let patch = checkBlob(p.patch, layout: layout, problem: problem) else { continue }
            guard p.patch.path == RepositoryLayout.patchPath(p.patch.sha256) else {
                problem("delta-path", p.patch.path, "a patch is not at its content address")
                continue
            }
            let baseObject = layout.resolve(RepositoryLayout.objectPath(p.base))
            guard let size = sizes[p.base], let content = try? Gzip.inflated(file: baseObject, limit: size) else {
                problem(
                    "delta-base-missing", p.patch.path,
                    "the object of its base \(p.base.hex.prefix(12))… cannot be read")
                continue
            }
            do {
                let result = try BinaryPatch.apply(patch: patch, base: content, limit: p.size)
                if Int64(result.count) != p.size || SHA256Digest.of(result) != p.target {
                    problem(
                        "delta-patch", p.patch.path,
                        "applied to its base it does not give its target \(p.target.hex.prefix(12))…")
                }
            } catch {
                problem("delta-patch", p.patch.path, "it does not apply to its base: \(error)")
            }
        }
    }

    /// The index the signature file names (`index`): the same bytes as `index.json` (else a
    /// device sees a torn pair), and the immutable copy `indexes/<sha256>.json` a device falls
    /// back on. A signature file from before `index` names nothing and is not a problem.
    private func checkIndexName(
        _ named: IndexName?, _ indexBytes: Data, layout: RepositoryLayout,
        problem: (String, String, String) -> Void
    ) {
        guard let named else { return }
        if !named.names(indexBytes) {
            problem(
                "index-torn",
                "\(RepositoryLayout.signatureName) names another index (\(named.size) bytes, sha256 \(named.sha256)) than \(RepositoryLayout.indexName) (\(indexBytes.count) bytes, sha256 \(SHA256Digest.of(indexBytes)))",
                RepositoryLayout.signatureName)
        }
        let copyPath = RepositoryLayout.indexCopyPath(named.sha256)
        guard let copy = try? AtomicFile.read(layout.resolve(copyPath), limit: ManifestCoding.maxDocumentBytes + 1)
        else {
            problem(
                "index-copy-missing",
                "no copy of the signed index at \(copyPath): a device whose cache pairs this signature with another index cannot recover",
                copyPath)
            return
        }
        if !named.names(copy) {
            problem("index-copy-mismatch", "\(copyPath) is not the index the signature names", copyPath)
        }
    }

    /// Reads a small document named by the index and checks its size and hash.
    private func checkBlob(_ ref: BlobRef, layout: RepositoryLayout, problem: (String, String?, String) -> Void)
        -> Data?
    {
        guard let data = try? AtomicFile.read(layout.resolve(ref.path), limit: ManifestCoding.maxDocumentBytes) else {
            problem("missing", ref.path, "\(ref.path) is missing or unreadable")
            return nil
        }
        if Int64(data.count) != ref.size {
            problem("size-mismatch", ref.path, "\(data.count) bytes, the index declares \(ref.size)")
            return nil
        }
        let digest = SHA256Digest.of(data)
        if digest != ref.sha256 {
            problem("hash-mismatch", ref.path, "sha256 \(digest), the index declares \(ref.sha256)")
            return nil
        }
        return data
    }

    /// Checks a large file's size and hash by streaming it.
    private func checkBlobOnDisk(_ ref: BlobRef, layout: RepositoryLayout, problem: (String, String?, String) -> Void)
        -> Bool
    {
        let path = layout.resolve(ref.path)
        guard let size = try? fileSize(path), let digest = try? digest(of: path) else {
            problem("missing", ref.path, "\(ref.path) is missing or unreadable")
            return false
        }
        if size != ref.size {
            problem("size-mismatch", ref.path, "\(size) bytes, the index declares \(ref.size)")
            return false
        }
        if digest != ref.sha256 {
            problem("hash-mismatch", ref.path, "sha256 \(digest), the index declares \(ref.sha256)")
            return false
        }
        return true
    }

    private func compare(
        _ actual: [FileEntry], _ list: FileList, bundle: String, problem: (String, String?, String) -> Void
    ) {
        for d in list.differences(from: actual) {
            switch d {
            case .missing(let f):
                problem("bundle-missing-file", f.path.string, "listed in files.json but not in \(bundle)")
            case .extra(let f):
                problem("bundle-extra-file", f.path.string, "in \(bundle) but not listed in files.json")
            case .differs(let l, let g):
                problem(
                    "bundle-file-differs", l.path.string,
                    "in \(bundle) it is \(g.size) bytes sha256 \(g.sha256); files.json says \(l.size) bytes sha256 \(l.sha256)"
                )
            }
        }
    }

    private func checkLinks(
        _ texts: [(RelativePath, String)], files: [FileEntry], entryName: String,
        problem: (String, String?, String) -> Void
    ) {
        let paths = Set(files.map(\.path.string))
        var directories: Set<String> = [""]
        for p in paths {
            var comps = p.split(separator: "/").dropLast()
            while !comps.isEmpty {
                directories.insert(comps.joined(separator: "/"))
                comps = comps.dropLast()
            }
        }
        for (file, text) in texts {
            let isCSS = file.pathExtension == "css"
            let refs = isCSS ? References.inCSS(text) : References.inHTML(text)
            for ref in refs {
                switch References.resolve(ref, from: file) {
                case .external:
                    continue
                case .escapes:
                    problem("link-escapes", file.string, "reference \(quoted(ref)) leads outside the package")
                case .malformed:
                    problem("link-malformed", file.string, "reference \(quoted(ref)) has bad percent-encoding")
                case .local(let target):
                    let dir = target.hasSuffix("/") ? String(target.dropLast()) : target
                    if !target.hasSuffix("/"), paths.contains(target) { continue }
                    if directories.contains(dir) {
                        let entry = dir.isEmpty ? entryName : dir + "/" + entryName
                        if paths.contains(entry) { continue }
                        problem(
                            "link-broken", file.string, "reference \(quoted(ref)) is a directory without \(entryName)")
                        continue
                    }
                    problem(
                        "link-broken", file.string,
                        "reference \(quoted(ref)) points to \(target), which is not in the package")
                }
            }
        }
    }

    // MARK: single bundle

    /// Verifies one bundle: the strict archive rules, its links, and when a file list is given,
    /// that the bundle's tree equals it exactly.
    public func verifyBundle(_ path: FilePath, fileList: FileList? = nil, entryName: String = "index.html")
        -> VerifyReport
    {
        var report = VerifyReport(kind: "bundle", path: path.string)
        func problem(_ code: String, _ file: String?, _ message: String) {
            report.problems.append(VerifyProblem(code: code, file: file, message: message))
        }
        var collector = TextCollector()
        do {
            let listing = try ZipReader(limits: limits).read(path, into: &collector)
            report.packagesChecked = 1
            report.filesChecked = listing.files.count
            if let list = fileList { compare(listing.files, list, bundle: path.string, problem: problem) }
            checkLinks(collector.texts, files: listing.files, entryName: entryName, problem: problem)
        } catch {
            problem(error.code, nil, "bundle rejected by the archive reader: \(error)")
        }
        return report
    }
}

/// Keeps the text of HTML and CSS files (up to 4 MiB each) while the reader streams a bundle.
struct TextCollector: ArchiveConsumer {
    static let limit = 4 << 20
    var texts: [(RelativePath, String)] = []
    var current: RelativePath?
    var buffer: [UInt8] = []
    /// Set once a chunk did not fit: the text is kept as a prefix, never with a hole.
    var truncated = false

    mutating func beginFile(_ path: RelativePath, declaredSize: Int64?) throws {
        let ext = path.pathExtension
        current = (ext == "html" || ext == "htm" || ext == "css") ? path : nil
        buffer.removeAll(keepingCapacity: true)
        truncated = false
    }

    mutating func write(_ chunk: UnsafeRawBufferPointer) throws {
        guard current != nil, !truncated else { return }
        guard buffer.count + chunk.count <= Self.limit else {
            truncated = true
            return
        }
        buffer.append(contentsOf: chunk)
    }

    mutating func endFile(_ path: RelativePath, size: Int64) throws {
        if let p = current { texts.append((p, String(decoding: buffer, as: UTF8.self))) }
        current = nil
    }
}
