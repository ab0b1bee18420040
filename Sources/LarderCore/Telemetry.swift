import Crypto
import Foundation

/// The index's `telemetry` member (format §19): where devices send their batches, and the share
/// of installs that do. Signed with the index, so a mirror cannot add or redirect it.
package struct TelemetrySettings: Codable, Sendable, Equatable {
    /// Where batches are posted (`https://…/v1/events`).
    package var endpoint: String
    /// The share of installs that report, 0 < sample ≤ 1 (absent: 1).
    package var sample: Double?

    /// Creates settings.
    package init(endpoint: String, sample: Double? = nil) {
        self.endpoint = endpoint
        self.sample = sample
    }

    /// The longest endpoint accepted.
    package static let maxEndpointBytes = 512

    /// The share, 1 when absent.
    package var rate: Double { sample ?? 1 }

    /// Why these settings break the format's rules, or nil.
    package var problem: String? {
        if let s = sample, !(s > 0 && s <= 1) { return "sample \(s) is outside (0, 1]" }
        guard endpoint.utf8.count <= Self.maxEndpointBytes else {
            return "endpoint is \(endpoint.utf8.count) bytes, more than \(Self.maxEndpointBytes)"
        }
        guard let u = URLComponents(string: endpoint), let scheme = u.scheme?.lowercased(),
            scheme == "https" || scheme == "http", let host = u.host, !host.isEmpty
        else { return "endpoint \(quoted(endpoint)) is not an absolute http(s) URL" }
        if u.user != nil || u.password != nil { return "endpoint \(quoted(endpoint)) carries credentials" }
        if u.query != nil || u.fragment != nil { return "endpoint \(quoted(endpoint)) has a query or fragment" }
        return nil
    }

    /// Whether the install `install` (32 hex digits) is in the sample: the first 8 bytes of its
    /// SHA-256, read big-endian, over 2^64, below the rate.
    package func includes(install: String) -> Bool {
        let rate = self.rate
        if rate >= 1 { return true }
        let d = Array(SHA256.hash(data: Data(install.utf8)))
        let head = d.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        return Double(head) / 18_446_744_073_709_551_616.0 < rate
    }
}

/// The ten kinds of event a device reports (format §19), each with its closed set of reasons
/// (failure kinds take any `ReasonCode`).
package enum TelemetryKind: String, Codable, Sendable, CaseIterable {
    /// The version a device runs (adoption), at most once an hour per package.
    case checked
    /// A version could not be downloaded.
    case downloadFailed = "download-failed"
    /// A downloaded version could not be placed.
    case installFailed = "install-failed"
    /// A version became active.
    case activated
    /// A device left a version for an older one.
    case rolledBack = "rolled-back"
    /// A page of the version failed its health check.
    case healthFailed = "health-failed"
    /// Uncaught script errors on the version's pages, counted.
    case pageError = "page-error"
    /// An on-demand package was fetched (or failed to be).
    case onDemand = "on-demand"
    /// An on-demand package was evicted to keep within the disk budget.
    case evicted
    /// A sync or fetch stopped for lack of disk space.
    case noSpace = "no-space"

    /// The reasons this kind takes; nil: any failure code (a `ReasonCode`).
    package var reasons: Set<String>? {
        switch self {
        case .checked: ["current"]
        case .activated: ["bundle", "objects", "delta", "local"]
        case .rolledBack: ["health", "crash-loop", "revoked", "manual"]
        case .healthFailed: ["not-ready", "script-error", "load-failed", "process-terminated"]
        case .pageError: ["script-error"]
        case .evicted: ["budget"]
        case .noSpace: ["no-space"]
        case .downloadFailed, .installFailed, .onDemand: nil
        }
    }

    /// Whether `from` is part of the event.
    package var hasFrom: Bool { [.downloadFailed, .installFailed, .activated, .rolledBack, .noSpace].contains(self) }
}

/// The operating-system families a batch may name.
package enum TelemetryPlatform: String, Codable, Sendable, CaseIterable {
    case ios, macos, tvos, watchos, visionos, linux, android, windows, other

    /// The platform this code was built for.
    package static var current: TelemetryPlatform {
        #if os(iOS)
            .ios
        #elseif os(macOS)
            .macos
        #elseif os(tvOS)
            .tvos
        #elseif os(watchOS)
            .watchos
        #elseif os(visionOS)
            .visionos
        #elseif os(Linux)
            .linux
        #elseif os(Android)
            .android
        #elseif os(Windows)
            .windows
        #else
            #error(
                "Larder: name this platform's telemetry family (TelemetryPlatform in Sources/LarderCore/Telemetry.swift)"
            )
        #endif
    }
}

/// One event as it travels (format §19). Text fields are kept as text so that the collector can
/// name what is wrong with a hostile one; a device makes them with `init(kind:…)`.
package struct TelemetryEvent: Codable, Sendable, Equatable, Hashable {
    /// One of `TelemetryKind`'s raw values.
    package var kind: String
    /// The package id.
    package var package: String
    /// The version the event is about (SemVer).
    package var version: String
    /// The channel the device follows.
    package var channel: String
    /// Why, from the kind's set.
    package var reason: String
    /// The version before (activation, rollback, failures), when there was one.
    package var from: String?
    /// How many times (merged events add up).
    package var count: Int
    /// Bytes received or freed, where the kind says so.
    package var bytes: Int64?
    /// The UTC hour it happened in.
    package var hour: Date

    enum CodingKeys: String, CodingKey, CaseIterable {
        case kind, package, version, channel, reason, from, count, bytes, hour
    }

    /// Decodes an event, refusing any member the format does not name (no URL or message can
    /// travel in one).
    package init(from decoder: Decoder) throws {
        try refuseUnknownMembers(decoder, known: CodingKeys.allCases.map(\.rawValue))
        let c = try decoder.container(keyedBy: CodingKeys.self)
        kind = try c.decode(String.self, forKey: .kind)
        package = try c.decode(String.self, forKey: .package)
        version = try c.decode(String.self, forKey: .version)
        channel = try c.decode(String.self, forKey: .channel)
        reason = try c.decode(String.self, forKey: .reason)
        from = try c.decodeIfPresent(String.self, forKey: .from)
        count = try c.decode(Int.self, forKey: .count)
        bytes = try c.decodeIfPresent(Int64.self, forKey: .bytes)
        hour = try c.decode(Date.self, forKey: .hour)
    }

    /// The largest count and byte figure accepted.
    package static let maxCount = 1_000_000
    /// 2^53: what a JSON number carries exactly everywhere.
    package static let maxBytes: Int64 = 1 << 53

    /// An event of `kind` at `now` (cut to its hour).
    package init(
        _ kind: TelemetryKind, package: PackageID, version: SemanticVersion, channel: Channel, reason: String,
        from: SemanticVersion? = nil, count: Int = 1, bytes: Int64? = nil, at now: Date
    ) {
        self.kind = kind.rawValue
        self.package = package.rawValue
        self.version = version.description
        self.channel = channel.rawValue
        self.reason = reason
        self.from = from?.description
        self.count = count
        self.bytes = bytes
        self.hour = Self.hour(of: now)
    }

    /// `date` cut to the start of its UTC hour.
    package static func hour(of date: Date) -> Date {
        Date(timeIntervalSince1970: (date.timeIntervalSince1970 / 3600).rounded(.down) * 3600)
    }

    /// What merges: events with the same key add their counts and bytes.
    package struct Key: Hashable {
        let kind, package, version, channel, reason: String
        let from: String?
        let hour: Date
    }

    /// This event's merge key.
    package var key: Key {
        Key(kind: kind, package: package, version: version, channel: channel, reason: reason, from: from, hour: hour)
    }

    /// `events` with those of one key merged (counts and bytes added, capped), in first-seen order.
    package static func merged(_ events: [TelemetryEvent]) -> [TelemetryEvent] {
        var order: [Key] = []
        var byKey: [Key: TelemetryEvent] = [:]
        for e in events {
            let k = e.key
            if var have = byKey[k] {
                // `checked` says "runs this version this hour": once is enough.
                if e.kind != TelemetryKind.checked.rawValue {
                    have.count = min(maxCount, have.count + e.count)
                    if let b = e.bytes { have.bytes = min(maxBytes, (have.bytes ?? 0) + b) }
                }
                byKey[k] = have
            } else {
                order.append(k)
                byKey[k] = e
            }
        }
        return order.compactMap { byKey[$0] }
    }
}

/// Any member name, to list what an object holds.
struct AnyMember: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}

/// Throws when the object being decoded has a member outside `known`.
func refuseUnknownMembers(_ decoder: Decoder, known: [String]) throws {
    let all = try decoder.container(keyedBy: AnyMember.self)
    if let extra = all.allKeys.first(where: { !known.contains($0.stringValue) }) {
        throw DecodingError.dataCorruptedError(
            forKey: extra, in: all, debugDescription: "\(quoted(extra.stringValue)) is not a member of the format")
    }
}
