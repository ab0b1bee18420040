import Foundation
import LarderCore
import SystemPackage

extension SystemCalls {
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
            if let name = entryName(of: entry) { entries.append(DirectoryEntry(bytes: name)) }
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
            let name = FilePath(bytes: entry.bytes)
            let full = path.joined(entry.bytes)
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
            let parent = p.parentPath
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
