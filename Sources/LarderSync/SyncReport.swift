import Foundation
import LarderArchive
import LarderCore
import LarderFetch
import LarderFileSystem
import LarderStore
import Logging
import SystemPackage

/// How one package's part of a sync ended. Raw values are the report's JSON strings.
public enum PackageOutcome: String, Sendable, Codable, Equatable, CaseIterable {
    /// The action was applied.
    case done
    /// The action failed; the package's active version is untouched (see `code`, `reason`).
    case failed
    /// Nothing to do (up to date, not eligible, or not in this device's rollout).
    case skipped
}

/// Progress of a sync, for a progress bar or JSON lines.
public enum SyncEvent: Sendable, Equatable {
    /// The index was fetched (`changed` false for a 304 / identical bytes).
    case index(serial: UInt64, changed: Bool)
    /// Bytes arrived for a package; `total` is what the plan expects to fetch for it.
    case bytes(id: String, done: Int64, total: Int64)
    /// A package finished.
    case package(id: String, outcome: PackageOutcome)
}

/// What happened to one package.
public struct PackageResult: Sendable, Codable, Equatable {
    /// The package id.
    public var id: String
    /// What the plan asked for.
    package var action: PlanAction.Kind
    /// The version before (absent for an install).
    public var from: String?
    /// The version after (absent for a removal).
    public var to: String?
    /// How the version was obtained, for installs and updates.
    package var method: FetchMethod?
    /// Bytes received over the wire (compressed objects or the bundle, as sent).
    public var bytesFetched: Int64
    /// The size of the version's full bundle, for comparison.
    public var bundleBytes: Int64?
    /// Wall time spent on the package, seconds.
    public var seconds: Double
    /// How it ended.
    public var outcome: PackageOutcome
    /// Why: the plan's reason, or the failure's message.
    public var reason: String
    /// For a failure: a stable code (`hash-mismatch`, `too-large`, `redirect`, `verification-failed`, …).
    public var code: ReasonCode?
    /// For a bundle placed: `true` when it was extracted while it downloaded, `false` when the
    /// complete file had to be read again (the download started over, or the streamed read
    /// refused what the complete file's reader then judged).
    package var streamed: Bool? = nil
    /// Bytes of metadata fetched for the package (its file list, gzipped list or delta manifest).
    package var metadataBytes: Int64? = nil
    /// For an update by delta (or one the index offered a delta for): what the delta did.
    public var delta: DeltaResult? = nil
}

/// What an update by delta did: patches applied, and each content that fell back.
public struct DeltaResult: Sendable, Codable, Equatable {
    /// Contents made by a patch.
    public var patchesApplied: Int
    /// The patches' bytes fetched.
    public var patchBytes: Int64
    /// Bytes the update did not fetch: the full bundle's size minus what was fetched (metadata included).
    public var bytesSaved: Int64
    /// Each content that did not come from its patch: why, and what it came from instead.
    public var fallbacks: [DeltaFallback]
    /// Why the delta the index offered was not used at all (the plan then chose objects or the
    /// bundle), when it was not.
    public var unused: String?

    /// Creates one.
    package init(
        patchesApplied: Int, patchBytes: Int64, bytesSaved: Int64, fallbacks: [DeltaFallback], unused: String? = nil
    ) {
        self.patchesApplied = patchesApplied
        self.patchBytes = patchBytes
        self.bytesSaved = bytesSaved
        self.fallbacks = fallbacks
        self.unused = unused
    }
}

/// One content of a delta that came another way.
public struct DeltaFallback: Sendable, Codable, Equatable {
    /// What it fell back to.
    public enum Source: String, Sendable, Codable, Equatable {
        /// Its object.
        case object
        /// The whole bundle (the object failed too).
        case bundle
    }
    /// The content (SHA-256).
    public var content: SHA256Digest
    /// Why its patch was not used.
    public var reason: String
    /// What it came from instead.
    public var to: Source

    /// Creates one.
    package init(content: SHA256Digest, reason: String, to: Source) {
        self.content = content
        self.reason = reason
        self.to = to
    }
}

/// What a sync did.
public struct SyncReport: Sendable, Codable, Equatable {
    /// The serial of the index the sync acted on.
    public var serial: UInt64
    /// Whether the index changed since the last sync.
    public var indexChanged: Bool
    /// One result per package the plan named, in plan order.
    public var packages: [PackageResult]
    /// Versions the retention gc removed after the sync (`id@version`).
    public var removedByGC: [String]
    /// With a disk budget (`larder init --disk-budget`): what keeping within it did.
    public var budget: BudgetReport?
    /// The index is the one the last sync applied in full and nothing changed since: this sync
    /// made its one request and stopped (`packages` is then empty).
    public var upToDate = false
    /// For a dry run (`SyncRequest.dryRun`): what a sync would do, and why; nothing was applied
    /// (`packages` is then empty).
    package var plan: Plan?
    /// Whether some package failed while others may have been applied.
    public var hasFailures: Bool { packages.contains { $0.outcome == .failed } }
}
