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
    /// The version is encrypted and this device has no recipient key (`SyncSetup.recipientKeys`).
    case recipientKeyMissing
    /// The version is encrypted for other recipients: none of its wrapped keys names one of
    /// this device's keys (`have`).
    case notRecipient(have: [String])
    /// The content key wrapped for this device's key `keyId` does not open with it (wrapped for
    /// another key, or damaged).
    case recipientKeyWrong(keyId: String)
    /// The version is encrypted with a scheme this build does not know.
    case encryptionScheme(String)
    /// A sealed blob matched its signed digest but does not open with the content key.
    case sealed(String)

    /// A stable machine-readable code.
    public var code: ReasonCode {
        switch self {
        case .fetch(let e): e.code
        case .store(let e): e.code
        case .fileListMismatch: "file-list-mismatch"
        case .fileListSchema(let e): e.code(or: "file-list-schema")
        case .dependencyGroup: "dependency-group"
        case .noSpace: "no-space"
        case .recipientKeyMissing: "recipient-key-missing"
        case .notRecipient: "not-a-recipient"
        case .recipientKeyWrong: "recipient-key-wrong"
        case .encryptionScheme: "encryption-scheme"
        case .sealed: "sealed-blob"
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
        case .recipientKeyMissing:
            "the version is encrypted and this device has no recipient key (sync --recipient-key FILE); nothing was fetched"
        case .notRecipient(let have):
            "the version is not encrypted to this device's recipient key (\(have.joined(separator: ", "))); nothing was fetched"
        case .recipientKeyWrong(let id):
            "the content key wrapped for recipient \(id) does not open with its private key (wrapped for another key, or damaged); nothing was fetched"
        case .encryptionScheme(let s):
            "the version is encrypted with scheme \(quoted(s)), which this build does not know (upgrade larder)"
        case .sealed(let d): "a sealed blob matches its signed digest but does not open: \(d)"
        }
    }
}
