import Foundation

/// The trust rules of a delegated repository (format §18), pure: the caller fetches, these decide.
package enum DelegationCheck {
    /// A document and its signature file, as fetched.
    package struct Signed: Sendable {
        /// The document's bytes.
        package var bytes: Data
        /// Its signature file's bytes.
        package var signature: Data

        /// Creates the pair.
        package init(bytes: Data, signature: Data) {
            self.bytes = bytes
            self.signature = signature
        }
    }

    /// Counts the distinct keys of `keyIDs` that signed `message` validly and may still sign;
    /// throws when fewer than `threshold` did. A signature by a key of the role that does not
    /// verify is refused outright (as in §6), one by a key outside the role is ignored.
    package static func requireThreshold(
        role: String, message: Data, signatures: [SignatureEntry], keyIDs: [String], threshold: Int,
        root: RootDocument?, extra: [PublicKey] = [], now: Date
    ) throws(DelegationRefusal) {
        var byID: [String: (PublicKey, Date?)] = [:]
        for k in root?.keys ?? [] { if let pk = k.publicKey { byID[k.keyId] = (pk, k.expires) } }
        for pk in extra { byID[pk.keyID] = (pk, nil) }
        let allowed = Set(keyIDs)
        let revoked = Set(root?.revokedKeys ?? [])
        var good = Set<String>()
        var revokedSeen: String?
        var expiredSeen: String?
        for e in signatures {
            if revoked.contains(e.keyID) {
                revokedSeen = revokedSeen ?? e.keyID
                continue
            }
            guard allowed.contains(e.keyID), let (key, expires) = byID[e.keyID] else { continue }
            guard e.algorithm == "ed25519", let sig = Data(base64Encoded: e.signature),
                key.isValidSignature(sig, for: message)
            else { throw .invalidSignature(role: role, keyID: e.keyID) }
            if let expires, expires <= now {
                expiredSeen = expiredSeen ?? e.keyID
                continue
            }
            good.insert(e.keyID)
        }
        guard good.count < threshold else { return }
        if let k = revokedSeen { throw .keyRevoked(role: role, keyID: k) }
        if let k = expiredSeen { throw .keyExpired(role: role, keyID: k) }
        throw .threshold(role: role, signed: good.count, threshold: threshold)
    }

    /// Decodes a root and checks its own rules.
    package static func decodeRoot(_ bytes: Data, document: String) throws(DelegationRefusal) -> RootDocument {
        let root: RootDocument
        do { root = try ManifestCoding.decode(RootDocument.self, from: bytes, document: document) } catch {
            throw .malformed(error)
        }
        if let p = root.problem() { throw .root("root \(root.version): \(p)") }
        return root
    }

    /// Follows the roots from the one held to the one named (TUF 5.3.4): each next version is
    /// signed by the threshold of the previous root's root keys and by its own; the first a device
    /// meets, with none held, by one of the keys it was configured with and by its own threshold.
    /// `chain` holds the versions after the held one, in order, ending at the one named. Returns
    /// the root now trusted (the held one when `chain` is empty).
    package static func followRoots(
        held: HeldRoot?, configured: [PublicKey], chain: [Signed], named: RootName, now: Date
    ) throws(DelegationRefusal) -> HeldRoot {
        let first: UInt64
        if let held {
            guard named.version >= held.document.version else {
                throw .root("the index names root \(named.version), older than the held \(held.document.version)")
            }
            first = held.document.version + 1
        } else {
            guard UInt64(chain.count) <= named.version, !chain.isEmpty else {
                throw .root("no root up to \(named.version) was given to check")
            }
            first = named.version - UInt64(chain.count) + 1
        }
        guard first + UInt64(chain.count) == named.version + 1 else {
            throw .root("the roots given do not lead to root \(named.version)")
        }
        do {
            return try walkRoots(held: held, first: first, configured: configured, chain: chain, named: named, now: now)
        } catch {
            // A root change the thresholds do not carry is a refusal of the root, whatever key missed.
            switch error {
            case .threshold, .keyRevoked, .keyExpired, .invalidSignature: throw .root(error.description)
            default: throw error
            }
        }
    }

    private static func walkRoots(
        held: HeldRoot?, first: UInt64, configured: [PublicKey], chain: [Signed], named: RootName, now: Date
    ) throws(DelegationRefusal) -> HeldRoot {
        var current = held
        for (n, file) in chain.enumerated() {
            let want = first + UInt64(n)
            let next = try decodeRoot(file.bytes, document: RootName.path(version: want))
            guard next.version == want else { throw .root("roots/\(want).json says version \(next.version)") }
            let sig = try signatureFile(file.signature, document: "roots/\(want).json.sig")
            if let prev = current?.document {
                try requireThreshold(
                    role: "root \(want) (by root \(prev.version)'s keys)", message: file.bytes,
                    signatures: sig.signatures, keyIDs: prev.roles.root.keyIds, threshold: prev.roles.root.threshold,
                    root: prev, now: now)
            } else {
                try requireThreshold(
                    role: "root \(want) (by a configured key)", message: file.bytes, signatures: sig.signatures,
                    keyIDs: configured.map(\.keyID), threshold: 1, root: nil, extra: configured, now: now)
            }
            try requireThreshold(
                role: "root \(want)", message: file.bytes, signatures: sig.signatures,
                keyIDs: next.roles.root.keyIds, threshold: next.roles.root.threshold, root: next, now: now)
            current = HeldRoot(document: next, name: RootName(version: want, of: file.bytes))
        }
        guard let root = current, root.name == named else {
            throw .root("root \(named.version) is not the bytes the index names")
        }
        return root
    }

    /// Checks the index signature against the root's index role.
    package static func requireIndexSignature(_ bytes: Data, signatures: SignatureFile, root: RootDocument, now: Date)
        throws(DelegationRefusal)
    {
        guard root.expires > now else {
            throw .root("root \(root.version) expired at \(ManifestCoding.formatRFC3339(root.expires))")
        }
        try requireThreshold(
            role: "the index", message: bytes, signatures: signatures.signatures, keyIDs: root.roles.index.keyIds,
            threshold: root.roles.index.threshold, root: root, now: now)
    }

    /// Checks each part the index names (team known, bytes as named, team threshold, serial not
    /// going back, entries within the team's patterns) and returns them by team.
    /// `partBytes` maps a team to its part's bytes as fetched.
    package static func checkParts(
        _ rows: [PartRow], partBytes: [String: Data], root: RootDocument, accepted: [String: AcceptedPart], now: Date,
        decode: Bool = true
    ) throws(DelegationRefusal) -> [String: TeamPart] {
        var parts: [String: TeamPart] = [:]
        var seen = Set<String>()
        for row in rows {
            guard let team = root.team(named: row.team) else { throw .unknownTeam(row.team) }
            guard seen.insert(row.team).inserted else {
                throw .partMismatch(team: row.team, detail: "the index names two parts of the team")
            }
            guard let bytes = partBytes[row.team] else {
                throw .partMismatch(team: row.team, detail: "\(row.part.path) is not the bytes the index names")
            }
            try checkSigned(row, bytes: bytes, team: team, root: root, now: now)
            if let acc = accepted[row.team] {
                if row.serial < acc.serial || (row.serial == acc.serial && row.part.sha256 != acc.sha256) {
                    throw .partRollback(team: row.team, serial: row.serial, accepted: acc.serial)
                }
            }
            guard decode else { continue }
            let part: TeamPart
            do { part = try ManifestCoding.decode(TeamPart.self, from: bytes, document: row.part.path) } catch {
                throw .malformed(error)
            }
            guard part.team == row.team, part.serial == row.serial else {
                throw .partMismatch(
                    team: row.team,
                    detail: "the part says team \(quoted(part.team)) serial \(part.serial), the index \(row.serial)")
            }
            try checkOwnership(part, team: team, root: root)
            parts[row.team] = part
        }
        return parts
    }

    /// A part row's path, bytes and the team's threshold of signatures over them.
    static func checkSigned(_ row: PartRow, bytes: Data, team: Team, root: RootDocument, now: Date)
        throws(DelegationRefusal)
    {
        guard row.part.path == TeamPart.path(team: row.team, serial: row.serial) else {
            throw .partMismatch(team: row.team, detail: "the part's path is \(quoted(row.part.path))")
        }
        guard Int64(bytes.count) == row.part.size, SHA256Digest.of(bytes) == row.part.sha256 else {
            throw .partMismatch(team: row.team, detail: "\(row.part.path) is not the bytes the index names")
        }
        do {
            try requireThreshold(
                role: "team \(row.team)", message: bytes, signatures: row.signatures, keyIDs: team.keyIds,
                threshold: team.threshold, root: root, now: now)
        } catch {
            // A team key's signature over other bytes: the part named is not the one it signed.
            guard case .invalidSignature(_, let key) = error else { throw error }
            throw .partMismatch(
                team: row.team,
                detail: "\(row.part.path) is not the part the team signed (key \(key)'s signature does not match it)")
        }
    }

    /// Every entry of a part is of a package its team owns; a rollout team's part has none, and
    /// only a rollout team's part has holds, each on a package its patterns match.
    static func checkOwnership(_ part: TeamPart, team: Team, root: RootDocument) throws(DelegationRefusal) {
        var held = Set<String>()
        for h in part.holds ?? [] {
            guard team.role == .rollout else {
                throw .outside(team: team.name, id: h.id, detail: "a release team's part holds no holds (format §20)")
            }
            guard team.claims(h.id) else {
                throw .outside(
                    team: team.name, id: h.id,
                    detail:
                        "its hold is not matched by its patterns \(team.packages.map(\.text).joined(separator: ", "))")
            }
            guard held.insert("\(h.id)\u{0}\(h.channel)").inserted else {
                throw .partMismatch(team: team.name, detail: "it holds \(h.id) (\(h.channel)) twice")
            }
        }
        var seen = Set<EntryKey>()
        for e in part.packages {
            guard seen.insert(EntryKey(e)).inserted else {
                throw .partMismatch(team: team.name, detail: "it lists \(e.id) (\(e.channel)) twice")
            }
            guard team.role == .release else {
                throw .outside(team: team.name, id: e.id, detail: "a rollout team's part holds no package entries")
            }
            guard team.claims(e.id) else {
                throw .outside(
                    team: team.name, id: e.id,
                    detail: "not matched by its patterns \(team.packages.map(\.text).joined(separator: ", "))")
            }
        }
    }

    /// A digest of a team's entries as this build encodes them, in `(id, channel)` order: equal
    /// entries give equal digests on one device (the encoding is canonical), which is all a
    /// device's own record needs.
    package static func entriesDigest(_ entries: [PackageEntry]) -> SHA256Digest? {
        let sorted = entries.sorted { ($0.id, $0.channel) < ($1.id, $1.channel) }
        return (try? ManifestCoding.encode(sorted, compact: true)).map(SHA256Digest.of)
    }

    /// The index's entries are exactly the parts' entries: each listed entry equals its owner's,
    /// and each part entry is listed, except on-demand ones of a sharded index (checked shard by
    /// shard, `checkShard`). `known` gives, for teams whose part this device accepted before
    /// (same bytes, same root) and did not decode again, the digest of that part's entries: the
    /// index's entries of such a team must have it.
    package static func checkComposition(
        _ index: RepositoryIndex, parts: [String: TeamPart], root: RootDocument, known: [String: SHA256Digest] = [:]
    ) throws(DelegationRefusal) {
        let signed = signedEntries(parts)
        var listed = Set<EntryKey>()
        var ofKnown: [String: [PackageEntry]] = [:]
        for e in index.packages {
            if let owner = root.owner(of: e.id)?.name, known[owner] != nil {
                ofKnown[owner, default: []].append(e)
                continue
            }
            try requireSigned(e, signed: signed, root: root)
            listed.insert(EntryKey(e))
        }
        try checkHolds(index, parts: parts, signed: signed)
        for (team, digest) in known where entriesDigest(ofKnown[team] ?? []) != digest {
            throw .partMismatch(team: team, detail: "the index's entries of the team differ from those of its part")
        }
        for (key, e) in signed where !listed.contains(key) {
            let sharded = index.shards != nil && e.install?.mode == .onDemand
            if !sharded {
                throw .partMismatch(
                    team: root.owner(of: e.id)?.name ?? "?",
                    detail: "its entry for \(e.id) (\(e.channel)) is missing from the index")
            }
        }
    }

    /// The index's holds are exactly its rollout parts' holds, in team order, and none raises a
    /// release past the ceiling its release team signed (format §20). Every rollout team's part
    /// is decoded (`parts`), never taken from a record.
    private static func checkHolds(
        _ index: RepositoryIndex, parts: [String: TeamPart], signed: [EntryKey: PackageEntry]
    )
        throws(DelegationRefusal)
    {
        let fromParts = parts.keys.sorted().flatMap { parts[$0]?.holds ?? [] }
        guard fromParts == (index.holds ?? []) else {
            let team = parts.keys.sorted().first { !(parts[$0]?.holds ?? []).isEmpty } ?? "rollout"
            throw .partMismatch(team: team, detail: "the index's holds differ from those its rollout parts signed")
        }
        for h in fromParts {
            if let e = signed[EntryKey(id: h.id, channel: h.channel)], let why = h.raise(e) { throw .rolloutRaise(why) }
        }
    }

    /// A shard's entries are exactly the parts' on-demand entries of its bucket.
    package static func checkShard(
        _ entries: [PackageEntry], number: Int, count: Int, parts: [String: TeamPart], root: RootDocument
    ) throws(DelegationRefusal) {
        let signed = signedEntries(parts)
        var seen = Set<EntryKey>()
        for e in entries {
            try requireSigned(e, signed: signed, root: root)
            seen.insert(EntryKey(e))
        }
        for (key, e) in signed
        where e.install?.mode == .onDemand && IndexShards.bucket(of: e.id, count: count) == number
            && !seen.contains(key)
        {
            throw .partMismatch(
                team: root.owner(of: e.id)?.name ?? "?",
                detail: "its entry for \(e.id) (\(e.channel)) is missing from shard \(number)")
        }
    }

    private struct EntryKey: Hashable {
        var id: PackageID
        var channel: Channel
        init(_ e: PackageEntry) {
            id = e.id
            channel = e.channel
        }
        init(id: PackageID, channel: Channel) {
            self.id = id
            self.channel = channel
        }
    }

    private static func signedEntries(_ parts: [String: TeamPart]) -> [EntryKey: PackageEntry] {
        var out: [EntryKey: PackageEntry] = [:]
        for p in parts.values { for e in p.packages { out[EntryKey(e)] = e } }
        return out
    }

    private static func requireSigned(_ e: PackageEntry, signed: [EntryKey: PackageEntry], root: RootDocument)
        throws(DelegationRefusal)
    {
        guard let owner = root.owner(of: e.id) else {
            throw .outside(team: nil, id: e.id, detail: "no team of the root owns it")
        }
        guard let s = signed[EntryKey(e)] else {
            throw .partMismatch(
                team: owner.name, detail: "the index lists \(e.id) (\(e.channel)), which the team's part does not")
        }
        guard s == e else {
            throw .partMismatch(
                team: owner.name, detail: "the index's entry for \(e.id) (\(e.channel)) differs from the one it signed")
        }
    }

    package static func signatureFile(_ bytes: Data, document: String) throws(DelegationRefusal) -> SignatureFile {
        do { return try ManifestCoding.decode(SignatureFile.self, from: bytes, document: document) } catch {
            throw .malformed(error)
        }
    }
}
