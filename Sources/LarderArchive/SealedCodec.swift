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
    /// Objects: each content is sealed under a key of its own, derived from the content key and
    /// the content's SHA-256, with a zero nonce prefix, so that the same content under the same
    /// content key is the same sealed bytes (an object named by them is shared by the versions
    /// that share the key), and no key seals two contents. Decoding needs the content's digest
    /// (`forContent`).
    let perContent: Bool
    /// The content the codec opens, for a `perContent` codec.
    let content: SHA256Digest?
    package var kind: BlobKind { inner.kind }

    /// Seals what `inner` stores with `key` (or, `perContent`, a key derived for each content),
    /// binding every segment to `associated`.
    package init(
        _ inner: any BlobCodec, key: SymmetricKey, associated: Data, perContent: Bool = false,
        content: SHA256Digest? = nil
    ) {
        self.inner = inner
        self.key = key
        self.associated = associated
        self.perContent = perContent
        self.content = content
    }

    /// This codec bound to the content with digest `digest` (what a `perContent` codec decodes).
    package func forContent(_ digest: SHA256Digest) -> SealedCodec {
        SealedCodec(inner, key: key, associated: associated, perContent: perContent, content: digest)
    }

    /// The key and nonce prefix `digest`'s content is sealed with.
    func sealing(_ digest: SHA256Digest?) throws(BlobError) -> (SymmetricKey, [UInt8]?) {
        guard perContent else { return (key, nil) }
        guard let digest else { throw .malformed(kind, "a sealed object opens only with its content's digest") }
        let derived = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: key, salt: Data("larder-seal-1 object".utf8),
            info: associated + Data(digest.hex.utf8), outputByteCount: 32)
        return (derived, [UInt8](repeating: 0, count: 7))
    }

    package func encode(_ content: Data) throws(BlobError) -> Data {
        let stored = try inner.encode(content)
        let (k, prefix) = try sealing(perContent ? SHA256Digest.of(content) : nil)
        do { return try SegmentedSeal.seal(stored, key: k, associated: associated, prefix: prefix) } catch {
            throw .malformed(kind, "sealing failed: \(error)")
        }
    }

    package func encode(file source: FilePath, to output: FilePath) throws(BlobError) -> EncodedBlob {
        let plain = FilePath(output.string + ".inner")
        defer { try? SystemCalls.unlink(plain) }
        let encoded = try inner.encode(file: source, to: plain)
        let (k, prefix) = try sealing(encoded.sha256)
        let size: Int64
        do {
            size = try Self.seal(file: plain, to: output, key: k, associated: associated, prefix: prefix)
        } catch let e as FileSystemError {
            throw .io(e)
        } catch {
            throw .malformed(kind, "sealing \(output) failed: \(error)")
        }
        return EncodedBlob(size: encoded.size, sha256: encoded.sha256, storedSize: size)
    }

    package func makeDecoder(limit: Int64) throws(BlobError) -> any BlobDecoder {
        // The sealed form of `limit` content bytes is longer; the inner decoder keeps the limit.
        let (k, _) = try sealing(content)
        return SealedDecoder(
            kind: kind, opener: SegmentedSeal.Opener(key: k, associated: associated),
            inner: try inner.makeDecoder(limit: limit))
    }

    /// Seals the file at `source` into `output` (replaced atomically) segment by segment; returns
    /// the sealed size.
    static func seal(
        file source: FilePath, to output: FilePath, key: SymmetricKey, associated: Data, prefix: [UInt8]? = nil
    ) throws -> Int64 {
        let src = try SystemCalls.open(source, .readOnly, options: [.noFollow])
        defer { try? SystemCalls.close(src, path: source) }
        var sealer = SegmentedSeal.Sealer(key: key, associated: associated, prefix: prefix)
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
    /// encrypted version (each kind bound to its own associated data).
    package func sealed(key: SymmetricKey, id: PackageID, version: SemanticVersion) -> BytePipeline {
        var p = self
        p.bundle = SealedCodec(bundle, key: key, associated: Encryption.associated(id, version, "bundle"))
        // Objects are bound to the package, not the version: a version packed with the content
        // key of the one before it shares the objects of the contents they share.
        p.object = SealedCodec(object, key: key, associated: Encryption.associatedObject(id), perContent: true)
        p.document = SealedCodec(document, key: key, associated: Encryption.associated(id, version, "document"))
        p.patchFile = SealedCodec(patchFile, key: key, associated: Encryption.associated(id, version, "patch"))
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

    /// This pipeline with its objects bound to the content `digest` (a sealed object opens only
    /// with its content's digest); unchanged when objects are not sealed.
    package func forObject(_ digest: SHA256Digest) -> BytePipeline {
        guard let sealed = object as? SealedCodec else { return self }
        var p = self
        p.object = sealed.forContent(digest)
        return p
    }

    /// Whether this is an encrypted version's pipeline.
    package var isSealed: Bool { bundle is SealedCodec }

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
            content: sealed.content)
        try AtomicFile.replace(output, durable: false, wrapping: { BlobError.io($0) }) {
            (out, temp) throws(BlobError) in
            try decode(outer, file: stored, limit: limit, bufferSize: 256 << 10) {
                (chunk) throws(FileSystemError) in
                try SystemCalls.writeAll(out, chunk, path: temp)
            }
        }
    }
}

/// A sealed bundle opened while it arrives: a thread of its own reads the sealed bytes from
/// `inner` (a download being written), opens each segment once it is complete — authenticated
/// before any of its bytes is handed on — writes the zip's bytes to `output` (which
/// `complete()` returns: the reader checks the complete zip there) and queues them for the
/// archive reader, at most `ahead` bytes in front of it. Opening runs beside extraction, not on
/// its thread.
package final class SealedByteSource: ArchiveByteSource, @unchecked Sendable {
    // @unchecked: the queue and the opening thread's outcome are guarded by `condition`; `current`
    // and `offset` are used by the one reading thread.
    let inner: any ArchiveByteSource
    let opener: SegmentedSeal.Opener
    /// The opened zip, written as it is handed on.
    package let output: FilePath
    /// How far opening may run ahead of the reader.
    static let ahead = 4 << 20
    private let condition = NSCondition()
    private var queue: [Data] = []
    private var head = 0
    private var queued = 0
    private var failure: (any Error)?
    private var cancelled = false
    /// `complete()` was called: what is opened after is written, not queued.
    private var draining = false
    private var running = false
    private var current = Data()
    private var offset = 0

    /// A source opening what `inner` delivers with `pipeline`'s bundle seal; nil when the
    /// pipeline's bundles are not sealed over their zip.
    package init?(_ inner: any ArchiveByteSource, pipeline: BytePipeline, output: FilePath) {
        guard let sealed = pipeline.bundle as? SealedCodec, sealed.inner is StoredCodec,
            let fd = try? SystemCalls.open(output, .writeOnly, options: [.create, .truncate])
        else { return nil }
        self.inner = inner
        opener = SegmentedSeal.Opener(key: sealed.key, associated: sealed.associated)
        self.output = output
        running = true
        let thread = Thread { [self] in self.open(into: fd) }
        thread.name = "larder.open-sealed"
        thread.start()
    }

    /// The opening thread: reads, opens, writes and queues until the end, a failure or `stop()`.
    private func open(into fd: FileDescriptor) {
        var outcome: (any Error)?
        let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 << 10, alignment: 16)
        defer { chunk.deallocate() }
        do {
            while true {
                let n = try inner.read(into: chunk)
                var segments: [Data] = []
                do {
                    if n == 0 {
                        try opener.finish { segments.append($0) }
                    } else {
                        try opener.feed(UnsafeRawBufferPointer(rebasing: chunk[0..<n])) { segments.append($0) }
                    }
                } catch {
                    throw ArchiveError.unreadable(detail: "the sealed bundle does not open: \(error)")
                }
                for segment in segments where !segment.isEmpty {
                    try segment.withUnsafeBytes { try SystemCalls.writeAll(fd, $0, path: output) }
                    guard enqueue(segment) else { break }
                }
                if n == 0 || stopped { break }
            }
        } catch {
            outcome = error
        }
        do { try SystemCalls.close(fd, path: output) } catch { outcome = outcome ?? error }
        condition.lock()
        failure = outcome
        running = false
        condition.broadcast()
        condition.unlock()
    }

    /// Whether `stop()` was called.
    private var stopped: Bool {
        condition.lock()
        defer { condition.unlock() }
        return cancelled
    }

    /// Queues an opened segment, waiting while the reader is `ahead` bytes behind; false once stopped.
    private func enqueue(_ segment: Data) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while queued >= Self.ahead, !cancelled, !draining { condition.wait() }
        if cancelled { return false }
        if draining { return true }
        queue.append(segment)
        queued += segment.count
        condition.broadcast()
        return true
    }

    package func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        guard let base = buffer.baseAddress else { return 0 }
        var done = 0
        while done < buffer.count {
            if offset == current.count {
                condition.lock()
                // Waits only when nothing at all has been handed back yet.
                while head == queue.count, running, done == 0 { condition.wait() }
                if head < queue.count {
                    current = queue[head]
                    head += 1
                    queued -= current.count
                    if head > 64 {
                        queue.removeFirst(head)
                        head = 0
                    }
                    condition.broadcast()
                    condition.unlock()
                    offset = 0
                } else {
                    let failed = failure
                    condition.unlock()
                    if let failed, done == 0 { throw failed }
                    return done
                }
            }
            let k = min(buffer.count - done, current.count - offset)
            current.withUnsafeBytes { raw in
                if let from = raw.baseAddress { (base + done).copyMemory(from: from + offset, byteCount: k) }
            }
            offset += k
            done += k
        }
        return done
    }

    package func complete() throws -> FilePath {
        _ = try inner.complete()
        // The reader may stop before the end (it reads the central directory from the file):
        // the rest is opened into the file only.
        condition.lock()
        draining = true
        queue = []
        head = 0
        queued = 0
        condition.broadcast()
        while running { condition.wait() }
        let failed = failure
        condition.unlock()
        if let failed { throw failed }
        return output
    }

    /// Stops the opening thread and waits for it (after a read that failed or stopped early:
    /// the transfer has returned, so the thread's reads do not wait long).
    package func stop() {
        condition.lock()
        cancelled = true
        condition.broadcast()
        while running { condition.wait() }
        condition.unlock()
    }
}
