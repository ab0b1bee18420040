import Foundation
import LarderArchive
import LarderCore
import LarderFetch
import LarderFileSystem
import LarderStore
import SystemPackage

/// The index and file-list steps of a sync: fetch, hand the bytes to the pure trust rules
/// (`IndexAcceptance`), and record what was accepted.
extension Syncer {
    /// The largest index or file list a sync fetches.
    static let maxIndexBytes = ManifestCoding.maxDocumentBytes

    /// Fetches the signature file, then the index it names unless that is the accepted one,
    /// applies the trust rules, and — with `record` — makes the accepted index durable (cache,
    /// then the accepted serial) and adopts rotated keys. Returns the index and whether it
    /// changed.
    ///
    /// The signature file names the exact index bytes it is over (`index`): no conditional
    /// request is needed, nor trusted (a static server's validator is its file's mtime and size,
    /// which two quick publications can share). When the index fetched is not the one named —
    /// an edge cache holding one file longer than the other — the immutable copy the signature
    /// names (`indexes/<sha256>.json`) is fetched, else the pair once more past any cache; only
    /// then is it `index-torn`. A signature file without `index` (an older publisher) falls back
    /// to a conditional request for the index.
    func acceptIndex(
        sandbox: Sandbox, config: SyncConfig, transport: any Transport, base: URL, record: Bool = true,
        prefetchedSignature: Data? = nil
    ) async throws(SyncError) -> (RepositoryIndex, Bool) {
        let (bytes, sigBytes, etag, notModified) = try await fetchIndexPair(
            sandbox: sandbox, transport: transport, base: base, prefetchedSignature: prefetchedSignature)
        let trusted: [PublicKey]
        do { trusted = try config.publicKeys() } catch { throw .config(error) }
        // A delegated repository (format §18): the root its signature file names, followed first.
        let followed = try await followRoot(
            signature: sigBytes, sandbox: sandbox, trusted: trusted, transport: transport, base: base)
        let decision: AcceptedIndexDecision
        do {
            decision = try IndexAcceptance.decide(
                IndexAcceptance.Input(
                    bytes: bytes, signature: sigBytes, notModified: notModified, trustedKeys: config.trustedKeys,
                    trusted: trusted, accepted: sandbox.state.index, now: setup.clock(),
                    root: followed?.root.document))
        } catch { throw SyncError(refusal: error) }
        var delegation: VerifiedDelegation?
        if let followed {
            delegation = try await checkParts(
                decision.index, followed, sandbox: sandbox, transport: transport, base: base)
        }
        // A sharded index: the entries of the shards this device needs, read before anything is
        // recorded (a held package's settings must never be missing from what it serves with).
        let read = try await readShards(
            decision.index, sandbox: sandbox, transport: transport, base: base, write: record, delegation: delegation)
        let index = read.index
        if record, let delegation, decision.fresh || delegation.rootChanged {
            try recordDelegation(delegation, index: decision.index, layout: sandbox.layout)
        }
        if record, let keys = decision.rotatedKeys {
            do { _ = try config.withKeys(keys, root: root) } catch { throw .config(error) }
            setup.logger.notice(
                "trusted keys rotated by the index",
                metadata: ["keys": "\(keys.map(\.keyId))", "serial": "\(index.serial)"])
        }
        if record {
            // The collector this index names, or none (format §19): signed, so no mirror sets it.
            TelemetrySpool(root: root, logger: setup.logger).setCollector(decision.index.telemetry)
            try recordAccepted(
                decision, entries: index.packages, shardsFetched: read.fetched, bytes: bytes, signature: sigBytes,
                etag: etag, sandbox: sandbox)
        }
        setup.progress?(.index(serial: index.serial, changed: decision.fresh))
        return (index, decision.fresh)
    }

    /// The index and its signature as the repository serves them now: the copy this sandbox
    /// accepted when the signature names it; else the index the signature names, mended when an
    /// edge served a torn pair; else (an older publisher) by a conditional request.
    func fetchIndexPair(sandbox: Sandbox, transport: any Transport, base: URL, prefetchedSignature: Data?)
        async throws(SyncError) -> (bytes: Data, signature: Data, etag: String?, notModified: Bool)
    {
        let cacheIndex = sandbox.layout.acceptedIndex
        let cacheSig = sandbox.layout.acceptedSignature
        let accepted = sandbox.state.index
        let cached = accepted != nil && AtomicFile.exists(cacheIndex)
        var sigBytes: Data
        if let prefetchedSignature {
            sigBytes = prefetchedSignature
        } else {
            sigBytes = try await fetchSignature(transport, base)
        }
        let named = Self.indexName(in: sigBytes)
        var bytes: Data
        var notModified = false
        var etag: String?
        if let named, cached, let accepted, named.sha256 == accepted.sha256 {
            // The index this sandbox accepted: nothing to fetch.
            do { bytes = try AtomicFile.read(cacheIndex) } catch { throw .store(.io(error)) }
            sigBytes = (try? AtomicFile.read(cacheSig)) ?? sigBytes
            notModified = true
        } else if let named {
            let doc = try await fetchIndex(transport, base, etag: nil)
            (bytes, etag) = (doc.data, doc.etag)
            if !named.names(bytes) {
                (bytes, sigBytes) = try await mendTornPair(transport, base, named: named, fetched: bytes, sig: sigBytes)
            }
        } else {
            // An older publisher's signature file: the index by a conditional request.
            let doc = try await fetchIndex(transport, base, etag: cached ? accepted?.etag : nil)
            (bytes, etag, notModified) = (doc.data, doc.etag, doc.notModified)
            if doc.notModified {
                do { bytes = try AtomicFile.read(cacheIndex) } catch { throw .store(.io(error)) }
                sigBytes = (try? AtomicFile.read(cacheSig)) ?? Data()
            }
        }
        return (bytes, sigBytes, etag, notModified)
    }

    /// Records a decision: a fresh index made durable (the cache, then the accepted serial)
    /// before anything is acted on; else only a new validator for the next request. `entries`
    /// are the index's with those of the shards read; when a shard was fetched for an index
    /// accepted before, the cached index is written again (the same bytes), so that readers that
    /// keep what they read by the file's identity read it and the shards anew.
    func recordAccepted(
        _ decision: AcceptedIndexDecision, entries: [PackageEntry], shardsFetched: Bool, bytes: Data,
        signature sigBytes: Data, etag: String?, sandbox: Sandbox
    ) throws(SyncError) {
        let index = decision.index
        let cacheIndex = sandbox.layout.acceptedIndex
        let cacheSig = sandbox.layout.acceptedSignature
        if decision.fresh {
            // Durable before anything is acted on: the cache, then the accepted serial.
            do {
                try AtomicFile.write(bytes, to: cacheIndex)
                try AtomicFile.write(sigBytes, to: cacheSig)
            } catch { throw .store(.io(error)) }
            setup.handoff?.wroteIndex(entries, sandbox.layout)
            do {
                try sandbox.recordIndex(
                    AcceptedIndex(
                        serial: index.serial, sha256: decision.digest, expires: index.expires, etag: etag,
                        acceptedAt: setup.clock()))
            } catch { throw .store(error) }
            sandbox.layout.pruneShards(keeping: index.shards)
            return
        }
        if shardsFetched {
            do { try AtomicFile.write(bytes, to: cacheIndex) } catch { throw .store(.io(error)) }
            setup.handoff?.wroteIndex(entries, sandbox.layout)
        }
        if let acc = sandbox.state.index, etag != nil, etag != acc.etag {
            var updated = acc
            updated.etag = etag
            // Only a validator for the next request: failing to record it costs one full GET.
            try? sandbox.recordIndex(updated)
        }
    }

    /// The repository's signature file, fetched whole every time (a few hundred bytes).
    func fetchSignature(_ transport: any Transport, _ base: URL, fresh: Bool = false) async throws(SyncError) -> Data {
        let u = url(base, RepositoryLayout.signatureName)
        do throws(FetchError) {
            return try await transport.document(fresh ? Self.pastCaches(u) : u, etag: nil, maxBytes: 1 << 16).data
        } catch { throw .fetch(error) }
    }

    private func fetchIndex(
        _ transport: any Transport, _ base: URL, etag: String?, fresh: Bool = false
    ) async throws(SyncError) -> FetchedDocument {
        let u = url(base, RepositoryLayout.indexName)
        do throws(FetchError) {
            return try await transport.document(
                fresh ? Self.pastCaches(u) : u, etag: etag, maxBytes: Self.maxIndexBytes)
        } catch { throw .fetch(error) }
    }

    /// The index a signature file names, when it names one (decoding errors are the trust
    /// rules' to report).
    static func indexName(in signature: Data) -> IndexName? {
        (try? ManifestCoding.decode(SignatureFile.self, from: signature, document: RepositoryLayout.signatureName))?
            .index
    }

    /// `u` with a query no cache has seen, so that an edge forwards the request to the origin
    /// (static servers ignore the query).
    static func pastCaches(_ u: URL) -> URL {
        guard var c = URLComponents(url: u, resolvingAgainstBaseURL: false) else { return u }
        c.queryItems = [URLQueryItem(name: "larder-fresh", value: String(UInt64.random(in: 0...UInt64.max), radix: 36))]
        return c.url ?? u
    }

    /// The index and signature to check after the index fetched was not the one the signature
    /// names: the immutable copy the signature names, when the repository has it; else the pair
    /// fetched again past any cache. What comes back may still disagree: the trust rules then
    /// refuse it as torn.
    private func mendTornPair(
        _ transport: any Transport, _ base: URL, named: IndexName, fetched: Data, sig: Data
    ) async throws(SyncError) -> (Data, Data) {
        setup.logger.notice(
            "the signature names another index than the one fetched; fetching the index it names",
            metadata: ["named": "\(named.sha256)", "fetched": "\(SHA256Digest.of(fetched))"])
        if named.size <= Int64(Self.maxIndexBytes) {
            let copyURL = url(base, RepositoryLayout.indexCopyPath(named.sha256))
            // A missing or wrong copy only means the pair is fetched again, below.
            do throws(FetchError) {
                let copy = try await transport.document(copyURL, etag: nil, maxBytes: Self.maxIndexBytes)
                if named.names(copy.data) { return (copy.data, sig) }
            } catch {
                setup.logger.notice("no copy of the named index", metadata: ["error": "\(error)"])
            }
        }
        let freshSig = try await fetchSignature(transport, base, fresh: true)
        let freshIndex = try await fetchIndex(transport, base, etag: nil, fresh: true)
        return (freshIndex.data, freshSig)
    }
}

extension SyncError {
    /// The sync's error for an index the trust rules refused (codes and messages as before the
    /// rules moved into the core).
    init(refusal: IndexRefusal) {
        switch refusal {
        case .signature(let e): self = .signature(e)
        case .manifest(let e): self = .manifest(e)
        case .rollbackAttack(let s, let a): self = .rollbackAttack(serial: s, accepted: a)
        case .serialReused(let s): self = .serialReused(serial: s)
        case .expired(let at): self = .expired(ManifestCoding.formatRFC3339(at))
        case .unusableRotatedKeys(let d): self = .config(.invalid("a trusted key in config.json is not usable: \(d)"))
        case .torn(let detail): self = .indexTorn(detail)
        case .delegation(let e): self = .init(e)
        }
    }

    /// The sync's error for a delegation refusal.
    init(_ refusal: DelegationRefusal) {
        self = .delegation(code: refusal.code, detail: refusal.description)
    }
}
