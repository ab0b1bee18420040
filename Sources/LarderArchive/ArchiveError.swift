import LarderCore
import LarderFileSystem

/// Why an archive was refused or could not be written. Every case has a stable `code` (used in
/// `--json` output and tests) and a message naming the entry involved.
public enum ArchiveError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The file could not be opened or is not a zip archive libarchive can read.
    case unreadable(detail: String)
    /// The archive's structure is malformed or admits more than one reading (see
    /// `ZipStructure`): truncated, leading or trailing data, several end records, headers that
    /// disagree, overlapping entries.
    case structure(code: ReasonCode, message: String)
    /// libarchive reported a problem (any warning is treated as an error).
    case libarchive(entry: String?, message: String)
    /// An entry that is neither a regular file nor a directory (symlink, device, FIFO, socket).
    case unsupportedEntryType(entry: String, type: String)
    /// A hard link entry.
    case hardLink(entry: String, target: String)
    /// An encrypted entry.
    case encrypted(entry: String)
    /// An entry name that breaks the path rules.
    case badName(entry: String, problem: PathProblem)
    /// Two entries with the same name.
    case duplicate(entry: String)
    /// Two names that a case- or normalisation-insensitive file system would merge.
    case collision(entry: String, other: String)
    /// A name used both as a file and as a directory.
    case fileDirectoryConflict(entry: String, other: String)
    /// More entries than the limit.
    case tooManyEntries(limit: Int)
    /// More files than the limit.
    case tooManyFiles(limit: Int)
    /// A file larger than the per-file limit.
    case fileTooLarge(entry: String, size: Int64, limit: Int64)
    /// All files together larger than the limit.
    case totalTooLarge(limit: Int64)
    /// More uncompressed bytes per archive byte than the limit (a zip bomb).
    case compressionRatio(entry: String, limit: Int64)
    /// An entry whose data length differs from its header's declared size.
    case sizeMismatch(entry: String, declared: Int64, actual: Int64)
    /// Data arrived out of order (sparse or overlapping blocks).
    case discontiguousData(entry: String)
    /// No files at all.
    case empty
    /// A file-system error while reading sources or writing output.
    case io(FileSystemError)
    /// A consumer of the entries refused one (e.g. an extraction sink failed).
    case sink(entry: String, detail: String)

    /// A stable machine-readable code.
    public var code: ReasonCode {
        switch self {
        case .unreadable: "archive-unreadable"
        case .structure(let code, _): code
        case .libarchive: "archive-error"
        case .unsupportedEntryType: "entry-type"
        case .hardLink: "entry-hardlink"
        case .encrypted: "entry-encrypted"
        case .badName(_, let p): p.code
        case .duplicate: "entry-duplicate"
        case .collision: "entry-collision"
        case .fileDirectoryConflict: "entry-file-directory-conflict"
        case .tooManyEntries: "limit-entries"
        case .tooManyFiles: "limit-files"
        case .fileTooLarge: "limit-file-size"
        case .totalTooLarge: "limit-total-size"
        case .compressionRatio: "limit-compression-ratio"
        case .sizeMismatch: "entry-size-mismatch"
        case .discontiguousData: "entry-discontiguous"
        case .empty: "archive-empty"
        case .io: "io"
        case .sink: "sink"
        }
    }

    /// What is wrong with the archive, naming the entry concerned and the limit crossed where there is one.
    public var description: String {
        switch self {
        case .unreadable(let d): "not a readable zip archive: \(d)"
        case .structure(_, let m): "zip structure: \(m)"
        case .libarchive(let e, let m):
            e.map { "entry \(quoted($0)): \(Quoting.sanitizeLine(m))" } ?? Quoting.sanitizeLine(m)
        case .unsupportedEntryType(let e, let t):
            "entry \(quoted(e)) is a \(t); only regular files and directories are allowed"
        case .hardLink(let e, let t): "entry \(quoted(e)) is a hard link to \(quoted(t)); links are not allowed"
        case .encrypted(let e): "entry \(quoted(e)) is encrypted; encrypted entries are not supported"
        case .badName(let e, let p): "entry \(quoted(e)): \(p)"
        case .duplicate(let e): "entry \(quoted(e)) appears twice"
        case .collision(let e, let o):
            "entries \(quoted(o)) and \(quoted(e)) differ only by case or Unicode normalisation (they would merge on iOS/macOS)"
        case .fileDirectoryConflict(let e, let o): "\(quoted(e)) is a file but \(quoted(o)) uses it as a directory"
        case .tooManyEntries(let l): "more than \(l) entries"
        case .tooManyFiles(let l): "more than \(l) files"
        case .fileTooLarge(let e, let s, let l): "entry \(quoted(e)) is \(s) bytes (limit \(l))"
        case .totalTooLarge(let l): "the files add up to more than \(l) bytes"
        case .compressionRatio(let e, let l):
            "while reading \(quoted(e)): more than \(l) uncompressed bytes per archive byte (zip bomb?)"
        case .sizeMismatch(let e, let d, let a): "entry \(quoted(e)) declares \(d) bytes but holds \(a)"
        case .discontiguousData(let e): "entry \(quoted(e)) has discontiguous data blocks"
        case .empty: "the archive holds no files"
        case .io(let e): e.description
        case .sink(let e, let d): "entry \(quoted(e)): \(d)"
        }
    }
}
