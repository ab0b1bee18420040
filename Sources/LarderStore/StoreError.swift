import LarderArchive
import LarderCore
import LarderFileSystem

/// Why a sandbox operation was refused or failed. Each case names what a person needs; `code` is
/// stable for scripts and tests.
public enum StoreError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Another writer holds the lock.
    case locked(holderPID: Int32?, waitedSeconds: Double)
    /// state.json exists but cannot be read; it is never replaced silently.
    case corruptState(detail: String)
    /// state.json is missing while versions are on disk.
    case missingState
    /// The text is not a valid package id.
    case badID(String)
    /// The text is not a SemVer 2.0.0 version.
    case badVersion(String)
    /// The sandbox has no such package, or no active version of it.
    case unknownPackage(String)
    /// The version is not on disk in this sandbox.
    case notInstalled(id: String, version: String)
    /// A rollback named no version and the package has no fallback on disk.
    case noFallback(id: String)
    /// The version was rolled back off before; installing it again needs `force`.
    case previouslyFailed(id: String, version: String, reason: String)
    /// The bundle was refused by the archive reader.
    case archive(ArchiveError)
    /// The bundle's tree differs from the file list.
    case verification(id: String, version: String, problems: [String])
    /// The file list does not fit the install (another id or version), or the bundle was not downloaded.
    case fileList(String)
    /// A file-system call failed; the error names the operation, path and errno.
    case io(FileSystemError)
    /// The sandbox handle was closed (its lock released); open it again.
    case closed
    /// A tree of this version is still in use by a live session (left by an interrupted
    /// operation); it can be replaced once the session ends.
    case versionBusy(id: String, version: String)
    /// A downloaded object is not a valid gzip stream (or inflates past its declared size).
    case objectCorrupt(id: String, version: String, detail: String)
    /// A downloaded object inflates to another content than the file list declares.
    case objectMismatch(object: String, expected: SHA256Digest, got: SHA256Digest)
    /// A document the store writes could not be encoded (a bug, not bad input).
    case encoding(document: String, detail: String)

    /// A stable machine-readable code.
    public var code: ReasonCode {
        switch self {
        case .locked: "locked"
        case .corruptState: "state-corrupt"
        case .missingState: "state-missing"
        case .badID: "bad-id"
        case .badVersion: "bad-version"
        case .unknownPackage: "unknown-package"
        case .notInstalled: "not-installed"
        case .noFallback: "no-fallback"
        case .previouslyFailed: "previously-failed"
        case .archive(let e): e.code
        case .verification: "verification-failed"
        case .fileList: "file-list"
        case .io: "io"
        case .closed: "closed"
        case .versionBusy: "version-busy"
        case .encoding: "encoding"
        case .objectCorrupt: "object-corrupt"
        case .objectMismatch: "hash-mismatch"
        }
    }

    /// What was wrong and, where there is one, what to do (`doctor --repair`, `--force`, …).
    public var description: String {
        switch self {
        case .locked(let pid, let waited):
            "another writer holds the sandbox lock\(pid.map { " (pid \($0))" } ?? "") — gave up after \(waited) s"
        case .corruptState(let d):
            "state.json cannot be read: \(d.hasSuffix(".") ? String(d.dropLast()) : d). It was left as it is; run `larder doctor --repair` to rebuild it from the verified versions on disk"
        case .missingState:
            "state.json is missing but versions are on disk; run `larder doctor --repair` to rebuild it"
        case .badID(let s): "\(quoted(s)) is not a package id: expected [a-z0-9][a-z0-9._-]{0,63}"
        case .badVersion(let s): "\(quoted(s)) is not a SemVer 2.0.0 version"
        case .unknownPackage(let id): "no package \(id) in this sandbox"
        case .notInstalled(let id, let v): "\(id) \(v) is not on disk in this sandbox"
        case .noFallback(let id): "\(id) has no fallback version to roll back to (name one with --to)"
        case .previouslyFailed(let id, let v, let r):
            "\(id) \(v) was rolled back off before (\(r)); install it again only with --force"
        case .archive(let e): "the bundle was refused: \(e)"
        case .verification(let id, let v, let problems):
            "\(id) \(v) does not match its file list: " + problems.prefix(5).joined(separator: "; ")
                + (problems.count > 5 ? "; and \(problems.count - 5) more" : "")
        case .fileList(let d): "the file list cannot be used: \(d)"
        case .io(let e): e.description
        case .closed: "the sandbox was closed; open it again"
        case .versionBusy(let id, let v):
            "a left-over copy of \(id) \(v) is pinned by a live session; install it again when that session ends"
        case .encoding(let document, let detail): "cannot encode \(document): \(detail)"
        case .objectCorrupt(let id, let v, let detail): "an object of \(id) \(v): \(detail)"
        case .objectMismatch(let object, let e, let g): "\(object): sha256 \(g), expected \(e)"
        }
    }
}
