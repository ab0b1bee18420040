import Foundation
import LarderCore
import SystemPackage

/// What kind of file a path names.
package enum FileKind: Sendable, Hashable {
    /// A regular file.
    case regular
    /// A directory.
    case directory
    /// A symbolic link (seen only by the calls that do not follow links).
    case symbolicLink
    /// A FIFO (named pipe).
    case fifo
    /// A socket.
    case socket
    /// A character device.
    case characterDevice
    /// A block device.
    case blockDevice
    /// A type this platform reports that Larder does not know.
    case unknown
}

/// A point in file time: seconds and nanoseconds since 1970.
package struct FileTime: Sendable, Hashable, Comparable {
    /// Whole seconds since 1970-01-01T00:00:00Z.
    package var seconds: Int64
    /// Nanoseconds into that second.
    package var nanoseconds: Int32

    /// Creates a time.
    package init(seconds: Int64, nanoseconds: Int32 = 0) {
        self.seconds = seconds
        self.nanoseconds = nanoseconds
    }

    /// Earlier first.
    package static func < (l: FileTime, r: FileTime) -> Bool {
        (l.seconds, l.nanoseconds) < (r.seconds, r.nanoseconds)
    }
}

/// What `stat`, `lstat` and `fstat` report, in the fields Larder uses.
package struct FileStatus: Sendable, Hashable {
    /// The type of file.
    package var kind: FileKind
    /// The permission bits (and set-id and sticky bits), without the type.
    package var permissions: FilePermissions
    /// Length in bytes.
    package var size: Int64
    /// The device holding it.
    package var device: UInt64
    /// Its inode number on that device.
    package var inode: UInt64
    /// How many names it has.
    package var linkCount: UInt64
    /// When its content last changed.
    package var modificationTime: FileTime

    /// Creates a status (for tests and fakes; the funnel fills it from the system).
    package init(
        kind: FileKind, permissions: FilePermissions, size: Int64, device: UInt64, inode: UInt64, linkCount: UInt64,
        modificationTime: FileTime
    ) {
        self.kind = kind
        self.permissions = permissions
        self.size = size
        self.device = device
        self.inode = inode
        self.linkCount = linkCount
        self.modificationTime = modificationTime
    }

    /// An empty status, overwritten by a successful call.
    static let none = FileStatus(
        kind: .unknown, permissions: [], size: 0, device: 0, inode: 0, linkCount: 0,
        modificationTime: FileTime(seconds: 0))
}

/// A name found in a directory (never `.` or `..`), with its bytes exactly as on disk.
package struct DirectoryEntry: Sendable, Hashable {
    /// The name's bytes as stored (any bytes but `/` and NUL, which need not be UTF-8).
    package var bytes: [UInt8]

    /// Creates an entry from a name's bytes.
    package init(bytes: [UInt8]) {
        self.bytes = bytes
    }

    /// The name as a path component. (Made on each use: a listing keeps bytes, since a
    /// component costs swift-system a parse and its checks; see FilePath+Bytes.swift.)
    package var name: FilePath.Component {
        // A directory's entry names are non-empty and hold no `/`, so they are components;
        // the fallback is never taken.
        FilePath(bytes: bytes).lastComponent ?? "_"
    }

    /// The name as a string (bytes that are not UTF-8 are repaired, so it may name nothing).
    package var string: String { String(decoding: bytes, as: UTF8.self) }
}

/// What `flock` does.
package enum LockOperation: Sendable, Hashable {
    /// Takes a shared lock.
    case shared
    /// Takes an exclusive lock.
    case exclusive
    /// Releases the lock.
    case unlock
}

/// The system-call funnel: every file-system call Larder makes, each run through one checked
/// helper, so that `EINTR` is retried, a failure is a `FileSystemError(operation, path, errno)`,
/// and tests can inject faults (`FaultInjector`).
///
/// Descriptors are swift-system `FileDescriptor` values, but their own methods are not used:
/// they would bypass the funnel. Every call that takes a descriptor also takes the `path` it was
/// opened with, which names it in errors and matches it against fault scopes. Every descriptor
/// is opened close-on-exec. Short reads and writes are the callers' business, except in
/// `writeAll` and the whole-file helpers.
