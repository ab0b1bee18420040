import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import SystemPackage

/// A test encoding layered over another codec, as encryption will be: the inner codec's stored
/// bytes masked with a position-dependent key stream. It hides nothing from anyone who reads
/// this file; it proves that a new encoding is one `BlobCodec` and that no caller of the byte
/// pipeline looks past it (a zip or gzip signature in the repository would show one that does).
package struct MaskingCodec: BlobCodec {
    package let inner: any BlobCodec
    package var kind: BlobKind { inner.kind }

    /// Masks what `inner` stores.
    package init(_ inner: any BlobCodec) { self.inner = inner }

    /// A pipeline whose four kinds are all masked.
    package static var pipeline: BytePipeline {
        var p = BytePipeline()
        p.bundle = MaskingCodec(p.bundle)
        p.object = MaskingCodec(p.object)
        p.document = MaskingCodec(p.document)
        p.patch = MaskingCodec(p.patch)
        return p
    }

    static func mask(_ bytes: inout [UInt8], from offset: Int64) {
        for i in bytes.indices { bytes[i] ^= UInt8(truncatingIfNeeded: (offset + Int64(i)) &* 131 &+ 0x5A) }
    }

    package func encode(_ content: Data) throws(BlobError) -> Data {
        var bytes = [UInt8](try inner.encode(content))
        Self.mask(&bytes, from: 0)
        return Data(bytes)
    }

    package func encode(file source: FilePath, to output: FilePath) throws(BlobError) -> EncodedBlob {
        let plain = FilePath(output.string + ".plain")
        defer { try? SystemCalls.unlink(plain) }
        let encoded = try inner.encode(file: source, to: plain)
        do {
            var bytes = [UInt8](try AtomicFile.read(plain, limit: Int.max / 2))
            Self.mask(&bytes, from: 0)
            try AtomicFile.write(Data(bytes), to: output)
        } catch { throw .io(error) }
        return encoded
    }

    package func makeDecoder(limit: Int64) throws(BlobError) -> any BlobDecoder {
        Unmasker(inner: try inner.makeDecoder(limit: limit))
    }

    final class Unmasker: BlobDecoder {
        let inner: any BlobDecoder
        var offset: Int64 = 0

        init(inner: any BlobDecoder) { self.inner = inner }

        func feed(_ stored: UnsafeRawBufferPointer, _ sink: (UnsafeRawBufferPointer) throws -> Void) throws {
            var bytes = [UInt8](stored)
            MaskingCodec.mask(&bytes, from: offset)
            offset += Int64(bytes.count)
            try bytes.withUnsafeBytes { try inner.feed($0, sink) }
        }

        func finish(_ sink: (UnsafeRawBufferPointer) throws -> Void) throws { try inner.finish(sink) }
    }
}
