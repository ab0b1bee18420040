import Foundation
import LarderCore

/// What an install did to the version it was given. Raw values are the report's JSON strings.
public enum InstallOutcome: String, Sendable, Codable, Equatable, CaseIterable {
    /// Extracted, verified, placed and activated (pending).
    case installed
    /// Extracted, verified and placed, not activated (sync activates dependency groups together).
    case placed
    /// Already on disk: activated without extracting.
    case activated
    /// Already on disk and active: nothing changed.
    case unchanged
}

/// What `install` did.
public struct InstallReport: Sendable, Codable, Equatable {
    /// The package id.
    public var id: String
    /// The version installed.
    public var version: String
    /// What happened to it.
    public var outcome: InstallOutcome
    /// The version active before the install; nil when there was none.
    public var previous: String?
    /// The fallback version after the install; nil when there is none.
    public var fallback: String?
    /// The number of files in the version.
    public var fileCount: Int
    /// The version's files' total size, in bytes.
    public var size: Int64
    /// Whether the file list was given (verified against) or computed from the bundle (trusted).
    public var verifiedAgainstFileList: Bool
}

/// The outcome of a health event for one package.
public struct HealthOutcome: Sendable, Codable, Equatable {
    /// The package id.
    public var id: String
    /// The active version after the event.
    public var active: String?
    /// The active version's health after the event.
    public var health: Health
    /// Set when the event rolled the package back automatically.
    public var rolledBackTo: String?
    /// The version rolled back off, set together with `rolledBackTo`.
    public var rolledBackFrom: String?
}

/// What a rollback did.
public struct RollbackReport: Sendable, Codable, Equatable {
    /// The package id.
    public var id: String
    /// The version that was active before the rollback.
    public var from: String?
    /// The version active now.
    public var to: String
}

/// One package in `status`.
public struct PackageStatus: Sendable, Codable, Equatable {
    /// What a version on disk is to its package. Raw values are the report's JSON strings.
    public enum Role: String, Sendable, Codable, Equatable, CaseIterable {
        /// The version served.
        case active
        /// The last known good version, restored by a rollback.
        case fallback
        /// Kept by retention (or a pin) for a later rollback or session.
        case retained
    }

    /// One version on disk.
    public struct Version: Sendable, Codable, Equatable {
        /// The version, as SemVer text.
        public var version: String
        /// The number of files in it.
        public var fileCount: Int
        /// Its files' total size, in bytes.
        public var size: Int64
        /// When it was placed on disk.
        public var installedAt: Date
        /// Whether a live session pins it, so that gc keeps it.
        public var pinned: Bool
        /// What the version is to its package.
        public var role: Role
    }
    /// The package id.
    public var id: String
    /// The version served; nil when there is none.
    public var active: String?
    /// The version a rollback restores; nil when there is none.
    public var fallback: String?
    /// The active version while it is not confirmed.
    public var pending: String?
    /// The active version's health.
    public var health: Health
    /// Failures reported since the active version was activated or confirmed.
    public var failures: Int
    /// Unconfirmed launches of the active version (counted while it is pending).
    public var launches: Int
    /// The versions on disk, in installation order.
    public var versions: [Version]
    /// The total size of the versions on disk, in bytes.
    public var diskUse: Int64
    /// Versions rolled back off or revoked, never installed again automatically.
    public var failed: [FailedVersion]
    /// The most recent state changes, oldest first (at most `PackageState.historyLimit`).
    public var history: [HistoryEntry]
    /// `eager` or `on-demand`, as the accepted index says (nil: not in it); filled by `larder status`.
    public var install: String?
    /// When a page last used it (`usage/<id>`, at most a minute stale), else its newest installation.
    public var lastUse: Date?
}

/// `status` of a whole sandbox.
public struct StatusReport: Sendable, Codable, Equatable {
    /// The sandbox directory.
    public var root: String
    /// The generation of the state read (it grows with every state write).
    public var generation: UInt64
    /// One entry per package, sorted by id.
    public var packages: [PackageStatus]
    /// The disk budget from the config, when there is one; filled by `larder status`.
    public var diskBudget: Int64?
    /// The bytes every package's versions hold together.
    public var diskUse: Int64 { packages.reduce(0) { $0 + $1.diskUse } }
}

/// What `gc` removed and kept.
public struct GCReport: Sendable, Codable, Equatable {
    /// The versions deleted, as `id@version`.
    public var removed: [String]
    /// Versions gc would have removed but a live session pins.
    public var keptPinned: [String]
    /// The deleted versions' total file size, in bytes.
    public var freedBytes: Int64
    /// With a disk budget in the config: what keeping within it did after the gc.
    public var budget: BudgetReport?
}

/// What `doctor` found and, with repair, did.
public struct DoctorReport: Sendable, Codable, Equatable {
    /// Each problem found, as `id@version: …` or `state.json: …`; empty when all is well.
    public var problems: [String]
    /// The versions on disk that match their file lists, as `id@version`.
    public var verifiedVersions: [String]
    /// Whether `repair` rebuilt the state (only done when there were problems).
    public var repaired: Bool
    /// Whether no problem was found; encoded as `ok` alongside the stored fields.
    public var ok: Bool { problems.isEmpty }

    enum CodingKeys: String, CodingKey { case problems, verifiedVersions, repaired, ok }

    /// Creates a report.
    public init(problems: [String], verifiedVersions: [String], repaired: Bool) {
        self.problems = problems
        self.verifiedVersions = verifiedVersions
        self.repaired = repaired
    }

    /// Decodes a report; an `ok` in the input is ignored, since it follows from `problems`.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        problems = try c.decode([String].self, forKey: .problems)
        verifiedVersions = try c.decode([String].self, forKey: .verifiedVersions)
        repaired = try c.decode(Bool.self, forKey: .repaired)
    }

    /// Encodes the stored fields and the derived `ok`.
    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(problems, forKey: .problems)
        try c.encode(verifiedVersions, forKey: .verifiedVersions)
        try c.encode(repaired, forKey: .repaired)
        try c.encode(ok, forKey: .ok)
    }
}

/// What a page-health verdict did to the store.
public struct PageHealthOutcome: Sendable, Equatable, CustomStringConvertible {
    /// What changed.
    public enum Effect: Sendable, Equatable {
        /// A pending version was confirmed.
        case confirmed
        /// The version was confirmed already; nothing was written.
        case unchanged
        /// The failure was recorded; the version stays (it was confirmed, or has no fallback).
        case failureRecorded
        /// The failure was recorded and the pending version rolled back to this one.
        case rolledBack(to: String)
        /// The activation watched is no longer current (what is); nothing changed.
        case stale(current: String)
    }

    /// The activation the page was loaded from.
    public let activation: ActivationRef
    /// The page's verdict.
    public let verdict: HealthVerdict
    /// What the store did with it.
    public let effect: Effect

    /// Creates an outcome.
    public init(activation: ActivationRef, verdict: HealthVerdict, effect: Effect) {
        self.activation = activation
        self.verdict = verdict
        self.effect = effect
    }

    /// One line for a log: the activation, the verdict, what was done.
    public var description: String {
        let done =
            switch effect {
            case .confirmed: "confirmed"
            case .unchanged: "already confirmed"
            case .failureRecorded: "failure recorded"
            case .rolledBack(let to): "rolled back to \(to)"
            case .stale(let current): "ignored (the activation is no longer current: \(current))"
            }
        return "health \(activation.package)@\(activation.version): \(verdict) → \(done)"
    }
}
