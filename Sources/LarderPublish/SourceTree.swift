import LarderCore
import LarderFileSystem
import SystemPackage

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A directory to be packed, scanned without following links: every regular file with its
/// validated relative path, sorted by path bytes.
public struct SourceTree: Sendable {
    /// The directory scanned.
    public let root: FilePath
    /// Every regular file: its path inside the package and its path on disk.
    public let files: [(path: RelativePath, source: FilePath)]
    /// Sum of the file sizes when scanned.
    public let totalSize: Int64

    /// Scans `root`, refusing symlinks, special files, names that break the path rules,
    /// collisions, an empty tree and trees over `limits`.
    public static func scan(_ root: FilePath, limits: TreeLimits = .standard) throws(PublishError) -> SourceTree {
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
        guard let d = opendir(dir.string) else {
            throw .io(FileSystemError("opendir", dir, Errno(rawValue: errno)))
        }
        defer { closedir(d) }
        var names: [[UInt8]] = []
        while let ent = readdir(d) {
            let name: [UInt8] = withUnsafeBytes(of: ent.pointee.d_name) { raw in
                Array(raw.prefix(while: { $0 != 0 }))
            }
            if name == [0x2E] || name == [0x2E, 0x2E] { continue }
            names.append(name)
        }
        for name in names {
            let relBytes = prefix.isEmpty ? name : prefix + [0x2F] + name
            let display = String(decoding: relBytes, as: UTF8.self)
            // Validate the name's bytes before touching the file system with it.
            let rel: RelativePath
            switch RelativePath.validate(bytes: relBytes, limits: limits) {
            case .success(let p): rel = p
            case .failure(let problem): throw .badName(path: display, problem: problem)
            }
            let full = dir.appending(String(rel.lastComponent))
            var st = stat()
            guard lstat(full.string, &st) == 0 else {
                throw .io(FileSystemError("lstat", full, Errno(rawValue: errno)))
            }
            let key = rel.collisionKey
            if let other = keys[key] { throw .collision(path: rel.string, other: other) }
            keys[key] = rel.string
            switch st.st_mode & S_IFMT {
            case S_IFDIR:
                try walk(full, prefix: relBytes, limits: limits, files: &files, total: &total, keys: &keys)
            case S_IFREG:
                let size = Int64(st.st_size)
                if size > limits.maxFileBytes { throw .fileTooLarge(path: rel.string, size: size, limit: limits.maxFileBytes) }
                total += size
                if total > limits.maxTotalBytes { throw .treeTooLarge(size: total, limit: limits.maxTotalBytes) }
                files.append((rel, full))
                if files.count > limits.maxFiles { throw .tooManyFiles(count: files.count, limit: limits.maxFiles) }
            case S_IFLNK:
                throw .symlink(path: rel.string)
            case S_IFIFO:
                throw .specialFile(path: rel.string, type: "FIFO")
            case S_IFSOCK:
                throw .specialFile(path: rel.string, type: "socket")
            case S_IFCHR:
                throw .specialFile(path: rel.string, type: "character device")
            case S_IFBLK:
                throw .specialFile(path: rel.string, type: "block device")
            default:
                throw .specialFile(path: rel.string, type: "special file")
            }
        }
    }
}
