import CZlib
import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

/// Errors of the gzip codec used for repository objects.
package enum GzipError: Error, Sendable, Equatable, CustomStringConvertible {
    /// zlib refused the stream.
    case zlib(code: Int32, message: String)
    /// The inflated content is longer than allowed.
    case tooLarge(limit: Int64)
    /// The stream ended before the gzip trailer.
    case truncated
    /// Bytes follow the end of the gzip member.
    case trailingData
    /// Reading or writing a file failed.
    case io(FileSystemError)

    /// What is wrong with the stream (or the file error), for an error message.
    package var description: String {
        switch self {
        case .zlib(let c, let m): "not a valid gzip stream (zlib \(c): \(m))"
        case .tooLarge(let l): "inflates to more than \(l) bytes"
        case .truncated: "the gzip stream is truncated"
        case .trailingData: "data follows the end of the gzip stream"
        case .io(let e): e.description
        }
    }
}

/// gzip (RFC 1952) through zlib: a fixed header (no name, mtime 0), level 9, so the same
/// content gives the same object bytes with the same zlib. Callers go through `BytePipeline`
/// (`GzipCodec`), never here.
package enum Gzip {
    private static let chunk = 256 << 10

    /// Compresses the file at `source` into `output` atomically; returns the size and SHA-256 of
    /// the content read (so the caller can check it is what it expected) and the compressed size.
    @discardableResult
    package static func compressFile(
        _ source: FilePath, to output: FilePath
    ) throws(GzipError) -> (size: Int64, sha256: SHA256Digest, compressedSize: Int64) {
        var produced: Int64 = 0
        var hasher = SHA256Stream()
        do {
            let src = try SystemCalls.open(source, .readOnly, options: [.noFollow])
            defer { try? SystemCalls.close(src, path: source) }
            try AtomicFile.replace(output, wrapping: { $0 as any Error }) { out, temp in
                var stream = z_stream()
                var r = deflateInit2_(
                    &stream, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY, zlibVersion(),
                    Int32(MemoryLayout<z_stream>.size))
                guard r == Z_OK else { throw GzipError.zlib(code: r, message: "deflateInit2") }
                defer { deflateEnd(&stream) }
                var input = [UInt8](repeating: 0, count: chunk)
                var outBuf = [UInt8](repeating: 0, count: chunk)
                var finished = false
                while !finished {
                    let n = try SystemCalls.read(src, into: &input, path: source)
                    input.withUnsafeBytes { hasher.update(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
                    let flush = n == 0 ? Z_FINISH : Z_NO_FLUSH
                    try input.withUnsafeMutableBufferPointer { inPtr in
                        stream.next_in = inPtr.baseAddress
                        stream.avail_in = UInt32(n)
                        repeat {
                            try outBuf.withUnsafeMutableBufferPointer { outPtr in
                                stream.next_out = outPtr.baseAddress
                                stream.avail_out = UInt32(chunk)
                                r = deflate(&stream, flush)
                                guard r != Z_STREAM_ERROR else { throw GzipError.zlib(code: r, message: "deflate") }
                                let have = chunk - Int(stream.avail_out)
                                if have > 0 {
                                    let deflated = UnsafeRawBufferPointer(start: outPtr.baseAddress, count: have)
                                    try SystemCalls.writeAll(out, deflated, path: temp)
                                    produced += Int64(have)
                                }
                            }
                        } while stream.avail_out == 0
                    }
                    if flush == Z_FINISH {
                        guard r == Z_STREAM_END else {
                            throw GzipError.zlib(code: r, message: "deflate did not finish")
                        }
                        finished = true
                    }
                }
            }
        } catch let e as GzipError {
            throw e
        } catch let e as FileSystemError {
            throw .io(e)
        } catch {
            // The body throws only the two types above; anything else is named, not generalised.
            throw .zlib(code: Z_ERRNO, message: "\(output): \(error)")
        }
        return (hasher.count, hasher.finish(), produced)
    }

    /// Inflates a gzip stream fed in chunks, handing the inflated bytes to a closure.
    package final class Inflater {
        private var stream = z_stream()
        private var out: [UInt8]
        private var ended = false
        /// Inflated bytes so far.
        package private(set) var produced: Int64 = 0
        private let limit: Int64

        /// Starts a gzip-only inflater that refuses to produce more than `limit` bytes.
        package init(limit: Int64) throws(GzipError) {
            self.limit = limit
            // Room for the whole content when it is small (one object among hundreds), never more
            // than 256 KiB; one byte more than the limit lets an overlong stream show itself.
            out = [UInt8](repeating: 0, count: Int(min(Int64(256 << 10), max(4096, limit + 1))))
            let r = inflateInit2_(&stream, 15 + 16, zlibVersion(), Int32(MemoryLayout<z_stream>.size))
            guard r == Z_OK else { throw .zlib(code: r, message: "inflateInit2") }
        }

        deinit { inflateEnd(&stream) }

        /// Whether the gzip trailer has been read.
        package var isFinished: Bool { ended }

        /// Feeds compressed bytes; `sink` receives inflated chunks. Call `drain` after the last
        /// feed so that output zlib still holds is delivered.
        package func feed(_ input: UnsafeRawBufferPointer, _ sink: (UnsafeRawBufferPointer) throws -> Void) throws {
            guard input.count > 0 else { return }
            if ended { throw GzipError.trailingData }
            stream.next_in = UnsafeMutablePointer(mutating: input.baseAddress?.assumingMemoryBound(to: UInt8.self))
            stream.avail_in = UInt32(input.count)
            try pump(sink)
            if ended && stream.avail_in > 0 { throw GzipError.trailingData }
        }

        /// Delivers output zlib still holds after the last input (a full output buffer can end
        /// exactly where more output is pending).
        package func drain(_ sink: (UnsafeRawBufferPointer) throws -> Void) throws {
            guard !ended else { return }
            stream.avail_in = 0
            try pump(sink)
        }

        /// Inflates until the stream ends, or the input is used up and the output was not full
        /// (zlib has nothing more to give without more input).
        private func pump(_ sink: (UnsafeRawBufferPointer) throws -> Void) throws {
            let size = out.count
            while !ended {
                var r: Int32 = Z_OK
                var have = 0
                out.withUnsafeMutableBufferPointer { o in
                    stream.next_out = o.baseAddress
                    stream.avail_out = UInt32(size)
                    r = inflate(&stream, Z_NO_FLUSH)
                    have = size - Int(stream.avail_out)
                }
                if r == Z_STREAM_END {
                    ended = true
                } else if r == Z_BUF_ERROR {
                    // No progress possible: zlib needs more input.
                    if stream.avail_in > 0 { throw GzipError.zlib(code: r, message: "no progress with input left") }
                } else if r != Z_OK {
                    let msg = stream.msg.map { String(cString: $0) } ?? "inflate"
                    throw GzipError.zlib(code: r, message: msg)
                }
                produced += Int64(have)
                if produced > limit { throw GzipError.tooLarge(limit: limit) }
                if have > 0 { try out.withUnsafeBytes { try sink(UnsafeRawBufferPointer(rebasing: $0[0..<have])) } }
                if r == Z_BUF_ERROR || (stream.avail_in == 0 && have < size) { break }
            }
        }
    }

    /// Inflates a whole gzip stream held in memory, refusing more than `limit` bytes out, a
    /// stream that does not end, and bytes after its end.
    package static func decompress(_ data: Data, limit: Int) throws -> Data {
        let inflater = try Inflater(limit: Int64(limit))
        var out = Data()
        try data.withUnsafeBytes { input in
            try inflater.feed(input) { out.append(contentsOf: $0) }
            try inflater.drain { out.append(contentsOf: $0) }
        }
        guard inflater.isFinished else { throw GzipError.truncated }
        return out
    }

    /// Compresses bytes as `compressFile` does (level 9, no name, mtime 0): the same bytes give
    /// the same gzip.
    package static func compress(_ data: Data) throws -> Data {
        var stream = z_stream()
        var r = deflateInit2_(
            &stream, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY, zlibVersion(), Int32(MemoryLayout<z_stream>.size))
        guard r == Z_OK else { throw GzipError.zlib(code: r, message: "deflateInit2") }
        defer { deflateEnd(&stream) }
        var out = Data()
        var buffer = [UInt8](repeating: 0, count: chunk)
        try data.withUnsafeBytes { (input: UnsafeRawBufferPointer) throws in
            stream.next_in = UnsafeMutablePointer(mutating: input.baseAddress?.assumingMemoryBound(to: UInt8.self))
            stream.avail_in = UInt32(input.count)
            repeat {
                let size = buffer.count
                buffer.withUnsafeMutableBufferPointer { o in
                    stream.next_out = o.baseAddress
                    stream.avail_out = UInt32(size)
                    r = deflate(&stream, Z_FINISH)
                }
                guard r == Z_OK || r == Z_STREAM_END || r == Z_BUF_ERROR else {
                    throw GzipError.zlib(code: r, message: "deflate")
                }
                out.append(contentsOf: buffer[0..<(size - Int(stream.avail_out))])
            } while r != Z_STREAM_END
        }
        return out
    }
}
