import Foundation
import LarderCore
import LarderFetch
import LarderFileSystem
import LarderStore
import SystemPackage

/// What a sync verified of a delegated repository (format §18): the root followed, and each team's
/// part the index names, checked against it.
struct VerifiedDelegation {
    /// The root now trusted.
    var root: HeldRoot
    /// Its bytes, to keep when it is new to this device.
    var rootBytes: Data
    /// Whether the root is newer than the one held.
    var rootChanged: Bool
    /// The parts, by team.
    var parts: [String: TeamPart] = [:]
    /// Their bytes, by team.
    var partBytes: [String: Data] = [:]
    /// The teams whose part was accepted before and not decoded again, with its entries' digest.
    var known: [String: SHA256Digest] = [:]
}

extension Syncer {
    /// The most roots a device walks through on one sync (a root rotates rarely: a year's worth
    /// at one a week).
    static let maxRootChain: UInt64 = 64

    /// The root this device follows, as verified and kept in `trust/root.json`; nil when it has
    /// never synced a delegated repository.
    func heldRoot(_ layout: SandboxLayout) throws(SyncError) -> (HeldRoot, Data)? {
        guard AtomicFile.exists(layout.heldRoot) else { return nil }
        let bytes: Data
        do { bytes = try AtomicFile.read(layout.heldRoot, limit: 1 << 20) } catch { throw .store(.io(error)) }
        do {
            let root = try DelegationCheck.decodeRoot(bytes, document: "trust/root.json")
            return (HeldRoot(document: root, name: RootName(version: root.version, of: bytes)), bytes)
        } catch { throw SyncError(error) }
    }

    /// The root the signature file names, followed from the one held (or, on first contact, from
    /// the keys this device is configured with): nil for a repository with one key set. A device
    /// that follows a root refuses an index that names none.
    func followRoot(signature: Data, sandbox: Sandbox, trusted: [PublicKey], transport: any Transport, base: URL)
        async throws(SyncError) -> VerifiedDelegation?
    {
        let named = Self.rootName(in: signature)
        let held = try heldRoot(sandbox.layout)
        guard let named else {
            if let held {
                throw SyncError(
                    DelegationRefusal.root(
                        "the index names no root, and this device follows root \(held.0.document.version) (a delegated repository does not go back to one key set)"
                    ))
            }
            return nil
        }
        let now = setup.clock()
        if let held, held.0.name == named {
            return VerifiedDelegation(root: held.0, rootBytes: held.1, rootChanged: false)
        }
        let from = (held?.0.document.version ?? 0) + 1
        guard named.version >= from || held == nil else {
            throw SyncError(
                DelegationRefusal.root("the index names root \(named.version), older than the held \(from - 1)"))
        }
        if let held {
            guard named.version - held.0.document.version <= Self.maxRootChain else {
                throw SyncError(
                    DelegationRefusal.root("root \(named.version) is more than \(Self.maxRootChain) versions ahead"))
            }
            let chain = try await fetchRoots(from...named.version, transport: transport, base: base)
            return try verified(held: held.0, trusted: trusted, chain: chain, named: named, now: now)
        }
        // First contact: the named root alone (an app configured with its keys), else the whole
        // chain from root 1 (a device configured with the key the repository had before).
        let last = try await fetchRoots(named.version...named.version, transport: transport, base: base)
        do throws(SyncError) {
            return try verified(held: nil, trusted: trusted, chain: last, named: named, now: now)
        } catch {
            guard named.version > 1, named.version <= Self.maxRootChain else { throw error }
            let chain = try await fetchRoots(1...named.version, transport: transport, base: base)
            return try verified(held: nil, trusted: trusted, chain: chain, named: named, now: now)
        }
    }

    private func verified(
        held: HeldRoot?, trusted: [PublicKey], chain: [DelegationCheck.Signed], named: RootName, now: Date
    ) throws(SyncError) -> VerifiedDelegation {
        do {
            let root = try DelegationCheck.followRoots(
                held: held, configured: trusted, chain: chain, named: named, now: now)
            return VerifiedDelegation(root: root, rootBytes: chain.last?.bytes ?? Data(), rootChanged: true)
        } catch { throw SyncError(error) }
    }

    private func fetchRoots(_ versions: ClosedRange<UInt64>, transport: any Transport, base: URL)
        async throws(SyncError) -> [DelegationCheck.Signed]
    {
        var out: [DelegationCheck.Signed] = []
        for v in versions {
            let path = RootName.path(version: v)
            do throws(FetchError) {
                let doc = try await transport.document(url(base, path), etag: nil, maxBytes: 1 << 20)
                let sig = try await transport.document(url(base, path + ".sig"), etag: nil, maxBytes: 1 << 16)
                out.append(DelegationCheck.Signed(bytes: doc.data, signature: sig.data))
            } catch {
                throw SyncError(DelegationRefusal.root("fetching \(path): \(error)"))
            }
        }
        return out
    }

    /// The root a signature file names, when it names one.
    static func rootName(in signature: Data) -> RootName? {
        (try? ManifestCoding.decode(SignatureFile.self, from: signature, document: RepositoryLayout.signatureName))?
            .root
    }

    /// Checks the parts an accepted index names (each from this device's cache when its digest is
    /// there, else fetched) and that the index lists exactly their entries. A part this device
    /// accepted before, under the same root, is not decoded again: the index's entries of its
    /// team are compared with the digest recorded then (an inline index only; a sharded index's
    /// shards are checked against decoded parts).
    func checkParts(
        _ index: RepositoryIndex, _ delegation: VerifiedDelegation, sandbox: Sandbox, transport: any Transport,
        base: URL
    ) async throws(SyncError) -> VerifiedDelegation {
        guard let member = index.delegations, member.root == delegation.root.name else {
            throw SyncError(
                DelegationRefusal.root("the index's delegations name another root than its signature file"))
        }
        if let twice = Dictionary(grouping: member.parts, by: \.team).first(where: { $0.value.count > 1 })?.key {
            throw SyncError(
                DelegationRefusal.partMismatch(team: twice, detail: "the index names two parts of the team"))
        }
        var out = delegation
        let accepted = acceptedParts(sandbox.layout)
        var known: [String: SHA256Digest] = [:]
        var rows: [PartRow] = []
        var knownRows: [PartRow] = []
        for row in member.parts {
            out.partBytes[row.team] = try await partBytes(row, sandbox: sandbox, transport: transport, base: base)
            // A rollout team's part is always decoded: its holds are compared with the index's.
            let release = delegation.root.document.team(named: row.team)?.role != .rollout
            if release, !delegation.rootChanged, index.shards == nil, let acc = accepted[row.team],
                acc.serial == row.serial,
                acc.sha256 == row.part.sha256, let digest = acc.entries, known[row.team] == nil
            {
                known[row.team] = digest
                knownRows.append(row)
            } else {
                rows.append(row)
            }
        }
        do {
            let root = delegation.root.document
            // Parts accepted before: their signatures again (cheap), not their decoding.
            _ = try DelegationCheck.checkParts(
                knownRows, partBytes: out.partBytes, root: root, accepted: accepted, now: setup.clock(), decode: false)
            out.parts = try DelegationCheck.checkParts(
                rows, partBytes: out.partBytes, root: root, accepted: accepted, now: setup.clock())
            try DelegationCheck.checkComposition(
                index, parts: out.parts, root: delegation.root.document, known: known)
        } catch { throw SyncError(error) }
        out.known = known
        return out
    }

    /// A part's bytes: the cached copy under its digest, else fetched.
    private func partBytes(_ row: PartRow, sandbox: Sandbox, transport: any Transport, base: URL)
        async throws(SyncError) -> Data
    {
        let cached = sandbox.layout.cachedPart(row.part.sha256)
        if let bytes = try? AtomicFile.read(cached, limit: ManifestCoding.maxDocumentBytes),
            SHA256Digest.of(bytes) == row.part.sha256
        {
            return bytes
        }
        do throws(FetchError) {
            let doc = try await transport.document(
                url(base, row.part.path), etag: nil,
                maxBytes: Int(min(max(row.part.size, 0), Int64(ManifestCoding.maxDocumentBytes))))
            return doc.data
        } catch {
            throw SyncError(
                DelegationRefusal.partMismatch(team: row.team, detail: "fetching \(row.part.path): \(error)"))
        }
    }

    /// Each team's part serial and digest this device accepted.
    func acceptedParts(_ layout: SandboxLayout) -> [String: AcceptedPart] {
        guard let bytes = try? AtomicFile.read(layout.acceptedParts, limit: 1 << 24),
            let record = try? ManifestCoding.decode(AcceptedParts.self, from: bytes, document: "trust/parts.json")
        else { return [:] }
        return record.parts
    }

    /// Keeps what a sync verified, before the index that relies on it is recorded: the root when
    /// new, the parts under their digests, then each team's serial.
    func recordDelegation(_ d: VerifiedDelegation, index: RepositoryIndex, layout: SandboxLayout) throws(SyncError) {
        do {
            try AtomicFile.makeDirectories(layout.cachedPart(d.root.name.sha256).parentPath)
            if d.rootChanged { try AtomicFile.write(d.rootBytes, to: layout.heldRoot) }
            var record = AcceptedParts(parts: acceptedParts(layout))
            var keep = Set<String>()
            for row in index.delegations?.parts ?? [] {
                let path = layout.cachedPart(row.part.sha256)
                keep.insert("\(row.part.sha256.hex).json")
                if let bytes = d.partBytes[row.team], !AtomicFile.exists(path) { try AtomicFile.write(bytes, to: path) }
                let digest =
                    d.known[row.team] ?? d.parts[row.team].flatMap { DelegationCheck.entriesDigest($0.packages) }
                record.parts[row.team] = AcceptedPart(serial: row.serial, sha256: row.part.sha256, entries: digest)
            }
            try AtomicFile.write(try ManifestCoding.encode(record), to: layout.acceptedParts)
            let dir = layout.cachedPart(d.root.name.sha256).parentPath
            for entry in (try? SystemCalls.listDirectory(dir)) ?? [] where !keep.contains(entry.name.string) {
                try? SystemCalls.unlink(dir.joined(entry.name))
            }
        } catch let e as FileSystemError {
            throw .store(.io(e))
        } catch {
            throw .store(.encoding(document: "trust/parts.json", detail: "\(error)"))
        }
    }
}

/// `trust/parts.json`: each team's accepted part.
struct AcceptedParts: Codable, RepositoryDocument {
    /// By team.
    var parts: [String: AcceptedPart]
}
