import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

import struct Crypto.HKDF
import struct Crypto.SHA256
import struct Crypto.SymmetricKey

/// The encoding of an encrypted version's blobs (manifests §16): what `inner` stores, sealed with
/// the version's content key in 64 KiB segments (`SegmentedSeal`). Decoding opens segment by
/// segment, each authenticated before its bytes reach the inner decoder.
package struct SealedCodec: BlobCodec {
    /// The encoding under the seal (gzip for objects and lists, as is for bundles and patches).
    package let inner: any BlobCodec
    let key: SymmetricKey
    let associated: Data
    /// Objects: each is sealed under a key of its own and a nonce prefix of its own, both derived
    /// from the content key and the sealed input — the stored form (gzip) that is sealed, not
    /// only the content it decodes to, since two packers may compress one content differently:
    /// the prefix from the stored form's SHA-256, the key from the content's SHA-256 and the
    /// prefix (header version 2, `SealHeader.derivedKeyFlag`). The same stored form under the
    /// same content key is the same sealed bytes (an object named by them is shared by the
    /// versions that share the key), and no key and nonce seal two inputs. Decoding needs the
    /// content's digest (`forContent`); a version 1 object (an earlier build's, its key from the
    /// content's digest alone, a zero prefix) still opens.
    let perContent: Bool
    /// The content the codec opens, for a `perContent` codec.
    let content: SHA256Digest?
    /// Whether what is sealed is padded to a Padmé sealed size (`pack --pad`, manifests §16).
    package let padded: Bool
    package var kind: BlobKind { inner.kind }

    /// Seals what `inner` stores with `key` (or, `perContent`, a key derived for each sealed
    /// input), binding every segment to `associated`; `padded`, to Padmé sealed sizes.
    package init(
        _ inner: any BlobCodec, key: SymmetricKey, associated: Data, perContent: Bool = false,
        content: SHA256Digest? = nil, padded: Bool = false
    ) {
        self.inner = inner
        self.key = key
        self.associated = associated
        self.perContent = perContent
        self.content = content
        self.padded = padded
    }

    /// This codec bound to the content with digest `digest` (what a `perContent` codec decodes).
    package func forContent(_ digest: SHA256Digest) -> SealedCodec {
        SealedCodec(inner, key: key, associated: associated, perContent: perContent, content: digest, padded: padded)
    }

    /// The key, nonce prefix and header flags the stored form `stored` of the content `content`
    /// is sealed with: for an object, both derived from the sealed input (header version 2).
    func sealing(content: SHA256Digest, stored: SHA256Digest) -> (SymmetricKey, [UInt8]?, UInt8) {
        let pad = padded ? SealHeader.paddedFlag : 0
        guard perContent else { return (key, nil, pad) }
        let prefix = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: key, salt: Data("larder-seal-2 object nonce".utf8),
            info: associated + Data(stored.hex.utf8), outputByteCount: 7
        ).withUnsafeBytes { [UInt8]($0) }
        return (objectKey(content, prefix: prefix), prefix, pad | SealHeader.derivedKeyFlag)
    }

    /// An object's key: version 2 from its content's digest and its nonce prefix, version 1 (an
    /// earlier build's) from its content's digest alone.
    func objectKey(_ digest: SHA256Digest, prefix: [UInt8]?) -> SymmetricKey {
        guard let prefix else {
            return HKDF<SHA256>.deriveKey(
                inputKeyMaterial: key, salt: Data("larder-seal-1 object".utf8),
                info: associated + Data(digest.hex.utf8), outputByteCount: 32)
        }
        return HKDF<SHA256>.deriveKey(
            inputKeyMaterial: key, salt: Data("larder-seal-2 object".utf8),
            info: associated + Data(digest.hex.utf8) + Data(prefix), outputByteCount: 32)
    }

    /// An opener of this codec's sealed bytes: an object's key is chosen by its header.
    package func makeOpener() -> SegmentedSeal.Opener {
        guard perContent else { return SegmentedSeal.Opener(key: key, associated: associated) }
        let content = content
        return SegmentedSeal.Opener(associated: associated) { (h: SealHeader) throws(SealError) -> SymmetricKey in
            guard let content else { throw .header("a sealed object opens only with its content's digest") }
            return objectKey(content, prefix: h.derivedKey ? h.prefix : nil)
        }
    }

    package func encode(_ content: Data) throws(BlobError) -> Data {
        let stored = try inner.encode(content)
        let (k, prefix, flags) = sealing(content: SHA256Digest.of(content), stored: SHA256Digest.of(stored))
        do {
            return try SegmentedSeal.seal(stored, key: k, associated: associated, prefix: prefix, flags: flags)
        } catch {
            throw .malformed(kind, "sealing failed: \(error)")
        }
    }

    package func encode(file source: FilePath, to output: FilePath) throws(BlobError) -> EncodedBlob {
        let plain = FilePath(output.string + ".inner")
        defer { try? SystemCalls.unlink(plain) }
        let encoded = try inner.encode(file: source, to: plain)
        let size: Int64
        do {
            let stored = perContent ? try Self.digest(file: plain) : encoded.sha256
            let (k, prefix, flags) = sealing(content: encoded.sha256, stored: stored)
            size = try Self.seal(
                file: plain, to: output, key: k, associated: associated, prefix: prefix, flags: flags,
                padded: padded ? encoded.storedSize : nil)
        } catch let e as FileSystemError {
            throw .io(e)
        } catch {
            throw .malformed(kind, "sealing \(output) failed: \(error)")
        }
        return EncodedBlob(size: encoded.size, sha256: encoded.sha256, storedSize: size)
    }

    package func makeDecoder(limit: Int64) throws(BlobError) -> any BlobDecoder {
        // The sealed form of `limit` content bytes is longer; the inner decoder keeps the limit.
        if perContent, content == nil {
            throw .malformed(kind, "a sealed object opens only with its content's digest")
        }
        return SealedDecoder(kind: kind, opener: makeOpener(), inner: try inner.makeDecoder(limit: limit))
    }

    /// The SHA-256 of the file at `path` (an object's stored form, before it is sealed).
    static func digest(file path: FilePath) throws -> SHA256Digest {
        let fd = try SystemCalls.open(path, .readOnly, options: [.noFollow])
        defer { try? SystemCalls.close(fd, path: path) }
        var hasher = SHA256()
        var buffer = [UInt8](repeating: 0, count: 256 << 10)
        while true {
            let n = try SystemCalls.read(fd, into: &buffer, path: path)
            if n == 0 { break }
            hasher.update(data: buffer[0..<n])
        }
        return SHA256Digest(finished: hasher.finalize())
    }

    /// Seals the file at `source` into `output` (replaced atomically) segment by segment; returns
    /// the sealed size. `padded`: the file's size, sealed after its length field and before
    /// Padmé padding.
    static func seal(
        file source: FilePath, to output: FilePath, key: SymmetricKey, associated: Data, prefix: [UInt8]? = nil,
        flags: UInt8 = 0, padded: Int64? = nil
    ) throws -> Int64 {
        let src = try SystemCalls.open(source, .readOnly, options: [.noFollow])
        defer { try? SystemCalls.close(src, path: source) }
        var sealer = SegmentedSeal.Sealer(
            key: key, associated: associated, prefix: prefix, flags: flags & ~SealHeader.paddedFlag,
            paddedLength: padded)
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
            try sealer.finish(emit)
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
        var segments: [Data] = []
        do { try opener.feed(stored) { segments.append($0) } } catch {
            throw BlobError.malformed(kind, error.description)
        }
        for opened in segments where !opened.isEmpty { try opened.withUnsafeBytes { try inner.feed($0, sink) } }
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
    /// encrypted version (each kind bound to its own associated data); `padded`, every blob padded
    /// to a Padmé sealed size.
    package func sealed(key: SymmetricKey, id: PackageID, version: SemanticVersion, padded: Bool = false)
        -> BytePipeline
    {
        var p = self
        p.bundle = SealedCodec(
            bundle, key: key, associated: Encryption.associated(id, version, "bundle"), padded: padded)
        // Objects are bound to the package, not the version: a version packed with the content
        // key of the one before it shares the objects of the contents they share.
        p.object = SealedCodec(
            object, key: key, associated: Encryption.associatedObject(id), perContent: true, padded: padded)
        p.document = SealedCodec(
            document, key: key, associated: Encryption.associated(id, version, "document"), padded: padded)
        p.patchFile = SealedCodec(
            patchFile, key: key, associated: Encryption.associated(id, version, "patch"), padded: padded)
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
                return sealed(
                    key: try k.unwrap(encryption.recipients, info: info), id: e.id, version: e.version,
                    padded: encryption.padding == Encryption.padme)
            } catch {
                if case .wrongKey = error { wrong = wrong ?? error }
            }
        }
        throw wrong ?? .noRecipient(keys.map(\.keyId).joined(separator: ", "))
    }

    /// This pipeline with its objects bound to the content `digest` (a sealed object opens only
    /// with its content's digest); unchanged when objects are not sealed.
    package func forObject(_ digest: SHA256Digest) -> BytePipeline {
        guard let sealed = object as? SealedCodec else { return self }
        var p = self
        p.object = sealed.forContent(digest)
        return p
    }

    /// Whether this is an encrypted version's pipeline (asked here only: the rest of the code
    /// asks the pipeline what differs, below).
    var isSealed: Bool { bundle is SealedCodec }

    /// Whether a delta manifest made with this pipeline names contents rather than whole entries:
    /// an encrypted version's names each content without its object's name and size, but for the
    /// objects a device fetches (manifests §16); any other names every entry whole.
    package var deltaNamesContentsOnly: Bool { isSealed }

    /// Where the delta manifest of `id` from `from` to `to` made with this pipeline is published:
    /// sealed (`.sealed`) for an encrypted version, else gzipped.
    package func deltaManifestPath(_ id: PackageID, from: SemanticVersion, to: SemanticVersion) -> String {
        isSealed
            ? RepositoryLayout.sealedDeltaPath(id, from: from, to: to)
            : RepositoryLayout.deltaPath(id, from: from, to: to)
    }

    /// The delta manifest's file name in the new version's staging `deltas/` directory.
    package func deltaManifestName(from: SemanticVersion) -> String {
        isSealed ? "\(from).sealed" : "\(from).json.gz"
    }

    /// Opens the seal of the stored `kind` blob at `stored` into `output` (replaced atomically),
    /// leaving the inner encoding (a zip, a gzip object, a zstd patch file): after a download
    /// whose sealed bytes were checked against their signed digest, so that the rest of a sync
    /// reads it as it reads any other. A pipeline that is not sealed copies nothing and says so.
    package func unseal(_ kind: BlobKind, _ stored: FilePath, to output: FilePath, limit: Int64) throws(BlobError) {
        guard let sealed = (kind == .patch ? patchFile : codec(kind)) as? SealedCodec else {
            throw .malformed(kind, "this \(kind.rawValue) is not sealed")
        }
        let outer = SealedCodec(
            StoredCodec(kind), key: sealed.key, associated: sealed.associated, perContent: sealed.perContent,
            content: sealed.content, padded: sealed.padded)
        try AtomicFile.replace(output, durable: false, wrapping: { BlobError.io($0) }) {
            (out, temp) throws(BlobError) in
            try decode(outer, file: stored, limit: limit, bufferSize: 256 << 10) {
                (chunk) throws(FileSystemError) in
                try SystemCalls.writeAll(out, chunk, path: temp)
            }
        }
    }
}
