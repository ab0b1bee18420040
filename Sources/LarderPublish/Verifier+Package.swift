import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import SystemPackage

/// One package of a repository: its file list, its bundle read by the strict reader, every
/// object it names, the links of its pages, its gzipped list and its deltas.
extension Verifier {
    /// Checks one index entry, adding to `report`; `objects` keeps the verdict of each content.
    func verifyPackage(
        _ entry: PackageEntry, layout: RepositoryLayout, report: inout VerifyReport, objects: inout [SHA256Digest: Bool]
    ) {
        let id = entry.id.rawValue
        let v = entry.version.description
        func problem(_ code: ReasonCode, _ file: String?, _ message: String) {
            report.problems.append(VerifyProblem(code: code, package: id, version: v, file: file, message: message))
        }
        if let encryption = entry.encryption {
            verifySealed(entry, encryption, layout: layout, report: &report, objects: &objects)
            return
        }
        // Paths from the index are used only when they match the layout (IndexRules reports others).
        guard entry.bundle.path == RepositoryLayout.bundlePath(entry.id, entry.version),
            entry.files.path == RepositoryLayout.fileListPath(entry.id, entry.version)
        else { return }

        let fileList = checkFileList(entry, layout: layout, problem: problem)

        // The bundle: present, declared size and hash, strict reader, same tree as the list.
        let bundlePath = layout.resolve(entry.bundle.path)
        var collector = TextCollector()
        var listing: ArchiveListing?
        if checkBlobOnDisk(entry.bundle, layout: layout, problem: problem) {
            do {
                listing = try pipeline.withZip(of: bundlePath, limit: limits.maxTotalBytes) {
                    (zip) throws(ArchiveError) in try ZipReader(limits: limits).read(zip, into: &collector)
                }
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
            checkObjects(list, pipeline: pipeline, layout: layout, objects: &objects, problem: problem)
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

    /// The entry's file list: present with its declared size and hash, decoding, and for this
    /// package and version; nil when it cannot be read.
    func checkFileList(
        _ entry: PackageEntry, layout: RepositoryLayout, problem: (ReasonCode, String?, String) -> Void
    ) -> FileList? {
        guard let data = checkBlob(entry.files, layout: layout, problem: problem) else { return nil }
        do {
            let list = try ManifestCoding.decode(FileList.self, from: data, document: entry.files.path)
            if list.id != entry.id || list.version != entry.version {
                problem("file-list-mismatch", entry.files.path, "the file list is for \(list.id) \(list.version)")
            }
            return list
        } catch {
            problem(error.code(or: "file-list-schema"), entry.files.path, error.description)
            return nil
        }
    }

    /// Each file's object: present, and inflating to the file's size and hash. `objects` keeps
    /// the verdict of each content checked, so a content shared by packages is read once.
    /// An encrypted version's objects are named by their sealed bytes (checked first, against
    /// the list's `sealed` and `packed`) and opened with its `pipeline`.
    func checkObjects(
        _ list: FileList, pipeline: BytePipeline, layout: RepositoryLayout, objects: inout [SHA256Digest: Bool],
        problem: (ReasonCode, String?, String) -> Void
    ) {
        for file in list.files {
            let objectRel = RepositoryLayout.objectPath(file.objectName)
            if let ok = objects[file.objectName] {
                if !ok {
                    problem("object-bad", objectRel, "object for \(file.path) is missing or corrupt (see above)")
                }
                continue
            }
            let objectPath = layout.resolve(objectRel)
            guard AtomicFile.exists(objectPath) else {
                objects[file.objectName] = false
                problem("object-missing", objectRel, "no object for \(file.path) (\(file.objectName))")
                continue
            }
            if let sealed = file.sealed {
                let ref = BlobRef(path: objectRel, size: file.packed ?? -1, sha256: sealed)
                guard checkBlobOnDisk(ref, layout: layout, problem: problem) else {
                    objects[file.objectName] = false
                    continue
                }
            }
            do {
                let got = try pipeline.forObject(file.sha256).contentOfObject(
                    file: objectPath, limit: limits.maxFileBytes)
                let ok = got.sha256 == file.sha256 && got.size == file.size
                objects[file.objectName] = ok
                if !ok {
                    problem(
                        "object-corrupt", objectRel,
                        "inflates to \(got.size) bytes with sha256 \(got.sha256), expected \(file.size) bytes for \(file.path)"
                    )
                }
            } catch {
                objects[file.objectName] = false
                problem("object-corrupt", objectRel, "cannot inflate the object for \(file.path): \(error)")
            }
        }
    }

    /// Reads a small document named by the index and checks its size and hash.
    func checkBlob(_ ref: BlobRef, layout: RepositoryLayout, problem: (ReasonCode, String?, String) -> Void)
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
    func checkBlobOnDisk(_ ref: BlobRef, layout: RepositoryLayout, problem: (ReasonCode, String?, String) -> Void)
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

    func compare(
        _ actual: [FileEntry], _ list: FileList, bundle: String, problem: (ReasonCode, String?, String) -> Void
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

    func checkLinks(
        _ texts: [(RelativePath, String)], files: [FileEntry], entryName: String,
        problem: (ReasonCode, String?, String) -> Void
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
