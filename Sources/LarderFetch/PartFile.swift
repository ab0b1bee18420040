import Foundation
import LarderCore
import LarderFileSystem
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
            fd = try FileDescriptor.open(path, .readWrite, options: [.create], permissions: [.ownerReadWrite, .groupRead])
        } catch {
            throw .io("\(path): \(error)")
        }
        // Re-hash what an earlier attempt left (and drop it if it is already too long).
        var buffer = [UInt8](repeating: 0, count: 256 << 10)
        while true {
            let n = (try? buffer.withUnsafeMutableBytes { try fd.read(into: $0) }) ?? 0
            if n == 0 { break }
            buffer.withUnsafeBytes { hasher.update(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            have += Int64(n)
        }
        if have > (expecting.size ?? expecting.limit) { reset() }
        watch?.advance(to: have)
    }

    /// The total the transfer must reach, when declared.
    var total: Int64? { expecting.size }

    /// Starts over (the server ignored our Range, or the bytes were wrong).
    mutating func reset() {
        _ = try? fd.resize(to: 0)
        _ = try? fd.seek(offset: 0, from: .start)
        have = 0
        hasher = SHA256Stream()
        watch?.restart()
    }

    /// Appends bytes, refusing anything past the declared size or the limit.
    mutating func append(_ data: Data) throws(FetchError) {
        let cap = expecting.size ?? expecting.limit
        if have + Int64(data.count) > cap {
            throw .tooLarge(url: url, limit: cap)
        }
        do {
            _ = try data.withUnsafeBytes { try fd.writeAll(toAbsoluteOffset: have, $0) }
        } catch {
            throw .io("\(path): \(error)")
        }
        data.withUnsafeBytes { hasher.update($0) }
        have += Int64(data.count)
        watch?.advance(to: have)
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
        do { try AtomicFile.sync(fd, path: path) } catch { throw .io("\(error)") }
        watch?.completed()
    }

    func close() { try? fd.close() }
}
