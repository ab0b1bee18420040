import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import SystemPackage

extension StagingArea {
    /// Builds `list`'s tree in this area from contents already in the sandbox (hard links to
    /// `local`, else copies) and downloaded objects (`objects`: gzip files, inflated while their
    /// size and SHA-256 are checked). The tree is not yet verified as a whole:
    /// `Sandbox.install(assembled:…)` does that before placing it.
    package func assemble(
        list: FileList, local: [SHA256Digest: FilePath], objects: [SHA256Digest: FilePath]
    ) throws(StoreError) {
        for f in list.files {
            let target = tree.appending(f.path.string)
            try io { () throws(FileSystemError) in try AtomicFile.makeDirectories(target.removingLastComponent()) }
            if let source = local[f.sha256] {
                // A hard link shares the content; across file systems (or where links are
                // refused) the bytes are copied.
                do throws(FileSystemError) { try SystemCalls.link(source, to: target) } catch {
                    try io { () throws(FileSystemError) in try SystemCalls.copyFile(source, to: target) }
                }
            } else if let gz = objects[f.sha256] {
                try Self.inflate(gz, to: target, expecting: f, of: list)
            } else {
                throw .verification(
                    id: list.id.rawValue, version: list.version.description,
                    problems: ["\(f.path): no source for its content"])
            }
        }
    }

    /// Inflates a downloaded object into `target`, checking size and SHA-256 while writing. An
    /// object whose content is not the declared one is deleted, so the next sync fetches it anew.
    static func inflate(_ gz: FilePath, to target: FilePath, expecting f: FileEntry, of list: FileList)
        throws(StoreError)
    {
        let corrupt = { (detail: String) in
            StoreError.objectCorrupt(id: list.id.rawValue, version: list.version.description, detail: detail)
        }
        let input = try io { () throws(FileSystemError) in try SystemCalls.open(gz, .readOnly) }
        defer { try? SystemCalls.close(input, path: gz) }
        let output = try io { () throws(FileSystemError) in
            try SystemCalls.open(target, .writeOnly, options: [.create, .exclusiveCreate])
        }
        defer { try? SystemCalls.close(output, path: target) }
        let inflater: Gzip.Inflater
        do { inflater = try Gzip.Inflater(limit: f.size) } catch { throw corrupt("\(error)") }
        var hasher = SHA256Stream()
        let stored = (try? SystemCalls.fstat(input, path: gz).size) ?? Int64(256 << 10)
        var buffer = [UInt8](repeating: 0, count: Int(min(Int64(256 << 10), max(4096, stored))))
        // The sink's own failures (writing the output) are kept apart from the inflater's.
        var writeFailure: FileSystemError?
        let sink = { (chunk: UnsafeRawBufferPointer) throws in
            hasher.update(chunk)
            do throws(FileSystemError) { try SystemCalls.writeAll(output, chunk, path: target) } catch {
                writeFailure = error
                throw error
            }
        }
        do {
            while true {
                let n = try io { () throws(FileSystemError) in try SystemCalls.read(input, into: &buffer, path: gz) }
                if n == 0 { break }
                try buffer.withUnsafeBytes { raw in
                    try inflater.feed(UnsafeRawBufferPointer(rebasing: raw[0..<n]), sink)
                }
            }
            try inflater.drain(sink)
        } catch let e as StoreError {
            throw e
        } catch {
            if let w = writeFailure { throw .io(w) }
            throw corrupt("\(error)")
        }
        guard inflater.isFinished else { throw corrupt("\(GzipError.truncated)") }
        let got = hasher.finish()
        guard hasher.count == f.size, got == f.sha256 else {
            try? SystemCalls.unlink(gz)
            throw .objectMismatch(object: RepositoryLayout.objectPath(f.sha256), expected: f.sha256, got: got)
        }
    }
}
