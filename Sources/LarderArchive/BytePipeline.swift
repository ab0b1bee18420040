import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

/// The one place that says how each kind of blob is encoded, verified, decoded and placed: a
/// codec per kind (`BlobCodec`) and the operations Sync, Store, Publish and verify call instead of
/// choosing gzip, zstd or zip themselves. A sandbox, a sync and a publisher each carry one
/// (`standard` unless told otherwise); another encoding is another codec here and a section of
/// the format doc, with no caller changed.
package struct BytePipeline: Sendable {
    /// How bundles are stored (as is: a zip compresses its own entries).
    package var bundle: any BlobCodec = StoredCodec(.bundle)
    /// How objects are stored (gzip).
    package var object: any BlobCodec = GzipCodec(.object)
    /// How compressed documents are stored (gzip).
    package var document: any BlobCodec = GzipCodec(.document)
    /// How each patch is stored (as is: a zstd frame).
    package var patch: any BlobCodec = StoredCodec(.patch)
    /// How a delta's patch file — its patches end to end — is stored (as is; sealed once, whole,
    /// in an encrypted version).
    package var patchFile: any BlobCodec = StoredCodec(.patch)

    /// The encodings of format version 1.
    package static let standard = BytePipeline()

    /// A pipeline with the standard codecs.
    package init() {}

    /// The codec for `kind`.
    package func codec(_ kind: BlobKind) -> any BlobCodec {
        switch kind {
        case .bundle: bundle
        case .object: object
        case .document: document
        case .patch: patch
        }
    }

    /// A delta's patch file (its stored patches end to end) as published.
    package func encodePatchFile(_ patches: Data) throws(BlobError) -> Data { try patchFile.encode(patches) }

    /// The most a stored blob of `kind` whose content is `size` bytes may take: what a download
    /// of it is bounded by when its stored size is not signed. gzip of incompressible data grows
    /// by a few bytes per 16 KiB block, so the bound is generous but firm.
    package func storedBound(_ kind: BlobKind, contentSize size: Int64) -> Int64 {
        switch codec(kind) {
        case is StoredCodec: size
        default: size + size / 64 + 1024
        }
    }

    // MARK: documents

    /// The stored form of a document (a file list, a delta manifest).
    package func encodeDocument(_ json: Data) throws(BlobError) -> Data {
        try document.encode(json)
    }

    /// A stored document's bytes, at most `limit`; a stored form that is not complete is
    /// refused. `exact`: the limit is the document's signed size, so the output is sized once.
    package func decodeDocument(_ stored: Data, limit: Int64, exact: Bool = false) throws(BlobError) -> Data {
        var out = Data()
        if exact { out.reserveCapacity(Int(min(limit, Int64(ManifestCoding.maxDocumentBytes)))) }
        try decode(document, stored, limit: limit) { out.append(contentsOf: $0) }
        return out
    }

    // MARK: objects

    /// Encodes the file at `source` as an object at `output` (replaced atomically).
    package func encodeObject(file source: FilePath, to output: FilePath) throws(BlobError) -> EncodedBlob {
        try object.encode(file: source, to: output)
    }

    /// An object's content in memory (at most `limit` bytes): a patch's base, a publisher's check.
    package func decodeObject(file path: FilePath, limit: Int64) throws(BlobError) -> Data {
        let stored: Data
        do {
            stored = try AtomicFile.read(
                path, limit: Int(min(storedBound(.object, contentSize: limit), Int64(Int.max / 2))))
        } catch { throw .io(error) }
        var out = Data()
        try decode(object, stored, limit: limit) { out.append(contentsOf: $0) }
        return out
    }

    /// The size and SHA-256 of an object's content, decoded as a stream.
    package func contentOfObject(file path: FilePath, limit: Int64) throws(BlobError) -> (
        size: Int64, sha256: SHA256Digest
    ) {
        var hasher = SHA256Stream()
        try decode(object, file: path, limit: limit, bufferSize: 256 << 10) { hasher.update($0) }
        return (hasher.count, hasher.finish())
    }

    /// Decodes the object at `stored` into a new file at `target` (which must not exist),
    /// checking the content's size and SHA-256 while writing. A content that is not the
    /// expected one is `.mismatch` (the caller decides what becomes of the object); a write
    /// failure is `.io`.
    package func placeObject(_ stored: FilePath, at target: FilePath, size: Int64, sha256: SHA256Digest)
        throws(BlobError)
    {
        let output: FileDescriptor
        let input: FileDescriptor
        do { input = try SystemCalls.open(stored, .readOnly) } catch { throw .io(error) }
        defer { try? SystemCalls.close(input, path: stored) }
        do { output = try SystemCalls.open(target, .writeOnly, options: [.create, .exclusiveCreate]) } catch {
            throw .io(error)
        }
        defer { try? SystemCalls.close(output, path: target) }
        var hasher = SHA256Stream()
        // Room for the whole object when it is small (one among hundreds), never more than 256 KiB.
        let storedSize = (try? SystemCalls.fstat(input, path: stored).size) ?? Int64(256 << 10)
        try decode(
            object, fd: input, path: stored, limit: size, bufferSize: Int(min(Int64(256 << 10), max(4096, storedSize)))
        ) {
            (chunk) throws(FileSystemError) in
            hasher.update(chunk)
            try SystemCalls.writeAll(output, chunk, path: target)
        }
        let got = hasher.finish()
        guard hasher.count == size, got == sha256 else { throw .mismatch(.object, size: hasher.count, sha256: got) }
    }

    // MARK: patches

    /// The stored patch that turns `base` into `target` (zstd, `level` 1–19).
    package func makePatch(base: Data, target: Data, level: Int32 = 19) throws(BlobError) -> Data {
        let frame: Data
        do { frame = try BinaryPatch.make(base: base, target: target, level: level) } catch {
            throw .malformed(.patch, "\(error)")
        }
        return try patch.encode(frame)
    }

    /// Applies a stored patch to `base` in memory (at most `limit` bytes): for small files,
    /// publishers and `verify`.
    package func applyPatch(_ stored: Data, base: Data, limit: Int64) throws(BlobError) -> Data {
        var out = Data()
        try applyPatch(stored, base: base, limit: limit) { out.append(contentsOf: $0) }
        return out
    }

    /// Applies the stored patch at `ref.offset` in `patchFile` (`ref.length` bytes) to the
    /// content at `base` (which must be `ref.base`), writing the result to a new `output` and
    /// checking its size and SHA-256 against `ref`; the output is removed when anything fails.
    /// Memory: the base, the patch and one 64 KiB chunk. The error's description says why, in
    /// words for a report.
    package func placePatched(_ ref: PatchRef, patchFile: FilePath, base: FilePath, at output: FilePath)
        throws(BlobError)
    {
        guard ref.size <= BinaryPatch.maxFileSize, ref.length <= Int64(BinaryPatch.maxFileSize) else {
            throw .malformed(.patch, "the content is larger than patches are applied for")
        }
        let baseData: Data
        let stored: Data
        do {
            baseData = try AtomicFile.read(base, limit: Int(BinaryPatch.maxFileSize))
            stored = try AtomicFile.read(patchFile, offset: ref.offset, length: Int(ref.length))
        } catch {
            throw .malformed(.patch, "reading the base or the patch failed: \(error)")
        }
        guard SHA256Digest.of(baseData) == ref.base else {
            throw .malformed(
                .patch, "the base content on disk is not the one the patch applies to (altered or damaged)")
        }
        try? SystemCalls.unlink(output)
        let fd: FileDescriptor
        do { fd = try SystemCalls.open(output, .writeOnly, options: [.create, .exclusiveCreate]) } catch {
            throw .malformed(.patch, "\(output): \(error)")
        }
        var hasher = SHA256Stream()
        var failure: BlobError?
        do throws(BlobError) {
            try applyPatch(stored, base: baseData, limit: ref.size) { chunk in
                hasher.update(chunk)
                try SystemCalls.writeAll(fd, chunk, path: output)
            }
        } catch {
            failure = .malformed(.patch, "the patch did not apply: \(error)")
        }
        try? SystemCalls.close(fd, path: output)
        if failure == nil {
            let (count, digest) = (hasher.count, hasher.finish())
            if count != ref.size || digest != ref.target { failure = .mismatch(.patch, size: count, sha256: digest) }
        }
        if let failure {
            try? SystemCalls.unlink(output)
            throw failure
        }
    }

    /// Decodes a stored patch and applies it, handing the result to `sink` in chunks.
    func applyPatch(_ stored: Data, base: Data, limit: Int64, _ sink: (UnsafeRawBufferPointer) throws -> Void)
        throws(BlobError)
    {
        let frame: Data
        if patch is StoredCodec {
            frame = stored
        } else {
            var decoded = Data()
            try decode(patch, stored, limit: Int64(stored.count) * 2 + (1 << 20)) { decoded.append(contentsOf: $0) }
            frame = decoded
        }
        do { try BinaryPatch.apply(patch: frame, base: base, limit: limit, write: sink) } catch {
            throw .malformed(.patch, "\(error)")
        }
    }

    // MARK: bundles

    /// Writes `files` as a bundle at `output`, returning each file's entry (size and SHA-256 of
    /// what was read).
    package func writeBundle(_ files: [(path: RelativePath, source: FilePath)], to output: FilePath)
        throws(ArchiveError) -> [FileEntry]
    {
        guard !(bundle is StoredCodec) else { return try ZipWriter.write(files, to: output) }
        let zip = FilePath(output.string + ".zip")
        defer { try? SystemCalls.unlink(zip) }
        let entries = try ZipWriter.write(files, to: zip)
        do { _ = try bundle.encode(file: zip, to: output) } catch {
            if case .io(let e) = error { throw .io(e) }
            throw .unreadable(detail: "\(output): \(error)")
        }
        return entries
    }

    /// Whether a bundle can be read while it downloads (its stored form is the zip itself).
    package var streamsBundles: Bool { bundle is StoredCodec }

    /// Runs `body` with the zip a stored bundle holds: the file itself when bundles are stored as
    /// is, else a decoded copy beside it (removed afterwards).
    package func withZip<R>(
        of stored: FilePath, limit: Int64, _ body: (FilePath) throws(ArchiveError) -> R
    ) throws(ArchiveError) -> R {
        guard !(bundle is StoredCodec) else { return try body(stored) }
        let zip = FilePath(stored.string + ".zip")
        defer { try? SystemCalls.unlink(zip) }
        do {
            try AtomicFile.replace(zip, durable: false, wrapping: { BlobError.io($0) }) {
                (out, temp) throws(BlobError) in
                try decode(bundle, file: stored, limit: limit, bufferSize: 256 << 10) {
                    (chunk) throws(FileSystemError) in
                    try SystemCalls.writeAll(out, chunk, path: temp)
                }
            }
        } catch {
            if case .io(let e) = error { throw .io(e) }
            throw .unreadable(detail: "\(stored): \(error)")
        }
        return try body(zip)
    }

    // MARK: decoding

    /// Decodes stored bytes in memory.
    func decode(
        _ codec: any BlobCodec, _ stored: Data, limit: Int64, _ sink: (UnsafeRawBufferPointer) throws -> Void
    ) throws(BlobError) {
        let decoder = try codec.makeDecoder(limit: limit)
        do {
            try stored.withUnsafeBytes { try decoder.feed($0, sink) }
            try decoder.finish(sink)
        } catch let e as BlobError {
            throw e
        } catch {
            throw .malformed(codec.kind, "\(error)")
        }
    }

    /// Decodes a stored file as a stream.
    func decode(
        _ codec: any BlobCodec, file path: FilePath, limit: Int64, bufferSize: Int,
        _ sink: (UnsafeRawBufferPointer) throws(FileSystemError) -> Void
    ) throws(BlobError) {
        let fd: FileDescriptor
        do { fd = try SystemCalls.open(path, .readOnly) } catch { throw .io(error) }
        defer { try? SystemCalls.close(fd, path: path) }
        try decode(codec, fd: fd, path: path, limit: limit, bufferSize: bufferSize, sink)
    }

    /// Decodes what `fd` reads as a stream; the sink's own failures (writing the output) are
    /// kept apart from the codec's.
    func decode(
        _ codec: any BlobCodec, fd: FileDescriptor, path: FilePath, limit: Int64, bufferSize: Int,
        _ sink: (UnsafeRawBufferPointer) throws(FileSystemError) -> Void
    ) throws(BlobError) {
        let decoder = try codec.makeDecoder(limit: limit)
        var buffer = [UInt8](repeating: 0, count: bufferSize)
        var sinkFailure: FileSystemError?
        func guarded(_ chunk: UnsafeRawBufferPointer) throws {
            do throws(FileSystemError) { try sink(chunk) } catch {
                sinkFailure = error
                throw error
            }
        }
        do {
            while true {
                let n = try SystemCalls.read(fd, into: &buffer, path: path)
                if n == 0 { break }
                try buffer.withUnsafeBytes { raw in
                    try decoder.feed(UnsafeRawBufferPointer(rebasing: raw[0..<n]), guarded)
                }
            }
            try decoder.finish(guarded)
        } catch let e as BlobError {
            throw e
        } catch {
            if let w = sinkFailure { throw .io(w) }
            if let e = error as? FileSystemError { throw .io(e) }
            throw .malformed(codec.kind, "\(error)")
        }
    }
}
