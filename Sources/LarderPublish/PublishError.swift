import LarderArchive
import LarderCore
import LarderFileSystem

/// Why `pack`, `revoke` or `keygen` refused or failed. Each case names the offending path or
/// value; `code` is stable for scripts.
package enum PublishError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The source to pack is not a directory.
    case notADirectory(String)
    /// The source tree holds a symbolic link (never packed).
    case symlink(path: String)
    /// The source tree holds a file that is neither regular nor a directory (its type).
    case specialFile(path: String, type: String)
    /// A file's path breaks the path rules (the rule).
    case badName(path: String, problem: PathProblem)
    /// Two paths differ only by case or Unicode normalisation (one file on iOS and macOS).
    case collision(path: String, other: String)
    /// The source tree has no file.
    case emptyTree(String)
    /// The source tree has more files than the limits allow.
    case tooManyFiles(count: Int, limit: Int)
    /// A file is larger than the limits allow.
    case fileTooLarge(path: String, size: Int64, limit: Int64)
    /// The tree is larger in total than the limits allow.
    case treeTooLarge(size: Int64, limit: Int64)
    /// Not a package id (the text given).
    case badID(String)
    /// Not a semantic version (the text given).
    case badVersion(String)
    /// Not a channel name (the text given).
    case badChannel(String)
    /// A route that is not valid (the route and why).
    case badRoute(String, reason: String)
    /// A rollout percentage outside 0–100.
    case badRollout(Int)
    /// A dependency that is not `ID@RANGE` (the text given).
    case badDependency(String)
    /// The entry file named is not in the tree.
    case entryMissing(String)
    /// The version is already published (versions are immutable).
    case versionExists(id: String, version: String)
    /// The version is not newer than the newest on its channel.
    case versionNotNewer(id: String, version: String, newest: String, channel: String)
    /// The repository has no such version (to revoke).
    case unknownVersion(id: String, version: String)
    /// The version is revoked already.
    case alreadyRevoked(id: String, version: String)
    /// The repository's current index cannot be trusted (why).
    case existingIndexUntrusted(detail: String)
    /// The index this publication would sign breaks a rule (a dependency it does not list, a
    /// route another package claims, …); nothing was published.
    case indexRule(IndexIssue)
    /// A source file changed while it was packed.
    case changedWhilePacking(path: String)
    /// Another pack, revoke or rotate-key is publishing into the same repository.
    case busy(holderPID: Int32?)
    /// The serial cannot grow any further.
    case serialExhausted
    /// Writing or checking the bundle failed.
    case archive(ArchiveError)
    /// A document of the repository could not be read or written.
    case manifest(ManifestError)
    /// A key or signature failed.
    case signing(SigningError)
    /// A file operation failed.
    case io(FileSystemError)
    /// A pack or revoke is under way or was interrupted (its `.pending` file is there): the
    /// repository is not in a published state to upload.
    case publicationPending(path: String)
    /// zlib refused to compress a file into its object (the detail says how).
    case compression(path: String, detail: String)
    /// A delta from an earlier version could not be made (what was missing or failed).
    case delta(from: String, detail: String)
    /// Sealing an encrypted version failed, or its content key could not be wrapped or unwrapped.
    case encryption(String)
    /// Padding was asked for a version in the clear (`pack --pad` needs `--encrypt-to`).
    case padWithoutEncryption
    /// A delegated repository's root or a team part breaks a trust rule (format §18).
    case delegation(DelegationRefusal)
    /// A delegated publication cannot be made as asked (the detail says why and what to do).
    case delegationSetup(String)
    /// A rollout verb cannot do what it was asked (format §20; the code and detail say why).
    case rollout(code: ReasonCode, detail: String)

    /// A stable machine-readable code.
    package var code: ReasonCode {
        switch self {
        case .notADirectory: "not-a-directory"
        case .symlink: "symlink"
        case .specialFile: "special-file"
        case .badName(_, let p): p.code
        case .collision: "name-collision"
        case .emptyTree: "empty-tree"
        case .tooManyFiles: "limit-files"
        case .fileTooLarge: "limit-file-size"
        case .treeTooLarge: "limit-total-size"
        case .badID: "bad-id"
        case .badVersion: "bad-version"
        case .badChannel: "bad-channel"
        case .badRoute: "bad-route"
        case .badRollout: "bad-rollout"
        case .badDependency: "bad-dependency"
        case .entryMissing: "entry-missing"
        case .versionExists: "version-exists"
        case .versionNotNewer: "version-not-newer"
        case .unknownVersion: "unknown-version"
        case .alreadyRevoked: "already-revoked"
        case .existingIndexUntrusted: "index-untrusted"
        case .indexRule(let issue): issue.code
        case .changedWhilePacking: "changed-while-packing"
        case .busy: "repository-busy"
        case .serialExhausted: "serial-exhausted"
        case .archive(let e): e.code
        case .manifest: "manifest"
        case .signing: "signing"
        case .io: "io"
        case .publicationPending: "publication-interrupted"
        case .compression: "compress"
        case .delta: "delta"
        case .encryption: "encryption"
        case .padWithoutEncryption: "pad-without-encryption"
        case .delegation(let e): e.code
        case .delegationSetup: "delegation"
        case .rollout(let code, _): code
        }
    }

    /// What was refused or failed, naming the path, id or value concerned and, where there is one, the fix.
    package var description: String {
        switch self {
        case .notADirectory(let p): "\(p) is not a directory"
        case .symlink(let p): "\(p) is a symbolic link; bundles hold regular files only (copy the target in instead)"
        case .specialFile(let p, let t): "\(p) is a \(t); bundles hold regular files only"
        case .badName(let p, let problem): "\(p): \(problem)"
        case .collision(let p, let o):
            "\(p) and \(o) differ only by case or Unicode normalisation; they would be one file on iOS/macOS — rename one"
        case .emptyTree(let p): "\(p) holds no files"
        case .tooManyFiles(let c, let l): "the tree holds \(c) files (limit \(l))"
        case .fileTooLarge(let p, let s, let l): "\(p) is \(s) bytes (limit \(l) per file)"
        case .treeTooLarge(let s, let l): "the tree holds \(s) bytes (limit \(l))"
        case .badID(let s): "\(quoted(s)) is not a package id: expected [a-z0-9][a-z0-9._-]{0,63}"
        case .badVersion(let s): "\(quoted(s)) is not a SemVer 2.0.0 version (e.g. 1.4.0 or 2.0.0-beta.1)"
        case .badChannel(let s): "\(quoted(s)) is not a channel name: expected [a-z0-9][a-z0-9._-]{0,31}"
        case .badRoute(let s, let r): "route \(quoted(s)): \(r)"
        case .badRollout(let p): "rollout percent \(p) is outside 0...100"
        case .badDependency(let s): "dependency \(quoted(s)): expected ID@RANGE, e.g. shared-ui@^1.2.0"
        case .entryMissing(let e): "the entry file \(quoted(e)) is not in the tree"
        case .versionExists(let id, let v):
            "\(id) \(v) already exists in the repository (published versions are immutable; choose a new version)"
        case .versionNotNewer(let id, let v, let newest, let ch):
            "\(id) \(v) is not greater than the newest published version \(newest) on channel \(ch)"
        case .unknownVersion(let id, let v): "\(id) \(v) was never published in this repository"
        case .alreadyRevoked(let id, let v): "\(id) \(v) is already revoked"
        case .existingIndexUntrusted(let d): "the repository's current index cannot be trusted: \(d)"
        case .indexRule(let issue): "refused, nothing published: \(issue.message)"
        case .changedWhilePacking(let p): "\(p) changed while it was being packed; pack again"
        case .busy(let pid):
            "another publisher\(pid.map { " (pid \($0))" } ?? "") is writing to this repository; try again when it is done"
        case .serialExhausted: "the index serial is at its maximum and cannot grow"
        case .archive(let e): e.description
        case .manifest(let e): e.description
        case .signing(let e): e.description
        case .io(let e): e.description
        case .publicationPending(let p):
            "\(p) is there: a pack or revoke is under way or was interrupted; run it again (or wait) before uploading"
        case .compression(let path, let detail): "\(path) could not be compressed into its object: \(detail)"
        case .delta(let from, let detail): "the delta from \(from) could not be made: \(detail)"
        case .encryption(let detail): "encryption: \(detail)"
        case .padWithoutEncryption:
            "padding rounds up the sizes of sealed blobs: it needs --encrypt-to (a version in the clear is not padded)"
        case .delegation(let e): e.description
        case .delegationSetup(let d): d
        case .rollout(_, let d): d
        }
    }
}
