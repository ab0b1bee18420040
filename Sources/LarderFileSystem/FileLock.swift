import Foundation
import SystemPackage

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Why a lock could not be taken.
public enum FileLockError: Error, Sendable, Equatable {
    /// Another process holds it (its pid when it wrote one).
    case locked(holderPID: Int32?, waitedSeconds: Double)
    case io(FileSystemError)
}

/// A writers' lock: `flock` on a lock file whose content names the holder's pid. A second
/// writer polls until `timeout`, then fails naming the holder. Released on `unlock()` or when the
/// process dies (the kernel drops flocks with the descriptor). Used for the sandbox
/// (`<root>/.lock`) and for publishing into a repository.
public final class FileLock {
    private var fd: Int32

    /// Takes the lock at `path`, waiting up to `timeout` seconds.
    public init(path: FilePath, timeout: Double) throws(FileLockError) {
        let f = open(path.string, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard f >= 0 else { throw .io(FileSystemError("open", path, Errno(rawValue: errno))) }
        let start = Date()
        while flock(f, LOCK_EX | LOCK_NB) != 0 {
            let e = errno
            guard e == EWOULDBLOCK || e == EINTR else {
                close(f)
                throw .io(FileSystemError("flock", path, Errno(rawValue: e)))
            }
            let waited = Date().timeIntervalSince(start)
            if waited >= timeout {
                let holder = Self.readPID(f)
                close(f)
                throw .locked(holderPID: holder, waitedSeconds: (waited * 10).rounded() / 10)
            }
            usleep(20_000)
        }
        fd = f
        let text = Array("\(getpid())\n".utf8)
        _ = ftruncate(f, 0)
        _ = text.withUnsafeBytes { pwrite(f, $0.baseAddress, $0.count, 0) }
    }

    private static func readPID(_ fd: Int32) -> Int32? {
        var buf = [UInt8](repeating: 0, count: 32)
        let n = buf.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard n > 0 else { return nil }
        return Int32(String(decoding: buf[0..<n], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// Releases the lock (idempotent).
    public func unlock() {
        guard fd >= 0 else { return }
        _ = ftruncate(fd, 0)
        flock(fd, LOCK_UN)
        close(fd)
        fd = -1
    }

    deinit { unlock() }
}
