import LarderCore
import LarderFileSystem
import SystemPackage

/// A directory to be packed, scanned without following links: every regular file with its
/// validated relative path, sorted by path bytes.
package struct SourceTree: Sendable {
    /// The directory scanned.
    package let root: FilePath
    /// Every regular file: its path inside the package and its path on disk.
    package let files: [(path: RelativePath, source: FilePath)]
    /// Sum of the file sizes when scanned.
    package let totalSize: Int64

    /// Scans `root`, refusing symlinks, special files, names that break the path rules,
    /// collisions, an empty tree and trees over `limits`.
    package static func scan(_ root: FilePath, limits: TreeLimits = .standard) throws(PublishError) -> SourceTree {
        // The root itself may be a symlink to the build output; entries inside are never followed.
        guard AtomicFile.isDirectoryFollowingLinks(root) else { throw .notADirectory(root.string) }
        var files: [(RelativePath, FilePath)] = []
        var total: Int64 = 0
        var keys: [String: String] = [:]
        try walk(root, prefix: [], limits: limits, files: &files, total: &total, keys: &keys)
        if files.isEmpty { throw .emptyTree(root.string) }
        files.sort { $0.0 < $1.0 }
        return SourceTree(root: root, files: files, totalSize: total)
    }

    private init(root: FilePath, files: [(RelativePath, FilePath)], totalSize: Int64) {
        self.root = root
        self.files = files.map { (path: $0.0, source: $0.1) }
        self.totalSize = totalSize
    }

    private static func walk(
        _ dir: FilePath, prefix: [UInt8], limits: TreeLimits, files: inout [(RelativePath, FilePath)],
        total: inout Int64, keys: inout [String: String]
    ) throws(PublishError) {
        let names: [[UInt8]]
        do { names = try SystemCalls.listDirectory(dir).map(\.bytes) } catch { throw .io(error) }
        for name in names {
            let relBytes = prefix.isEmpty ? name : prefix + [0x2F] + name
            let display = String(decoding: relBytes, as: UTF8.self)
            // Validate the name's bytes before touching the file system with it.
            let rel: RelativePath
            switch RelativePath.validate(bytes: relBytes, limits: limits) {
            case .success(let p): rel = p
            case .failure(let problem): throw .badName(path: display, problem: problem)
            }
            let full = dir.joined(String(rel.lastComponent))
            let status: FileStatus
            do { status = try SystemCalls.lstat(full) } catch { throw .io(error) }
            let key = rel.collisionKey
            if let other = keys[key] { throw .collision(path: rel.string, other: other) }
            keys[key] = rel.string
            switch status.kind {
            case .directory:
                try walk(full, prefix: relBytes, limits: limits, files: &files, total: &total, keys: &keys)
            case .regular:
                let size = status.size
                if size > limits.maxFileBytes {
                    throw .fileTooLarge(path: rel.string, size: size, limit: limits.maxFileBytes)
                }
                total += size
                if total > limits.maxTotalBytes { throw .treeTooLarge(size: total, limit: limits.maxTotalBytes) }
                files.append((rel, full))
                if files.count > limits.maxFiles { throw .tooManyFiles(count: files.count, limit: limits.maxFiles) }
            case .symbolicLink:
                throw .symlink(path: rel.string)
            case .fifo:
                throw .specialFile(path: rel.string, type: "FIFO")
            case .socket:
                throw .specialFile(path: rel.string, type: "socket")
            case .characterDevice:
                throw .specialFile(path: rel.string, type: "character device")
            case .blockDevice:
                throw .specialFile(path: rel.string, type: "block device")
            case .unknown:
                throw .specialFile(path: rel.string, type: "special file")
            }
        }
    }
}
