import Foundation

/// Why a delegated repository's root, index or part was refused (format §18). Each case has its
/// own reason code; a device that meets one keeps what it runs and what it accepted before.
package enum DelegationRefusal: Error, Sendable, Equatable, CustomStringConvertible {
    /// A root is not the next one, is not signed by the previous root's threshold and its own,
    /// is older than the one held, breaks a root rule, or is not the one named.
    case root(String)
    /// Fewer distinct keys of the role signed than its threshold.
    case threshold(role: String, signed: Int, threshold: Int)
    /// The threshold was missed, and a revoked key's signature would have counted.
    case keyRevoked(role: String, keyID: String)
    /// The threshold was missed, and an expired key's signature would have counted.
    case keyExpired(role: String, keyID: String)
    /// A signature by one of the role's keys does not match the bytes.
    case invalidSignature(role: String, keyID: String)
    /// The index names a team the root does not know.
    case unknownTeam(String)
    /// A part is not the one named or signed, or the index's entries are not the parts' entries.
    case partMismatch(team: String, detail: String)
    /// A team's part is older than the one accepted, or reuses its serial with other bytes.
    case partRollback(team: String, serial: UInt64, accepted: UInt64)
    /// A package outside the patterns of the team that signed it, or owned by no team.
    case outside(team: String?, id: PackageID, detail: String)
    /// A root or part document cannot be read.
    case malformed(ManifestError)
    /// A hold caps a release above the ceiling its release key signed (format §20).
    case rolloutRaise(String)

    /// The reason code.
    package var code: ReasonCode {
        switch self {
        case .root: "delegation-root"
        case .threshold: "delegation-threshold"
        case .keyRevoked: "delegation-key-revoked"
        case .keyExpired: "delegation-key-expired"
        case .invalidSignature: "signature"
        case .unknownTeam: "delegation-unknown-team"
        case .partMismatch: "delegation-part-mismatch"
        case .partRollback: "delegation-part-rollback"
        case .outside: "delegation-outside"
        case .malformed(let e): e.code(or: "delegation-document")
        case .rolloutRaise: "rollout-raise"
        }
    }

    /// What was wrong, naming the role, team, key or package.
    package var description: String {
        switch self {
        case .root(let d): "root: \(d)"
        case .threshold(let role, let signed, let threshold):
            "\(role) is signed by \(signed) of its keys; its threshold is \(threshold)"
        case .keyRevoked(let role, let key):
            "\(role) misses its threshold: key \(key) is revoked, its signature does not count"
        case .keyExpired(let role, let key):
            "\(role) misses its threshold: key \(key) has expired, its signature does not count"
        case .invalidSignature(let role, let key):
            "the signature by \(role) key \(key) does not match the bytes (edited after signing, or corrupted)"
        case .unknownTeam(let t): "the index names a part of team \(quoted(t)), which the root does not delegate to"
        case .partMismatch(let team, let d): "team \(team)'s part: \(d)"
        case .partRollback(let team, let serial, let accepted):
            serial == accepted
                ? "team \(team)'s part \(serial) was accepted with different contents"
                : "team \(team)'s part \(serial) is older than the accepted \(accepted)"
        case .outside(let team, let id, let d):
            team.map { "team \($0) may not publish package \(id): \(d)" } ?? "package \(id): \(d)"
        case .malformed(let e): "\(e)"
        case .rolloutRaise(let d): "\(d); a rollout key can only hold a release back"
        }
    }
}

/// A part this device accepted for a team: its serial and bytes' digest, and the digest of its
/// entries as this device encodes them (`DelegationCheck.entriesDigest`), so that a later index
/// naming the same part under the same root is checked without decoding the part again.
package struct AcceptedPart: Codable, Sendable, Equatable {
    /// The part's serial.
    package var serial: UInt64
    /// SHA-256 of its bytes.
    package var sha256: SHA256Digest
    /// `entriesDigest` of its entries; nil in records written before it existed.
    package var entries: SHA256Digest?

    /// Creates a record.
    package init(serial: UInt64, sha256: SHA256Digest, entries: SHA256Digest? = nil) {
        self.serial = serial
        self.sha256 = sha256
        self.entries = entries
    }
}

/// A root a device trusts: the document and the name of its bytes.
package struct HeldRoot: Sendable, Equatable {
    /// The root.
    package var document: RootDocument
    /// Its version and bytes' size and SHA-256.
    package var name: RootName

    /// Creates the pair.
    package init(document: RootDocument, name: RootName) {
        self.document = document
        self.name = name
    }
}
