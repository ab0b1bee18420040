import Foundation
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

    /// Fetches the index (conditionally), fetches its signature when the bytes are new, applies
    /// the trust rules, and — with `record` — makes the accepted index durable (cache, then the
    /// accepted serial) and adopts rotated keys. Returns the index and whether it changed.
    func acceptIndex(
        sandbox: Sandbox, config: SyncConfig, transport: any Transport, base: URL, record: Bool = true,
        prefetched: FetchedDocument? = nil
    ) async throws(SyncError) -> (RepositoryIndex, Bool) {
        let cacheIndex = sandbox.layout.acceptedIndex
        let cacheSig = sandbox.layout.acceptedSignature
        let cached = sandbox.state.index != nil && AtomicFile.exists(cacheIndex)
        let doc: FetchedDocument
        if let prefetched, !prefetched.notModified {
            // The no-change check's request already brought a new index (see `checkNoChange`).
            doc = prefetched
        } else {
            do throws(FetchError) {
                doc = try await transport.document(
                    url(base, RepositoryLayout.indexName), etag: cached ? sandbox.state.index?.etag : nil,
                    maxBytes: Self.maxIndexBytes)
            } catch { throw .fetch(error) }
        }
        let trusted: [PublicKey]
        do { trusted = try config.publicKeys() } catch { throw .config(error) }
        var bytes = doc.data
        if doc.notModified {
            do { bytes = try AtomicFile.read(cacheIndex) } catch { throw .store(.io(error)) }
        }
        let fresh = IndexAcceptance.isFresh(bytes: bytes, notModified: doc.notModified, accepted: sandbox.state.index)
        // The signature is checked over the exact bytes before anything is decoded.
        var sigBytes = Data()
        if fresh {
            do throws(FetchError) {
                sigBytes = try await transport.document(
                    url(base, RepositoryLayout.signatureName), etag: nil, maxBytes: 1 << 16
                ).data
            } catch { throw .fetch(error) }
        } else {
            sigBytes = (try? AtomicFile.read(cacheSig)) ?? Data()
        }
        let decision: AcceptedIndexDecision
        do {
            decision = try IndexAcceptance.decide(
                IndexAcceptance.Input(
                    bytes: bytes, signature: sigBytes, notModified: doc.notModified, trustedKeys: config.trustedKeys,
                    trusted: trusted, accepted: sandbox.state.index, now: options.clock()))
        } catch { throw SyncError(refusal: error) }
        let index = decision.index
        if record, let keys = decision.rotatedKeys {
            do { _ = try config.withKeys(keys, root: root) } catch { throw .config(error) }
            options.logger.notice(
                "trusted keys rotated by the index",
                metadata: ["keys": "\(keys.map(\.keyId))", "serial": "\(index.serial)"])
        }
        if decision.fresh && record {
            // Durable before anything is acted on: the cache, then the accepted serial.
            do {
                try AtomicFile.write(bytes, to: cacheIndex)
                try AtomicFile.write(sigBytes, to: cacheSig)
            } catch { throw .store(.io(error)) }
            do {
                try sandbox.recordIndex(
                    AcceptedIndex(
                        serial: index.serial, sha256: decision.digest, expires: index.expires, etag: doc.etag,
                        acceptedAt: options.clock()))
            } catch { throw .store(error) }
        } else if record, let acc = sandbox.state.index, doc.etag != nil, doc.etag != acc.etag {
            var updated = acc
            updated.etag = doc.etag
            // Only a validator for the next request: failing to record it costs one full GET.
            try? sandbox.recordIndex(updated)
        }
        options.progress?(.index(serial: index.serial, changed: decision.fresh))
        return (index, decision.fresh)
    }

    /// Fetches the file lists the plan needs, each checked against the size and SHA-256 the
    /// index declares. Failures are returned per package; with each list, the verified bytes it
    /// was decoded from (placed as they are, see `Sandbox.provideListBytes`).
    func fetchLists(
        _ plan: Plan, index: RepositoryIndex, transport: any Transport, base: URL, channel: String
    ) async -> ([PackageID: FileList], [PackageID: PackageFailure], [PackageID: Data]) {
        var lists: [PackageID: FileList] = [:]
        var bytes: [PackageID: Data] = [:]
        var failures: [PackageID: PackageFailure] = [:]
        let entries = Dictionary(
            index.packages.filter { $0.channel == channel }.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        for a in plan.actions where a.skip == .fileListNeeded {
            guard let e = entries[a.id] else { continue }
            let doc: FetchedDocument
            do throws(FetchError) {
                doc = try await transport.document(
                    url(base, e.files.path), etag: nil, maxBytes: Int(min(e.files.size, Int64(Self.maxIndexBytes))))
            } catch {
                failures[a.id] = .fetch(error)
                continue
            }
            guard Int64(doc.data.count) == e.files.size, SHA256Digest.of(doc.data) == e.files.sha256 else {
                failures[a.id] = .fileListMismatch(
                    "\(e.files.path) does not match the size and sha256 the index declares")
                continue
            }
            let list: FileList
            do { list = try ManifestCoding.decode(FileList.self, from: doc.data, document: e.files.path) } catch {
                failures[a.id] = .fileListSchema(error)
                continue
            }
            guard list.id == e.id, list.version == e.version else {
                failures[a.id] = .fileListMismatch("\(e.files.path) describes \(list.id) \(list.version)")
                continue
            }
            lists[a.id] = list
            bytes[a.id] = doc.data
        }
        return (lists, failures, bytes)
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
        }
    }
}
