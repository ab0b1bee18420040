import Crypto
import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

/// The encoding of an encrypted version's blobs (manifests §16): what `inner` stores, sealed with
/// the version's content key in 64 KiB segments (`SegmentedSeal`). Decoding opens segment by
/// segment, each authenticated before its bytes reach the inner decoder.
package struct SealedCodec: BlobCodec {
    /// The encoding under the seal (gzip for objects and lists, as is for bundles and patches).
    package let inner: any BlobCodec
    let key: SymmetricKey
    let associated: Data
    package var kind: BlobKind { inner.kind }

    /// Seals what `inner` stores with `key`, binding every segment to `associated`.
    package init(_ inner: any BlobCodec, key: SymmetricKey, associated: Data) {
        self.inner = inner
        self.key = key
        self.associated = associated
    }

    package func encode(_ content: Data) throws(BlobError) -> Data {
        let stored = try inner.encode(content)
        do { return try SegmentedSeal.seal(stored, key: key, associated: associated) } catch {
            throw .malformed(kind, "sealing failed: \(error)")
        }
    }

    package func encode(file source: FilePath, to output: FilePath) throws(BlobError) -> EncodedBlob {
        let plain = FilePath(output.string + ".inner")
        defer { try? SystemCalls.unlink(plain) }
        let encoded = try inner.encode(file: source, to: plain)
        let size: Int64
        do {
            size = try Self.seal(file: plain, to: output, key: key, associated: associated)
        } catch let e as FileSystemError {
            throw .io(e)
        } catch {
            throw .malformed(kind, "sealing \(output) failed: \(error)")
        }
        return EncodedBlob(size: encoded.size, sha256: encoded.sha256, storedSize: size)
    }

    package func makeDecoder(limit: Int64) throws(BlobError) -> any BlobDecoder {
        // The sealed form of `limit` content bytes is longer; the inner decoder keeps the limit.
        SealedDecoder(
            kind: kind, opener: SegmentedSeal.Opener(key: key, associated: associated),
            inner: try inner.makeDecoder(limit: limit))
    }

    /// Seals the file at `source` into `output` (replaced atomically) segment by segment; returns
    /// the sealed size.
    static func seal(file source: FilePath, to output: FilePath, key: SymmetricKey, associated: Data) throws -> Int64 {
        let src = try SystemCalls.open(source, .readOnly, options: [.noFollow])
        defer { try? SystemCalls.close(src, path: source) }
        var sealer = SegmentedSeal.Sealer(key: key, associated: associated)
        var total: Int64 = 0
        try AtomicFile.replace(output, wrapping: { $0 as any Error }) { out, temp in
            var buffer = [UInt8](repeating: 0, count: 256 << 10)
            func emit(_ d: Data) throws {
                total += Int64(d.count)
                try d.withUnsafeBytes { try SystemCalls.writeAll(out, $0, path: temp) }
            }
            try emit(sealer.header)
            while true {
                let n = try SystemCalls.read(src, into: &buffer, path: source)
                if n == 0 { break }
                try emit(try sealer.feed(Data(buffer[0..<n])))
            }
            try emit(try sealer.finish())
        }
        return total
    }
}

/// Opens sealed segments and hands their bytes to the inner decoder.
final class SealedDecoder: BlobDecoder {
    let kind: BlobKind
    let opener: SegmentedSeal.Opener
    let inner: any BlobDecoder

    init(kind: BlobKind, opener: SegmentedSeal.Opener, inner: any BlobDecoder) {
        self.kind = kind
        self.opener = opener
        self.inner = inner
    }

    func feed(_ stored: UnsafeRawBufferPointer, _ sink: (UnsafeRawBufferPointer) throws -> Void) throws {
        let opened: Data
        do { opened = try opener.feed(Data(stored)) } catch { throw BlobError.malformed(kind, error.description) }
        if !opened.isEmpty { try opened.withUnsafeBytes { try inner.feed($0, sink) } }
    }

    func finish(_ sink: (UnsafeRawBufferPointer) throws -> Void) throws {
        let opened: Data
        do { opened = try opener.finish() } catch { throw BlobError.malformed(kind, error.description) }
        if !opened.isEmpty { try opened.withUnsafeBytes { try inner.feed($0, sink) } }
        try inner.finish(sink)
    }
}

extension BytePipeline {
    /// This pipeline's encodings sealed with `key` for `id`@`version`: the pipeline of an
    /// encrypted version (each kind bound to its own associated data).
    package func sealed(key: SymmetricKey, id: PackageID, version: SemanticVersion) -> BytePipeline {
        var p = self
        p.bundle = SealedCodec(bundle, key: key, associated: Encryption.associated(id, version, "bundle"))
        p.object = SealedCodec(object, key: key, associated: Encryption.associated(id, version, "object"))
        p.document = SealedCodec(document, key: key, associated: Encryption.associated(id, version, "document"))
        p.patch = SealedCodec(patch, key: key, associated: Encryption.associated(id, version, "patch"))
        return p
    }

    /// The pipeline of the encrypted version `e`, its content key unwrapped with the first of
    /// `keys` it is wrapped for. Throws `.wrongKey` when a wrapped key names one of `keys` but
    /// does not open with it, else `.noRecipient` (naming `keys`' ids).
    package func sealed(for e: PackageEntry, _ encryption: Encryption, keys: [RecipientKey]) throws(SealError)
        -> BytePipeline
    {
        let info = Encryption.keyInfo(e.id, e.version)
        var wrong: SealError?
        for k in keys {
            do throws(SealError) {
                return sealed(key: try k.unwrap(encryption.recipients, info: info), id: e.id, version: e.version)
            } catch {
                if case .wrongKey = error { wrong = wrong ?? error }
            }
        }
        throw wrong ?? .noRecipient(keys.map(\.keyId).joined(separator: ", "))
    }

    /// Whether this is an encrypted version's pipeline.
    package var isSealed: Bool { bundle is SealedCodec }

    /// Opens the seal of the stored `kind` blob at `stored` into `output` (replaced atomically),
    /// leaving the inner encoding (a zip, a gzip object, a zstd patch file): after a download
    /// whose sealed bytes were checked against their signed digest, so that the rest of a sync
    /// reads it as it reads any other. A pipeline that is not sealed copies nothing and says so.
    package func unseal(_ kind: BlobKind, _ stored: FilePath, to output: FilePath, limit: Int64) throws(BlobError) {
        guard let sealed = codec(kind) as? SealedCodec else {
            throw .malformed(kind, "this \(kind.rawValue) is not sealed")
        }
        let outer = SealedCodec(StoredCodec(kind), key: sealed.key, associated: sealed.associated)
        try AtomicFile.replace(output, durable: false, wrapping: { BlobError.io($0) }) {
            (out, temp) throws(BlobError) in
            try decode(outer, file: stored, limit: limit, bufferSize: 256 << 10) {
                (chunk) throws(FileSystemError) in
                try SystemCalls.writeAll(out, chunk, path: temp)
            }
        }
    }
}
