import Foundation
import SystemPackage

/// Why a lock could not be taken.
package enum FileLockError: Error, Sendable, Equatable {
    /// Another process holds it (its pid when it wrote one).
    case locked(holderPID: Int32?, waitedSeconds: Double)
    /// Opening or locking the lock file failed.
    case io(FileSystemError)
}

/// A writers' lock: `flock` on a lock file whose content names the holder's pid. A second
/// writer polls until `timeout`, then fails naming the holder. Released on `unlock()` or when the
/// process dies (the kernel drops flocks with the descriptor). Used for the sandbox
/// (`<root>/.lock`) and for publishing into a repository.
package final class FileLock {
    private var fd: FileDescriptor?
    private let path: FilePath

    /// Takes the lock at `path`, waiting up to `timeout` seconds.
    package init(path: FilePath, timeout: Double) throws(FileLockError) {
        self.path = path
        let f: FileDescriptor
        do {
            f = try SystemCalls.open(
                path, .readWrite, options: [.create], permissions: [.ownerReadWrite, .groupRead, .otherRead])
        } catch {
            throw .io(error)
        }
        let start = Date()
        while true {
            let acquired: Bool
            do { acquired = try SystemCalls.flock(f, .exclusive, nonBlocking: true, path: path) } catch {
                try? SystemCalls.close(f, path: path)
                throw .io(error)
            }
            if acquired { break }
            let waited = Date().timeIntervalSince(start)
            if waited >= timeout {
                let holder = Self.readPID(f, path)
                try? SystemCalls.close(f, path: path)
                throw .locked(holderPID: holder, waitedSeconds: (waited * 10).rounded() / 10)
            }
            usleep(20_000)  // 20 ms between tries; a plain sleep, no thread of its own
        }
        fd = f
        let text = Array("\(getpid())\n".utf8)
        try? SystemCalls.ftruncate(f, to: 0, path: path)
        try? text.withUnsafeBytes { raw in
            Result { () throws(FileSystemError) in try SystemCalls.writeAll(f, raw, at: 0, path: path) }
        }.get()
    }

    private static func readPID(_ fd: FileDescriptor, _ path: FilePath) -> Int32? {
        var buf = [UInt8](repeating: 0, count: 32)
        let n = (try? SystemCalls.pread(fd, into: &buf, at: 0, path: path)) ?? 0
        guard n > 0 else { return nil }
        return Int32(String(decoding: buf[0..<n], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// Releases the lock (idempotent).
    package func unlock() {
        guard let f = fd else { return }
        try? SystemCalls.ftruncate(f, to: 0, path: path)
        _ = try? SystemCalls.flock(f, .unlock, path: path)
        try? SystemCalls.close(f, path: path)
        fd = nil
    }

    deinit { unlock() }
}
