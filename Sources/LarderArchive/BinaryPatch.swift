import CZstd
import Foundation

/// Why a patch could not be made or applied.
package enum PatchError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A file is larger than patches are made for (`BinaryPatch.maxFileSize`).
    case tooLarge(Int64)
    /// libzstd refused (its message).
    case zstd(String)
    /// The patch's result is longer than the target it promises.
    case resultTooLong(limit: Int64)
    /// The patch ended before its frame did (truncated or not a patch).
    case truncated
    /// The consumer of the result failed (its message).
    case output(String)

    /// What went wrong, for a person.
    package var description: String {
        switch self {
        case .tooLarge(let n): "a file of \(n) bytes is larger than patches are made for (\(BinaryPatch.maxFileSize))"
        case .zstd(let m): "zstd: \(m)"
        case .resultTooLong(let limit): "the patch's result is longer than the \(limit) bytes of its target"
        case .truncated: "the patch ends before its last frame does (truncated, or not a zstd patch)"
        case .output(let m): "writing the result failed: \(m)"
        }
    }
}

/// Binary patches with zstd's patch-from mode: the base content is the compression's prefix
/// (a dictionary of raw bytes), so a target that is a small edit of its base compresses to the
/// edit. What `zstd --patch-from=BASE TARGET` makes, through libzstd.
package enum BinaryPatch {
    /// The largest base or target patched (64 MiB; larger files are fetched as objects).
    package static let maxFileSize: Int64 = 64 << 20

    /// The window a patch of a base and a target of these sizes needs (log2): both must fit.
    static func windowLog(_ base: Int, _ target: Int) -> Int32 {
        let need = max(base + target, 1 << 10)
        var log: Int32 = 10
        while (1 << Int(log)) < need { log += 1 }
        return min(max(log, 10), 27)
    }

    /// A patch turning `base` into `target` (zstd level `level`, long-distance matching, a
    /// window that covers both). Deterministic for the same inputs and libzstd version.
    package static func make(base: Data, target: Data, level: Int32 = 19) throws(PatchError) -> Data {
        do { return try makeUntyped(base: base, target: target, level: level) } catch let e as PatchError {
            throw e
        } catch {
            throw .zstd("\(error)")
        }
    }

    static func makeUntyped(base: Data, target: Data, level: Int32) throws -> Data {
        guard Int64(base.count) <= maxFileSize else { throw PatchError.tooLarge(Int64(base.count)) }
        guard Int64(target.count) <= maxFileSize else { throw PatchError.tooLarge(Int64(target.count)) }
        guard let cctx = ZSTD_createCCtx() else { throw PatchError.zstd("cannot create a compression context") }
        defer { ZSTD_freeCCtx(cctx) }
        try check(ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level))
        try check(ZSTD_CCtx_setParameter(cctx, ZSTD_c_windowLog, windowLog(base.count, target.count)))
        try check(ZSTD_CCtx_setParameter(cctx, ZSTD_c_enableLongDistanceMatching, 1))
        try check(ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1))
        let bound = ZSTD_compressBound(target.count)
        var out = Data(count: bound)
        let written: Int = try base.withUnsafeBytes { (b: UnsafeRawBufferPointer) throws -> Int in
            try check(ZSTD_CCtx_refPrefix(cctx, b.baseAddress, b.count))
            return try target.withUnsafeBytes { (t: UnsafeRawBufferPointer) throws -> Int in
                try out.withUnsafeMutableBytes { (o: UnsafeMutableRawBufferPointer) throws -> Int in
                    try check(ZSTD_compress2(cctx, o.baseAddress, o.count, t.baseAddress, t.count))
                }
            }
        }
        out.count = written
        return out
    }

    /// Applies `patch` to `base`, handing the result to `write` in chunks of at most 64 KiB —
    /// memory holds the base, the patch and one chunk, never the whole result. Throws when the
    /// result would pass `limit` bytes, when the patch is damaged or truncated (its frame
    /// checksum is checked), or when `write` throws.
    package static func apply(
        patch: Data, base: Data, limit: Int64, write sink: (UnsafeRawBufferPointer) throws -> Void
    ) throws(PatchError) {
        do { try applyUntyped(patch: patch, base: base, limit: limit, sink: sink) } catch let e as PatchError {
            throw e
        } catch {
            throw .output("\(error)")
        }
    }

    static func applyUntyped(
        patch: Data, base: Data, limit: Int64, sink: (UnsafeRawBufferPointer) throws -> Void
    ) throws {
        guard let dctx = ZSTD_createDCtx() else { throw PatchError.zstd("cannot create a decompression context") }
        defer { ZSTD_freeDCtx(dctx) }
        try check(ZSTD_DCtx_setParameter(dctx, ZSTD_d_windowLogMax, 27))
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        var total: Int64 = 0
        var lastHint = 1
        try base.withUnsafeBytes { (b: UnsafeRawBufferPointer) throws in
            try check(ZSTD_DCtx_refPrefix(dctx, b.baseAddress, b.count))
            try patch.withUnsafeBytes { (p: UnsafeRawBufferPointer) throws in
                var input = ZSTD_inBuffer(src: p.baseAddress, size: p.count, pos: 0)
                repeat {
                    let (hint, produced): (Int, Int) = try chunk.withUnsafeMutableBytes {
                        (c: UnsafeMutableRawBufferPointer) throws -> (Int, Int) in
                        var output = ZSTD_outBuffer(dst: c.baseAddress, size: c.count, pos: 0)
                        let h = try check(ZSTD_decompressStream(dctx, &output, &input))
                        return (h, output.pos)
                    }
                    lastHint = hint
                    if produced > 0 {
                        total += Int64(produced)
                        if total > limit { throw PatchError.resultTooLong(limit: limit) }
                        do {
                            try chunk.withUnsafeBytes { try sink(UnsafeRawBufferPointer(rebasing: $0[0..<produced])) }
                        } catch {
                            throw PatchError.output("\(error)")
                        }
                    }
                    // Stop when the input is used up and the last call filled no whole chunk.
                    if input.pos == input.size && produced < chunk.count { break }
                } while true
            }
        }
        // A non-zero hint at the end: the frame is not complete.
        if lastHint != 0 { throw PatchError.truncated }
    }

    /// Applies a patch and returns the whole result (for small files and tests).
    package static func apply(patch: Data, base: Data, limit: Int64) throws(PatchError) -> Data {
        var out = Data()
        try apply(patch: patch, base: base, limit: limit) { out.append(contentsOf: $0) }
        return out
    }

    @discardableResult
    static func check(_ code: Int) throws(PatchError) -> Int {
        if ZSTD_isError(code) != 0 { throw .zstd(String(cString: ZSTD_getErrorName(code))) }
        return code
    }
}
