import Foundation
import LarderCore
import SystemPackage

/// Durable file operations: every replacement is write-temp → fsync → rename → fsync(directory),
/// so a crash leaves either the old bytes or the new ones, never a mix.
package enum AtomicFile {
    /// Flushes a descriptor to stable storage (`F_FULLFSYNC` where the platform has it).
    package static func sync(_ fd: FileDescriptor, path: FilePath) throws(FileSystemError) {
        try SystemCalls.fsync(fd, path: path)
    }

    /// Flushes a directory's entries (after a rename or create inside it).
    package static func syncDirectory(_ dir: FilePath) throws(FileSystemError) {
        let fd = try SystemCalls.open(dir, .readOnly, options: [.directory])
        defer { try? SystemCalls.close(fd, path: dir) }
        try SystemCalls.fsync(fd, path: dir)
    }

    /// Atomically replaces (or creates) `path` with `data`, with the given permissions.
    /// `durable: false` skips both fsyncs: for a cache whose loss or damage costs only work (a
    /// crash may leave the old bytes, the new ones, or a damaged file that the reader refuses).
    package static func write(
        _ data: Data, to path: FilePath, permissions: FilePermissions = [.ownerReadWrite, .groupRead, .otherRead],
        durable: Bool = true
    ) throws(FileSystemError) {
        try replace(path, permissions: permissions, durable: durable, wrapping: { $0 }) {
            (fd, temp) throws(FileSystemError) in
            try SystemCalls.writeAll(fd, contentsOf: data, path: temp)
        }
    }

    /// Atomically replaces (or creates) `path` with what `body` writes to a temporary file in
    /// the same directory: the temporary file is synced, renamed over `path`, and the directory
    /// synced. If anything fails the temporary file is removed and `path` is untouched. `body`'s
    /// own errors are rethrown as they are; the file-system steps' errors are turned into the
    /// same type by `wrap`, so no error is ever generalised away.
    package static func replace<E: Error>(
        _ path: FilePath, permissions: FilePermissions = [.ownerReadWrite, .groupRead, .otherRead],
        durable: Bool = true, wrapping wrap: (FileSystemError) -> E,
        _ body: (FileDescriptor, FilePath) throws(E) -> Void
    ) throws(E) {
        let parent = path.parentPath
        let dir = parent.isEmpty ? FilePath(".") : parent
        let name = path.lastNameBytes
        let temp = dir.joined(
            Array(".".utf8) + (name.isEmpty ? Array("file".utf8) : name)
                + Array(".tmp-\(getpid())-\(UInt32.random(in: 0...UInt32.max))".utf8))
        let options: FileDescriptor.OpenOptions = [.create, .exclusiveCreate, .truncate]
        let fd: FileDescriptor
        do { fd = try SystemCalls.open(temp, .writeOnly, options: options, permissions: permissions) } catch {
            throw wrap(error)
        }
        var closed = false
        func cleanUp() {
            if !closed { try? SystemCalls.close(fd, path: temp) }
            try? SystemCalls.unlink(temp)
        }
        do {
            try body(fd, temp)
        } catch {
            cleanUp()
            throw error
        }
        do {
            if durable { try SystemCalls.fsync(fd, path: temp) }
            closed = true
            try SystemCalls.close(fd, path: temp)
            try SystemCalls.rename(temp, to: path)
            if durable { try syncDirectory(dir) }
        } catch {
            // After the rename the new file is in place; only the directory sync failed, and
            // the caller learns the write may not be durable.
            cleanUp()
            throw wrap(error)
        }
    }

    /// Creates `path` and its missing parents (mode 0755), syncing each parent that gained an
    /// entry.
    package static func makeDirectories(_ path: FilePath) throws(FileSystemError) {
        try makeDirectories([path])
    }

    /// Creates every path of `paths` with its missing parents, as `makeDirectories(_:)` does,
    /// and syncs each directory that gained an entry once, after all are made (a new sandbox's
    /// six directories cost one directory sync, not six).
    package static func makeDirectories(_ paths: [FilePath]) throws(FileSystemError) {
        var parents: [FilePath] = []
        for path in paths {
            // Existing parents may be symlinks to directories (a symlinked root): they are followed.
            for dir in try SystemCalls.makeDirectories(path) {
                let parent = dir.parentPath.isEmpty ? FilePath(".") : dir.parentPath
                if !parents.contains(parent) { parents.append(parent) }
            }
        }
        // Deepest first: a directory's own entry is synced after what it holds.
        for parent in parents.reversed() { try syncDirectory(parent) }
    }

    /// Whether `path` is a directory (not following a final symlink).
    package static func isDirectory(_ path: FilePath) -> Bool {
        (try? SystemCalls.lstat(path))?.kind == .directory
    }

    /// Whether `path` is a directory, following symlinks.
    package static func isDirectoryFollowingLinks(_ path: FilePath) -> Bool {
        (try? SystemCalls.stat(path))?.kind == .directory
    }

    /// Whether anything exists at `path` (not following a final symlink).
    package static func exists(_ path: FilePath) -> Bool {
        (try? SystemCalls.lstat(path)) != nil
    }

    /// Reads a whole file (for small documents: indexes, file lists, keys).
    package static func read(_ path: FilePath, limit: Int = 64 << 20) throws(FileSystemError) -> Data {
        let fd = try SystemCalls.open(path, .readOnly)
        defer { try? SystemCalls.close(fd, path: path) }
        var out = Data()
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let n = try SystemCalls.read(fd, into: &buffer, path: path)
            if n == 0 { break }
            out.append(contentsOf: buffer[0..<n])
            if out.count > limit { throw FileSystemError("read", path, .fileTooLarge) }
        }
        return out
    }

    /// Reads exactly `length` bytes at `offset` of a file (a patch in a delta's patch file); a
    /// file that ends first is an error (`ENODATA`).
    package static func read(_ path: FilePath, offset: Int64, length: Int) throws(FileSystemError) -> Data {
        let fd = try SystemCalls.open(path, .readOnly)
        defer { try? SystemCalls.close(fd, path: path) }
        var out = Data(count: length)
        var done = 0
        while done < length {
            let n = try out.withUnsafeMutableBytes { raw in
                Result { () throws(FileSystemError) in
                    try SystemCalls.pread(
                        fd, into: UnsafeMutableRawBufferPointer(rebasing: raw[done...]), at: offset + Int64(done),
                        path: path)
                }
            }.get()
            if n == 0 { throw FileSystemError("read", path, .noData) }
            done += n
        }
        return out
    }
}

extension AtomicFile {
    /// Flushes the whole file system holding `fd` (one call after writing thousands of files,
    /// instead of an fsync each). Since Linux 5.8 it reports write-back errors.
    package static func syncFileSystem(_ fd: Int32, path: FilePath) throws(FileSystemError) {
        try SystemCalls.syncfs(FileDescriptor(rawValue: fd), path: path)
    }
}
