import Foundation
import LarderCore
import LarderFileSystem
import Synchronization
import SystemPackage

/// A download in progress at `downloads/<name>.part`: resumes from what it holds (re-hashing
/// those bytes so the final digest covers the whole content), hashes while appending, stops at
/// the declared size, and on `finish()` checks size and SHA-256 — a mismatch deletes the file so
/// the next attempt starts clean.
struct PartFile {
    let path: FilePath
    let url: String
    let expecting: Expectation
    private(set) var have: Int64 = 0
    /// How many bytes an earlier attempt had left when this one opened the file (0: a new
    /// download). A mismatch over such bytes may be theirs — a power cut can leave a part file
    /// of the right size holding zeros — so the callers fetch it all once more.
    private(set) var resumedFrom: Int64 = 0
    private var hasher = SHA256Stream()
    private var fd: FileDescriptor
    /// Told of every byte written, so that an extraction can follow the download.
    private let watch: GrowingPart?

    init(_ path: FilePath, url: String, expecting: Expectation, watch: GrowingPart? = nil) throws(FetchError) {
        self.path = path
        self.url = url
        self.expecting = expecting
        self.watch = watch
        do {
            fd = try SystemCalls.open(path, .readWrite, options: [.create], permissions: [.ownerReadWrite, .groupRead])
        } catch {
            throw .file(error)
        }
        // Re-hash what an earlier attempt left (and drop it if it is already too long; a read
        // error ends the re-hash there, and the bytes after are fetched again).
        // A buffer only as large as what is there to re-hash (none for a new part file: a sync
        // of many small objects must not zero 256 KiB for each).
        let existing = (try? SystemCalls.fstat(fd, path: path).size) ?? 0
        var buffer = [UInt8](repeating: 0, count: Int(min(Int64(256 << 10), max(0, existing))))
        while !buffer.isEmpty {
            let n = (try? SystemCalls.read(fd, into: &buffer, path: path)) ?? 0
            if n == 0 { break }
            buffer.withUnsafeBytes { hasher.update(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            have += Int64(n)
        }
        if have > (expecting.size ?? expecting.limit) { reset() }
        resumedFrom = have
        watch?.advance(to: have)
    }

    /// The total the transfer must reach, when declared.
    var total: Int64? { expecting.size }

    /// Starts over (the server ignored our Range, or the bytes were wrong).
    mutating func reset() {
        try? SystemCalls.ftruncate(fd, to: 0, path: path)
        _ = try? SystemCalls.seek(fd, to: 0, path: path)
        have = 0
        hasher = SHA256Stream()
        watch?.restart()
    }

    /// Appends bytes, refusing anything past the declared size or the limit.
    mutating func append(_ bytes: UnsafeRawBufferPointer) throws(FetchError) {
        let cap = expecting.size ?? expecting.limit
        if have + Int64(bytes.count) > cap {
            throw .tooLarge(url: url, limit: cap)
        }
        do { try SystemCalls.writeAll(fd, bytes, at: have, path: path) } catch { throw .file(error) }
        hasher.update(bytes)
        have += Int64(bytes.count)
        watch?.advance(to: have)
    }

    /// Appends the bytes of `data` (as `append(_:)` of a buffer).
    mutating func append(_ data: Data) throws(FetchError) {
        try data.withUnsafeBytes { raw in Result { () throws(FetchError) in try append(raw) } }.get()
    }

    /// Whether `error` (from `finish()`) is a mismatch over bytes an earlier attempt left, with
    /// the part file now empty: worth one fresh transfer before the download is called bad.
    mutating func shouldRefetch(after error: FetchError) -> Bool {
        guard case .hashMismatch = error, resumedFrom > 0 else { return false }
        resumedFrom = 0
        return true
    }

    /// Checks the complete content; a wrong one is deleted.
    mutating func finish() throws(FetchError) {
        if let size = expecting.size, have != size {
            throw .truncated(url: url, expected: size, got: have)
        }
        if let want = expecting.sha256 {
            let got = hasher.finish()
            if got != want {
                reset()
                throw .hashMismatch(url: url, expected: want, got: got)
            }
        }
        do { try SystemCalls.fsync(fd, path: path) } catch { throw .file(error) }
        watch?.completed()
    }

    func close() { try? SystemCalls.close(fd, path: path) }
}

/// A part file shared with a request's engine (its delegate queue or task, one request at a
/// time) and, between requests, the caller.
final class PartFileBox: Sendable {
    /// The part file.
    let part: Mutex<PartFile>
    init(_ part: consuming sending PartFile) { self.part = Mutex(part) }
}
