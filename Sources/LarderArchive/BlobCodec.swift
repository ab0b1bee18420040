import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

/// The kinds of blob a repository holds (manifests §3): what a device downloads and a publisher
/// writes, each stored in the encoding its codec in `BytePipeline` gives it.
package enum BlobKind: String, Sendable, Equatable, CaseIterable {
    /// A version's zip bundle.
    case bundle
    /// One file's content, content-addressed.
    case object
    /// A JSON document sent compressed: a file list's `files.json.gz`, a delta manifest.
    case document
    /// A binary patch (a zstd frame made with the base content as its dictionary).
    case patch
}

/// Why a blob could not be encoded or decoded, or did not hold what it should. The description
/// is the underlying codec's own words, so error texts read as they always have.
package enum BlobError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The stored bytes are not a valid encoding (damaged, truncated, followed by data, or
    /// decoding to more than allowed).
    case malformed(BlobKind, String)
    /// Decoded, the blob is not the content it stands for.
    case mismatch(BlobKind, size: Int64, sha256: SHA256Digest)
    /// Reading the blob or writing what it decodes to failed.
    case io(FileSystemError)

    /// The codec's or the file system's words.
    package var description: String {
        switch self {
        case .malformed(_, let detail): detail
        case .mismatch(let kind, let size, let sha256):
            "the \(kind.rawValue)'s result is not the content it promises (\(size) bytes, sha256 \(sha256.hex.prefix(12))…)"
        case .io(let e): e.description
        }
    }
}

/// How one kind of blob is stored: the encoding between the content (a file's bytes, a zip, a
/// JSON document, a zstd patch) and the bytes in the repository. Encoding is whole (a publisher
/// holds the content); decoding streams, so a device never holds a large blob in memory. The
/// checks every caller needs (size and SHA-256 of the content, limits) are `BytePipeline`'s, on
/// top of a codec; a new encoding — encryption is next — is one more conformance, which may wrap
/// another (encrypt what gzip produced).
package protocol BlobCodec: Sendable {
    /// What this codec stores.
    var kind: BlobKind { get }
    /// The stored form of `content`; the same content gives the same bytes.
    func encode(_ content: Data) throws(BlobError) -> Data
    /// Encodes the file at `source` into `output` (replaced atomically); returns the size and
    /// SHA-256 of the content read, and the stored size.
    func encode(file source: FilePath, to output: FilePath) throws(BlobError) -> EncodedBlob
    /// A decoder for one stored blob that refuses to produce more than `limit` bytes.
    func makeDecoder(limit: Int64) throws(BlobError) -> any BlobDecoder
}

/// What encoding a file gave: the content's size and SHA-256 (so the caller can check it read
/// what it meant to), and the size of the stored form.
package struct EncodedBlob: Sendable, Equatable {
    /// The content's size.
    package let size: Int64
    /// The content's SHA-256.
    package let sha256: SHA256Digest
    /// The stored form's size.
    package let storedSize: Int64
}

/// Decodes one stored blob fed in chunks, handing content to a sink as it comes.
package protocol BlobDecoder: AnyObject {
    /// Feeds stored bytes; `sink` receives decoded chunks. A sink's error is rethrown as is.
    func feed(_ stored: UnsafeRawBufferPointer, _ sink: (UnsafeRawBufferPointer) throws -> Void) throws
    /// Ends the input: delivers what is still held and throws when the stored form is incomplete.
    func finish(_ sink: (UnsafeRawBufferPointer) throws -> Void) throws
}

/// gzip (RFC 1952, level 9, no name, mtime 0): objects and compressed documents.
package struct GzipCodec: BlobCodec {
    package let kind: BlobKind

    /// A gzip codec for blobs of `kind`.
    package init(_ kind: BlobKind) { self.kind = kind }

    package func encode(_ content: Data) throws(BlobError) -> Data {
        do { return try Gzip.compress(content) } catch { throw .malformed(kind, "\(error)") }
    }

    package func encode(file source: FilePath, to output: FilePath) throws(BlobError) -> EncodedBlob {
        do {
            let r = try Gzip.compressFile(source, to: output)
            return EncodedBlob(size: r.size, sha256: r.sha256, storedSize: r.compressedSize)
        } catch {
            if case .io(let e) = error { throw .io(e) }
            throw .malformed(kind, error.description)
        }
    }

    package func makeDecoder(limit: Int64) throws(BlobError) -> any BlobDecoder {
        do { return GzipDecoder(try Gzip.Inflater(limit: limit)) } catch { throw .malformed(kind, "\(error)") }
    }
}

/// A gzip inflater as a blob decoder.
final class GzipDecoder: BlobDecoder {
    let inflater: Gzip.Inflater

    init(_ inflater: Gzip.Inflater) { self.inflater = inflater }

    func feed(_ stored: UnsafeRawBufferPointer, _ sink: (UnsafeRawBufferPointer) throws -> Void) throws {
        try inflater.feed(stored, sink)
    }

    func finish(_ sink: (UnsafeRawBufferPointer) throws -> Void) throws {
        try inflater.drain(sink)
        guard inflater.isFinished else { throw GzipError.truncated }
    }
}

/// Stored as is: bundles (a zip compresses its own entries) and patches (a zstd frame).
package struct StoredCodec: BlobCodec {
    package let kind: BlobKind

    /// A codec that stores blobs of `kind` unchanged.
    package init(_ kind: BlobKind) { self.kind = kind }

    package func encode(_ content: Data) throws(BlobError) -> Data { content }

    package func encode(file source: FilePath, to output: FilePath) throws(BlobError) -> EncodedBlob {
        var hasher = SHA256Stream()
        do {
            let src = try SystemCalls.open(source, .readOnly, options: [.noFollow])
            defer { try? SystemCalls.close(src, path: source) }
            try AtomicFile.replace(output, wrapping: { $0 as any Error }) { out, temp in
                var buffer = [UInt8](repeating: 0, count: 256 << 10)
                while true {
                    let n = try SystemCalls.read(src, into: &buffer, path: source)
                    if n == 0 { break }
                    try buffer.withUnsafeBytes { raw in
                        let chunk = UnsafeRawBufferPointer(rebasing: raw[0..<n])
                        hasher.update(chunk)
                        try SystemCalls.writeAll(out, chunk, path: temp)
                    }
                }
            }
        } catch let e as FileSystemError {
            throw .io(e)
        } catch {
            throw .malformed(kind, "\(output): \(error)")
        }
        let size = hasher.count
        return EncodedBlob(size: size, sha256: hasher.finish(), storedSize: size)
    }

    package func makeDecoder(limit: Int64) throws(BlobError) -> any BlobDecoder {
        PassDecoder(kind: kind, limit: limit)
    }
}

/// Hands stored bytes on unchanged, up to a limit.
final class PassDecoder: BlobDecoder {
    let kind: BlobKind
    let limit: Int64
    var produced: Int64 = 0

    init(kind: BlobKind, limit: Int64) {
        self.kind = kind
        self.limit = limit
    }

    func feed(_ stored: UnsafeRawBufferPointer, _ sink: (UnsafeRawBufferPointer) throws -> Void) throws {
        produced += Int64(stored.count)
        if produced > limit { throw BlobError.malformed(kind, "the \(kind.rawValue) is longer than \(limit) bytes") }
        if stored.count > 0 { try sink(stored) }
    }

    func finish(_ sink: (UnsafeRawBufferPointer) throws -> Void) throws {}
}
