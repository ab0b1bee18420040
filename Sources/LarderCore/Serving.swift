import Foundation

/// The part of an index entry the resolver serves with: where the package answers (routes), what
/// a directory URL gets (entry, SPA fallback) and what a missing file does (policy). Decoded on
/// its own, so that building a resolver snapshot does not decode every digest, rollout and
/// dependency of an index with a thousand packages.
package struct ServingSettings: Decodable, Sendable, Equatable {
    /// The package.
    package var id: PackageID
    /// The channel of the entry (a device serves with its own channel's entries).
    package var channel: Channel
    /// URL prefixes the package serves, as the index spells them.
    package var routes: [String]
    /// The file served for directory URLs.
    package var entry: String
    /// Whether an extension-less path with no file gets the entry file.
    package var spaFallback: Bool
    /// What a path with no file does.
    package var policy: Policy
    /// Whether devices install it only at first use (`install.mode` is `on-demand`).
    package var onDemand = false
    /// The version the entry publishes (its `corsOrigins` are for that version only).
    package var version: SemanticVersion?
    /// Origins that may read its files across origins (none for an encrypted entry, whatever
    /// it lists: manifests §17).
    package var corsOrigins: [String] = []
    /// Hosts its pages may reach through passthrough and bypass routes; nil: any.
    package var networkHosts: [String]?

    /// The settings of an entry.
    package init(_ e: PackageEntry) {
        self.init(
            id: e.id, channel: e.channel, routes: e.routes, entry: e.entry, spaFallback: e.spaFallback,
            policy: e.policy)
        onDemand = e.isOnDemand
        version = e.version
        corsOrigins = e.encryption == nil ? e.corsOrigins ?? [] : []
        networkHosts = e.networkHosts
    }

    /// Equal settings serve alike. The entry's version counts only when it lists `corsOrigins`
    /// (they are for that version): a new release of a package with none changes no setting.
    package static func == (a: ServingSettings, b: ServingSettings) -> Bool {
        a.id == b.id && a.channel == b.channel && a.routes == b.routes && a.entry == b.entry
            && a.spaFallback == b.spaFallback && a.policy == b.policy && a.onDemand == b.onDemand
            && a.corsOrigins == b.corsOrigins && a.networkHosts == b.networkHosts
            && (a.corsOrigins.isEmpty || a.version == b.version)
    }

    /// Settings as given; the defaults are those of a package the index does not describe.
    package init(
        id: PackageID, channel: Channel = .default, routes: [String] = [], entry: String = "index.html",
        spaFallback: Bool = false, policy: Policy = Policy()
    ) {
        self.id = id
        self.channel = channel
        self.routes = routes
        self.entry = entry
        self.spaFallback = spaFallback
        self.policy = policy
    }

    enum CodingKeys: String, CodingKey {
        case id, version, channel, routes, entry, spaFallback, policy, install, encryption, corsOrigins, networkHosts
    }

    /// The settings of `channel`'s entries, by package id text (the last entry of an id wins).
    package static func byID(_ entries: [ServingSettings], channel: Channel) -> [String: ServingSettings] {
        var out: [String: ServingSettings] = [:]
        for e in entries where e.channel == channel { out[e.id.rawValue] = e }
        return out
    }

    /// Decodes the fields with `PackageEntry`'s defaults for those absent.
    package init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(PackageID.self, forKey: .id)
        channel = try c.decodeIfPresent(Channel.self, forKey: .channel) ?? .default
        routes = try c.decodeIfPresent([String].self, forKey: .routes) ?? []
        entry = try c.decodeIfPresent(String.self, forKey: .entry) ?? "index.html"
        spaFallback = try c.decodeIfPresent(Bool.self, forKey: .spaFallback) ?? false
        policy = try c.decodeIfPresent(Policy.self, forKey: .policy) ?? Policy()
        onDemand = try c.decodeIfPresent(InstallPolicy.self, forKey: .install)?.mode == .onDemand
        version = try? c.decodeIfPresent(SemanticVersion.self, forKey: .version)
        // An encrypted entry is never readable across origins, whatever it lists.
        corsOrigins = c.contains(.encryption) ? [] : try c.decodeIfPresent([String].self, forKey: .corsOrigins) ?? []
        networkHosts = try c.decodeIfPresent([String].self, forKey: .networkHosts)
    }
}

/// An index as the resolver reads it: each entry's serving settings only. The index was verified
/// when the sync accepted it; this reads the device's cached copy.
package struct ServingIndex: Decodable, Sendable, SchemaVersioned {
    /// The document's format version.
    package var schemaVersion: Int
    /// The serving settings of every entry, every channel.
    package var packages: [ServingSettings]
    /// A sharded index's shards and catalog.
    package var shards: IndexShards?

    /// 1 and 2, as `RepositoryIndex`.
    package static var supportedSchemaVersions: ClosedRange<Int> { RepositoryIndex.supportedSchemaVersions }
    /// 2.
    package static var supportedSchemaVersion: Int { RepositoryIndex.supportedSchemaVersion }
}

/// A shard or the catalog of a sharded index as the resolver reads them: each entry's (or
/// row's) serving settings only.
package struct ServingEntries: Decodable, Sendable, SchemaVersioned {
    /// The document's format version.
    package var schemaVersion: Int
    /// The serving settings of every entry or row.
    package var packages: [ServingSettings]
}

/// A file list as the resolver reads it: every path validated as a `FileList` validates it (a
/// damaged list never sends a read outside its tree), sizes and media types checked, and each
/// digest checked as 64 lowercase hex digits but kept as text — the resolver only quotes it.
package struct ServingList: Decodable, Sendable, SchemaVersioned {
    /// One file.
    package struct File: Decodable, Sendable {
        /// The path inside the package.
        package var path: RelativePath
        /// Its size.
        package var size: Int64
        /// Its SHA-256, 64 lowercase hex digits.
        package var sha256: String
        /// The media type the list gives, if any.
        package var mime: String?

        enum CodingKeys: String, CodingKey { case path, size, sha256, mime }

        /// Decodes with the checks of `FileEntry`, the digest left as text.
        package init(from decoder: Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            path = try c.decode(RelativePath.self, forKey: .path)
            size = try c.decode(Int64.self, forKey: .size)
            sha256 = try c.decode(String.self, forKey: .sha256)
            mime = try c.decodeIfPresent(String.self, forKey: .mime)
            guard sha256.utf8.count == 64,
                sha256.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) })
            else {
                throw DecodingError.dataCorruptedError(
                    forKey: .sha256, in: c, debugDescription: "not 64 lowercase hex digits")
            }
            try FileEntry.check(size: size, mime: mime, c, sizeKey: .size, mimeKey: .mime)
        }
    }

    /// The document's format version.
    package var schemaVersion: Int
    /// The package.
    package var id: PackageID
    /// The version listed.
    package var version: SemanticVersion
    /// Its files.
    package var files: [File]
}

extension RoutedPackage {
    /// A package routed by its settings whose files are not read (yet): enough to tell which
    /// package a URL routes to (`RouteTable.routedPackage`), not to answer it.
    package init(id: PackageID, version: SemanticVersion, settings s: ServingSettings?) {
        self.id = id
        self.version = version
        routes = (s?.routes ?? []).compactMap(RoutePrefix.init)
        entry = s?.entry ?? "index.html"
        spaFallback = s?.spaFallback ?? false
        policy = s?.policy ?? Policy()
        // The signed entry's corsOrigins are for the version it publishes: another version
        // served (one rolled back to, one not updated yet, an encrypted one) is not readable.
        corsOrigins = s?.version == version ? s?.corsOrigins ?? [] : []
        networkHosts = s?.networkHosts
        files = [:]
    }

    /// Creates one from a file list read for serving and the settings it is served with.
    package init(list: ServingList, settings s: ServingSettings?) {
        self.init(id: list.id, version: list.version, settings: s)
        files = Self.table(list.id, list.version, list.files.lazy.map { ($0.path, $0.size, $0.sha256, $0.mime) })
    }
}
