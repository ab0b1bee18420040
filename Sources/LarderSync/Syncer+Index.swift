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
        let decision: AcceptedIndexDecision
        do {
            decision = try IndexAcceptance.decide(
                IndexAcceptance.Input(
                    bytes: bytes, signature: sigBytes, notModified: notModified, trustedKeys: config.trustedKeys,
                    trusted: trusted, accepted: sandbox.state.index, now: options.clock()))
        } catch { throw SyncError(refusal: error) }
        // A sharded index: the entries of the shards this device needs, read before anything is
        // recorded (a held package's settings must never be missing from what it serves with).
        let read = try await readShards(
            decision.index, sandbox: sandbox, transport: transport, base: base, write: record)
        let index = read.index
        if record, let keys = decision.rotatedKeys {
            do { _ = try config.withKeys(keys, root: root) } catch { throw .config(error) }
            options.logger.notice(
                "trusted keys rotated by the index",
                metadata: ["keys": "\(keys.map(\.keyId))", "serial": "\(index.serial)"])
        }
        if record {
            try recordAccepted(
                decision, entries: index.packages, shardsFetched: read.fetched, bytes: bytes, signature: sigBytes,
                etag: etag, sandbox: sandbox)
        }
        options.progress?(.index(serial: index.serial, changed: decision.fresh))
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
            options.handoff?.wroteIndex(entries, sandbox.layout)
            do {
                try sandbox.recordIndex(
                    AcceptedIndex(
                        serial: index.serial, sha256: decision.digest, expires: index.expires, etag: etag,
                        acceptedAt: options.clock()))
            } catch { throw .store(error) }
            sandbox.layout.pruneShards(keeping: index.shards)
            return
        }
        if shardsFetched {
            do { try AtomicFile.write(bytes, to: cacheIndex) } catch { throw .store(.io(error)) }
            options.handoff?.wroteIndex(entries, sandbox.layout)
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
        options.logger.notice(
            "the signature names another index than the one fetched; fetching the index it names",
            metadata: ["named": "\(named.sha256)", "fetched": "\(SHA256Digest.of(fetched))"])
        if named.size <= Int64(Self.maxIndexBytes) {
            let copyURL = url(base, RepositoryLayout.indexCopyPath(named.sha256))
            // A missing or wrong copy only means the pair is fetched again, below.
            do throws(FetchError) {
                let copy = try await transport.document(copyURL, etag: nil, maxBytes: Self.maxIndexBytes)
                if named.names(copy.data) { return (copy.data, sig) }
            } catch {
                options.logger.notice("no copy of the named index", metadata: ["error": "\(error)"])
            }
        }
        let freshSig = try await fetchSignature(transport, base, fresh: true)
        let freshIndex = try await fetchIndex(transport, base, etag: nil, fresh: true)
        return (freshIndex.data, freshSig)
    }

    /// Fetches the file lists the plan needs, each checked against the size and SHA-256 the
    /// index declares. Failures are returned per package; with each list, the verified bytes it
    /// was decoded from (placed as they are, see `Sandbox.provideListBytes`).
    /// What fetching the file lists gave: each list (with the verified bytes it is encoded as),
    /// the delta manifest it was rebuilt from when there was one, the failures, and the bytes
    /// the metadata cost on the wire.
    struct Lists {
        var lists: [PackageID: FileList] = [:]
        var bytes: [PackageID: Data] = [:]
        var deltas: [PackageID: ResolvedDelta] = [:]
        var failures: [PackageID: PackageFailure] = [:]
        var wireBytes: [PackageID: Int64] = [:]
        /// Why a delta the index offered was not used (the list came another way).
        var deltaNotes: [PackageID: String] = [:]
        /// The byte pipelines of encrypted versions (sealed with their content keys), by package.
        var sealed: [PackageID: BytePipeline] = [:]

        /// Records `id`'s list, the verified bytes it is encoded as, and what it cost on the wire.
        mutating func take(_ id: PackageID, _ list: FileList, _ data: Data, wire: Int64) {
            lists[id] = list
            bytes[id] = data
            wireBytes[id, default: 0] += wire
        }
    }

    /// The file list of each release the first plan needs one for. With a delta manifest from
    /// the active version, the list is built from the active version's verified list and the
    /// manifest, and checked against the signed list's size and SHA-256: nothing else is
    /// fetched. Otherwise the gzipped list when the index names one, else the list itself.
    func fetchLists(
        _ plan: Plan, index: RepositoryIndex, transport: any Transport, base: URL, channel: Channel, sandbox: Sandbox
    ) async -> Lists {
        var out = Lists()
        let entries = Dictionary(
            index.packages.filter { $0.channel == channel }.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        for a in plan.actions where a.skip == .fileListNeeded {
            guard let e = entries[a.id] else { continue }
            if let encryption = e.encryption {
                await fetchListOfSealed(
                    a.id, e, encryption, into: &out, transport: transport, base: base, sandbox: sandbox)
                continue
            }
            if let active = sandbox.state[a.id].active, let ref = e.delta(from: active) {
                switch await listFromDelta(e, ref, active: active, transport: transport, base: base, sandbox: sandbox) {
                case .success(let (list, bytes, manifest, wire)):
                    out.take(a.id, list, bytes, wire: wire)
                    out.deltas[a.id] = manifest
                    continue
                case .failure(let why):
                    out.deltaNotes[a.id] = why.description
                    options.logger.info(
                        "the delta is not usable; fetching the file list",
                        metadata: ["id": "\(a.id)", "reason": "\(why)"])
                }
            }
            switch await fetchList(e, transport: transport, base: base) {
            case .success(let (list, bytes, wire)):
                out.take(a.id, list, bytes, wire: wire)
            case .failure(let failure):
                out.failures[a.id] = failure
            }
        }
        return out
    }

    /// `fetchLists` for an encrypted version: its key unwrapped first (nothing of the version is
    /// fetched without it), then the list from a delta of the active version, else the sealed
    /// list, with the pipeline that opens the version's blobs.
    func fetchListOfSealed(
        _ id: PackageID, _ e: PackageEntry, _ encryption: Encryption, into out: inout Lists, transport: any Transport,
        base: URL, sandbox: Sandbox
    ) async {
        // The key first: nothing of the version is fetched without it.
        let pipeline: BytePipeline
        switch sealedPipeline(e, encryption) {
        case .success(let p): pipeline = p
        case .failure(let f):
            out.failures[id] = f
            return
        }
        if let active = sandbox.state[id].active, let ref = e.delta(from: active) {
            switch await listFromDelta(
                e, ref, active: active, sealed: (pipeline, encryption), transport: transport, base: base,
                sandbox: sandbox)
            {
            case .success(let (list, bytes, delta, wire)):
                out.take(id, list, bytes, wire: wire)
                out.deltas[id] = delta
                out.sealed[id] = pipeline
                return
            case .failure(let why):
                out.deltaNotes[id] = why.description
            }
        }
        switch await fetchSealedList(e, encryption, pipeline: pipeline, transport: transport, base: base) {
        case .success(let (list, bytes, wire)):
            out.take(id, list, bytes, wire: wire)
            out.sealed[id] = pipeline
        case .failure(let failure):
            out.failures[id] = failure
        }
    }

    /// The delta manifest `ref` (decoded with `pipeline`: the standard one, or an encrypted
    /// version's), checked to lead from `active` to `e`, with the active version's list and the
    /// bytes it cost on the wire.
    func fetchDelta(
        _ e: PackageEntry, _ ref: DeltaRef, active: SemanticVersion, pipeline: BytePipeline,
        transport: any Transport, base: URL, sandbox: Sandbox
    ) async -> Result<(DeltaManifest, FileList, Int64), DeltaError> {
        let doc: FetchedDocument
        do throws(FetchError) {
            doc = try await transport.document(
                url(base, ref.manifest.path), etag: nil,
                maxBytes: Int(min(ref.manifest.size, Int64(Self.maxIndexBytes))))
        } catch {
            return .failure(DeltaError("\(ref.manifest.path): \(error)"))
        }
        guard Int64(doc.data.count) == ref.manifest.size, SHA256Digest.of(doc.data) == ref.manifest.sha256 else {
            return .failure(DeltaError("\(ref.manifest.path) does not match the size and sha256 the index declares"))
        }
        let manifest: DeltaManifest
        do {
            let json = try pipeline.decodeDocument(doc.data, limit: Int64(Self.maxIndexBytes))
            manifest = try ManifestCoding.decode(DeltaManifest.self, from: json, document: ref.manifest.path)
        } catch {
            return .failure(DeltaError("\(ref.manifest.path): \(error)"))
        }
        guard manifest.id == e.id, manifest.from == active, manifest.to == e.version else {
            return .failure(DeltaError("\(ref.manifest.path) is not the delta \(e.id)@\(active) → \(e.version)"))
        }
        let current: FileList
        do {
            let data = try AtomicFile.read(sandbox.layout.list(e.id, active))
            current = try ManifestCoding.decode(FileList.self, from: data, document: "the list of \(active)")
        } catch {
            return .failure(DeltaError("the list of the active \(active) cannot be read: \(error)"))
        }
        return .success((manifest, current, Int64(doc.data.count)))
    }

    /// The release's list from the delta manifest `ref` and the active version's list. `sealed`:
    /// an encrypted version's pipeline and encryption — its manifest is opened with the pipeline
    /// and names the opened list's contents (at the sealed list's path; the list without the
    /// objects' names and sizes), its patch file is sealed whole, and the list built names only
    /// the objects the delta fetches (`nameObjects` fetches the sealed list when more are needed).
    func listFromDelta(
        _ e: PackageEntry, _ ref: DeltaRef, active: SemanticVersion, sealed: (BytePipeline, Encryption)? = nil,
        transport: any Transport, base: URL, sandbox: Sandbox
    ) async -> Result<(FileList, Data, ResolvedDelta, Int64), DeltaError> {
        let manifest: DeltaManifest
        let current: FileList
        let wire: Int64
        switch await fetchDelta(
            e, ref, active: active, pipeline: sealed?.0 ?? options.pipeline, transport: transport, base: base,
            sandbox: sandbox)
        {
        case .success(let got): (manifest, current, wire) = got
        case .failure(let why): return .failure(why)
        }
        // In the clear the manifest names the index's list; encrypted, the opened list at the sealed list's path.
        guard sealed.map({ manifest.files.path == $0.1.files.path }) ?? (manifest.files == e.files) else {
            return .failure(DeltaError("\(ref.manifest.path) leads to another list than the index's"))
        }
        let delta: ResolvedDelta
        switch manifest.resolve(from: current, sealed: sealed != nil) {
        case .success(let d): delta = d
        case .failure(let why): return .failure(why)
        }
        let rebuilt = delta.list
        let bytes: Data
        let checked: Data
        do {
            bytes = try ManifestCoding.encode(rebuilt)
            // Encrypted, the manifest names the list's contents: the objects' names left out.
            checked = sealed == nil ? bytes : try ManifestCoding.encode(rebuilt.contentOnly)
        } catch {
            return .failure(DeltaError("the rebuilt list cannot be encoded: \(error)"))
        }
        guard Int64(checked.count) == manifest.files.size, SHA256Digest.of(checked) == manifest.files.sha256 else {
            return .failure(DeltaError("the list built from the delta is not the signed list of \(e.version)"))
        }
        if let gap = delta.covers(rebuilt, holding: Set(current.files.map(\.sha256))) { return .failure(gap) }
        return .success((rebuilt, bytes, delta, wire))
    }

    /// The release's list: gzipped when the index names a gzip (its decompressed bytes checked
    /// against the list's size and SHA-256), else — or when the gzip fails — the list itself.
    func fetchList(_ e: PackageEntry, transport: any Transport, base: URL) async -> Result<
        (FileList, Data, Int64), PackageFailure
    > {
        var wire: Int64 = 0
        if let gz = e.filesGzip {
            do throws(FetchError) {
                let doc = try await transport.document(
                    url(base, gz.path), etag: nil, maxBytes: Int(min(gz.size, Int64(Self.maxIndexBytes))))
                wire += Int64(doc.data.count)
                if Int64(doc.data.count) == gz.size, SHA256Digest.of(doc.data) == gz.sha256,
                    let data = try? options.pipeline.decodeDocument(doc.data, limit: e.files.size, exact: true),
                    Int64(data.count) == e.files.size, SHA256Digest.of(data) == e.files.sha256
                {
                    return decodeList(e, data).map { ($0, data, wire) }
                }
                options.logger.info(
                    "the gzipped file list does not match; fetching the list", metadata: ["id": "\(e.id)"])
            } catch {
                options.logger.info(
                    "the gzipped file list could not be fetched; fetching the list",
                    metadata: ["id": "\(e.id)", "error": "\(error)"])
            }
        }
        let doc: FetchedDocument
        do throws(FetchError) {
            doc = try await transport.document(
                url(base, e.files.path), etag: nil, maxBytes: Int(min(e.files.size, Int64(Self.maxIndexBytes))))
        } catch {
            return .failure(.fetch(error))
        }
        wire += Int64(doc.data.count)
        guard Int64(doc.data.count) == e.files.size, SHA256Digest.of(doc.data) == e.files.sha256 else {
            return .failure(.fileListMismatch("\(e.files.path) does not match the size and sha256 the index declares"))
        }
        return decodeList(e, doc.data).map { ($0, doc.data, wire) }
    }

    func decodeList(_ e: PackageEntry, _ data: Data) -> Result<FileList, PackageFailure> {
        let list: FileList
        do { list = try ManifestCoding.decode(FileList.self, from: data, document: e.files.path) } catch {
            return .failure(.fileListSchema(error))
        }
        guard list.id == e.id, list.version == e.version else {
            return .failure(.fileListMismatch("\(e.files.path) describes \(list.id) \(list.version)"))
        }
        return .success(list)
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
        }
    }
}
