import Foundation
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
    /// The name as a path component (any bytes but `/` and NUL).
    package var name: FilePath.Component

    /// Creates an entry.
    package init(name: FilePath.Component) {
        self.name = name
    }

    /// The name's bytes as stored (which need not be UTF-8).
    package var bytes: [UInt8] {
        name.withPlatformString { p in
            var out: [UInt8] = []
            var i = 0
            while p[i] != 0 {
                out.append(UInt8(bitPattern: p[i]))
                i += 1
            }
            return out
        }
    }

    /// The name as a string (bytes that are not UTF-8 are repaired, so it may name nothing).
    package var string: String { name.string }
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
package enum SystemCalls {
    // MARK: descriptors

    /// Opens `path` (close-on-exec); a failure to create with `.exclusiveCreate` is `create`.
    package static func open(
        _ path: FilePath, _ mode: FileDescriptor.AccessMode, options: FileDescriptor.OpenOptions = [],
        permissions: FilePermissions = [.ownerReadWrite, .groupRead, .otherRead]
    ) throws(FileSystemError) -> FileDescriptor {
        let flags = mode.rawValue | options.rawValue | CFlags.closeOnExec
        let fd = try checked(.open, path, operation: options.contains(.exclusiveCreate) ? "create" : nil) {
            system_open(path, flags, permissions.rawValue)
        }
        return FileDescriptor(rawValue: fd)
    }

    /// Opens `name` relative to the directory open as `directory` (`openat`), which was opened as
    /// `directoryPath`; a relative name never escapes through a link when `.noFollow` is given
    /// for its last component and its parents were created by the caller.
    package static func open(
        _ name: FilePath, in directory: FileDescriptor, directoryPath: FilePath, _ mode: FileDescriptor.AccessMode,
        options: FileDescriptor.OpenOptions = [],
        permissions: FilePermissions = [.ownerReadWrite, .groupRead, .otherRead]
    ) throws(FileSystemError) -> FileDescriptor {
        let flags = mode.rawValue | options.rawValue | CFlags.closeOnExec
        let fd = try checked(
            .open, directoryPath.pushing(name), operation: options.contains(.exclusiveCreate) ? "create" : nil
        ) {
            system_openat(directory.rawValue, name, flags, permissions.rawValue)
        }
        return FileDescriptor(rawValue: fd)
    }

    /// Closes a descriptor. Not retried on `EINTR`, which counts as closed: Linux has released
    /// the descriptor by then, and a retry could close one another thread just opened.
    package static func close(_ fd: FileDescriptor, path: FilePath) throws(FileSystemError) {
        do {
            _ = try checked(.close, path, retryOnInterrupt: false) { system_close(fd.rawValue) }
        } catch  where error.errno == .interrupted {
            return
        }
    }

    /// A pipe, both ends closed on exec: what is written to `write` is read from `read`.
    package static func pipe() throws(FileSystemError) -> (read: FileDescriptor, write: FileDescriptor) {
        var fds: [Int32] = [-1, -1]
        _ = try fds.withUnsafeMutableBufferPointer { buffer in
            Result { () throws(FileSystemError) in
                try checked(.pipe, "pipe") { buffer.baseAddress.map(system_pipe) ?? -1 }
            }
        }.get()
        system_setCloseOnExec(fds[0])
        system_setCloseOnExec(fds[1])
        return (FileDescriptor(rawValue: fds[0]), FileDescriptor(rawValue: fds[1]))
    }

    /// Reads at most `buffer.count` bytes at the file offset; 0 at the end of the file.
    package static func read(
        _ fd: FileDescriptor, into buffer: UnsafeMutableRawBufferPointer, path: FilePath
    ) throws(FileSystemError) -> Int {
        try checked(.read, path) { system_read(fd.rawValue, buffer) }
    }

    /// Reads at most `buffer.count` bytes at `offset` (the file offset does not move); 0 at the end.
    package static func pread(
        _ fd: FileDescriptor, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64, path: FilePath
    ) throws(FileSystemError) -> Int {
        try checked(.pread, path) { system_pread(fd.rawValue, buffer, offset) }
    }

    /// Reads at most `buffer.count` bytes at the file offset into `buffer` from its start; 0 at the end.
    package static func read(
        _ fd: FileDescriptor, into buffer: inout [UInt8], path: FilePath
    ) throws(FileSystemError) -> Int {
        try buffer.withUnsafeMutableBytes { raw in
            Result { () throws(FileSystemError) in try Self.read(fd, into: raw, path: path) }
        }.get()
    }

    /// Reads at most `buffer.count` bytes at `offset` into `buffer` from its start; 0 at the end.
    package static func pread(
        _ fd: FileDescriptor, into buffer: inout [UInt8], at offset: Int64, path: FilePath
    ) throws(FileSystemError) -> Int {
        try buffer.withUnsafeMutableBytes { raw in
            Result { () throws(FileSystemError) in try Self.pread(fd, into: raw, at: offset, path: path) }
        }.get()
    }

    /// Writes at most `bytes.count` bytes at the file offset; returns how many were written.
    package static func write(
        _ fd: FileDescriptor, _ bytes: UnsafeRawBufferPointer, path: FilePath
    ) throws(FileSystemError) -> Int {
        try checked(
            .write, path,
            lost: {
                // A lost write still moves the offset, as the block that never reached the disk would.
                _ = system_lseek(fd.rawValue, Int64(bytes.count), CFlags.seekCurrent)
                return bytes.count
            }
        ) { system_write(fd.rawValue, bytes) }
    }

    /// Writes at most `bytes.count` bytes at `offset` (the file offset does not move).
    package static func pwrite(
        _ fd: FileDescriptor, _ bytes: UnsafeRawBufferPointer, at offset: Int64, path: FilePath
    ) throws(FileSystemError) -> Int {
        try checked(.pwrite, path, lost: { bytes.count }) { system_pwrite(fd.rawValue, bytes, offset) }
    }

    /// Writes all of `bytes` at the file offset, as many `write` calls as it takes.
    package static func writeAll(
        _ fd: FileDescriptor, _ bytes: UnsafeRawBufferPointer, path: FilePath
    ) throws(FileSystemError) {
        var done = 0
        while done < bytes.count {
            let n = try Self.write(fd, UnsafeRawBufferPointer(rebasing: bytes[done...]), path: path)
            // write(2) writes something or fails when asked for at least one byte.
            guard n > 0 else { throw FileSystemError("write", path, .ioError) }
            done += n
        }
    }

    /// Writes all of `bytes` (a `Data`, an array…) at the file offset.
    package static func writeAll(
        _ fd: FileDescriptor, contentsOf bytes: some ContiguousBytes, path: FilePath
    ) throws(FileSystemError) {
        try bytes.withUnsafeBytes { raw in
            Result { () throws(FileSystemError) in try writeAll(fd, raw, path: path) }
        }.get()
    }

    /// Writes all of `bytes` at `offset`, as many `pwrite` calls as it takes.
    package static func writeAll(
        _ fd: FileDescriptor, _ bytes: UnsafeRawBufferPointer, at offset: Int64, path: FilePath
    ) throws(FileSystemError) {
        var done = 0
        while done < bytes.count {
            let rest = UnsafeRawBufferPointer(rebasing: bytes[done...])
            let n = try Self.pwrite(fd, rest, at: offset + Int64(done), path: path)
            guard n > 0 else { throw FileSystemError("pwrite", path, .ioError) }
            done += n
        }
    }

    /// Writes all of `bytes` (a `Data`, an array…) at `offset`.
    package static func writeAll(
        _ fd: FileDescriptor, contentsOf bytes: some ContiguousBytes, at offset: Int64, path: FilePath
    ) throws(FileSystemError) {
        try bytes.withUnsafeBytes { raw in
            Result { () throws(FileSystemError) in try writeAll(fd, raw, at: offset, path: path) }
        }.get()
    }

    /// Moves the file offset; returns the new one.
    @discardableResult
    package static func seek(
        _ fd: FileDescriptor, to offset: Int64, from origin: FileDescriptor.SeekOrigin = .start, path: FilePath
    ) throws(FileSystemError) -> Int64 {
        try checked(.seek, path) { system_lseek(fd.rawValue, offset, origin.rawValue) }
    }

    /// Flushes a file's data and metadata to stable storage (`F_FULLFSYNC` first on Darwin).
    package static func fsync(_ fd: FileDescriptor, path: FilePath) throws(FileSystemError) {
        _ = try checked(.fsync, path, lost: { 0 }) { system_fsync(fd.rawValue) }
    }

    /// Flushes a file's data (and the metadata needed to read it back) to stable storage.
    package static func fdatasync(_ fd: FileDescriptor, path: FilePath) throws(FileSystemError) {
        _ = try checked(.fdatasync, path, lost: { 0 }) { system_fdatasync(fd.rawValue) }
    }

    /// Whether `syncfs` flushes the whole file system holding a descriptor (Linux). Where it
    /// does not, it syncs only that file, and a caller syncs each file and directory instead.
    package static var syncsWholeFileSystem: Bool { platformSyncsFileSystem }

    /// Flushes the whole file system holding `fd` (one call after writing thousands of files,
    /// instead of an fsync each). Since Linux 5.8 it reports write-back errors.
    package static func syncfs(_ fd: FileDescriptor, path: FilePath) throws(FileSystemError) {
        _ = try checked(.syncfs, path, lost: { 0 }) { system_syncfs(fd.rawValue) }
    }

    /// Sets the file's length (cutting it, or extending it with zeros).
    package static func ftruncate(_ fd: FileDescriptor, to size: Int64, path: FilePath) throws(FileSystemError) {
        _ = try checked(.ftruncate, path) { system_ftruncate(fd.rawValue, size) }
    }

    /// Takes or releases an advisory lock on the whole file; with `nonBlocking`, returns false
    /// (instead of waiting) when another descriptor holds a conflicting lock.
    @discardableResult
    package static func flock(
        _ fd: FileDescriptor, _ operation: LockOperation, nonBlocking: Bool = false, path: FilePath
    ) throws(FileSystemError) -> Bool {
        var op: Int32 =
            switch operation {
            case .shared: CFlags.lockShared
            case .exclusive: CFlags.lockExclusive
            case .unlock: CFlags.lockUnlock
            }
        if nonBlocking { op |= CFlags.lockNonBlocking }
        do {
            _ = try checked(.flock, path) { system_flock(fd.rawValue, op) }
            return true
        } catch  where nonBlocking && (error.errno == .wouldBlock || error.errno == .resourceTemporarilyUnavailable) {
            return false
        }
    }

    /// The status of the file open as `fd`.
    package static func fstat(_ fd: FileDescriptor, path: FilePath) throws(FileSystemError) -> FileStatus {
        var status = FileStatus.none
        _ = try checked(.fstat, path) { system_fstat(fd.rawValue, &status) }
        return status
    }

    /// Maps the first `length` bytes of the file open as `fd`, read-only and shared: another
    /// process's writes show through. The file must hold `length` bytes (a mapping past its end
    /// faults when read). Undo with `unmap`.
    package static func mapReadOnly(
        _ fd: FileDescriptor, length: Int, path: FilePath
    ) throws(FileSystemError) -> UnsafeRawPointer {
        let mapped = try checked(.mmap, path, failed: { $0 == nil }) { system_mmapReadOnly(fd.rawValue, length) }
        guard let mapped else { throw FileSystemError("mmap", path, .invalidArgument) }
        return mapped
    }

    /// Removes a mapping made by `mapReadOnly`.
    package static func unmap(_ address: UnsafeRawPointer, length: Int, path: FilePath) throws(FileSystemError) {
        _ = try checked(.munmap, path) { system_munmap(address, length) }
    }

    // MARK: paths

    /// The status of `path`, following symbolic links.
    package static func stat(_ path: FilePath) throws(FileSystemError) -> FileStatus {
        var status = FileStatus.none
        _ = try checked(.stat, path) { system_stat(path, &status) }
        return status
    }

    /// The bytes still free for this process's writes on the file system holding `path`.
    package static func availableSpace(_ path: FilePath) throws(FileSystemError) -> Int64 {
        var available: Int64 = 0
        _ = try checked(.statvfs, path) { system_statvfs(path, &available) }
        return available
    }

    /// The status of `path` itself (a final symbolic link is not followed).
    package static func lstat(_ path: FilePath) throws(FileSystemError) -> FileStatus {
        var status = FileStatus.none
        _ = try checked(.lstat, path) { system_lstat(path, &status) }
        return status
    }

    /// The status of `name` in the directory open as `directory` (not following a final link).
    package static func lstat(
        _ name: FilePath, in directory: FileDescriptor, directoryPath: FilePath
    ) throws(FileSystemError) -> FileStatus {
        var status = FileStatus.none
        _ = try checked(.lstat, directoryPath.pushing(name)) { system_lstatat(directory.rawValue, name, &status) }
        return status
    }

    /// Renames `from` to `to`, atomically replacing a file there (in one file system).
    package static func rename(_ from: FilePath, to: FilePath) throws(FileSystemError) {
        _ = try checked(.rename, from, to: to) { system_rename(from, to) }
    }

    /// Gives the file at `existing` a second name, `new` (a hard link; fails if `new` exists).
    package static func link(_ existing: FilePath, to new: FilePath) throws(FileSystemError) {
        _ = try checked(.link, existing, to: new) { system_link(existing, new) }
    }

    /// Removes a name (not a directory); a symbolic link is removed, not its target.
    package static func unlink(_ path: FilePath) throws(FileSystemError) {
        _ = try checked(.unlink, path) { system_unlink(path) }
    }

    /// Creates one directory.
    package static func mkdir(
        _ path: FilePath, permissions: FilePermissions = [.ownerReadWriteExecute, .groupReadExecute, .otherReadExecute]
    ) throws(FileSystemError) {
        _ = try checked(.mkdir, path) { system_mkdir(path, permissions.rawValue) }
    }

    /// Creates one directory, `name`, relative to the directory open as `directory` (`mkdirat`).
    package static func mkdir(
        _ name: FilePath, in directory: FileDescriptor, directoryPath: FilePath,
        permissions: FilePermissions = [.ownerReadWriteExecute, .groupReadExecute, .otherReadExecute]
    ) throws(FileSystemError) {
        _ = try checked(.mkdir, directoryPath.pushing(name)) {
            system_mkdirat(directory.rawValue, name, permissions.rawValue)
        }
    }

    /// Removes an empty directory.
    package static func rmdir(_ path: FilePath) throws(FileSystemError) {
        _ = try checked(.rmdir, path) { system_rmdir(path) }
    }

    /// Sets a file's access and modification times (following a final symbolic link).
    package static func setTimes(_ path: FilePath, accessed: FileTime, modified: FileTime) throws(FileSystemError) {
        _ = try checked(.utimens, path) { system_utimensat(path, accessed, modified) }
    }

    // MARK: directories and trees

    /// The names in the directory `path` (a final symbolic link to a directory is followed, as
    /// `opendir` does; the entries themselves are only named, never followed), in the order the
    /// file system returns them. One `opendir` call, then `readdir` calls.
    package static func listDirectory(_ path: FilePath) throws(FileSystemError) -> [DirectoryEntry] {
        let stream = try checked(.opendir, path, failed: { $0 == nil }) { system_opendir(path) }
        guard let stream else { throw FileSystemError("opendir", path, .badFileDescriptor) }
        return try readDirectory(stream, path: path)
    }

    /// The names in the directory open as `fd` (which stays open: it is read through a
    /// descriptor of its own, `openat(fd, ".")`, so a listing never changes `fd`'s position).
    package static func listDirectory(_ fd: FileDescriptor, path: FilePath) throws(FileSystemError) -> [DirectoryEntry]
    {
        let own = try Self.open(".", in: fd, directoryPath: path, .readOnly, options: [.directory])
        let stream: DirectoryStream?
        do { stream = try checked(.opendir, path, failed: { $0 == nil }) { system_fdopendir(own.rawValue) } } catch {
            try? Self.close(own, path: path)  // fdopendir takes the descriptor only when it succeeds
            throw error
        }
        guard let stream else { throw FileSystemError("opendir", path, .badFileDescriptor) }
        return try readDirectory(stream, path: path)
    }

    /// Reads a directory stream to its end and closes it.
    private static func readDirectory(
        _ stream: DirectoryStream, path: FilePath
    ) throws(FileSystemError) -> [DirectoryEntry] {
        defer { _ = try? checked(.close, path, retryOnInterrupt: false) { system_closedir(stream) } }
        var entries: [DirectoryEntry] = []
        while true {
            let entry = try checked(.readdir, path, failed: readdirFailed) { system_readdir(stream) }
            guard let entry else { return entries }
            if let name = component(of: entry) { entries.append(DirectoryEntry(name: name)) }
        }
    }

    /// Removes `path` and, if it is a directory, everything in it. Never follows a symbolic
    /// link: a link (at `path` or inside) is removed itself, and each directory is opened with
    /// `O_NOFOLLOW` and emptied through its descriptor, so a link swapped in meanwhile cannot
    /// lead outside. A missing `path` is not an error (the goal holds); the first other failure
    /// stops the removal and is thrown.
    package static func removeTree(_ path: FilePath) throws(FileSystemError) {
        let status: FileStatus
        do { status = try Self.lstat(path) } catch  where error.errno == .noSuchFileOrDirectory { return }
        guard status.kind == .directory else {
            do { try Self.unlink(path) } catch  where error.errno == .noSuchFileOrDirectory {}
            return
        }
        let dir = try Self.open(path, .readOnly, options: [.directory, .noFollow])
        do {
            try removeContents(of: dir, at: path)
            try Self.close(dir, path: path)
        } catch {
            try? Self.close(dir, path: path)
            throw error
        }
        do { try Self.rmdir(path) } catch  where error.errno == .noSuchFileOrDirectory {}
    }

    /// Empties the directory open as `dir` (at `path`) depth first, through descriptors only.
    private static func removeContents(of dir: FileDescriptor, at path: FilePath) throws(FileSystemError) {
        for entry in try listDirectory(dir, path: path) {
            let name = FilePath(root: nil, [entry.name])
            let full = path.appending(entry.name)
            let status: FileStatus
            do {
                status = try Self.lstat(name, in: dir, directoryPath: path)
            } catch  where error.errno == .noSuchFileOrDirectory {
                continue  // gone meanwhile
            }
            if status.kind == .directory {
                let child = try Self.open(
                    name, in: dir, directoryPath: path, .readOnly, options: [.directory, .noFollow])
                do {
                    try removeContents(of: child, at: full)
                    try Self.close(child, path: full)
                } catch {
                    try? Self.close(child, path: full)
                    throw error
                }
                _ = try checked(.rmdir, full) { system_unlinkat(dir.rawValue, name, directory: true) }
            } else {
                _ = try checked(.unlink, full) { system_unlinkat(dir.rawValue, name, directory: false) }
            }
        }
    }

    /// Creates `path` and its missing parents (not durable: nothing is synced); returns the
    /// directories it created, outermost first. Existing parents may be links to directories.
    @discardableResult
    package static func makeDirectories(
        _ path: FilePath, permissions: FilePermissions = [.ownerReadWriteExecute, .groupReadExecute, .otherReadExecute]
    ) throws(FileSystemError) -> [FilePath] {
        var missing: [FilePath] = []
        var p = path
        while !p.isEmpty, (try? Self.stat(p))?.kind != .directory {
            missing.append(p)
            let parent = p.removingLastComponent()
            if parent == p { break }
            p = parent
        }
        var created: [FilePath] = []
        for dir in missing.reversed() {
            do {
                try Self.mkdir(dir, permissions: permissions)
                created.append(dir)
            } catch  where error.errno == .fileExists && (try? Self.stat(dir))?.kind == .directory {
                continue
            }
        }
        return created
    }

    // MARK: whole files

    /// Copies the regular file `source` (not through a final link) to a new file `target`, with
    /// the source's permission bits; fails if `target` exists. Not durable: nothing is synced.
    package static func copyFile(_ source: FilePath, to target: FilePath) throws(FileSystemError) {
        let input = try Self.open(source, .readOnly, options: [.noFollow])
        defer { try? Self.close(input, path: source) }
        let status = try Self.fstat(input, path: source)
        guard status.kind == .regular else { throw FileSystemError("open", source, .invalidArgument) }
        let output = try Self.open(
            target, .writeOnly, options: [.create, .exclusiveCreate, .noFollow],
            permissions: FilePermissions(rawValue: status.permissions.rawValue & 0o777))
        do {
            var buffer = [UInt8](repeating: 0, count: 256 << 10)
            while true {
                let n = try Self.read(input, into: &buffer, path: source)
                if n == 0 { break }
                try writeAll(output, contentsOf: buffer[0..<n], path: target)
            }
            try Self.close(output, path: target)
        } catch {
            try? Self.close(output, path: target)
            try? Self.unlink(target)
            throw error
        }
    }

    /// Creates or truncates `path` and writes `bytes` to it. Not durable and not atomic: a reader
    /// can see it half written; use `AtomicFile.write` for anything that must survive a crash.
    package static func writeFile(
        _ bytes: some ContiguousBytes, to path: FilePath,
        permissions: FilePermissions = [.ownerReadWrite, .groupRead, .otherRead]
    ) throws(FileSystemError) {
        let fd = try Self.open(path, .writeOnly, options: [.create, .truncate], permissions: permissions)
        do {
            try writeAll(fd, contentsOf: bytes, path: path)
            try Self.close(fd, path: path)
        } catch {
            try? Self.close(fd, path: path)
            throw error
        }
    }
}
