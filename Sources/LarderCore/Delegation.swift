import Foundation

/// A public key a delegated repository's root names (format §18): the key file of §6, with an
/// optional expiry after which its signatures do not count.
package struct RootKey: Codable, Sendable, Equatable {
    /// The key id (first 16 hex digits of the raw key's SHA-256).
    package var keyId: String
    /// Always `ed25519-public`.
    package var type: String
    /// The 32 raw key bytes, base64.
    package var key: String
    /// After this instant the key's signatures do not count.
    package var expires: Date?

    /// The entry for `key`.
    package init(_ key: PublicKey, expires: Date? = nil) {
        keyId = key.keyID
        type = KeyFile.publicType
        self.key = key.base64
        self.expires = expires
    }

    /// The key, when the entry is a usable Ed25519 public key whose id is its `keyId`.
    package var publicKey: PublicKey? {
        guard type == KeyFile.publicType, let raw = Data(base64Encoded: key),
            let k = try? PublicKey(rawRepresentation: raw), k.keyID == keyId
        else { return nil }
        return k
    }
}

/// The keys of one role and how many of them must sign.
package struct RoleKeys: Codable, Sendable, Equatable {
    /// The role's key ids (each in the root's `keys`).
    package var keyIds: [String]
    /// How many distinct keys of `keyIds` must sign (1 ... keyIds.count).
    package var threshold: Int

    /// Creates a role.
    package init(keyIds: [String], threshold: Int) {
        self.keyIds = keyIds
        self.threshold = threshold
    }
}

/// The root's own keys and the online keys that sign the composed index.
package struct RootRoles: Codable, Sendable, Equatable {
    /// The root keys: they sign every root.
    package var root: RoleKeys
    /// The online keys that sign `index.json`.
    package var index: RoleKeys

    /// Creates the roles.
    package init(root: RoleKeys, index: RoleKeys) {
        self.root = root
        self.index = index
    }
}

/// What a team's keys may sign.
package enum TeamRole: String, Codable, Sendable, CaseIterable {
    /// The entries of the packages its patterns match.
    case release
    /// Only holds on releases (pause, a lower percentage, halt): the rollout guard's key.
    case rollout
}

/// One delegated team: its keys, threshold and package patterns.
package struct Team: Codable, Sendable, Equatable {
    /// The team's name (`^[a-z0-9][a-z0-9._-]{0,63}$`, the grammar of a package id), also its
    /// directory under `parts/`.
    package var name: String
    /// Release or rollout.
    package var role: TeamRole
    /// The team's key ids (each in the root's `keys`).
    package var keyIds: [String]
    /// How many distinct team keys must sign a part.
    package var threshold: Int
    /// The package ids the team may publish.
    package var packages: [PackagePattern]

    /// Creates a team.
    package init(name: String, role: TeamRole = .release, keyIds: [String], threshold: Int, packages: [PackagePattern])
    {
        self.name = name
        self.role = role
        self.keyIds = keyIds
        self.threshold = threshold
        self.packages = packages
    }

    /// Whether the team's patterns match `id`.
    package func claims(_ id: PackageID) -> Bool { packages.contains { $0.matches(id) } }
}

/// `root.json` of a delegated repository (format §18): every key, the root and index roles, and
/// the teams with their patterns. Signed by its root keys, and each new version also by the
/// previous version's.
package struct RootDocument: Codable, Sendable, Equatable, RepositoryDocument, SchemaVersioned {
    /// The document's format version, 1.
    package var schemaVersion: Int
    /// 1, 2, …: one more with each change.
    package var version: UInt64
    /// After this instant a device accepts no index under this root.
    package var expires: Date
    /// Every key the roles name.
    package var keys: [RootKey]
    /// The root and index roles.
    package var roles: RootRoles
    /// The delegated teams.
    package var teams: [Team]
    /// Key ids no role may use again.
    package var revokedKeys: [String]

    /// The most teams a root may name.
    package static let maxTeams = 256

    /// Creates a root.
    package init(
        schemaVersion: Int = currentSchemaVersion, version: UInt64, expires: Date, keys: [RootKey], roles: RootRoles,
        teams: [Team], revokedKeys: [String] = []
    ) {
        self.schemaVersion = schemaVersion
        self.version = version
        self.expires = expires
        self.keys = keys
        self.roles = roles
        self.teams = teams
        self.revokedKeys = revokedKeys
    }

    enum CodingKeys: String, CodingKey { case schemaVersion, version, expires, keys, roles, teams, revokedKeys }

    /// Decodes a root; a missing `revokedKeys` is empty.
    package init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        schemaVersion = try c.decode(Int.self, forKey: .schemaVersion)
        version = try c.decode(UInt64.self, forKey: .version)
        expires = try c.decode(Date.self, forKey: .expires)
        keys = try c.decode([RootKey].self, forKey: .keys)
        roles = try c.decode(RootRoles.self, forKey: .roles)
        teams = try c.decode([Team].self, forKey: .teams)
        revokedKeys = try c.decodeIfPresent([String].self, forKey: .revokedKeys) ?? []
    }

    /// The team with this name.
    package func team(named name: String) -> Team? { teams.first { $0.name == name } }

    /// The release team whose patterns match `id` (release teams' patterns never overlap, so
    /// there is at most one).
    package func owner(of id: PackageID) -> Team? {
        teams.first { $0.role == .release && $0.claims(id) }
    }

    /// The rules the schema cannot state: versions from 1, every key usable and named once, every
    /// role's keys known and its threshold reachable, team names valid and unique, release
    /// teams' patterns disjoint. The first broken rule, for a person; nil when all hold.
    package func problem() -> String? {
        guard version >= 1 else { return "version must be 1 or more" }
        var known = Set<String>()
        for k in keys {
            guard k.publicKey != nil else { return "key \(quoted(k.keyId)) is not an Ed25519 public key with that id" }
            guard known.insert(k.keyId).inserted else { return "key \(k.keyId) is listed twice" }
        }
        func roleProblem(_ what: String, _ r: RoleKeys) -> String? {
            if let unknown = r.keyIds.first(where: { !known.contains($0) }) {
                return "\(what) names unknown key \(unknown)"
            }
            if Set(r.keyIds).count != r.keyIds.count { return "\(what) names a key twice" }
            guard (1...max(1, r.keyIds.count)).contains(r.threshold), !r.keyIds.isEmpty else {
                return "\(what) has threshold \(r.threshold) with \(r.keyIds.count) keys"
            }
            return nil
        }
        if let p = roleProblem("the root role", roles.root) { return p }
        if let p = roleProblem("the index role", roles.index) { return p }
        guard teams.count <= Self.maxTeams else { return "\(teams.count) teams: a root names at most \(Self.maxTeams)" }
        var names = Set<String>()
        for t in teams {
            guard PackageID.isValid(t.name) else { return "\(quoted(t.name)) is not a team name" }
            guard names.insert(t.name).inserted else { return "team \(t.name) is listed twice" }
            if let p = roleProblem("team \(t.name)", RoleKeys(keyIds: t.keyIds, threshold: t.threshold)) { return p }
            guard !t.packages.isEmpty else { return "team \(t.name) has no package pattern" }
        }
        return overlap().map { "teams \($0.0) and \($0.1) both claim package ids matching \($0.2) and \($0.3)" }
    }

    /// Two release teams whose patterns share an id: the teams and the two patterns.
    package func overlap() -> (String, String, String, String)? {
        let release = teams.filter { $0.role == .release }
        for (i, a) in release.enumerated() {
            for b in release[(i + 1)...] {
                for pa in a.packages {
                    for pb in b.packages where pa.overlaps(pb) { return (a.name, b.name, pa.text, pb.text) }
                }
            }
        }
        return nil
    }
}

/// A team's part, `parts/<team>/<serial>.json` (format §18): the entries of the team's own
/// packages, signed by the team's keys.
package struct TeamPart: Codable, Sendable, Equatable, RepositoryDocument, SchemaVersioned {
    /// The document's format version, 1.
    package var schemaVersion: Int
    /// The team that signs it.
    package var team: String
    /// 1, 2, …: one more with each publication of the team.
    package var serial: UInt64
    /// The team's package entries, every channel (none in a rollout team's part).
    package var packages: [PackageEntry]
    /// A rollout team's holds (format §20); nil in a release team's part.
    package var holds: [RolloutHold]?

    /// Creates a part.
    package init(
        schemaVersion: Int = currentSchemaVersion, team: String, serial: UInt64, packages: [PackageEntry],
        holds: [RolloutHold]? = nil
    ) {
        self.schemaVersion = schemaVersion
        self.team = team
        self.serial = serial
        self.packages = packages
        self.holds = holds
    }

    enum CodingKeys: String, CodingKey { case schemaVersion, team, serial, packages, holds }

    /// Decodes a part, refusing a team name that is not one and a serial of 0.
    package init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        schemaVersion = try c.decode(Int.self, forKey: .schemaVersion)
        team = try c.decode(String.self, forKey: .team)
        serial = try c.decode(UInt64.self, forKey: .serial)
        packages = try c.decode([PackageEntry].self, forKey: .packages)
        holds = try c.decodeIfPresent([RolloutHold].self, forKey: .holds)
        if let holds, holds.count > RolloutHold.maxHolds {
            throw DecodingError.dataCorruptedError(
                forKey: .holds, in: c, debugDescription: "\(holds.count) holds: at most \(RolloutHold.maxHolds)")
        }
        guard PackageID.isValid(team) else {
            throw DecodingError.dataCorruptedError(
                forKey: .team, in: c,
                debugDescription: "\(quoted(team)) is not a team name: expected [a-z0-9][a-z0-9._-]{0,63}")
        }
        guard serial >= 1 else {
            throw DecodingError.dataCorruptedError(
                forKey: .serial, in: c, debugDescription: "a part's serial is 1 or more")
        }
    }

    /// Where a team's part of a serial lives in the repository.
    package static func path(team: String, serial: UInt64) -> String { "parts/\(team)/\(serial).json" }
}

/// The exact bytes of a root version: what the composed index was made under.
package struct RootName: Codable, Sendable, Equatable {
    /// The root's version.
    package var version: UInt64
    /// Its length in bytes.
    package var size: Int64
    /// SHA-256 of its bytes.
    package var sha256: SHA256Digest

    /// The name of a root's bytes.
    package init(version: UInt64, of bytes: Data) {
        self.version = version
        size = Int64(bytes.count)
        sha256 = SHA256Digest.of(bytes)
    }

    /// Whether `bytes` are the root this names.
    package func names(_ bytes: Data) -> Bool { Int64(bytes.count) == size && SHA256Digest.of(bytes) == sha256 }

    /// Where a root version lives in the repository.
    package static func path(version: UInt64) -> String { "roots/\(version).json" }
}

/// One team's current part, as the composed index names it.
package struct PartRow: Codable, Sendable, Equatable {
    /// The team.
    package var team: String
    /// The part's serial.
    package var serial: UInt64
    /// The part file: `parts/<team>/<serial>.json`, its size and SHA-256.
    package var part: BlobRef
    /// The team's signatures over the part's bytes.
    package var signatures: [SignatureEntry]

    /// Creates a row.
    package init(team: String, serial: UInt64, part: BlobRef, signatures: [SignatureEntry]) {
        self.team = team
        self.serial = serial
        self.part = part
        self.signatures = signatures
    }
}

extension PartRow {
    /// The row of a team's part whose bytes are `bytes`: at its own path, by their size and SHA-256.
    package init(team: String, serial: UInt64, bytes: Data, signatures: [SignatureEntry]) {
        self.init(
            team: team, serial: serial,
            part: BlobRef(
                path: TeamPart.path(team: team, serial: serial), size: Int64(bytes.count),
                sha256: SHA256Digest.of(bytes)),
            signatures: signatures)
    }
}

/// `index.json`'s `delegations` member: the root the view was composed under, and each team's
/// current part.
package struct Delegations: Codable, Sendable, Equatable {
    /// The root version and bytes.
    package var root: RootName
    /// One row per team that has published.
    package var parts: [PartRow]

    /// Creates the member.
    package init(root: RootName, parts: [PartRow]) {
        self.root = root
        self.parts = parts
    }
}
