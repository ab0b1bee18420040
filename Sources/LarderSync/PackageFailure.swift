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
    /// Not fetched: the file system holding the sandbox has too little room. `download` and
    /// `write` are what it would fetch and place, `reserve` what must stay free besides, and
    /// `available` what is free (all bytes).
    case noSpace(download: Int64, write: Int64, reserve: Int64, available: Int64, path: String)

    /// A stable machine-readable code.
    public var code: String {
        switch self {
        case .fetch(let e): e.code
        case .store(let e): e.code
        case .fileListMismatch: "file-list-mismatch"
        case .fileListSchema(let e): e.code(or: "file-list-schema")
        case .dependencyGroup: "dependency-group"
        case .noSpace: "no-space"
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
        case .noSpace(let download, let write, let reserve, let available, let path):
            "not enough free space: it needs \(ByteText.format(download + write)) (\(ByteText.format(download)) to download, "
                + "\(ByteText.format(write)) to write) and \(ByteText.format(reserve)) left free besides; "
                + "\(ByteText.format(available)) are free on \(path) (nothing was written)"
        }
    }
}
