import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

/// A delegated repository as a publisher reads it (format §18): its root, each team's newest
/// part, and the composed index made from them.
struct DelegatedRepository {
    /// The current root.
    var root: RootDocument
    /// Its bytes (what the index names).
    var rootBytes: Data
    /// The newest complete part of each team that has published, by team.
    var parts: [String: PublishedPart]

    /// The name the composed index gives the root.
    var rootName: RootName { RootName(version: root.version, of: rootBytes) }
}

/// One team part as written in the repository: its value, bytes and signatures.
struct PublishedPart {
    var part: TeamPart
    var bytes: Data
    var signatures: SignatureFile

    /// The row the composed index names it by.
    var row: PartRow {
        PartRow(team: part.team, serial: part.serial, bytes: bytes, signatures: signatures.signatures)
    }
}

extension RepositoryLayout {
    /// `root.json`: a copy of the newest root, for tools.
    var rootDocument: FilePath { root.joined("root.json") }
    /// `root.json.sig`.
    var rootSignature: FilePath { root.joined("root.json.sig") }
    /// `roots/`: every root version and its signatures, immutable.
    var roots: FilePath { root.joined("roots") }
    /// Whether the repository is delegated (it has a root 1).
    var isDelegated: Bool { AtomicFile.exists(resolve(RootName.path(version: 1) + ".sig")) }

    /// The newest root version whose document and signature are both there (the signature is
    /// written first).
    func newestRootVersion() -> UInt64? { Self.newestSigned(in: roots) }

    /// The highest `n` of the complete `<n>.json` in `dir` (its `.sig` beside it: the signature
    /// is written first), or nil when there is none. Roots and team parts are kept this way.
    static func newestSigned(in dir: FilePath) -> UInt64? {
        guard let names = try? SystemCalls.listDirectory(dir) else { return nil }
        let files = Set(names.map(\.name.string))
        return files.compactMap { name -> UInt64? in
            guard name.hasSuffix(".json"), files.contains(name + ".sig") else { return nil }
            return UInt64(name.dropLast(5))
        }.max()
    }
}

extension Publisher {
    /// The repository's newest root (`roots/<n>.json`), checked against its own root keys; nil
    /// when it has none.
    func loadRoot(_ layout: RepositoryLayout) throws(PublishError) -> (RootDocument, Data)? {
        guard layout.isDelegated, let version = layout.newestRootVersion() else { return nil }
        let rel = RootName.path(version: version)
        let bytes = try io { () throws(FileSystemError) in try AtomicFile.read(layout.resolve(rel)) }
        let sig = try io { () throws(FileSystemError) in try AtomicFile.read(layout.resolve(rel + ".sig")) }
        do throws(DelegationRefusal) {
            let root = try DelegationCheck.decodeRoot(bytes, document: rel)
            guard root.version == version else { throw DelegationRefusal.root("\(rel) says version \(root.version)") }
            let file = try DelegationCheck.signatureFile(sig, document: rel + ".sig")
            try DelegationCheck.requireThreshold(
                role: "root \(root.version)", message: bytes, signatures: file.signatures,
                keyIDs: root.roles.root.keyIds, threshold: root.roles.root.threshold, root: root, now: now())
            return (root, bytes)
        } catch { throw .delegation(error) }
    }

    /// The root and every team's newest complete part (its signature file is written first, so a
    /// part file without one is from an interrupted publication and is skipped), each checked:
    /// its team's threshold, its serial, and packages within the team's patterns.
    func loadDelegated(_ layout: RepositoryLayout) throws(PublishError) -> DelegatedRepository? {
        guard let (root, rootBytes) = try loadRoot(layout) else { return nil }
        var parts: [String: PublishedPart] = [:]
        for team in root.teams {
            guard let serial = newestPartSerial(layout, team: team.name) else { continue }
            let rel = TeamPart.path(team: team.name, serial: serial)
            let bytes = try io { () throws(FileSystemError) in try AtomicFile.read(layout.resolve(rel)) }
            let sigBytes = try io { () throws(FileSystemError) in try AtomicFile.read(layout.resolve(rel + ".sig")) }
            do throws(DelegationRefusal) {
                let sig = try DelegationCheck.signatureFile(sigBytes, document: rel + ".sig")
                let row = PartRow(team: team.name, serial: serial, bytes: bytes, signatures: sig.signatures)
                let checked = try DelegationCheck.checkParts(
                    [row], partBytes: [team.name: bytes], root: root, accepted: [:], now: now())
                if let part = checked[team.name] {
                    parts[team.name] = PublishedPart(part: part, bytes: bytes, signatures: sig)
                }
            } catch { throw .delegation(error) }
        }
        return DelegatedRepository(root: root, rootBytes: rootBytes, parts: parts)
    }

    /// The highest serial of a team's complete parts (`parts/<team>/<n>.json` with its `.sig`).
    func newestPartSerial(_ layout: RepositoryLayout, team: String) -> UInt64? {
        RepositoryLayout.newestSigned(in: layout.root.joined("parts").joined(team))
    }

    /// The index a delegated repository's publishers work on: every team's newest part's entries,
    /// with the entries of the current index that no part lists yet (a repository migrating from
    /// one key), the current serial and shard layout.
    func delegatedView(_ repo: DelegatedRepository, current: RepositoryIndex?) -> RepositoryIndex {
        var packages = repo.parts.values.flatMap(\.part.packages)
        let signed = Set(packages.map { "\($0.id)\u{0}\($0.channel)" })
        packages += (current?.packages ?? []).filter { !signed.contains("\($0.id)\u{0}\($0.channel)") }
        packages.sort { ($0.id, $0.channel) < ($1.id, $1.channel) }
        return RepositoryIndex(
            serial: current?.serial ?? 0, expires: current?.expires ?? now(), packages: packages,
            shards: current?.shards, telemetry: current?.telemetry)
    }

    /// The release team `key` belongs to.
    func publishingTeam(_ root: RootDocument) throws(PublishError) -> Team {
        let id = key.publicKey.keyID
        guard let team = root.teams.first(where: { $0.role == .release && $0.keyIds.contains(id) }) else {
            throw .delegationSetup(
                "key \(id) belongs to no release team of root \(root.version) (teams: \(root.teams.map(\.name).joined(separator: ", ")))"
            )
        }
        return team
    }

    /// Refuses a package the publishing team does not own, before anything is written.
    func requireOwned(_ id: PackageID, by team: Team, _ root: RootDocument) throws(PublishError) {
        guard root.owner(of: id)?.name == team.name else {
            let detail =
                root.owner(of: id).map { "team \($0.name) owns it" }
                ?? "no team's patterns match it (theirs: \(team.packages.map(\.text).joined(separator: ", ")))"
            throw .delegation(.outside(team: team.name, id: id, detail: detail))
        }
    }

    /// Writes the team's next part from `view` (its entries of the packages it owns), signed by the
    /// keys of this publisher that are the team's, when they differ from its newest part. Returns
    /// the part written, or nil when nothing of the team's changed.
    func writePart(
        _ view: RepositoryIndex, team: Team, _ repo: inout DelegatedRepository, _ layout: RepositoryLayout,
        always: Bool = false
    ) throws(PublishError) -> TeamPart? {
        let entries = view.packages.filter { repo.root.owner(of: $0.id)?.name == team.name }
        let previous = repo.parts[team.name]
        if let previous, previous.part.packages == entries, !always { return nil }
        let part = TeamPart(team: team.name, serial: (previous?.part.serial ?? 0) + 1, packages: entries)
        try writeSigned(part, team: team, &repo, layout)
        return part
    }

    /// Writes `part` signed by the keys of this publisher that are its team's (their threshold
    /// checked first), the signature before the part, and records it as the team's newest.
    func writeSigned(_ part: TeamPart, team: Team, _ repo: inout DelegatedRepository, _ layout: RepositoryLayout)
        throws(PublishError)
    {
        let bytes = try encode(part)
        let signers = ([key] + coSigners).filter { team.keyIds.contains($0.publicKey.keyID) }
        let sig: SignatureFile
        do { sig = try IndexSignature.sign(bytes, with: signers) } catch {
            throw .signing(.badKeyFile(path: "(signing key)", detail: "\(error)"))
        }
        do {
            try DelegationCheck.requireThreshold(
                role: "team \(team.name)", message: bytes, signatures: sig.signatures, keyIDs: team.keyIds,
                threshold: team.threshold, root: repo.root, now: now())
        } catch { throw .delegation(error) }
        let rel = TeamPart.path(team: team.name, serial: part.serial)
        let path = layout.resolve(rel)
        let sigBytes = try encode(sig)
        // The signature first: a part file is complete only once both are there.
        try io { () throws(FileSystemError) in
            try AtomicFile.makeDirectories(path.parentPath)
            try AtomicFile.write(sigBytes, to: layout.resolve(rel + ".sig"))
            try AtomicFile.write(bytes, to: path)
        }
        repo.parts[team.name] = PublishedPart(part: part, bytes: bytes, signatures: sig)
    }

    /// The keys of this publisher that sign for the index role, when they reach its threshold.
    func indexSigners(_ root: RootDocument) -> [PrivateKey]? {
        var seen = Set<String>()
        let keys = ([key] + coSigners + indexKeys).filter {
            root.roles.index.keyIds.contains($0.publicKey.keyID) && seen.insert($0.publicKey.keyID).inserted
        }
        return keys.count >= root.roles.index.threshold ? keys : nil
    }

    /// Why the index cannot be composed yet: entries of the current index that no team's part
    /// lists (a repository migrating from one key), named with their owners; nil when it can.
    func unclaimed(_ repo: DelegatedRepository, current: RepositoryIndex?) -> String? {
        let signed = Set(repo.parts.values.flatMap(\.part.packages).map { "\($0.id)\u{0}\($0.channel)" })
        let missing = (current?.packages ?? []).filter { !signed.contains("\($0.id)\u{0}\($0.channel)") }
        guard !missing.isEmpty else { return nil }
        let ids = Set(missing.map(\.id)).sorted()
        var owners = ids.prefix(8).map { id in
            "\(id) (\(repo.root.owner(of: id).map { "team \($0.name)" } ?? "no team"))"
        }
        if ids.count > 8 { owners.append("and \(ids.count - 8) more") }
        return
            "not composed: no team part lists \(owners.joined(separator: ", ")); the owning team runs `larder delegate claim`, or a team is added for them"
    }

    /// Composes and publishes the index from every team's newest part, signed by the index keys:
    /// refused while an entry of the current index has no part.
    func composeIndex(
        _ repo: DelegatedRepository, current: RepositoryIndex?, _ layout: RepositoryLayout, signers: [PrivateKey],
        ttl: TimeInterval
    ) throws(PublishError) -> RepositoryIndex {
        if let why = unclaimed(repo, current: current) { throw .delegationSetup(why) }
        var index = delegatedView(repo, current: current)
        index.keys = nil
        let holds = holdsOfParts(repo)
        index.holds = holds.isEmpty ? nil : holds
        index.delegations = Delegations(
            root: repo.rootName,
            parts: repo.parts.values.sorted { $0.part.team < $1.part.team }.map(\.row))
        return try publish(&index, layout, ttl: ttl, signers: signers, root: repo.rootName)
    }
}

/// Where a pack or revoke publishes its change: the index itself, or a delegated repository's
/// team part (and then the composed index, when the publisher holds the index keys).
struct PublicationTarget {
    /// The delegated repository, nil for a single-key one.
    var delegated: DelegatedRepository?
    /// The release team the publisher's key belongs to.
    var team: Team?
    /// The current index as published (the view is composed from the parts).
    var current: RepositoryIndex?
}

extension Publisher {
    /// The index a pack or revoke changes, and where the change goes.
    func openTarget(_ layout: RepositoryLayout) throws(PublishError) -> (RepositoryIndex?, PublicationTarget) {
        guard let repo = try loadDelegated(layout) else { return (try loadIndex(layout), PublicationTarget()) }
        let team = try publishingTeam(repo.root)
        // The team's threshold from this publisher's keys, checked before anything is written.
        let now = now()
        let usable = Set(([key] + coSigners).map(\.publicKey.keyID)).filter { id in
            team.keyIds.contains(id) && !repo.root.revokedKeys.contains(id)
                && !(repo.root.keys.first { $0.keyId == id }?.expires.map { $0 <= now } ?? false)
        }
        guard usable.count >= team.threshold else {
            throw .delegation(.threshold(role: "team \(team.name)", signed: usable.count, threshold: team.threshold))
        }
        let current = try loadIndex(layout, trusted: trustedForIndex(repo.root))
        return (delegatedView(repo, current: current), PublicationTarget(delegated: repo, team: team, current: current))
    }

    /// Publishes a changed index: signed as it is in a single-key repository; in a delegated one
    /// as the team's next part, then composed when this publisher holds the index keys and every
    /// entry has a part.
    /// `resign`: write the part even when its entries did not change (a claim signs it anew, with
    /// the keys given).
    func publishChange(
        _ view: inout RepositoryIndex, _ target: PublicationTarget, _ layout: RepositoryLayout, ttl: TimeInterval,
        resign: Bool = false
    ) throws(PublishError) -> (RepositoryIndex, PartReport?) {
        guard var repo = target.delegated, let team = target.team else {
            return (try publish(&view, layout, ttl: ttl), nil)
        }
        let written = try writePart(view, team: team, &repo, layout, always: resign)
        let serial = written?.serial ?? repo.parts[team.name]?.part.serial ?? 0
        if let signers = indexSigners(repo.root) {
            if let why = unclaimed(repo, current: target.current) {
                logger.notice("\(why)")
            } else {
                // Index-level members (the telemetry endpoint) as the change left them.
                var current = target.current
                current?.telemetry = view.telemetry
                let index = try composeIndex(repo, current: current, layout, signers: signers, ttl: ttl)
                return (index, PartReport(team: team.name, serial: serial, composed: true))
            }
        }
        return (view, PartReport(team: team.name, serial: serial, composed: false))
    }
}
