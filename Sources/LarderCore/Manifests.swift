import Foundation

/// The largest size any document may declare for a file or blob (1 TiB): far above every limit,
/// low enough that sums over any index or file list cannot overflow.
package let maxDeclaredSize: Int64 = 1 << 40

/// This build's version (the `larder version` output, the User-Agent, and what `minClientVersion`
/// is compared with when no app version is configured).
package let larderVersion = "0.1.0"

/// The schema version this build writes and the major version it reads. Readers accept any
/// document whose `schemaVersion` equals this and ignore fields they do not know.
package let currentSchemaVersion = 1

/// A reference to an immutable file in the repository: where it is, how long, what hash.
package struct BlobRef: Codable, Sendable, Equatable {
    /// Path relative to the repository root (`packages/<id>/<version>/bundle.zip`).
    package var path: String
    /// Exact length in bytes.
    package var size: Int64
    /// SHA-256 of the exact bytes.
    package var sha256: SHA256Digest

    /// Creates a reference.
    package init(path: String, size: Int64, sha256: SHA256Digest) {
        self.path = path
        self.size = size
        self.sha256 = sha256
    }

    enum CodingKeys: String, CodingKey { case path, size, sha256 }

    /// Decodes a reference, refusing a size outside `0...maxDeclaredSize`.
    package init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        path = try c.decode(String.self, forKey: .path)
        size = try c.decode(Int64.self, forKey: .size)
        sha256 = try c.decode(SHA256Digest.self, forKey: .sha256)
        if size < 0 || size > maxDeclaredSize {
            throw DecodingError.dataCorruptedError(
                forKey: .size, in: c, debugDescription: "size \(size) is outside 0...\(maxDeclaredSize)")
        }
    }
}

/// What the resolver does when a URL inside a package's routes has no local file.
package enum PolicyMode: String, Codable, Sendable, Equatable, CaseIterable {
    /// Offline-first: answer not found.
    case localOnly = "local-only"
    /// Default: pass the request through to the network.
    case localThenNetwork = "local-then-network"
}

/// A package's serving policy.
package struct Policy: Codable, Sendable, Equatable {
    /// What happens when a file is missing locally.
    package var mode: PolicyMode
    /// Path prefixes (relative to a route, e.g. `/api/`) that always pass through to the network.
    package var bypass: [String]

    /// Creates a policy.
    package init(mode: PolicyMode = .localThenNetwork, bypass: [String] = []) {
        self.mode = mode
        self.bypass = bypass
    }

    enum CodingKeys: String, CodingKey { case mode, bypass }

    /// Decodes a policy; a missing `mode` is `localThenNetwork`, a missing `bypass` is empty.
    package init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        mode = try c.decodeIfPresent(PolicyMode.self, forKey: .mode) ?? .localThenNetwork
        bypass = try c.decodeIfPresent([String].self, forKey: .bypass) ?? []
    }
}

/// Staged rollout: a device installs a release when its stable bucket (0..<100, a hash of device
/// id, package, version and salt) is below `percent`.
package struct Rollout: Codable, Sendable, Equatable {
    /// Share of devices, 0...100.
    package var percent: Int
    /// Mixed into the bucket hash so that each release draws its own devices.
    package var salt: String
    /// The share following the clock (format §20); `percent` is then its first step, what a
    /// device that does not read schedules follows.
    package var schedule: RolloutSchedule?

    /// Creates a rollout.
    package init(percent: Int, salt: String, schedule: RolloutSchedule? = nil) {
        self.percent = percent
        self.salt = salt
        self.schedule = schedule
    }
}

/// When a device installs a package: at every sync (`eager`, the default), or only once it is
/// used or asked for (`on-demand`), with a hint for fetching it ahead of use. Set at pack time;
/// a device that does not know it installs every package, as before.
package struct InstallPolicy: Codable, Sendable, Equatable {
    /// The two ways a package gets onto a device.
    package enum Mode: String, Codable, Sendable, CaseIterable {
        /// Installed and updated by every sync.
        case eager
        /// Installed at first use (or by `larder fetch`); updated by syncs once held.
        case onDemand = "on-demand"
    }

    /// When an on-demand package may be fetched ahead of use (`larder fetch --preload`).
    package enum Preload: String, Codable, Sendable, CaseIterable {
        /// Only at first use or when asked for by name.
        case never
        /// Ahead of use on an unmetered network (Wi-Fi, Ethernet), when the app allows it.
        case unmetered
        /// Ahead of use on any network, when the app allows it.
        case always
    }

    /// Eager or on demand.
    package var mode: Mode
    /// The preload hint (on-demand packages only).
    package var preload: Preload
    /// Higher first when several packages are preloaded (0 by default).
    package var priority: Int

    /// Creates one.
    package init(mode: Mode = .eager, preload: Preload = .never, priority: Int = 0) {
        self.mode = mode
        self.preload = preload
        self.priority = priority
    }

    /// Every sync installs it.
    package static let eager = InstallPolicy()

    /// Whether its hint lets a preload on `network` fetch it (an on-demand package only).
    package func allowsPreload(on network: NetworkKind) -> Bool {
        mode == .onDemand && (preload == .always || (preload == .unmetered && network == .unmetered))
    }

    enum CodingKeys: String, CodingKey { case mode, preload, priority }

    /// Decodes one; `preload` and `priority` default to `never` and 0, and a priority is an
    /// integer in -1000...1000.
    package init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        mode = try c.decode(Mode.self, forKey: .mode)
        preload = try c.decodeIfPresent(Preload.self, forKey: .preload) ?? .never
        priority = try c.decodeIfPresent(Int.self, forKey: .priority) ?? 0
        guard (-1000...1000).contains(priority) else {
            throw DecodingError.dataCorruptedError(
                forKey: .priority, in: c, debugDescription: "priority \(priority) is outside -1000...1000")
        }
    }
}

/// The network a preload runs on, as the app (or `larder fetch --network`) tells it.
public enum NetworkKind: String, Codable, Sendable, CaseIterable {
    /// Paid by the byte or capped (cellular, a metered hotspot).
    case metered
    /// Not (Wi-Fi, Ethernet).
    case unmetered
}

/// A package that must be present at a version within `range`.
package struct Dependency: Codable, Sendable, Equatable {
    /// The required package.
    package var id: PackageID
    /// The accepted versions.
    package var range: VersionRange

    /// Creates a dependency.
    package init(id: PackageID, range: VersionRange) {
        self.id = id
        self.range = range
    }
}

/// One package release as the index publishes it.
package struct PackageEntry: Codable, Sendable, Equatable {
    /// The package this release belongs to.
    package var id: PackageID
    /// The version this entry publishes.
    package var version: SemanticVersion
    /// URL prefixes served by this package besides the implied `larder://<id>/`.
    package var routes: [String]
    /// File served for a directory URL (default `index.html`).
    package var entry: String
    /// Whether extension-less paths fall back to the entry file (single-page apps).
    package var spaFallback: Bool
    /// What a URL under the routes does with no local file, and which prefixes always pass through.
    package var policy: Policy
    /// The full bundle (zip).
    package var bundle: BlobRef
    /// The file list (files.json) of this version.
    package var files: BlobRef
    /// Lowest app version that may install this release.
    package var minClientVersion: SemanticVersion?
    /// Release channel (default `stable`).
    package var channel: Channel
    /// The share of devices that install this release (default: every device, empty salt).
    package var rollout: Rollout
    /// Whether the app should apply this release before showing the package.
    package var mandatory: Bool
    /// Published versions that clients must not run (they roll back off them).
    package var revoked: [SemanticVersion]
    /// Packages this release needs, each within its version range; the differ skips the release when
    /// one of them will not be available.
    package var dependencies: [Dependency]
    /// The file list gzip-compressed (`files.json.gz`): what a device fetches instead of `files`,
    /// checking the decompressed bytes against `files`. Absent in older indexes.
    package var filesGzip: BlobRef?
    /// Delta manifests to this version from earlier ones (newest base first); absent when none.
    package var deltas: [DeltaRef]?
    /// When devices install it; absent: eager (every sync), as in indexes before it.
    package var install: InstallPolicy?
    /// How this version is encrypted, when it is (manifests §16): its bundle, objects and file
    /// list are sealed with a content key wrapped for each recipient; `files` then names a marker
    /// that devices without encryption refuse. Absent: in the clear.
    package var encryption: Encryption?
    /// Origins (`scheme://host[:port]`, or `*`) whose pages may read this package's files across
    /// origins: a request with such an `Origin` is answered with `Access-Control-Allow-Origin`.
    /// Absent: none may (manifests §17). Never applied to an encrypted version.
    package var corsOrigins: [String]?
    /// Hosts (`api.example.com`, `*.example.com`) this package's pages may reach through its
    /// passthrough and bypass routes, besides its own routes' hosts; a request to another is
    /// refused (403). Absent: any host, as before the field (manifests §17).
    package var networkHosts: [String]?

    /// Whether a device installs this package only at first use or when asked for.
    package var isOnDemand: Bool { install?.mode == .onDemand }

    /// Creates an entry with the format's defaults for everything optional.
    package init(
        id: PackageID, version: SemanticVersion, routes: [String] = [], entry: String = "index.html",
        spaFallback: Bool = false, policy: Policy = Policy(), bundle: BlobRef, files: BlobRef,
        minClientVersion: SemanticVersion? = nil, channel: Channel = .default,
        rollout: Rollout = Rollout(percent: 100, salt: ""), mandatory: Bool = false,
        revoked: [SemanticVersion] = [], dependencies: [Dependency] = []
    ) {
        self.id = id
        self.version = version
        self.routes = routes
        self.entry = entry
        self.spaFallback = spaFallback
        self.policy = policy
        self.bundle = bundle
        self.files = files
        self.minClientVersion = minClientVersion
        self.channel = channel
        self.rollout = rollout
        self.mandatory = mandatory
        self.revoked = revoked
        self.dependencies = dependencies
        self.filesGzip = nil
        self.deltas = nil
        self.install = nil
        self.encryption = nil
        self.corsOrigins = nil
        self.networkHosts = nil
    }

    enum CodingKeys: String, CodingKey {
        case id, version, routes, entry, spaFallback, policy, bundle, files, minClientVersion, channel, rollout,
            mandatory, revoked, dependencies, filesGzip, deltas, install, encryption, corsOrigins, networkHosts
    }

    /// The delta manifest from `version`, when the index has one.
    package func delta(from version: SemanticVersion) -> DeltaRef? {
        deltas?.first { $0.from == version }
    }

    /// Decodes an entry, giving every absent optional field the format's default.
    package init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(PackageID.self, forKey: .id)
        version = try c.decode(SemanticVersion.self, forKey: .version)
        routes = try c.decodeIfPresent([String].self, forKey: .routes) ?? []
        entry = try c.decodeIfPresent(String.self, forKey: .entry) ?? "index.html"
        spaFallback = try c.decodeIfPresent(Bool.self, forKey: .spaFallback) ?? false
        policy = try c.decodeIfPresent(Policy.self, forKey: .policy) ?? Policy()
        bundle = try c.decode(BlobRef.self, forKey: .bundle)
        files = try c.decode(BlobRef.self, forKey: .files)
        minClientVersion = try c.decodeIfPresent(SemanticVersion.self, forKey: .minClientVersion)
        channel = try c.decodeIfPresent(Channel.self, forKey: .channel) ?? .default
        rollout = try c.decodeIfPresent(Rollout.self, forKey: .rollout) ?? Rollout(percent: 100, salt: "")
        mandatory = try c.decodeIfPresent(Bool.self, forKey: .mandatory) ?? false
        revoked = try c.decodeIfPresent([SemanticVersion].self, forKey: .revoked) ?? []
        dependencies = try c.decodeIfPresent([Dependency].self, forKey: .dependencies) ?? []
        filesGzip = try c.decodeIfPresent(BlobRef.self, forKey: .filesGzip)
        deltas = try c.decodeIfPresent([DeltaRef].self, forKey: .deltas)
        install = try c.decodeIfPresent(InstallPolicy.self, forKey: .install)
        encryption = try c.decodeIfPresent(Encryption.self, forKey: .encryption)
        corsOrigins = try c.decodeIfPresent([String].self, forKey: .corsOrigins)
        networkHosts = try c.decodeIfPresent([String].self, forKey: .networkHosts)
        if let d = deltas, d.count > 64 {
            throw DecodingError.dataCorruptedError(
                forKey: .deltas, in: c, debugDescription: "\(d.count) deltas is more than 64")
        }
    }
}

/// An index's reference to a delta manifest: the version it starts from and the manifest's
/// place, size and SHA-256 (so the index's signature covers it).
package struct DeltaRef: Codable, Sendable, Equatable {
    /// The version the delta starts from.
    package var from: SemanticVersion
    /// The delta manifest, gzipped (`packages/<id>/<to>/deltas/<from>.json.gz`); size and SHA-256
    /// are the gzip's.
    package var manifest: BlobRef

    /// Creates a reference.
    package init(from: SemanticVersion, manifest: BlobRef) {
        self.from = from
        self.manifest = manifest
    }
}

/// The repository index (`index.json`): what every device polls.
package struct RepositoryIndex: Codable, Sendable, Equatable, RepositoryDocument {
    /// The document's format version; `ManifestCoding.decode` refuses any but `currentSchemaVersion`.
    package var schemaVersion: Int
    /// Grows with every publication; devices refuse a lower one (rollback attack).
    package var serial: UInt64
    /// After this instant devices install nothing new from this index.
    package var expires: Date
    /// One entry per package and channel.
    package var packages: [PackageEntry]
    /// Key rotation: the public keys devices trust from this index on. A device adopts them only
    /// when the index is signed by a key it already trusts.
    package var keys: [KeyFile]?
    /// A sharded index's on-demand entries, in files it names (schema version 2 only).
    package var shards: IndexShards?
    /// A delegated repository's composition (format §18): the root and each team's part.
    package var delegations: Delegations?
    /// Where devices that turned telemetry on send their events (format §19); nil: nowhere.
    package var telemetry: TelemetrySettings?
    /// Holds on releases (format §20): pauses, caps and halts, signed by a rollout key.
    package var holds: [RolloutHold]?

    /// Creates an index.
    package init(
        schemaVersion: Int = currentSchemaVersion, serial: UInt64, expires: Date, packages: [PackageEntry],
        keys: [KeyFile]? = nil, shards: IndexShards? = nil, delegations: Delegations? = nil,
        telemetry: TelemetrySettings? = nil, holds: [RolloutHold]? = nil
    ) {
        self.schemaVersion = schemaVersion
        self.serial = serial
        self.expires = expires
        self.packages = packages
        self.keys = keys
        self.shards = shards
        self.delegations = delegations
        self.telemetry = telemetry
        self.holds = holds
    }

    enum CodingKeys: String, CodingKey {
        case schemaVersion, serial, expires, packages, keys, shards, delegations, telemetry, holds
    }

    /// Decodes an index, refusing `shards` in schema version 1 and its absence in 2.
    package init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        schemaVersion = try c.decode(Int.self, forKey: .schemaVersion)
        serial = try c.decode(UInt64.self, forKey: .serial)
        expires = try c.decode(Date.self, forKey: .expires)
        packages = try c.decode([PackageEntry].self, forKey: .packages)
        keys = try c.decodeIfPresent([KeyFile].self, forKey: .keys)
        shards = try c.decodeIfPresent(IndexShards.self, forKey: .shards)
        delegations = try c.decodeIfPresent(Delegations.self, forKey: .delegations)
        telemetry = try c.decodeIfPresent(TelemetrySettings.self, forKey: .telemetry)
        holds = try c.decodeIfPresent([RolloutHold].self, forKey: .holds)
        if let holds, holds.count > RolloutHold.maxHolds {
            throw DecodingError.dataCorruptedError(
                forKey: .holds, in: c, debugDescription: "\(holds.count) holds: at most \(RolloutHold.maxHolds)")
        }
        if (shards != nil) != (schemaVersion == ShardedIndex.schemaVersion),
            Self.supportedSchemaVersions.contains(schemaVersion)
        {
            throw DecodingError.dataCorruptedError(
                forKey: .shards, in: c,
                debugDescription: shards == nil
                    ? "schemaVersion \(schemaVersion) requires shards"
                    : "shards requires schemaVersion \(ShardedIndex.schemaVersion)")
        }
    }
}
