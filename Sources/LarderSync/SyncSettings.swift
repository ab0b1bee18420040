import Foundation
import LarderArchive
import LarderCore
import LarderFetch
import LarderFileSystem
import LarderStore
import Logging
import SystemPackage

/// What an app (or the CLI) sets once for every sync of its sandbox: the HTTP engine and its
/// policy, the limits, the device's recipient keys, the clock, where progress and logs go, and
/// the seams a test injects. One sync's own questions are a `SyncRequest`.
///
/// The engine has no default: the façade (`OfflinePackages`, which gives the platform's) and the
/// CLI choose it and inject it, so the sync depends on LarderFetch alone. `HTTPStack.none` syncs
/// from `file://` repositories only. The disk budget is the sandbox's (`config.json`, set by
/// `larder init --disk-budget` or `OfflinePackages.Configuration.diskBudget`).
public struct SyncSetup: Sendable {
    /// The HTTP engine.
    public var engine: HTTPStack
    /// Retries, timeouts and rate floor of HTTP transfers.
    public var http = HTTPOptions()
    /// Other versions gc keeps per package after a sync.
    public var retention = 1
    /// How long a sync waits for another writer's sandbox lock (another sync, an install)
    /// before it fails with `locked`, seconds.
    public var lockTimeout = 10.0
    /// What must stay free on the sandbox's file system after a sync's downloads, as a multiple
    /// of what they fetch and write (2: twice). A package that would leave less is not fetched
    /// (`no-space`), and nothing of it is written.
    public var freeSpaceReserve = 2.0
    /// The device's recipient keys (`larder keygen --recipient`): an encrypted version is
    /// installed when its content key is wrapped for one of them (manifests §16).
    public var recipientKeys: [RecipientKey] = []
    /// Told of the index and state a sync writes, for a resolver of the same process (the one
    /// `OfflinePackages` shares with its resolver); nil: a resolver reads them from disk.
    package var handoff: ServingHandoff?
    /// The clock the index expiry is checked against.
    public var clock: @Sendable () -> Date = { Date() }
    /// Told of progress as it happens (from several transfers at once).
    public var progress: (@Sendable (SyncEvent) -> Void)?
    /// Where a sync logs what it decided.
    public var logger = Logger(label: "larder.sync")
    /// How stored blobs are decoded (`BytePipeline.standard`: format version 1).
    package var pipeline: BytePipeline = .standard
    /// The bytes free for writing on the file system holding a path (`statvfs`); nil: unknown,
    /// and the check is not made. The fault seam: tests inject a small disk here.
    package var availableSpace: @Sendable (FilePath) -> Int64? = { try? SystemCalls.availableSpace($0) }

    /// The defaults, over `engine`.
    public init(engine: HTTPStack) {
        self.engine = engine
    }
}

/// What one sync asks: which packages, on which channel and app version, and whether only to
/// plan (`dryRun`). The defaults: every package, the sandbox's channel and app version.
public struct SyncRequest: Sendable, Equatable {
    /// Only these packages, and what they depend on (all when empty).
    public var packages: [PackageID]
    /// On-demand packages to install now, with what they depend on (`larder fetch`); otherwise
    /// a sync installs an on-demand package only once the device holds it.
    public var fetching: [PackageID]
    /// A preload on this network: also install the on-demand packages whose hint allows it
    /// (`preload: always`, or `unmetered` on an unmetered network). Nil: no preload.
    public var preload: NetworkKind?
    /// Overrides the sandbox's channel.
    public var channel: Channel?
    /// Overrides the sandbox's app version (for `minClientVersion`).
    public var appVersion: SemanticVersion?
    /// Only plan: fetch and verify the index and the file lists the plan needs, apply and record
    /// nothing; the report's `plan` says what a sync would do.
    public var dryRun: Bool

    /// A request; every argument optional.
    public init(
        packages: [PackageID] = [], fetching: [PackageID] = [], preload: NetworkKind? = nil, channel: Channel? = nil,
        appVersion: SemanticVersion? = nil, dryRun: Bool = false
    ) {
        self.packages = packages
        self.fetching = fetching
        self.preload = preload
        self.channel = channel
        self.appVersion = appVersion
        self.dryRun = dryRun
    }
}
