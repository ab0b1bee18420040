import LarderArchive
import LarderCore
import LarderFileSystem
import SystemPackage

/// Writes a validated archive's entries under a fresh staging directory that nothing else
/// shares. Names reach it already validated (relative, no `..`, no links in the archive), every
/// file is created with `O_EXCL | O_NOFOLLOW` relative to the staging directory's descriptor,
/// and only regular files and directories are ever created, so nothing can land outside it.
struct Extractor: ArchiveConsumer {
    let root: FilePath
    private let rootFD: FileDescriptor
    private var made: Set<String> = [""]
    private var current: FileDescriptor?
    private var currentPath = FilePath()
    /// Where the platform has no `syncfs`, every file is synced as it is closed.
    private let syncEachFile: Bool

    init(root: FilePath) throws(FileSystemError) {
        self.root = root
        rootFD = try SystemCalls.open(root, .readOnly, options: [.directory, .noFollow])
        syncEachFile = !SystemCalls.syncsWholeFileSystem
    }

    /// Closes the staging directory descriptor (and a file left open by a failed read).
    func close() {
        if let fd = current { try? SystemCalls.close(fd, path: currentPath) }
        try? SystemCalls.close(rootFD, path: root)
    }

    private mutating func ensureDirectory(_ rel: Substring) throws(FileSystemError) {
        if rel.isEmpty || made.contains(String(rel)) { return }
        if let slash = rel.lastIndex(of: "/") { try ensureDirectory(rel[..<slash]) }
        do throws(FileSystemError) {
            try SystemCalls.mkdir(FilePath(String(rel)), in: rootFD, directoryPath: root)
        } catch  where error.errno == .fileExists {
            // Made by an earlier entry's path: only a directory may stand there, and the next
            // openat with O_NOFOLLOW below it fails on anything else.
        }
        made.insert(String(rel))
    }

    mutating func directory(_ path: RelativePath) throws {
        try ensureDirectory(Substring(path.string))
    }

    mutating func beginFile(_ path: RelativePath, declaredSize: Int64?) throws {
        let s = path.string
        if let slash = s.lastIndex(of: "/") { try ensureDirectory(s[..<slash]) }
        current = try SystemCalls.open(
            FilePath(s), in: rootFD, directoryPath: root, .writeOnly, options: [.create, .exclusiveCreate, .noFollow],
            permissions: [.ownerReadWrite, .groupRead, .otherRead])
        currentPath = root.joined(s)
    }

    mutating func write(_ chunk: UnsafeRawBufferPointer) throws {
        guard let fd = current else { return }
        try SystemCalls.writeAll(fd, chunk, path: currentPath)
    }

    mutating func endFile(_ path: RelativePath, size: Int64) throws {
        guard let fd = current else { return }
        defer {
            try? SystemCalls.close(fd, path: currentPath)
            current = nil
        }
        if syncEachFile { try SystemCalls.fsync(fd, path: currentPath) }
    }

    /// Makes everything written durable: one `syncfs` on Linux, else every directory synced
    /// (files were synced as they closed). An error here abandons the staged version.
    func makeDurable() throws(FileSystemError) {
        guard SystemCalls.syncsWholeFileSystem else {
            for dir in made.sorted(by: { $0.count > $1.count }) {
                try AtomicFile.syncDirectory(dir.isEmpty ? root : root.joined(dir))
            }
            return
        }
        try SystemCalls.syncfs(rootFD, path: root)
    }
}

extension Extractor: ConcurrentArchiveConsumer {
    /// A worker writing under the same staging directory, through the same descriptor (which
    /// only this extractor closes), with no file open.
    func makeWorker() -> Extractor {
        var worker = self
        worker.current = nil
        worker.currentPath = FilePath()
        return worker
    }

    /// Takes back a worker: the directories it made (synced by `makeDurable` where files are
    /// synced one by one), and the file a failed read left open in it, closed.
    mutating func absorb(_ worker: Extractor) {
        if let fd = worker.current { try? SystemCalls.close(fd, path: worker.currentPath) }
        made.formUnion(worker.made)
    }
}
