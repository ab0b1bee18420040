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
    public var previous: String?
    public var fallback: String?
    public var fileCount: Int
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
    public var rolledBackFrom: String?
}

/// What a rollback did.
public struct RollbackReport: Sendable, Codable, Equatable {
    public var id: String
    public var from: String?
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
        public var version: String
        public var fileCount: Int
        public var size: Int64
        public var installedAt: Date
        public var pinned: Bool
        /// What the version is to its package.
        public var role: Role
    }
    public var id: String
    public var active: String?
    public var fallback: String?
    /// The active version while it is not confirmed.
    public var pending: String?
    /// The active version's health.
    public var health: Health
    public var failures: Int
    public var launches: Int
    public var versions: [Version]
    public var diskUse: Int64
    public var failed: [FailedVersion]
    public var history: [HistoryEntry]
}

/// `status` of a whole sandbox.
public struct StatusReport: Sendable, Codable, Equatable {
    public var root: String
    public var generation: UInt64
    public var packages: [PackageStatus]
}

/// What `gc` removed and kept.
public struct GCReport: Sendable, Codable, Equatable {
    public var removed: [String]
    /// Versions gc would have removed but a live session pins.
    public var keptPinned: [String]
    public var freedBytes: Int64
}

/// What `doctor` found and, with repair, did.
public struct DoctorReport: Sendable, Codable, Equatable {
    public var problems: [String]
    public var verifiedVersions: [String]
    public var repaired: Bool
    public var ok: Bool { problems.isEmpty }

    enum CodingKeys: String, CodingKey { case problems, verifiedVersions, repaired, ok }

    public init(problems: [String], verifiedVersions: [String], repaired: Bool) {
        self.problems = problems
        self.verifiedVersions = verifiedVersions
        self.repaired = repaired
    }

    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        problems = try c.decode([String].self, forKey: .problems)
        verifiedVersions = try c.decode([String].self, forKey: .verifiedVersions)
        repaired = try c.decode(Bool.self, forKey: .repaired)
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(problems, forKey: .problems)
        try c.encode(verifiedVersions, forKey: .verifiedVersions)
        try c.encode(repaired, forKey: .repaired)
        try c.encode(ok, forKey: .ok)
    }
}
