import Foundation
import SystemPackage

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
}
