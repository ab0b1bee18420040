import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

/// A team as `delegate add` asks for it.
package struct TeamRequest: Sendable {
    /// The team's name.
    package var name: String
    /// Release or rollout.
    package var role: TeamRole
    /// The team's public keys.
    package var publicKeys: [PublicKey]
    /// The package ids the team may publish.
    package var patterns: [PackagePattern]
    /// How many of its keys must sign a part.
    package var threshold: Int
    /// After this instant the team's keys' signatures do not count (nil: no expiry).
    package var keysExpire: Date?

    /// Creates a request.
    package init(
        name: String, role: TeamRole = .release, publicKeys: [PublicKey], patterns: [PackagePattern],
        threshold: Int = 1,
        keysExpire: Date? = nil
    ) {
        self.name = name
        self.role = role
        self.publicKeys = publicKeys
        self.patterns = patterns
        self.threshold = threshold
        self.keysExpire = keysExpire
    }
}

/// The two roles the root itself keys.
package enum RootRole: String, Sendable, CaseIterable {
    /// The root keys (offline): they sign every root.
    case root
    /// The online keys that sign the composed index.
    case index
}

/// One team as `delegate list` and the other verbs report it.
package struct TeamSummary: Sendable, Codable, Equatable {
    /// The team's name.
    package var name: String
    /// `release` or `rollout`.
    package var role: TeamRole
    /// Its key ids.
    package var keyIds: [String]
    /// How many must sign.
    package var threshold: Int
    /// Its package patterns.
    package var packages: [String]
    /// The serial of its newest part, when it has published one.
    package var partSerial: UInt64?
}

/// What a `delegate` verb or `compose` did, or what `delegate list` found.
package struct DelegationReport: Sendable, Codable, Equatable {
    /// The root version now current.
    package var rootVersion: UInt64
    /// Its root and index keys and thresholds.
    package var roles: RootRoles
    /// Every team.
    package var teams: [TeamSummary]
    /// Revoked key ids.
    package var revokedKeys: [String]
    /// Whether an index was composed (and so devices see this root and these parts).
    package var composed: Bool
    /// The composed index's serial, when one was published.
    package var serial: UInt64?
    /// Why no index was composed, when none was.
    package var notComposed: String?
    /// The part a `claim` wrote.
    package var part: PartReport?
}

extension Publisher {
    /// Adds a team to the root, or replaces its keys, patterns, threshold and role; the first one
    /// makes root 1 of a single-key repository, with this publisher's key as root and index key.
    package func delegateAdd(_ request: TeamRequest, repository: FilePath, timeToLive: TimeInterval = 30 * 24 * 3600)
        throws(PublishError) -> DelegationReport
    {
        try changeRoot(repository, ttl: timeToLive, strict: true) { root throws(PublishError) in
            let ids = request.publicKeys.map(\.keyID)
            if let revoked = ids.first(where: root.revokedKeys.contains) {
                throw .delegationSetup("key \(revoked) is revoked and is never used again; make a new key")
            }
            for k in request.publicKeys {
                if let i = root.keys.firstIndex(where: { $0.keyId == k.keyID }) {
                    if request.keysExpire != nil { root.keys[i].expires = request.keysExpire }
                } else {
                    root.keys.append(RootKey(k, expires: request.keysExpire))
                }
            }
            let team = Team(
                name: request.name, role: request.role, keyIds: ids, threshold: request.threshold,
                packages: request.patterns)
            if let i = root.teams.firstIndex(where: { $0.name == request.name }) {
                root.teams[i] = team
            } else {
                root.teams.append(team)
            }
        }
    }

    /// Removes a team. Refused while the composed view holds its packages, unless `dropPackages`
    /// (then they leave the index, and devices remove them). Its keys that no other role uses are
    /// revoked.
    package func delegateRemove(
        _ name: String, dropPackages: Bool, repository: FilePath, timeToLive: TimeInterval = 30 * 24 * 3600
    ) throws(PublishError) -> DelegationReport {
        try changeRoot(repository, ttl: timeToLive, strict: true, dropTeam: dropPackages ? name : nil) {
            root throws(PublishError) in
            guard let team = root.team(named: name) else {
                throw .delegationSetup("root \(root.version - 1) has no team \(quoted(name))")
            }
            root.teams.removeAll { $0.name == name }
            let used = Set(root.teams.flatMap(\.keyIds) + root.roles.root.keyIds + root.roles.index.keyIds)
            root.revokedKeys += team.keyIds.filter { !used.contains($0) && !root.revokedKeys.contains($0) }
        }
    }

    /// Revokes a key: no role may use it again. A team whose part it alone signed must re-sign
    /// (`delegate claim` with another key) before the index can be composed again.
    package func delegateRevoke(keyID: String, repository: FilePath, timeToLive: TimeInterval = 30 * 24 * 3600)
        throws(PublishError) -> DelegationReport
    {
        try changeRoot(repository, ttl: timeToLive, strict: false) { root throws(PublishError) in
            guard root.keys.contains(where: { $0.keyId == keyID }) else {
                throw .delegationSetup("root \(root.version - 1) names no key \(keyID)")
            }
            root.revokedKeys.append(keyID)
            for i in root.teams.indices { root.teams[i].keyIds.removeAll { $0 == keyID } }
            root.roles.root.keyIds.removeAll { $0 == keyID }
            root.roles.index.keyIds.removeAll { $0 == keyID }
        }
    }

    /// Sets the keys of a root role: `index` (the online keys that sign the composed index) or
    /// `root` (a root rotation: the new root is signed by the old root keys' threshold and the
    /// new ones', so give both as `--key` and `--co-sign`).
    package func delegateRole(
        _ role: RootRole, keys: [PublicKey], threshold: Int, repository: FilePath,
        timeToLive: TimeInterval = 30 * 24 * 3600
    ) throws(PublishError) -> DelegationReport {
        try changeRoot(repository, ttl: timeToLive, strict: true) { root throws(PublishError) in
            if let revoked = keys.map(\.keyID).first(where: root.revokedKeys.contains) {
                throw .delegationSetup("key \(revoked) is revoked and is never used again; make a new key")
            }
            for k in keys where !root.keys.contains(where: { $0.keyId == k.keyID }) { root.keys.append(RootKey(k)) }
            let keys = RoleKeys(keyIds: keys.map(\.keyID), threshold: threshold)
            switch role {
            case .root: root.roles.root = keys
            case .index: root.roles.index = keys
            }
        }
    }

    /// The team of this publisher's key signs, as its next part, its entries of the composed view:
    /// the packages it owns that were published before the repository was delegated (or before
    /// the team was given them). A part is written even when nothing changed, so a claim also
    /// re-signs the team's part with the keys given (before a threshold is raised, or a key
    /// dropped). Then the index is composed when it can be.
    package func claim(repository: FilePath, timeToLive: TimeInterval = 30 * 24 * 3600) throws(PublishError)
        -> DelegationReport
    {
        let layout = RepositoryLayout(root: repository)
        let lock = try publishLock(layout)
        defer { lock.unlock() }
        let (loaded, target) = try openTarget(layout)
        guard let delegated = target.delegated, var view = loaded else {
            throw .delegationSetup("\(repository) is not delegated (no root): `larder delegate add` makes one")
        }
        let (index, part) = try publishChange(&view, target, layout, ttl: timeToLive, resign: true)
        let repo = try loadDelegated(layout) ?? delegated
        var report = Self.report(repo)
        report.part = part
        report.composed = part?.composed ?? false
        report.serial = report.composed ? index.serial : nil
        if !report.composed { report.notComposed = unclaimed(repo, current: target.current) ?? "no index key" }
        return report
    }

    /// Composes the index from every team's newest part and publishes it, signed by the index
    /// keys this publisher holds.
    package func compose(repository: FilePath, timeToLive: TimeInterval = 30 * 24 * 3600) throws(PublishError)
        -> DelegationReport
    {
        let layout = RepositoryLayout(root: repository)
        let lock = try publishLock(layout)
        defer { lock.unlock() }
        guard let repo = try loadDelegated(layout) else {
            throw .delegationSetup("\(repository) is not delegated (no root): `larder delegate add` makes one")
        }
        guard let signers = indexSigners(repo.root) else {
            throw .delegationSetup(
                "the keys given are not \(repo.root.roles.index.threshold) of root \(repo.root.version)'s index keys (\(repo.root.roles.index.keyIds.joined(separator: ", ")))"
            )
        }
        let current = try loadIndex(layout, trusted: trustedForIndex(repo.root))
        let index = try composeIndex(repo, current: current, layout, signers: signers, ttl: timeToLive)
        var report = Self.report(repo)
        report.composed = true
        report.serial = index.serial
        return report
    }

    /// The root and teams of a delegated repository, read and checked against its own root keys.
    package func listDelegations(repository: FilePath) throws(PublishError) -> DelegationReport {
        guard let repo = try loadDelegated(RepositoryLayout(root: repository)) else {
            throw .delegationSetup("\(repository) is not delegated (no root)")
        }
        return Self.report(repo)
    }

    static func report(_ repo: DelegatedRepository) -> DelegationReport {
        DelegationReport(
            rootVersion: repo.root.version, roles: repo.root.roles,
            teams: repo.root.teams.map { t in
                TeamSummary(
                    name: t.name, role: t.role, keyIds: t.keyIds, threshold: t.threshold,
                    packages: t.packages.map(\.text), partSerial: repo.parts[t.name]?.part.serial)
            }, revokedKeys: repo.root.revokedKeys, composed: false)
    }

    /// The keys whose signature on the current index a delegated publisher accepts: the root's
    /// index and root keys (a repository migrating from one key has its old index signed by the
    /// root key), and its own.
    func trustedForIndex(_ root: RootDocument) -> [PublicKey] {
        let roleKeys = Set(root.roles.index.keyIds + root.roles.root.keyIds)
        return root.keys.filter { roleKeys.contains($0.keyId) }.compactMap(\.publicKey) + ownKeys
    }

    /// Writes the next root (`change` applied to the current one, or root 1 of a single-key
    /// repository), signed by the old root keys' threshold and the new ones' from this
    /// publisher's keys; then composes the index when it can. With `strict`, every team's newest
    /// part must still verify under the new root (a rotation must not orphan a part); otherwise
    /// those that do not are left out of the composition. `dropTeam`'s entries leave the index.
    func changeRoot(
        _ repository: FilePath, ttl: TimeInterval, strict: Bool, dropTeam: String? = nil,
        _ change: (inout RootDocument) throws(PublishError) -> Void
    ) throws(PublishError) -> DelegationReport {
        let layout = RepositoryLayout(root: repository)
        try io { () throws(FileSystemError) in try AtomicFile.makeDirectories(layout.root) }
        let lock = try publishLock(layout)
        defer { lock.unlock() }
        let existing = try loadDelegated(layout)
        var current: RepositoryIndex?
        var next: RootDocument
        if let repo = existing {
            current = try loadIndex(layout, trusted: trustedForIndex(repo.root))
            next = repo.root
            next.version += 1
        } else {
            // Root 1 of a single-key repository: its key becomes the root and index key.
            current = try loadIndex(layout)
            let id = key.publicKey.keyID
            next = RootDocument(
                version: 1, expires: now(), keys: [RootKey(key.publicKey)],
                roles: RootRoles(
                    root: RoleKeys(keyIds: [id], threshold: 1), index: RoleKeys(keyIds: [id], threshold: 1)),
                teams: [])
        }
        try change(&next)
        next.expires = Date(timeIntervalSince1970: (now().timeIntervalSince1970 + Self.rootLifetime).rounded(.down))
        let named = Set(next.roles.root.keyIds + next.roles.index.keyIds + next.teams.flatMap(\.keyIds))
        next.keys.removeAll { !named.contains($0.keyId) }
        if let p = next.problem() { throw .delegationSetup("refused, no root written: \(p)") }
        let bytes = try encode(next)
        let sig = try signRoot(bytes, next: next, previous: existing?.root)
        let repo = DelegatedRepository(
            root: next, rootBytes: bytes,
            parts: try carriedParts(existing, into: next, strict: strict, dropTeam: dropTeam))
        if let dropTeam, let c = current {
            current?.packages = c.packages.filter { existing?.root.owner(of: $0.id)?.name != dropTeam }
        } else if let c = current, let gone = existing?.root.teams.first(where: { next.team(named: $0.name) == nil }),
            c.packages.contains(where: { existing?.root.owner(of: $0.id)?.name == gone.name })
        {
            throw .delegationSetup(
                "refused, no root written: team \(gone.name) still has packages in the index (remove them with --drop-packages)"
            )
        }
        try writeRoot(bytes, sig, version: next.version, layout)
        var report = Self.report(repo)
        if let signers = indexSigners(next) {
            if let why = unclaimed(repo, current: current) {
                report.notComposed = why
            } else {
                report.serial = try composeIndex(repo, current: current, layout, signers: signers, ttl: ttl).serial
                report.composed = true
            }
        } else {
            report.notComposed = "no index key given: `larder compose --key INDEX.key` publishes it"
        }
        return report
    }

    /// The teams' newest parts that still verify under `next` (a removed team's and `dropTeam`'s
    /// are left out). With `strict`, one that does not verify refuses the change.
    func carriedParts(_ existing: DelegatedRepository?, into next: RootDocument, strict: Bool, dropTeam: String?)
        throws(PublishError) -> [String: PublishedPart]
    {
        var parts: [String: PublishedPart] = [:]
        for (team, p) in existing?.parts ?? [:] where team != dropTeam && next.team(named: team) != nil {
            do {
                _ = try DelegationCheck.checkParts(
                    [p.row], partBytes: [team: p.bytes], root: next, accepted: [:], now: now())
                parts[team] = p
            } catch {
                if strict {
                    throw .delegationSetup(
                        "refused, no root written: team \(team)'s newest part would not verify under it (\(error)); while both keys are listed, let the team sign a new part (`larder delegate claim` or a pack) with its new key first"
                    )
                }
                logger.notice("a team's part no longer verifies and is left out", metadata: ["team": "\(team)"])
            }
        }
        return parts
    }

    /// Writes root `version` (its signature first, so that a root without one is incomplete),
    /// then the `root.json` copy for tools.
    func writeRoot(_ bytes: Data, _ sig: SignatureFile, version: UInt64, _ layout: RepositoryLayout)
        throws(PublishError)
    {
        let rel = RootName.path(version: version)
        let sigBytes = try encode(sig)
        try io { () throws(FileSystemError) in
            try AtomicFile.makeDirectories(layout.roots)
            try AtomicFile.write(sigBytes, to: layout.resolve(rel + ".sig"))
            try AtomicFile.write(bytes, to: layout.resolve(rel))
            try AtomicFile.write(sigBytes, to: layout.rootSignature)
            try AtomicFile.write(bytes, to: layout.rootDocument)
        }
    }

    /// How long a root is valid: a year (the publisher writes a new one to renew it).
    static let rootLifetime: TimeInterval = 365 * 24 * 3600

    /// Signs a root with this publisher's keys that the old or new root role names, and checks
    /// both thresholds are met.
    func signRoot(_ bytes: Data, next: RootDocument, previous: RootDocument?) throws(PublishError) -> SignatureFile {
        let wanted = Set(next.roles.root.keyIds + (previous?.roles.root.keyIds ?? [key.publicKey.keyID]))
        var seen = Set<String>()
        let signers = ([key] + coSigners).filter {
            wanted.contains($0.publicKey.keyID) && seen.insert($0.publicKey.keyID).inserted
        }
        let sig: SignatureFile
        do { sig = try IndexSignature.sign(bytes, with: signers) } catch {
            throw .signing(.badKeyFile(path: "(signing key)", detail: "\(error)"))
        }
        do {
            if let previous {
                try DelegationCheck.requireThreshold(
                    role: "root \(next.version) (by root \(previous.version)'s keys)", message: bytes,
                    signatures: sig.signatures, keyIDs: previous.roles.root.keyIds,
                    threshold: previous.roles.root.threshold, root: previous, now: now())
            }
            try DelegationCheck.requireThreshold(
                role: "root \(next.version)", message: bytes, signatures: sig.signatures,
                keyIDs: next.roles.root.keyIds, threshold: next.roles.root.threshold, root: next, now: now())
        } catch { throw .delegation(error) }
        return sig
    }
}
