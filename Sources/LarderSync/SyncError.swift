import LarderCore
import LarderFetch
import LarderStore

/// Why a sync could do nothing (per-package failures are in the report instead).
public enum SyncError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The sandbox's config.json is missing or unusable.
    case config(ConfigError)
    /// The index or its signature could not be fetched.
    case fetch(FetchError)
    /// The index is not signed by a trusted key (or the check itself failed).
    case signature(SigningError)
    /// The signed index cannot be decoded (malformed, too large, or another schema version).
    case manifest(ManifestError)
    /// The index's serial is lower than one this sandbox accepted: a replayed old index.
    case rollbackAttack(serial: UInt64, accepted: UInt64)
    /// The same serial with different bytes.
    case serialReused(serial: UInt64)
    /// The index expired: nothing new is installed (what is installed keeps serving).
    case expired(String)
    /// The signature names another index than the one fetched, still after fetching the copy
    /// it names and the pair again past any cache: a publication under way, or a broken upload.
    /// Transient, not an attack: nothing was changed and the next sync tries again.
    case indexTorn(String)
    /// A shard or the catalog of a sharded index could not be fetched, or is not the one the
    /// signed index names (size, SHA-256, or contents that break the shard rules): nothing was
    /// recorded or changed.
    case indexShard(String)
    /// The sandbox could not be opened, read or written (locked, corrupt state, I/O).
    case store(StoreError)
    /// A delegated repository's root, index signature, team part or composition broke a trust
    /// rule (format §18): the code names which (`delegation-root`, `delegation-threshold`,
    /// `delegation-outside`, …). Nothing was recorded or changed.
    case delegation(code: ReasonCode, detail: String)

    /// A stable machine-readable code.
    public var code: ReasonCode {
        switch self {
        case .config(let e): e.code
        case .fetch(let e): e.code
        case .signature: "signature"
        case .manifest(let e): e.code(or: "index-schema")
        case .rollbackAttack: "rollback-attack"
        case .serialReused: "serial-reused"
        case .expired: "index-expired"
        case .indexTorn: "index-torn"
        case .indexShard: "index-shard"
        case .store(let e): e.code
        case .delegation(let code, _): code
        }
    }

    /// What stopped the sync, for a person.
    public var description: String {
        switch self {
        case .config(let e): e.description
        case .fetch(let e): "fetching the index: \(e)"
        case .signature(let e): "the index was refused: \(e)"
        case .manifest(let e): "the index was refused: \(e)"
        case .rollbackAttack(let s, let a):
            "the index has serial \(s), lower than the \(a) this sandbox accepted (a replayed old index?); nothing was changed"
        case .serialReused(let s):
            "the index has serial \(s), already accepted with different contents; nothing was changed"
        case .expired(let at): "the index expired at \(at); nothing new is installed until the publisher re-signs it"
        case .indexTorn(let detail):
            "\(detail); it named no copy the repository could serve either (indexes/<sha256>.json), nor did a fresh request past any cache agree; nothing was changed, and the next sync tries again"
        case .indexShard(let detail):
            "the index was refused: \(detail); nothing was changed"
        case .store(let e): e.description
        case .delegation(_, let detail): "the index was refused: \(detail); nothing was changed"
        }
    }
}
