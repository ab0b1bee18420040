import Foundation

/// Why a collector refused a batch: a code from format §19's list and what was wrong.
package struct BatchRefusal: Error, Sendable, Equatable, CustomStringConvertible {
    /// `bad-kind`, `too-many-events`, …
    package var code: ReasonCode
    /// What was wrong, naming the event when one was.
    package var detail: String

    /// Creates one.
    package init(_ code: ReasonCode, _ detail: String) {
        self.code = code
        self.detail = detail
    }

    /// `code: detail`.
    package var description: String { "\(code): \(detail)" }
}

/// A batch of events, as posted to a collector (format §19).
package struct TelemetryBatch: Codable, Sendable, Equatable {
    /// `1`.
    package var schemaVersion: Int
    /// The idempotency key: 32 hex digits, kept across retries.
    package var batch: String
    /// The install id: 32 hex digits, replaced every 30 days.
    package var install: String
    /// The app's version.
    package var app: String
    /// The operating-system family (`TelemetryPlatform`).
    package var platform: String
    /// Larder's version.
    package var larder: String
    /// Events the spool dropped since the last batch a collector took.
    package var dropped: Int
    /// The events, 1 … `maxEvents`.
    package var events: [TelemetryEvent]

    enum CodingKeys: String, CodingKey, CaseIterable {
        case schemaVersion, batch, install, app, platform, larder, dropped, events
    }

    /// Decodes a batch, refusing any member the format does not name (no user id can travel in one).
    package init(from decoder: Decoder) throws {
        try refuseUnknownMembers(decoder, known: CodingKeys.allCases.map(\.rawValue))
        let c = try decoder.container(keyedBy: CodingKeys.self)
        schemaVersion = try c.decode(Int.self, forKey: .schemaVersion)
        batch = try c.decode(String.self, forKey: .batch)
        install = try c.decode(String.self, forKey: .install)
        app = try c.decode(String.self, forKey: .app)
        platform = try c.decode(String.self, forKey: .platform)
        larder = try c.decode(String.self, forKey: .larder)
        dropped = try c.decode(Int.self, forKey: .dropped)
        events = try c.decode([TelemetryEvent].self, forKey: .events)
    }

    /// The batch format this code writes and reads.
    package static let schemaVersion = 1
    /// The most events a batch holds.
    package static let maxEvents = 1_000
    /// The largest body a collector accepts, compressed.
    package static let maxCompressedBytes = 256 << 10
    /// The largest body once inflated.
    package static let maxBytes = 1 << 20
    /// How far back an event's hour may be.
    package static let maxAge: TimeInterval = 31 * 86_400

    /// Creates a batch.
    package init(
        batch: String, install: String, app: String, platform: String = TelemetryPlatform.current.rawValue,
        larder: String = larderVersion, dropped: Int, events: [TelemetryEvent]
    ) {
        schemaVersion = Self.schemaVersion
        self.batch = batch
        self.install = install
        self.app = app
        self.platform = platform
        self.larder = larder
        self.dropped = dropped
        self.events = events
    }

    /// 32 random lower-case hex digits (a batch or install id).
    package static func randomID() -> String {
        (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
    }

    /// Decodes a posted body (already inflated) and checks every rule, the collector's clock being
    /// `now`; throws the first problem.
    package static func accept(_ body: Data, now: Date) throws(BatchRefusal) -> TelemetryBatch {
        guard body.count <= maxBytes else {
            throw BatchRefusal("too-large", "the batch is \(body.count) bytes inflated, more than \(maxBytes)")
        }
        let b: TelemetryBatch
        do {
            let d = JSONDecoder()
            d.dateDecodingStrategy = .custom { dec in
                let c = try dec.singleValueContainer()
                let text = try c.decode(String.self)
                guard let date = ManifestCoding.parseRFC3339(text) else {
                    throw DecodingError.dataCorruptedError(
                        in: c, debugDescription: "\(quoted(text)) is not a date-time")
                }
                return date
            }
            b = try d.decode(TelemetryBatch.self, from: body)
        } catch let error as DecodingError {
            throw BatchRefusal("bad-json", "the body is not a batch: \(ManifestCoding.describe(error))")
        } catch {
            throw BatchRefusal("bad-json", "the body is not a batch: \(error)")
        }
        try b.check(now: now)
        return b
    }

    /// Checks every rule of format §19 against the clock `now`.
    package func check(now: Date) throws(BatchRefusal) {
        guard schemaVersion == Self.schemaVersion else {
            throw BatchRefusal(
                "bad-schema-version", "schemaVersion \(schemaVersion); this collector reads \(Self.schemaVersion)")
        }
        guard Self.isID(batch) else {
            throw BatchRefusal("bad-batch-id", "batch \(quoted(batch)) is not 32 lower-case hex digits")
        }
        guard Self.isID(install) else {
            throw BatchRefusal("bad-install", "install \(quoted(install)) is not 32 lower-case hex digits")
        }
        guard SemanticVersion(app) != nil else {
            throw BatchRefusal("bad-app-version", "app \(quoted(app)) is not a SemVer version")
        }
        guard SemanticVersion(larder) != nil else {
            throw BatchRefusal("bad-app-version", "larder \(quoted(larder)) is not a SemVer version")
        }
        guard TelemetryPlatform(rawValue: platform) != nil else {
            throw BatchRefusal(
                "bad-platform",
                "platform \(quoted(platform)) is not one of \(TelemetryPlatform.allCases.map(\.rawValue).joined(separator: ", "))"
            )
        }
        guard (0...Int(Int32.max)).contains(dropped) else {
            throw BatchRefusal("bad-count", "dropped \(dropped) is out of range")
        }
        guard !events.isEmpty, events.count <= Self.maxEvents else {
            throw BatchRefusal("too-many-events", "\(events.count) events; a batch holds 1 to \(Self.maxEvents)")
        }
        for (i, e) in events.enumerated() { try Self.check(e, at: i, now: now) }
    }

    private static func check(_ e: TelemetryEvent, at i: Int, now: Date) throws(BatchRefusal) {
        let at = "event \(i)"
        guard let kind = TelemetryKind(rawValue: e.kind) else {
            throw BatchRefusal("bad-kind", "\(at): kind \(quoted(e.kind)) is not one of the ten")
        }
        if let allowed = kind.reasons {
            guard allowed.contains(e.reason) else {
                throw BatchRefusal(
                    "bad-reason",
                    "\(at): \(kind.rawValue) takes \(allowed.sorted().joined(separator: ", ")), not \(quoted(e.reason))"
                )
            }
        } else if ReasonCode(rawValue: e.reason) == nil {
            throw BatchRefusal("bad-reason", "\(at): reason \(quoted(e.reason)) is not a reason code")
        }
        guard PackageID(e.package) != nil else {
            throw BatchRefusal("bad-package", "\(at): package \(quoted(e.package)) is not a package id")
        }
        guard SemanticVersion(e.version) != nil else {
            throw BatchRefusal("bad-version", "\(at): version \(quoted(e.version)) is not SemVer")
        }
        if let f = e.from {
            guard kind.hasFrom, SemanticVersion(f) != nil else {
                throw BatchRefusal("bad-version", "\(at): from \(quoted(f)) is not allowed here or not SemVer")
            }
        }
        guard Channel(e.channel) != nil else {
            throw BatchRefusal("bad-channel", "\(at): channel \(quoted(e.channel)) is not a channel name")
        }
        guard (1...TelemetryEvent.maxCount).contains(e.count) else {
            throw BatchRefusal("bad-count", "\(at): count \(e.count) is outside 1...\(TelemetryEvent.maxCount)")
        }
        if let b = e.bytes, !(0...TelemetryEvent.maxBytes).contains(b) {
            throw BatchRefusal("bad-bytes", "\(at): bytes \(b) is out of range")
        }
        let age = now.timeIntervalSince(e.hour)
        guard e.hour == TelemetryEvent.hour(of: e.hour), age <= maxAge, age >= -3600 else {
            throw BatchRefusal(
                "bad-hour",
                "\(at): hour \(ManifestCoding.formatRFC3339(e.hour)) is not a whole hour within the last 31 days")
        }
    }

    private static func isID(_ s: String) -> Bool {
        s.utf8.count == 32 && s.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }
    }
}
