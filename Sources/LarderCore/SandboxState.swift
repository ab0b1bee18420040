import Foundation

/// Whether the active version of a package has proven itself.
public enum Health: String, Codable, Sendable, Equatable, CaseIterable {
    /// Newly activated; rolled back automatically after too many failures or unconfirmed launches.
    case pending
    /// Confirmed healthy by the app (`confirm`), or a fallback restored by a rollback.
    case confirmed
}

/// What a history entry records. The raw values are what state.json stores and `status` prints;
/// `manifests/README.md` ("Sandbox state") lists them, and a test pins the two together.
package enum HistoryEvent: String, Codable, Sendable, Equatable, CaseIterable {
    /// A verified tree was placed under `packages/` (not yet active).
    case install
    /// A version on disk became the active one (pending until confirmed).
    case activate
    /// The app confirmed the active version healthy.
    case confirm
    /// A failure of the active version was counted.
    case failure
    /// An operator (or a revocation) rolled back to another version.
    case rollback
    /// The health policy rolled a pending version back on its own.
    case autoRollback = "auto-rollback"
    /// gc deleted a version that was neither active, fallback, pinned nor retained.
    case gc
    /// `doctor --repair` rebuilt the state from the verified trees on disk.
    case repair
    /// A tree the state named was missing from disk, so the state forgot it.
    case forget
    /// A version rolled back off before was installed again with `--force`.
    case unfail
}

/// One line of a package's history: what happened, to which version, and why.
package struct HistoryEntry: Codable, Sendable, Equatable {
    /// What happened.
    package var event: HistoryEvent
    /// The version the event concerns; nil when there is none (every event Larder records names one).
    package var version: SemanticVersion?
    /// The version that was active before, for activations and rollbacks.
    package var from: SemanticVersion?
    /// Why, for a person (a failure's message, `installed with --force`, …); nil when none was given.
    package var reason: String?
    /// When it happened, by the sandbox's clock in whole seconds.
    package var at: Date

    /// Creates an entry.
    package init(
        event: HistoryEvent, version: SemanticVersion?, from: SemanticVersion? = nil, reason: String? = nil, at: Date
    ) {
        self.event = event
        self.version = version
        self.from = from
        self.reason = reason
        self.at = at
    }
}

/// A version present in the sandbox (its tree under `packages/<id>/<version>/`, its verified
/// file list under `lists/<id>/<version>.json`).
package struct InstalledVersion: Codable, Sendable, Equatable {
    /// The version on disk.
    package var version: SemanticVersion
    /// The number of files in its verified file list.
    package var fileCount: Int
    /// Sum of the file sizes.
    package var size: Int64
    /// When it was placed on disk (or, for a tree found only on disk, when `doctor` recorded it).
    package var installedAt: Date

    /// Creates a record.
    package init(version: SemanticVersion, fileCount: Int, size: Int64, installedAt: Date) {
        self.version = version
        self.fileCount = fileCount
        self.size = size
        self.installedAt = installedAt
    }
}

/// A version that was rolled back off; it is never installed again automatically.
package struct FailedVersion: Codable, Sendable, Equatable {
    /// The version rolled back off, or revoked by the repository while not active.
    package var version: SemanticVersion
    /// Why, for a person: the rollback's or the revocation's reason.
    package var reason: String
    /// When it was recorded as failed.
    package var at: Date

    /// Creates a record.
    package init(version: SemanticVersion, reason: String, at: Date) {
        self.version = version
        self.reason = reason
        self.at = at
    }
}

/// The thresholds of the automatic rollback.
package struct HealthPolicy: Sendable, Equatable, Codable {
    /// Failures reported against a pending version before it is rolled back.
    package var maxFailures: Int
    /// Launches a pending version may go unconfirmed; the next launch rolls it back.
    package var maxUnconfirmedLaunches: Int

    /// The defaults: 3 and 3.
    package static let standard = HealthPolicy(maxFailures: 3, maxUnconfirmedLaunches: 3)

    /// Creates a policy.
    package init(maxFailures: Int, maxUnconfirmedLaunches: Int) {
        self.maxFailures = maxFailures
        self.maxUnconfirmedLaunches = maxUnconfirmedLaunches
    }
}

/// Everything the sandbox knows about one package.
package struct PackageState: Codable, Sendable, Equatable {
    /// The version served; nil before the first activation, or after its tree went missing.
    package var active: SemanticVersion?
    /// The last known good version, restored by a rollback.
    package var fallback: SemanticVersion?
    /// Whether the active version is still pending or confirmed (a new package starts `confirmed`).
    package var health: Health
    /// Failures reported since the active version was activated.
    package var failures: Int
    /// Launches since the active version was activated.
    package var launches: Int
    /// Versions on disk, in installation order.
    package var versions: [InstalledVersion]
    /// Versions rolled back off or revoked; `install` refuses them without `force`.
    package var failed: [FailedVersion]
    /// The most recent state changes, oldest first (bounded by `historyLimit`).
    package var history: [HistoryEntry]
    /// Grows by one every time the active version changes (absent in states written before it
    /// existed: read it through `activationNumber`). A page-health verdict names the activation it
    /// watched, so it is never applied to another.
    package var activation: UInt64?

    /// The number of the current activation (0 before the first).
    package var activationNumber: UInt64 { activation ?? 0 }

    /// The current activation of the active version, for a page-health verdict; nil when none is active.
    package func activationRef(_ id: PackageID) -> ActivationRef? {
        active.map { ActivationRef(package: id, version: $0, number: activationNumber) }
    }

    /// How many history entries are kept per package.
    package static let historyLimit = 100

    /// An empty package.
    package init() {
        active = nil
        fallback = nil
        health = .confirmed
        failures = 0
        launches = 0
        versions = []
        failed = []
        history = []
    }

    /// Whether `version` is on disk.
    package func has(_ version: SemanticVersion) -> Bool { versions.contains { $0.version == version } }

    /// Whether `version` was rolled back off.
    package func hasFailed(_ version: SemanticVersion) -> Bool { failed.contains { $0.version == version } }

    /// Appends to the history, dropping the oldest entries past the limit.
    package mutating func record(_ entry: HistoryEntry) {
        history.append(entry)
        if history.count > Self.historyLimit { history.removeFirst(history.count - Self.historyLimit) }
    }

    /// Makes `version` (already on disk) active and pending. The previous active version becomes
    /// the fallback — unless it was never confirmed and a fallback exists already, in which case
    /// that last known good version stays the fallback.
    package mutating func activate(
        _ version: SemanticVersion, event: HistoryEvent = .activate, reason: String? = nil, at: Date
    ) {
        let previous = active
        if let p = previous, p != version, health == .confirmed || fallback == nil { fallback = p }
        if fallback == version { fallback = nil }
        active = version
        activation = activationNumber + 1
        health = .pending
        failures = 0
        launches = 0
        record(HistoryEntry(event: event, version: version, from: previous, reason: reason, at: at))
    }

    /// The app says the active version works.
    package mutating func confirm(at: Date) {
        guard let v = active else { return }
        health = .confirmed
        failures = 0
        launches = 0
        record(HistoryEntry(event: .confirm, version: v, at: at))
    }

    /// Rolls back to `target` (the fallback unless named), recording the version left as
    /// failed with `reason`. Returns the version rolled back from.
    @discardableResult
    package mutating func rollBack(
        to target: SemanticVersion, reason: String, event: HistoryEvent = .rollback, at: Date
    )
        -> SemanticVersion?
    {
        let from = active
        if let f = from, f != target, !hasFailed(f) { failed.append(FailedVersion(version: f, reason: reason, at: at)) }
        // Rolling back *to* a version is a decision that it is good.
        failed.removeAll { $0.version == target }
        active = target
        activation = activationNumber + 1
        health = .confirmed
        failures = 0
        launches = 0
        if fallback == target { fallback = nil }
        record(HistoryEntry(event: event, version: target, from: from, reason: reason, at: at))
        return from
    }

    /// Counts a failure of the active version; a pending version that reaches the policy's
    /// limit and has a fallback is rolled back. Returns the version rolled back to, if any.
    package mutating func recordFailure(_ reason: String, policy: HealthPolicy, at: Date) -> SemanticVersion? {
        guard let v = active else { return nil }
        failures += 1
        record(HistoryEntry(event: .failure, version: v, reason: reason, at: at))
        guard health == .pending, failures >= policy.maxFailures, let target = fallback else { return nil }
        rollBack(to: target, reason: "\(failures) failures, the last: \(reason)", event: .autoRollback, at: at)
        return target
    }

    /// Applies a page's health verdict about the current activation: healthy confirms a pending
    /// version (a confirmed one is left as it is, nothing recorded); failed counts a failure and,
    /// for a pending version with a fallback, rolls back at once — a page that failed its health
    /// check is decisive, unlike a missing file counted against `maxFailures`. Returns the
    /// version rolled back to, if any.
    package mutating func recordPageHealth(_ verdict: HealthVerdict, at: Date) -> SemanticVersion? {
        guard let v = active else { return nil }
        switch verdict {
        case .healthy:
            if health == .pending { confirm(at: at) }
            return nil
        case .failed(let reason):
            failures += 1
            record(HistoryEntry(event: .failure, version: v, reason: "page health: \(reason)", at: at))
            guard health == .pending, let target = fallback else { return nil }
            rollBack(to: target, reason: "page health: \(reason)", event: .autoRollback, at: at)
            return target
        }
    }

    /// Counts a launch; a pending version launched more than the policy allows without a
    /// confirmation, and that has a fallback, is rolled back. Returns the version rolled back to.
    package mutating func recordLaunch(policy: HealthPolicy, at: Date) -> SemanticVersion? {
        guard active != nil, health == .pending else { return nil }
        launches += 1
        guard launches > policy.maxUnconfirmedLaunches, let target = fallback else { return nil }
        rollBack(to: target, reason: "not confirmed after \(launches - 1) launches", event: .autoRollback, at: at)
        return target
    }
}

/// The last index this sandbox accepted, recorded durably before anything is acted on.
package struct AcceptedIndex: Codable, Sendable, Equatable {
    /// Never lower in a later index (rollback attack); equal only with identical bytes.
    package var serial: UInt64
    /// SHA-256 of the exact bytes accepted.
    package var sha256: SHA256Digest
    /// When the accepted index expires, as it declares (signed).
    package var expires: Date
    /// The server's ETag, for the next conditional GET.
    package var etag: String?
    /// When this sandbox accepted it, by the sync's clock.
    package var acceptedAt: Date

    /// Creates a record.
    package init(serial: UInt64, sha256: SHA256Digest, expires: Date, etag: String?, acceptedAt: Date) {
        self.serial = serial
        self.sha256 = sha256
        self.expires = expires
        self.etag = etag
        self.acceptedAt = acceptedAt
    }
}

/// `state.json`: the sandbox's single source of truth, replaced atomically.
package struct SandboxState: Codable, Sendable, Equatable {
    /// The document's format version; `ManifestCoding.decode` refuses any but `currentSchemaVersion`.
    package var schemaVersion: Int
    /// Grows with every write, so readers notice a change cheaply.
    package var generation: UInt64
    /// Each package's state, keyed by package id text (read it through `subscript(id:)`).
    package var packages: [String: PackageState]
    /// The last accepted index (absent before the first sync).
    package var index: AcceptedIndex?

    /// An empty sandbox.
    package init() {
        schemaVersion = currentSchemaVersion
        generation = 0
        packages = [:]
        index = nil
    }

    /// The state of `id` (empty when unknown).
    package subscript(id: PackageID) -> PackageState {
        get { packages[id.rawValue] ?? PackageState() }
        set { packages[id.rawValue] = newValue }
    }
}
