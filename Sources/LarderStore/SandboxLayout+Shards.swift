import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

/// The accepted index as this device's readers see it: the signed index it accepted and, for a
/// sharded one, the shards it read (the shards of what it holds; see `index-shards/`).
extension SandboxLayout {
    /// The serving settings of the accepted index's entries and of those of its cached shards;
    /// nil when there is no readable accepted index.
    package func servingIndex() -> ServingIndex? {
        guard let data = try? AtomicFile.read(acceptedIndex, limit: ManifestCoding.maxDocumentBytes),
            var index = try? ManifestCoding.decode(ServingIndex.self, from: data, document: "index")
        else { return nil }
        guard let shards = index.shards else { return index }
        for ref in shards.files {
            guard let bytes = try? AtomicFile.read(cachedShard(ref.sha256), limit: ManifestCoding.maxDocumentBytes),
                let shard = try? ManifestCoding.decode(ServingEntries.self, from: bytes, document: ref.path)
            else { continue }
            index.packages += shard.packages
        }
        return index
    }

    /// The rows (every channel), as serving settings, of the accepted sharded index's catalog;
    /// empty when the index is not sharded or its catalog is not here. (Reads the index for the
    /// catalog's name only when this device caches shards at all: an inline index may be large.)
    package func catalogSettings() -> [ServingSettings] {
        guard AtomicFile.exists(indexShards),
            let data = try? AtomicFile.read(acceptedIndex, limit: ManifestCoding.maxDocumentBytes),
            let index = try? ManifestCoding.decode(ServingIndex.self, from: data, document: "index"),
            let ref = index.shards?.catalog,
            let bytes = try? AtomicFile.read(cachedCatalog(ref.sha256), limit: ManifestCoding.maxDocumentBytes),
            let catalog = try? ManifestCoding.decode(ServingEntries.self, from: bytes, document: "catalog")
        else { return [] }
        return catalog.packages
    }

    /// The cached copy of `ref` (a shard) when it is there and has the size and SHA-256 `ref`
    /// names.
    package func cached(_ ref: BlobRef, at path: FilePath) -> Data? {
        guard let bytes = try? AtomicFile.read(path, limit: ManifestCoding.maxDocumentBytes),
            Int64(bytes.count) == ref.size, SHA256Digest.of(bytes) == ref.sha256
        else { return nil }
        return bytes
    }

    /// Removes the cached shards the index `shards` does not name (all of them when it names
    /// none), after a new index was recorded.
    package func pruneShards(keeping shards: IndexShards?) {
        guard let names = try? SystemCalls.listDirectory(indexShards) else { return }
        var kept = Set((shards?.files ?? []).map { "\($0.sha256.hex).json" })
        if let catalog = shards?.catalog { kept.insert("catalog-\(catalog.sha256.hex).json") }
        for entry in names where !kept.contains(entry.name.string) {
            try? SystemCalls.unlink(indexShards.joined(entry.name))
        }
        if shards == nil { try? SystemCalls.rmdir(indexShards) }
    }
}
