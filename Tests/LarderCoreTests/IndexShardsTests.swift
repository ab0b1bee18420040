import Foundation
import LarderCore
import Testing

@Suite("Sharded index")
struct IndexShardsTests {
    static func entry(_ i: String, onDemand: Bool = true, routes: [String] = []) -> PackageEntry {
        var e = DifferTests.entry(i, "1.0.0")
        e.routes = routes
        if onDemand { e.install = InstallPolicy(mode: .onDemand) }
        return e
    }

    static func full(eager: Int, onDemand: Int) -> RepositoryIndex {
        let packages =
            (0..<eager).map { entry("eager-\($0)", onDemand: false) }
            + (0..<onDemand).map { entry("mini-\($0)", routes: ["https://m.example/\($0)/"]) }
        return RepositoryIndex(serial: 7, expires: Date(timeIntervalSince1970: 2_000_000_000), packages: packages)
    }

    /// The bytes of each file of a split, by path.
    static func files(_ split: [ShardedIndex.File]) -> [String: Data] {
        Dictionary(uniqueKeysWithValues: split.map { ($0.ref.path, $0.bytes) })
    }

    @Test("shard counts: a power of two near one shard per 16 packages")
    func counts() {
        #expect(ShardedIndex.shardCount(forPackages: 0) == 1)
        #expect(ShardedIndex.shardCount(forPackages: 16) == 1)
        #expect(ShardedIndex.shardCount(forPackages: 17) == 2)
        #expect(ShardedIndex.shardCount(forPackages: 40) == 4)
        #expect(ShardedIndex.shardCount(forPackages: 10_000) == 1024)
    }

    @Test(
        "a split keeps eager entries in the root and every on-demand entry in its bucket's shard; assembled, it is the index again"
    )
    func roundTrip() throws {
        let full = Self.full(eager: 3, onDemand: 40)
        let (root, files) = try ShardedIndex.split(full)
        #expect(root.schemaVersion == 2 && root.packages.map(\.id.rawValue) == ["eager-0", "eager-1", "eager-2"])
        let refs = try #require(root.shards)
        #expect(refs.files.count == 4 && files.count == 5)
        for ref in refs.files + [refs.catalog] {
            #expect(ref.path == IndexShards.path(ref.sha256))
        }
        let bytes = Self.files(files)
        var seen = 0
        for (i, ref) in refs.files.enumerated() {
            let entries = try ShardedIndex.entries(of: try #require(bytes[ref.path]), number: i, root: root)
            for e in entries { #expect(IndexShards.bucket(of: e.id, count: 4) == i) }
            seen += entries.count
        }
        #expect(seen == 40)
        // The root round-trips through its encoding, and the whole index is assembled again.
        let decoded = try ManifestCoding.decode(
            RepositoryIndex.self, from: try ManifestCoding.encode(root), document: "index")
        #expect(decoded == root)
        let again = try ShardedIndex.assemble(
            root: decoded, shards: refs.files.map { bytes[$0.path]! }, catalog: bytes[refs.catalog.path]!)
        #expect(Set(again.packages.map(\.id)) == Set(full.packages.map(\.id)) && again.packages.count == 43)
        #expect(again.shards == nil && again.schemaVersion == 1)
        let catalog = try ShardedIndex.catalog(of: bytes[refs.catalog.path]!, root: root)
        #expect(catalog.packages.count == 40 && catalog.packages.allSatisfy { $0.install.mode == .onDemand })
    }

    @Test("a shard that is not the one named, or breaks a rule, is refused with what is wrong")
    func refusals() throws {
        let (root, files) = try ShardedIndex.split(Self.full(eager: 1, onDemand: 40))
        let refs = try #require(root.shards)
        let bytes = Self.files(files)
        let zero = try #require(bytes[refs.files[0].path])

        // Other bytes than the index names.
        var tampered = zero
        tampered[tampered.count / 2] ^= 1
        #expect(throws: ShardError.self) { try ShardedIndex.entries(of: tampered, number: 0, root: root) }
        // Shard 0's bytes given as shard 1.
        #expect(throws: ShardError.self) { try ShardedIndex.entries(of: zero, number: 1, root: root) }
        #expect(throws: ShardError.self) { try ShardedIndex.entries(of: zero, number: 9, root: root) }

        /// A root naming `shard` as its shard `number` (of `count`), so that only the rule is at fault.
        func rooted(_ shard: IndexShard, count: Int) throws -> (RepositoryIndex, Data) {
            let data = try ManifestCoding.encode(shard)
            let ref = BlobRef(
                path: IndexShards.path(SHA256Digest.of(data)), size: Int64(data.count), sha256: SHA256Digest.of(data))
            var r = root
            r.shards = IndexShards(files: Array(repeating: ref, count: count), catalog: refs.catalog)
            return (r, data)
        }
        func message(_ body: () throws -> Void) -> String {
            do { try body() } catch { return "\(error)" }
            return "no error"
        }
        // An entry outside its bucket.
        let misplaced = Self.entry("mini-x")
        let wrong = (IndexShards.bucket(of: misplaced.id, count: 4) + 1) % 4
        let (r1, d1) = try rooted(IndexShard(shard: wrong, packages: [misplaced]), count: 4)
        #expect(message { _ = try ShardedIndex.entries(of: d1, number: wrong, root: r1) }.contains("bucket"))
        // An eager entry in a shard.
        let (r2, d2) = try rooted(IndexShard(shard: 0, packages: [Self.entry("eager-x", onDemand: false)]), count: 1)
        #expect(message { _ = try ShardedIndex.entries(of: d2, number: 0, root: r2) }.contains("not on demand"))
        // An entry the root lists too.
        var twice = root.packages[0]
        twice.install = InstallPolicy(mode: .onDemand)
        let (r3, d3) = try rooted(IndexShard(shard: 0, packages: [twice]), count: 1)
        #expect(message { _ = try ShardedIndex.entries(of: d3, number: 0, root: r3) }.contains("lists too"))

        // A catalog row that differs from its entry.
        let catalog = try ShardedIndex.catalog(of: try #require(bytes[refs.catalog.path]), root: root)
        let entries = try ShardedIndex.entries(of: zero, number: 0, root: root)
        var other = catalog
        if let i = other.packages.firstIndex(where: { $0.id == entries.first?.id }) {
            other.packages[i].routes = ["https://elsewhere.example/"]
        }
        try ShardedIndex.checkCatalog(catalog, covers: entries)
        #expect(throws: ShardError.self) { try ShardedIndex.checkCatalog(other, covers: entries) }
        // Assembled with a shard missing.
        #expect(throws: ShardError.self) {
            try ShardedIndex.assemble(root: root, shards: [zero], catalog: bytes[refs.catalog.path]!)
        }
    }

    @Test("schema version 2 goes with shards, 1 without; another version is refused as unsupported")
    func versions() throws {
        let (root, _) = try ShardedIndex.split(Self.full(eager: 1, onDemand: 2))
        var text = String(decoding: try ManifestCoding.encode(root), as: UTF8.self)
        #expect(text.contains("\"schemaVersion\" : 2") || text.contains("\"schemaVersion\":2"))
        func decode(_ s: String) -> String {
            do { _ = try ManifestCoding.decode(RepositoryIndex.self, from: Data(s.utf8), document: "index") } catch {
                return "\(error)"
            }
            return "ok"
        }
        #expect(decode(text) == "ok")
        // Shards without version 2.
        let one = text.replacingOccurrences(of: "\"schemaVersion\" : 2", with: "\"schemaVersion\" : 1")
            .replacingOccurrences(of: "\"schemaVersion\":2", with: "\"schemaVersion\":1")
        #expect(decode(one).contains("requires schemaVersion 2"), "\(decode(one))")
        // Version 2 without shards.
        var plain = root
        plain.shards = nil
        text = String(decoding: try ManifestCoding.encode(plain), as: UTF8.self)
        #expect(decode(text).contains("requires shards"), "\(decode(text))")
        // A version this build does not read.
        let three = String(decoding: try ManifestCoding.encode(root), as: UTF8.self)
            .replacingOccurrences(of: "\"schemaVersion\" : 2", with: "\"schemaVersion\" : 3")
            .replacingOccurrences(of: "\"schemaVersion\":2", with: "\"schemaVersion\":3")
        #expect(decode(three).contains("schemaVersion 3"), "\(decode(three))")
    }
}
