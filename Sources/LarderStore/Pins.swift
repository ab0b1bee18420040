import Foundation
import LarderCore
import LarderFileSystem
import Synchronization
import SystemPackage

/// A session's hold on a version: while it exists, `gc` (in any process) does not delete the
/// version. A file under `pins/<id>/<version>/` named after the holder's pid and process start
/// time, so that a pin held by a dead process — or by a new process that reused its pid —
/// expires. Released by `release()` or when the lease is deallocated.
package final class PinLease: Sendable {
    /// The package whose version is held.
    package let id: PackageID
    /// The version gc keeps while the lease is held.
    package let version: SemanticVersion
    let path: FilePath
    /// Whether `release()` ran.
    private let released = Mutex(false)

    init(id: PackageID, version: SemanticVersion, path: FilePath) {
        self.id = id
        self.version = version
        self.path = path
    }

    /// Gives the version back to gc. Idempotent.
    package func release() {
        let first = released.withLock { released in
            defer { released = true }
            return !released
        }
        if first { try? SystemCalls.unlink(path) }
    }

    deinit { release() }
}

/// Reading and writing pins.
enum Pins {
    /// This process's start time (clock ticks since boot, /proc/<pid>/stat field 22), used with
    /// the pid to tell a live holder from a reused pid. `0` where /proc is not available.
    static func startTime(of pid: Int32) -> UInt64 {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = text.lastIndex(of: ")")
        else { return 0 }
        let fields = text[text.index(after: close)...].split(separator: " ")
        // fields[0] is field 3 (state); field 22 (starttime) is fields[19].
        guard fields.count > 19, let t = UInt64(fields[19]) else { return 0 }
        return t
    }

    static let ownStart = startTime(of: getpid())

    /// Creates a pin file for `version` of `id`.
    static func create(_ layout: SandboxLayout, _ id: PackageID, _ version: SemanticVersion) throws(FileSystemError)
        -> PinLease
    {
        let dir = layout.pinDirectory(id, version)
        try AtomicFile.makeDirectories(dir)
        let name = "\(getpid())-\(ownStart)-\(UInt32.random(in: 0...UInt32.max))"
        let path = dir.joined(name)
        let fd = try SystemCalls.open(
            path, .writeOnly, options: [.create, .exclusiveCreate],
            permissions: [.ownerReadWrite, .groupRead, .otherRead])
        try SystemCalls.close(fd, path: path)
        return PinLease(id: id, version: version, path: path)
    }

    /// Whether a live process pins `version` of `id`; pins of dead processes are removed.
    static func isPinned(_ layout: SandboxLayout, _ id: PackageID, _ version: SemanticVersion) -> Bool {
        let dir = layout.pinDirectory(id, version)
        guard let entries = try? SystemCalls.listDirectory(dir) else { return false }
        var live = false
        for name in entries.map(\.string) {
            let parts = name.split(separator: "-")
            guard parts.count == 3, let pid = Int32(parts[0]), let start = UInt64(parts[1]) else { continue }
            if isAlive(pid: pid, start: start) {
                live = true
            } else {
                try? SystemCalls.unlink(dir.joined(name))
            }
        }
        if !live { try? SystemCalls.rmdir(dir) }
        return live
    }

    static func isAlive(pid: Int32, start: UInt64) -> Bool {
        guard pid > 0, kill(pid, 0) == 0 || errno == EPERM else { return false }
        let now = startTime(of: pid)
        return start == 0 || now == 0 || now == start
    }
}
