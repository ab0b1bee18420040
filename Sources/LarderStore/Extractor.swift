import LarderArchive
import LarderCore
import LarderFileSystem
import SystemPackage

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Writes a validated archive's entries under a fresh staging directory that nothing else
/// shares. Names reach it already validated (relative, no `..`, no links in the archive), every
/// file is created with `O_EXCL | O_NOFOLLOW` relative to the staging directory's descriptor,
/// and only regular files and directories are ever created, so nothing can land outside it.
struct Extractor: ArchiveConsumer {
    let root: FilePath
    private let rootFD: Int32
    private var made: Set<String> = [""]
    private var current: Int32 = -1
    private var currentPath = ""
    /// Where the platform has no `syncfs`, every file is synced as it is closed.
    private let syncEachFile: Bool

    init(root: FilePath) throws(FileSystemError) {
        self.root = root
        let fd = open(root.string, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { throw FileSystemError("open", root, Errno(rawValue: errno)) }
        rootFD = fd
        #if os(Linux)
            syncEachFile = false
        #else
            syncEachFile = true
        #endif
    }

    /// Closes the staging directory descriptor (and a file left open by a failed read).
    func close() {
        if current >= 0 { _ = Glibc_close(current) }
        _ = Glibc_close(rootFD)
    }

    private mutating func ensureDirectory(_ rel: Substring) throws(FileSystemError) {
        if rel.isEmpty || made.contains(String(rel)) { return }
        if let slash = rel.lastIndex(of: "/") { try ensureDirectory(rel[..<slash]) }
        if mkdirat(rootFD, String(rel), 0o755) != 0, errno != EEXIST {
            throw FileSystemError("mkdir", root.appending(String(rel)), Errno(rawValue: errno))
        }
        made.insert(String(rel))
    }

    mutating func directory(_ path: RelativePath) throws {
        try ensureDirectory(Substring(path.string))
    }

    mutating func beginFile(_ path: RelativePath, declaredSize: Int64?) throws {
        let s = path.string
        if let slash = s.lastIndex(of: "/") { try ensureDirectory(s[..<slash]) }
        let fd = openat(rootFD, s, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw FileSystemError("create", root.appending(s), Errno(rawValue: errno)) }
        current = fd
        currentPath = s
    }

    mutating func write(_ chunk: UnsafeRawBufferPointer) throws {
        guard let base = chunk.baseAddress else { return }
        var offset = 0
        while offset < chunk.count {
            let n = Glibc_write(current, base + offset, chunk.count - offset)
            if n < 0 {
                if errno == EINTR { continue }
                throw FileSystemError("write", root.appending(currentPath), Errno(rawValue: errno))
            }
            offset += n
        }
    }

    mutating func endFile(_ path: RelativePath, size: Int64) throws {
        defer {
            _ = Glibc_close(current)
            current = -1
        }
        if syncEachFile { try AtomicFile.sync(FileDescriptor(rawValue: current), path: root.appending(currentPath)) }
    }

    /// Makes everything written durable: one `syncfs` on Linux, else every directory synced
    /// (files were synced as they closed). An error here abandons the staged version.
    func makeDurable() throws(FileSystemError) {
        #if os(Linux)
            try AtomicFile.syncFileSystem(rootFD, path: root)
        #else
            for dir in made.sorted(by: { $0.count > $1.count }) {
                try AtomicFile.syncDirectory(dir.isEmpty ? root : root.appending(dir))
            }
        #endif
    }
}

// Unambiguous names for the C calls (the consumer has methods called write and close).
@inline(__always) private func Glibc_close(_ fd: Int32) -> Int32 {
    #if canImport(Glibc)
        Glibc.close(fd)
    #else
        Darwin.close(fd)
    #endif
}

@inline(__always) private func Glibc_write(_ fd: Int32, _ p: UnsafeRawPointer, _ n: Int) -> Int {
    #if canImport(Glibc)
        Glibc.write(fd, p, n)
    #else
        Darwin.write(fd, p, n)
    #endif
}
