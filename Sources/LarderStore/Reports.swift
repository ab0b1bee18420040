import Foundation
import LarderCore

/// What an install did to the version it was given. Raw values are the report's JSON strings.
package enum InstallOutcome: String, Sendable, Codable, Equatable, CaseIterable {
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
package struct InstallReport: Sendable, Codable, Equatable {
    /// The package id.
    package var id: String
    /// The version installed.
    package var version: String
    /// What happened to it.
    package var outcome: InstallOutcome
    /// The version active before the install; nil when there was none.
    package var previous: String?
    /// The fallback version after the install; nil when there is none.
    package var fallback: String?
    /// The number of files in the version.
    package var fileCount: Int
    /// The version's files' total size, in bytes.
    package var size: Int64
    /// Whether the file list was given (verified against) or computed from the bundle (trusted).
    package var verifiedAgainstFileList: Bool
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
package struct RollbackReport: Sendable, Codable, Equatable {
    /// The package id.
    package var id: String
    /// The version that was active before the rollback.
    package var from: String?
    /// The version active now.
    package var to: String
}

/// One package in `status`.
package struct PackageStatus: Sendable, Codable, Equatable {
    /// What a version on disk is to its package. Raw values are the report's JSON strings.
    package enum Role: String, Sendable, Codable, Equatable, CaseIterable {
        /// The version served.
        case active
        /// The last known good version, restored by a rollback.
        case fallback
        /// Kept by retention (or a pin) for a later rollback or session.
        case retained
    }

    /// One version on disk.
    package struct Version: Sendable, Codable, Equatable {
        /// The version, as SemVer text.
        package var version: String
        /// The number of files in it.
        package var fileCount: Int
        /// Its files' total size, in bytes.
        package var size: Int64
        /// When it was placed on disk.
        package var installedAt: Date
        /// Whether a live session pins it, so that gc keeps it.
        package var pinned: Bool
        /// What the version is to its package.
        package var role: Role
    }
    /// The package id.
    package var id: String
    /// The version served; nil when there is none.
    package var active: String?
    /// The version a rollback restores; nil when there is none.
    package var fallback: String?
    /// The active version while it is not confirmed.
    package var pending: String?
    /// The active version's health.
    package var health: Health
    /// Failures reported since the active version was activated or confirmed.
    package var failures: Int
    /// Unconfirmed launches of the active version (counted while it is pending).
    package var launches: Int
    /// The versions on disk, in installation order.
    package var versions: [Version]
    /// The total size of the versions on disk, in bytes.
    package var diskUse: Int64
    /// Versions rolled back off or revoked, never installed again automatically.
    package var failed: [FailedVersion]
    /// The most recent state changes, oldest first (at most `PackageState.historyLimit`).
    package var history: [HistoryEntry]
    /// `eager` or `on-demand`, as the accepted index says (nil: not in it); filled by `larder status`.
    package var install: String?
    /// When a page last used it (`usage/<id>`, at most a minute stale), else its newest installation.
    package var lastUse: Date?
}

/// `status` of a whole sandbox.
package struct StatusReport: Sendable, Codable, Equatable {
    /// The sandbox directory.
    package var root: String
    /// The generation of the state read (it grows with every state write).
    package var generation: UInt64
    /// One entry per package, sorted by id.
    package var packages: [PackageStatus]
    /// The disk budget from the config, when there is one; filled by `larder status`.
    package var diskBudget: Int64?
    /// The bytes every package's versions hold together.
    package var diskUse: Int64 { packages.reduce(0) { $0 + $1.diskUse } }
}

/// What `gc` removed and kept.
package struct GCReport: Sendable, Codable, Equatable {
    /// The versions deleted, as `id@version`.
    package var removed: [String]
    /// Versions gc would have removed but a live session pins.
    package var keptPinned: [String]
    /// The deleted versions' total file size, in bytes.
    package var freedBytes: Int64
    /// With a disk budget in the config: what keeping within it did after the gc.
    package var budget: BudgetReport?
}

/// What `doctor` found and, with repair, did. Encoded (`larder doctor --json`) as `problems`
/// (each finding's line), `findings` (each as `code`, `id`, `version`, `message`),
/// `verifiedVersions`, `repaired` and `ok`.
package struct DoctorReport: Sendable, Encodable, Equatable {
    /// Each problem found; empty when all is well.
    package var findings: [DoctorFinding]
    /// The versions on disk that match their file lists, as `id@version`.
    package var verifiedVersions: [String]
    /// Whether `repair` rebuilt the state (only done when there were problems).
    package var repaired: Bool
    /// Whether no problem was found.
    package var ok: Bool { findings.isEmpty }
    /// Each finding's line, as `id@version: …` or `state.json: …`.
    package var problems: [String] { findings.map(\.description) }

    enum CodingKeys: String, CodingKey { case problems, findings, verifiedVersions, repaired, ok }
    private enum FindingKeys: String, CodingKey { case code, id, version, message }

    /// Creates a report.
    package init(findings: [DoctorFinding], verifiedVersions: [String], repaired: Bool) {
        self.findings = findings
        self.verifiedVersions = verifiedVersions
        self.repaired = repaired
    }

    /// Encodes the findings (as lines and as coded objects), the verified versions, `repaired`
    /// and the derived `ok`.
    package func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(problems, forKey: .problems)
        var list = c.nestedUnkeyedContainer(forKey: .findings)
        for f in findings {
            var o = list.nestedContainer(keyedBy: FindingKeys.self)
            try o.encode(f.code, forKey: .code)
            try o.encodeIfPresent(f.id?.rawValue, forKey: .id)
            try o.encodeIfPresent(f.version?.description, forKey: .version)
            try o.encode(f.description, forKey: .message)
        }
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
