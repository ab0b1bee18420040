import Foundation
import LarderCore
import LarderFetch
import LarderFileSystem
import LarderStore
import SystemPackage

/// The shards of a sharded index (manifests §3): the device reads the catalog and the shards of
/// the packages it holds, asks for, may preload, or needs as dependencies — no others.
extension Syncer {
    /// What reading a sharded index's shards gave.
    struct ShardRead {
        /// The index with the entries of every shard read (`shards` kept).
        var index: RepositoryIndex
        /// Whether a shard or the catalog was fetched (not all were in the cache).
        var fetched = false
    }

    /// `root` with the entries of the shards this device needs, each from the cache or fetched and
    /// checked against the size and SHA-256 `root` names; with `write`, what was fetched is
    /// cached (durably: the held packages' settings are served from it). A shard or catalog that
    /// cannot be fetched or breaks the rules stops the sync (`index-shard`) before anything is
    /// recorded.
    func readShards(
        _ root: RepositoryIndex, sandbox: Sandbox, transport: any Transport, base: URL, write: Bool,
        delegation: VerifiedDelegation? = nil
    ) async throws(SyncError) -> ShardRead {
        guard let refs = root.shards else { return ShardRead(index: root) }
        var out = ShardRead(index: root)
        let layout = sandbox.layout
        if write {
            do { try AtomicFile.makeDirectories(layout.indexShards) } catch { throw .store(.io(error)) }
        }
        // The catalog: fetched and checked when this device does not have it under its digest
        // (a new catalog: packages came, went or changed routes); decoded again only for a
        // preload, which picks from its rows (10,000 rows are megabytes of JSON).
        let catalogPath = layout.cachedCatalog(refs.catalog.sha256)
        var catalog: IndexCatalog?
        if !AtomicFile.exists(catalogPath) {
            let bytes = try await fetchShard(refs.catalog, transport: transport, base: base)
            do throws(ShardError) { catalog = try ShardedIndex.catalog(of: bytes, root: root) } catch {
                throw .indexShard(error.description)
            }
            if write {
                do { try AtomicFile.write(bytes, to: catalogPath) } catch { throw .store(.io(error)) }
            }
            out.fetched = true
        }
        var needed = Set(sandbox.state.packages.keys.compactMap(PackageID.init))
        needed.formUnion(request.fetching)
        needed.formUnion(request.packages)
        if let network = request.preload {
            if catalog == nil {
                do {
                    let bytes = try AtomicFile.read(catalogPath, limit: ManifestCoding.maxDocumentBytes)
                    catalog = try ManifestCoding.decode(IndexCatalog.self, from: bytes, document: refs.catalog.path)
                } catch { throw .indexShard("the cached catalog cannot be read: \(error)") }
            }
            needed.formUnion((catalog?.packages ?? []).filter { $0.install.allowsPreload(on: network) }.map(\.id))
        }
        for e in root.packages { needed.formUnion(e.dependencies.map(\.id)) }
        // What the index lists itself is in no shard.
        let inRoot = Set(root.packages.map(\.id))
        needed.subtract(inRoot)
        let count = refs.files.count
        var loaded: [Int: [PackageEntry]] = [:]
        var frontier = needed
        while !frontier.isEmpty {
            let buckets = Set(frontier.map { IndexShards.bucket(of: $0, count: count) }).subtracting(loaded.keys)
            frontier = []
            let read = await withTaskGroup(of: (Int, Result<Data, SyncError>).self) { group in
                for b in buckets {
                    if let bytes = layout.cached(refs.files[b], at: layout.cachedShard(refs.files[b].sha256)) {
                        group.addTask { (b, .success(bytes)) }
                        continue
                    }
                    let ref = refs.files[b]
                    // A Result, not a typed throw inside the task: with one, the release build
                    // returned a garbage bucket number (Swift 6.3.1).
                    group.addTask { (b, await self.fetchShardResult(ref, transport: transport, base: base)) }
                }
                var all: [(Int, Result<Data, SyncError>)] = []
                for await r in group { all.append(r) }
                return all
            }
            for (b, result) in read.sorted(by: { $0.0 < $1.0 }) {
                let bytes: Data
                switch result {
                case .success(let d): bytes = d
                case .failure(let e): throw e
                }
                let entries: [PackageEntry]
                do throws(ShardError) { entries = try ShardedIndex.entries(of: bytes, number: b, root: root) } catch {
                    throw .indexShard(error.description)
                }
                if let d = delegation {
                    // Under delegations each shard holds exactly its bucket's entries of the parts.
                    do {
                        try DelegationCheck.checkShard(
                            entries, number: b, count: count, parts: d.parts, root: d.root.document)
                    } catch { throw SyncError(error) }
                }
                let path = layout.cachedShard(refs.files[b].sha256)
                if write, !AtomicFile.exists(path) {
                    do { try AtomicFile.write(bytes, to: path) } catch { throw .store(.io(error)) }
                    out.fetched = true
                }
                loaded[b] = entries
                for e in entries where needed.contains(e.id) {
                    for d in e.dependencies where !inRoot.contains(d.id) && needed.insert(d.id).inserted {
                        frontier.insert(d.id)
                    }
                }
            }
        }
        for b in loaded.keys.sorted() { out.index.packages += loaded[b] ?? [] }
        setup.logger.debug(
            "read the index's shards",
            metadata: ["shards": "\(loaded.count) of \(count)", "entries": "\(out.index.packages.count)"])
        return out
    }

    /// `fetchShard` as a result.
    private func fetchShardResult(_ ref: BlobRef, transport: any Transport, base: URL) async -> Result<Data, SyncError>
    {
        do throws(SyncError) { return .success(try await fetchShard(ref, transport: transport, base: base)) } catch {
            return .failure(error)
        }
    }

    /// `ref` fetched and checked against its size and SHA-256.
    private func fetchShard(_ ref: BlobRef, transport: any Transport, base: URL) async throws(SyncError) -> Data {
        let doc: FetchedDocument
        do throws(FetchError) {
            doc = try await transport.document(
                url(base, ref.path), etag: nil, maxBytes: Int(min(ref.size, Int64(Self.maxIndexBytes))))
        } catch { throw .indexShard("fetching \(ref.path): \(error)") }
        guard Int64(doc.data.count) == ref.size, SHA256Digest.of(doc.data) == ref.sha256 else {
            throw .indexShard("\(ref.path) does not match the size and sha256 the index declares")
        }
        return doc.data
    }
}
