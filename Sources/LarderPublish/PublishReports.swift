import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import Logging
import SystemPackage

/// What to pack: the tree, where, and the index fields of the new release.
package struct PackRequest: Sendable {
    /// The directory whose whole tree becomes the version's files.
    package var source: FilePath
    /// The repository root directory; created when missing.
    package var repository: FilePath
    /// The package id, as text (`pack` validates it).
    package var id: String
    /// The SemVer version to publish, as text; it must be above the channel's newest.
    package var version: String
    /// URL prefixes the package serves besides `larder://<id>/`; stored normalised.
    package var routes: [String] = []
    /// The file served for directory URLs, relative to them; it must be in the tree.
    package var entry: String = "index.html"
    /// Whether an extension-less path with no file is answered with the entry file (single-page apps).
    package var spaFallback = false
    /// The release channel the version is published on.
    package var channel: Channel = .default
    /// The lowest app version that may install the release (SemVer text); `nil` for any.
    package var minClientVersion: String?
    /// The share of devices that install the release, 0...100.
    package var rolloutPercent = 100
    /// Defaults to `<id>@<version>` so that every release draws its own devices.
    package var rolloutSalt: String?
    /// A schedule's steps (format §20): the share follows them from the time of the pack, one
    /// each `rolloutEvery` seconds; `rolloutPercent` is then ignored (the first step is written).
    package var rolloutSteps: [Int]?
    /// Seconds between the schedule's steps.
    package var rolloutEvery = 3600
    /// Whether the app should apply the release before showing the package.
    package var mandatory = false
    /// When devices install it (`install` in the index); nil: eager, and no member written.
    package var install: InstallPolicy?
    /// `ID@RANGE` each, e.g. `shared-ui@^1.2.0`.
    package var dependencies: [String] = []
    /// What a path under the routes with no file does, and the prefixes that always pass through.
    package var policy = Policy()
    /// Origins that may read the package's files across origins (manifests §17); nil: none.
    package var corsOrigins: [String]?
    /// Hosts the package's pages may reach through passthrough and bypass routes; nil: any.
    package var networkHosts: [String]?
    /// A change to the index's telemetry member (format §19): set it, or remove it (nil: keep it).
    package var telemetry: TelemetryChange?
    /// How long the new index stays valid.
    package var timeToLive: TimeInterval = 30 * 24 * 3600
    /// Limits on the tree (files, sizes, path lengths and depth), also applied to the bundle's self-check.
    package var limits: TreeLimits = .standard
    /// Deltas are made to the new version from this many of the package's last versions on its
    /// channel (the one it replaces and the bases of that one's deltas, newest first); 0 makes none.
    package var deltaBases = 3
    /// Recipients to encrypt the version to (manifests §16): its bundle, objects and file list
    /// are sealed with a content key of its own, wrapped for each of these keys. Empty: in the
    /// clear.
    package var encryptTo: [RecipientPublicKey] = []
    /// Recipient keys the publisher holds, to read earlier encrypted versions: a delta from an
    /// encrypted version is made only when one of these opens its content key.
    package var recipientKeys: [RecipientKey] = []
    /// Pads every sealed blob of an encrypted version to a Padmé size (manifests §16), so that
    /// exact sizes do not name files. Needs `encryptTo`.
    package var pad = false

    /// A request with the required parts; set the rest as needed.
    package init(source: FilePath, repository: FilePath, id: String, version: String) {
        self.source = source
        self.repository = repository
        self.id = id
        self.version = version
    }
}

/// What `pack` did.
package struct PackReport: Sendable, Codable, Equatable {
    /// The package id.
    package var id: String
    /// The version published.
    package var version: String
    /// The channel it was published on.
    package var channel: Channel
    /// The serial of the newly signed index.
    package var serial: UInt64
    /// When the new index expires: now plus the time to live, in whole seconds.
    package var expires: Date
    /// Where the bundle (`bundle.zip`) is, its size and SHA-256.
    package var bundle: BlobRef
    /// Where the file list (`files.json`) is, its size and SHA-256.
    package var fileList: BlobRef
    /// The number of files in the version.
    package var fileCount: Int
    /// The files' total size in bytes, uncompressed.
    package var totalSize: Int64
    /// Objects written by this pack (contents the repository did not hold yet).
    package var objectsWritten: Int
    /// Objects already present (shared with earlier versions or packages).
    package var objectsReused: Int
    /// Compressed bytes of the objects written by this pack.
    package var objectBytesWritten: Int64
    /// The key id of the publisher's own key (co-signers are not listed).
    package var signedBy: String
    /// The gzip-compressed file list (`files.json.gz`).
    package var filesGzip: BlobRef?
    /// The deltas made to this version, newest base first.
    package var deltas: [DeltaReport] = []
    /// The key ids of the recipients the version is encrypted to; absent when it is in the clear.
    package var encryptedTo: [String]?
    /// In a delegated repository, the team part written and whether the index was composed.
    package var part: PartReport?
}

/// What `revoke` did.
package struct RevokeReport: Sendable, Codable, Equatable {
    /// The package id.
    package var id: String
    /// The version revoked.
    package var version: String
    /// The serial of the newly signed index.
    package var serial: UInt64
    /// When the new index expires: now plus the time to live, in whole seconds.
    package var expires: Date
    /// The key id of the publisher's own key (co-signers are not listed).
    package var signedBy: String
    /// In a delegated repository, the team part written and whether the index was composed.
    package var part: PartReport?
}

/// What a delegated publication wrote (format §18): the team's part and whether the index that
/// devices read names it yet.
package struct PartReport: Sendable, Codable, Equatable {
    /// The publishing team.
    package var team: String
    /// The serial of the part written (the newest one when nothing of the team's changed).
    package var serial: UInt64
    /// Whether the index was composed with it (false without the index keys: `larder compose`
    /// publishes it).
    package var composed: Bool
}

/// What a pack does to the index's `telemetry` member.
package enum TelemetryChange: Sendable, Equatable {
    /// Devices that turned telemetry on send their events here.
    case set(TelemetrySettings)
    /// The index names no collector.
    case remove

    /// The member after the change.
    package var settings: TelemetrySettings? {
        if case .set(let s) = self { return s }
        return nil
    }
}
