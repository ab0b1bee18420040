import Foundation

/// Where a sharded index keeps its on-demand entries (manifests/README.md §3, "Sharded
/// indexes"): files named by their SHA-256 that the signed index names by size and digest, so a
/// device reads the entries of the packages it holds and no others.
///
/// An index with `shards` has `schemaVersion` 2: a device that cannot read shards refuses the
/// index whole (and keeps what it has) rather than reading it as an index that dropped its
/// on-demand packages, which it would remove.
package struct IndexShards: Codable, Sendable, Equatable {
    /// The shards, in order: shard `i` holds the entries (every channel) of each sharded package
    /// whose id falls in bucket `i` (`bucket(of:count:)` with `count` = `files.count`).
    package var files: [BlobRef]
    /// Every sharded entry's serving settings and install policy: what a device needs to know
    /// which package a URL belongs to before it holds it, and what it may preload.
    package var catalog: BlobRef

    /// Creates the reference part of a sharded index.
    package init(files: [BlobRef], catalog: BlobRef) {
        self.files = files
        self.catalog = catalog
    }

    /// The most shards an index may name.
    package static let maxShards = 1 << 16

    enum CodingKeys: String, CodingKey { case files, catalog }

    /// Decodes the references, refusing no shard or more than `maxShards`.
    package init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        files = try c.decode([BlobRef].self, forKey: .files)
        catalog = try c.decode(BlobRef.self, forKey: .catalog)
        guard (1...Self.maxShards).contains(files.count) else {
            throw DecodingError.dataCorruptedError(
                forKey: .files, in: c, debugDescription: "\(files.count) shards: an index names 1...\(Self.maxShards)")
        }
    }

    /// The bucket of a package id among `count` shards: the first four bytes of the SHA-256 of
    /// its UTF-8 text, big-endian, modulo `count`.
    package static func bucket(of id: PackageID, count: Int) -> Int {
        let d = SHA256Digest.of(Data(id.rawValue.utf8)).bytes
        let n = UInt32(d[0]) << 24 | UInt32(d[1]) << 16 | UInt32(d[2]) << 8 | UInt32(d[3])
        return Int(n % UInt32(max(1, count)))
    }

    /// The shard files' path for bytes of digest `d`: `shards/<aa>/<sha256>.json`.
    package static func path(_ d: SHA256Digest) -> String {
        let hex = d.hex
        return "shards/\(hex.prefix(2))/\(hex).json"
    }
}

/// One shard of a sharded index: the entries of its bucket's packages.
package struct IndexShard: Codable, Sendable, Equatable, RepositoryDocument, SchemaVersioned {
    /// The document's format version (1).
    package var schemaVersion: Int
    /// Its position in the index's `shards.files`.
    package var shard: Int
    /// The entries, as an index lists them.
    package var packages: [PackageEntry]

    /// Creates one.
    package init(schemaVersion: Int = currentSchemaVersion, shard: Int, packages: [PackageEntry]) {
        self.schemaVersion = schemaVersion
        self.shard = shard
        self.packages = packages
    }

    enum CodingKeys: String, CodingKey { case schemaVersion, shard, packages }

    /// Decodes a shard, refusing a position outside `0..<IndexShards.maxShards`.
    package init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        schemaVersion = try c.decode(Int.self, forKey: .schemaVersion)
        shard = try c.decode(Int.self, forKey: .shard)
        packages = try c.decode([PackageEntry].self, forKey: .packages)
        guard (0..<IndexShards.maxShards).contains(shard) else {
            throw DecodingError.dataCorruptedError(
                forKey: .shard, in: c, debugDescription: "shard \(shard) is outside 0...\(IndexShards.maxShards - 1)")
        }
    }
}

/// A sharded entry's row in the catalog: where it answers and how it installs.
package struct CatalogEntry: Codable, Sendable, Equatable {
    /// The package.
    package var id: PackageID
    /// The entry's channel.
    package var channel: Channel
    /// Its routes, as the entry spells them.
    package var routes: [String]
    /// Its entry file.
    package var entry: String
    /// Its SPA fallback.
    package var spaFallback: Bool
    /// Its policy for a path with no file.
    package var policy: Policy
    /// Its install policy.
    package var install: InstallPolicy

    enum CodingKeys: String, CodingKey { case id, channel, routes, entry, spaFallback, policy, install }

    /// Decodes a row, refusing a route that is not one, or not written as pack normalises it
    /// (the index rules' check of an entry's routes, for the rows whose entries a device has
    /// not read).
    package init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(PackageID.self, forKey: .id)
        channel = try c.decode(Channel.self, forKey: .channel)
        routes = try c.decode([String].self, forKey: .routes)
        entry = try c.decode(String.self, forKey: .entry)
        spaFallback = try c.decode(Bool.self, forKey: .spaFallback)
        policy = try c.decode(Policy.self, forKey: .policy)
        install = try c.decode(InstallPolicy.self, forKey: .install)
        for r in routes where RoutePrefix(r)?.description != r {
            throw DecodingError.dataCorruptedError(
                forKey: .routes, in: c,
                debugDescription: "route \(quoted(r)) is not a route written as pack writes it")
        }
    }

    /// The row of an entry.
    package init(_ e: PackageEntry) {
        id = e.id
        channel = e.channel
        routes = e.routes
        entry = e.entry
        spaFallback = e.spaFallback
        policy = e.policy
        install = e.install ?? .eager
    }
}

/// The catalog of a sharded index: one row per sharded entry, sorted as the index sorts entries.
package struct IndexCatalog: Codable, Sendable, Equatable, RepositoryDocument, SchemaVersioned {
    /// The document's format version (1).
    package var schemaVersion: Int
    /// The rows.
    package var packages: [CatalogEntry]

    /// Creates one.
    package init(schemaVersion: Int = currentSchemaVersion, packages: [CatalogEntry]) {
        self.schemaVersion = schemaVersion
        self.packages = packages
    }
}

/// Why a shard or the catalog of a sharded index was refused.
package struct ShardError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What was wrong, naming the file.
    package let description: String

    /// An error saying `description`.
    package init(_ description: String) { self.description = description }
}

/// Splitting a whole index into a signed root and its shards (publishers), and checking shards
/// against the root that names them (devices and `verify`). Pure.
package enum ShardedIndex {
    /// The schema version of an index with shards.
    package static let schemaVersion = 2

    /// The number of entries a shard holds on average: a device holding a few packages reads a
    /// few shards of about this many entries.
    package static let entriesPerShard = 16

    /// How many shards `count` sharded packages take: a power of two, `count / entriesPerShard`
    /// rounded up (at least 1), so that it changes rarely as packages come and go.
    package static func shardCount(forPackages count: Int) -> Int {
        let wanted = max(1, (count + entriesPerShard - 1) / entriesPerShard)
        var n = 1
        while n < wanted && n < IndexShards.maxShards { n <<= 1 }
        return n
    }

    /// A document of a sharded index and its bytes.
    package struct File: Sendable, Equatable {
        /// Its reference in the root.
        package let ref: BlobRef
        /// Its bytes.
        package let bytes: Data
    }

    /// `full` split: its eager entries stay in the root; its on-demand entries go to shards, by
    /// the bucket of their id, with a catalog row each. The root has schema version 2 and names
    /// every shard and the catalog.
    package static func split(_ full: RepositoryIndex) throws -> (root: RepositoryIndex, files: [File]) {
        let sharded = full.packages.filter(\.isOnDemand)
        let count = shardCount(forPackages: Set(sharded.map(\.id)).count)
        var buckets = Array(repeating: [PackageEntry](), count: count)
        for e in sharded { buckets[IndexShards.bucket(of: e.id, count: count)].append(e) }
        var files: [File] = []
        var refs: [BlobRef] = []
        for (i, entries) in buckets.enumerated() {
            let bytes = try ManifestCoding.encode(IndexShard(shard: i, packages: entries))
            let file = named(bytes)
            refs.append(file.ref)
            files.append(file)
        }
        let catalog = named(try ManifestCoding.encode(IndexCatalog(packages: sharded.map(CatalogEntry.init))))
        files.append(catalog)
        var root = full
        root.schemaVersion = schemaVersion
        root.packages = full.packages.filter { !$0.isOnDemand }
        root.shards = IndexShards(files: refs, catalog: catalog.ref)
        return (root, files)
    }

    private static func named(_ bytes: Data) -> File {
        let d = SHA256Digest.of(bytes)
        return File(ref: BlobRef(path: IndexShards.path(d), size: Int64(bytes.count), sha256: d), bytes: bytes)
    }

    /// The entries of shard `number` of `root`, from `bytes`: the size and SHA-256 the root
    /// names, a well-formed shard that says it is that shard, every entry in its bucket, on
    /// demand, and none listed by the root itself.
    package static func entries(of bytes: Data, number: Int, root: RepositoryIndex) throws(ShardError)
        -> [PackageEntry]
    {
        guard let shards = root.shards, shards.files.indices.contains(number) else {
            throw ShardError("the index names no shard \(number)")
        }
        let ref = shards.files[number]
        try check(bytes, against: ref, what: "shard \(number)")
        let shard: IndexShard
        do { shard = try ManifestCoding.decode(IndexShard.self, from: bytes, document: ref.path) } catch {
            throw ShardError("shard \(number) (\(ref.path)): \(error)")
        }
        guard shard.shard == number else {
            throw ShardError("\(ref.path) says it is shard \(shard.shard), but the index names it as shard \(number)")
        }
        let inRoot = Set(root.packages.map(\.id))
        for e in shard.packages {
            let bucket = IndexShards.bucket(of: e.id, count: shards.files.count)
            if bucket != number {
                throw ShardError("\(ref.path) lists \(e.id), whose bucket is \(bucket), not \(number)")
            }
            if !e.isOnDemand {
                throw ShardError("\(ref.path) lists \(e.id), which is not on demand (eager entries are in the index)")
            }
            if inRoot.contains(e.id) {
                throw ShardError("\(ref.path) lists \(e.id), which the index lists too")
            }
        }
        return shard.packages
    }

    /// The catalog of `root`, from `bytes`: the size and SHA-256 the root names, well formed,
    /// every row on demand and not listed by the root.
    package static func catalog(of bytes: Data, root: RepositoryIndex) throws(ShardError) -> IndexCatalog {
        guard let ref = root.shards?.catalog else { throw ShardError("the index names no catalog") }
        try check(bytes, against: ref, what: "the catalog")
        let catalog: IndexCatalog
        do { catalog = try ManifestCoding.decode(IndexCatalog.self, from: bytes, document: ref.path) } catch {
            throw ShardError("the catalog (\(ref.path)): \(error)")
        }
        let inRoot = Set(root.packages.map(\.id))
        for row in catalog.packages {
            if row.install.mode != .onDemand { throw ShardError("the catalog lists \(row.id), which is not on demand") }
            if inRoot.contains(row.id) { throw ShardError("the catalog lists \(row.id), which the index lists too") }
        }
        return catalog
    }

    /// Every entry of `shard` has its catalog row, equal to the entry's (a device serves a
    /// package it does not hold by its row, and the one it holds by its entry: they must agree).
    package static func checkCatalog(_ catalog: IndexCatalog, covers entries: [PackageEntry]) throws(ShardError) {
        var rows: [String: CatalogEntry] = [:]
        for r in catalog.packages { rows["\(r.id)\u{0}\(r.channel)"] = r }
        for e in entries where rows["\(e.id)\u{0}\(e.channel)"] != CatalogEntry(e) {
            throw ShardError(
                "the catalog's row for \(e.id) (channel \(e.channel)) is missing or differs from its entry")
        }
    }

    /// The whole index a root and all its shards make: the root's entries, then each shard's, and
    /// the catalog checked to have exactly one row per sharded entry.
    package static func assemble(root: RepositoryIndex, shards: [Data], catalog: Data) throws(ShardError)
        -> RepositoryIndex
    {
        guard let refs = root.shards else { return root }
        guard shards.count == refs.files.count else {
            throw ShardError("\(shards.count) shards for the \(refs.files.count) the index names")
        }
        var full = root
        var sharded: [PackageEntry] = []
        for (i, bytes) in shards.enumerated() { sharded += try entries(of: bytes, number: i, root: root) }
        let cat = try self.catalog(of: catalog, root: root)
        try checkCatalog(cat, covers: sharded)
        if cat.packages.count != sharded.count {
            throw ShardError(
                "the catalog has \(cat.packages.count) rows for the \(sharded.count) entries of the shards")
        }
        full.packages += sharded
        full.shards = nil
        full.schemaVersion = currentSchemaVersion
        return full
    }

    static func check(_ bytes: Data, against ref: BlobRef, what: String) throws(ShardError) {
        guard Int64(bytes.count) == ref.size, SHA256Digest.of(bytes) == ref.sha256 else {
            throw ShardError("\(what) (\(ref.path)) does not match the size and sha256 the index declares")
        }
    }
}
