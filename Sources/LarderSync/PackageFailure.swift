import LarderCore
import LarderFetch
import LarderStore

/// Why one package's part of a sync failed. The other packages go on; the report carries this
/// failure's `code` and `description`.
public enum PackageFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// A transfer failed (status, connection, size, hash, rate, redirect…).
    case fetch(FetchError)
    /// The store refused or failed to place or activate the version.
    case store(StoreError)
    /// The fetched file list is not the one the index declares (size, SHA-256, id or version).
    case fileListMismatch(String)
    /// The fetched file list is not a valid file list.
    case fileListSchema(ManifestError)
    /// Not activated because `member`, in the same dependency group, failed.
    case dependencyGroup(member: PackageID)

    /// A stable machine-readable code.
    public var code: String {
        switch self {
        case .fetch(let e): e.code
        case .store(let e): e.code
        case .fileListMismatch: "file-list-mismatch"
        case .fileListSchema(let e): e.code(or: "file-list-schema")
        case .dependencyGroup: "dependency-group"
        }
    }

    /// What was wrong, for a person.
    public var description: String {
        switch self {
        case .fetch(let e): e.description
        case .store(let e): e.description
        case .fileListMismatch(let d): d
        case .fileListSchema(let e): e.description
        case .dependencyGroup(let m): "not activated: \(m), in the same dependency group, failed"
        }
    }
}
