#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif
import Foundation
import SystemPackage

/// Durable file operations: every replacement is write-temp → fsync → rename → fsync(directory),
/// so a crash leaves either the old bytes or the new ones, never a mix.
public enum AtomicFile {
    /// Calls `body` and turns a thrown `Errno` into a `FileSystemError` naming the operation
    /// and path.
    @inline(__always)
    public static func check<T>(_ operation: String, _ path: FilePath, _ body: () throws -> T) throws(FileSystemError) -> T {
        do {
            return try body()
        } catch let e as Errno {
            throw FileSystemError(operation, path, e)
        } catch {
            throw FileSystemError(operation, path, .ioError)
        }
    }

    /// Flushes a descriptor to stable storage (`F_FULLFSYNC` where the platform has it).
    public static func sync(_ fd: FileDescriptor, path: FilePath) throws(FileSystemError) {
        #if canImport(Darwin)
            if fcntl(fd.rawValue, F_FULLFSYNC) == 0 { return }
        #endif
        if fsync(fd.rawValue) != 0 { throw FileSystemError("fsync", path, Errno(rawValue: errno)) }
    }

    /// Flushes a directory's entries (after a rename or create inside it).
    public static func syncDirectory(_ dir: FilePath) throws(FileSystemError) {
        let fd = try check("open", dir) { try FileDescriptor.open(dir, .readOnly, options: [.directory]) }
        defer { try? fd.close() }
        try sync(fd, path: dir)
    }

    /// Atomically replaces (or creates) `path` with `data`, with the given permissions.
    public static func write(
        _ data: Data, to path: FilePath, permissions: FilePermissions = [.ownerReadWrite, .groupRead, .otherRead]
    ) throws(FileSystemError) {
        do {
            try replace(path, permissions: permissions) { fd, temp in
                _ = try check("write", temp) { try data.withUnsafeBytes { try fd.writeAll($0) } }
            }
        } catch let e as FileSystemError {
            throw e
        } catch {
            throw FileSystemError("write", path, .ioError)
        }
    }

    /// Atomically replaces (or creates) `path` with what `body` writes to a temporary file in
    /// the same directory: the temporary file is synced, renamed over `path`, and the directory
    /// synced. If anything fails the temporary file is removed and `path` is untouched; `body`'s
    /// own errors are rethrown as they are, file-system steps throw `FileSystemError`.
    public static func replace(
        _ path: FilePath, permissions: FilePermissions = [.ownerReadWrite, .groupRead, .otherRead],
        _ body: (FileDescriptor, FilePath) throws -> Void
    ) throws {
        let parent = path.removingLastComponent()
        let dir = parent.isEmpty ? FilePath(".") : parent
        let name = path.lastComponent?.string ?? "file"
        let temp = dir.appending(".\(name).tmp-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        let fd = try check("create", temp) {
            try FileDescriptor.open(temp, .writeOnly, options: [.create, .exclusiveCreate, .truncate], permissions: permissions)
        }
        var closed = false
        do {
            try body(fd, temp)
            try sync(fd, path: temp)
            closed = true
            try check("close", temp) { try fd.close() }
            if rename(temp.string, path.string) != 0 {
                throw FileSystemError("rename", temp, Errno(rawValue: errno))
            }
        } catch {
            if !closed { try? fd.close() }
            _ = unlink(temp.string)
            throw error
        }
        try syncDirectory(dir)
    }

    /// Creates `path` and its missing parents (mode 0755), syncing each parent that gained an
    /// entry.
    public static func makeDirectories(_ path: FilePath) throws(FileSystemError) {
        var missing: [FilePath] = []
        var p = path
        // Existing parents may be symlinks to directories (a symlinked root): follow them here.
        while !p.isEmpty, !isDirectoryFollowingLinks(p) {
            missing.append(p)
            let parent = p.removingLastComponent()
            if parent == p { break }
            p = parent
        }
        for dir in missing.reversed() {
            if mkdir(dir.string, 0o755) != 0 {
                let e = Errno(rawValue: errno)
                if e != .fileExists || !isDirectoryFollowingLinks(dir) { throw FileSystemError("mkdir", dir, e) }
            }
            try syncDirectory(dir.removingLastComponent().isEmpty ? FilePath(".") : dir.removingLastComponent())
        }
    }

    /// Whether `path` is a directory (not following a final symlink).
    public static func isDirectory(_ path: FilePath) -> Bool {
        var st = stat()
        return lstat(path.string, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR
    }

    /// Whether `path` is a directory, following symlinks.
    public static func isDirectoryFollowingLinks(_ path: FilePath) -> Bool {
        var st = stat()
        return stat(path.string, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR
    }

    /// Whether anything exists at `path` (not following a final symlink).
    public static func exists(_ path: FilePath) -> Bool {
        var st = stat()
        return lstat(path.string, &st) == 0
    }

    /// Reads a whole file (for small documents: indexes, file lists, keys).
    public static func read(_ path: FilePath, limit: Int = 64 << 20) throws(FileSystemError) -> Data {
        let fd = try check("open", path) { try FileDescriptor.open(path, .readOnly) }
        defer { try? fd.close() }
        var out = Data()
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let n = try check("read", path) { try buffer.withUnsafeMutableBytes { try fd.read(into: $0) } }
            if n == 0 { break }
            out.append(contentsOf: buffer[0..<n])
            if out.count > limit { throw FileSystemError("read", path, .fileTooLarge) }
        }
        return out
    }
}

#if os(Linux)
    /// glibc's `syncfs(2)` (since 2.14): Swift's Glibc module does not export it because the
    /// header declares it only under `_GNU_SOURCE`. The C signature is `int syncfs(int fd)`.
    @_silgen_name("syncfs")
    private func glibc_syncfs(_ fd: Int32) -> Int32

    extension AtomicFile {
        /// Flushes the whole file system holding `fd` (one call after writing thousands of files,
        /// instead of an fsync each). Since Linux 5.8 it reports write-back errors.
        public static func syncFileSystem(_ fd: Int32, path: FilePath) throws(FileSystemError) {
            if glibc_syncfs(fd) != 0 { throw FileSystemError("syncfs", path, Errno(rawValue: errno)) }
        }
    }
#endif
