import Foundation
import LarderCore

extension TelemetryStore {
    static let attemptKinds = "('activated', 'download-failed', 'install-failed', 'no-space')"
    static let failureKinds = "('download-failed', 'install-failed', 'no-space', 'health-failed')"
    static let adoptionKinds = "('checked', 'activated', 'rolled-back')"

    /// The report for events since `since` (to the hour), of `package` only when given
    /// (format §19, "Reports").
    package func report(since: Date, until: Date = Date(), package: String? = nil) async throws -> ReleaseReport {
        let from = Int64(TelemetryEvent.hour(of: since).timeIntervalSince1970)
        var binds: [SQLValue] = [.int(from)]
        var only = ""
        if let p = package {
            binds.append(.text(p))
            only = " AND package = $2"
        }
        let scope = "hour >= $1" + only
        func counts(_ sql: String) async throws -> [PackageVersion: Int] {
            var out: [PackageVersion: Int] = [:]
            for r in try await runner.query(sql, binds, columns: [.text, .text, .int]) {
                out[PackageVersion(r[0].text, r[1].text)] = Int(r[2].int)
            }
            return out
        }
        var rows = ReportRows()
        rows.devices = try await counts(
            """
            SELECT package, version, COUNT(DISTINCT install) FROM (
              SELECT package, version, install FROM larder_events WHERE \(scope)
              UNION ALL
              SELECT package, from_version AS version, install FROM larder_events
                WHERE kind = 'rolled-back' AND from_version IS NOT NULL AND \(scope)
            ) seen GROUP BY package, version
            """)
        rows.attempts = try await counts(
            "SELECT package, version, COUNT(DISTINCT install) FROM larder_events WHERE kind IN \(Self.attemptKinds) AND \(scope) GROUP BY package, version"
        )
        rows.failures = try await counts(
            "SELECT package, version, COUNT(DISTINCT install) FROM larder_events WHERE kind IN \(Self.failureKinds) AND \(scope) GROUP BY package, version"
        )
        rows.rollbacks = try await counts(
            "SELECT package, from_version, COUNT(DISTINCT install) FROM larder_events WHERE kind = 'rolled-back' AND from_version IS NOT NULL AND \(scope) GROUP BY package, from_version"
        )
        rows.pageErrors = try await counts(
            "SELECT package, version, SUM(n) FROM larder_events WHERE kind = 'page-error' AND \(scope) GROUP BY package, version"
        )
        try await addReasons(&rows, scope: scope, binds: binds)
        try await addAdoption(&rows, scope: scope, binds: binds, until: until)
        let batches = try await runner.query(
            "SELECT COUNT(*), COALESCE(SUM(dropped), 0) FROM larder_batches WHERE received >= $1", [.int(from)],
            columns: [.int, .int])
        rows.batches = Int(batches.first?[0].int ?? 0)
        rows.dropped = Int(batches.first?[1].int ?? 0)
        return ReleaseReport.make(rows, since: Date(timeIntervalSince1970: Double(from)), until: until)
    }

    /// Failures and rollbacks by kind and reason.
    func addReasons(_ rows: inout ReportRows, scope: String, binds: [SQLValue]) async throws {
        let reasons = try await runner.query(
            """
            SELECT package, version, kind, reason, COUNT(DISTINCT install) FROM larder_events
              WHERE kind IN \(Self.failureKinds) AND \(scope) GROUP BY package, version, kind, reason
            UNION ALL
            SELECT package, from_version, kind, reason, COUNT(DISTINCT install) FROM larder_events
              WHERE kind = 'rolled-back' AND from_version IS NOT NULL AND \(scope)
              GROUP BY package, from_version, kind, reason
            """, binds, columns: [.text, .text, .text, .text, .int])
        for r in reasons {
            rows.reasons[PackageVersion(r[0].text, r[1].text), default: []].append(
                ReasonCount(kind: r[2].text, reason: r[3].text, devices: Int(r[4].int)))
        }
    }

    /// Adoption hour by hour, from the events that say which version each install runs.
    func addAdoption(_ rows: inout ReportRows, scope: String, binds: [SQLValue], until: Date) async throws {
        let found = try await runner.query(
            "SELECT package, install, hour, kind, version FROM larder_events WHERE kind IN \(Self.adoptionKinds) AND \(scope)",
            binds, columns: [.text, .text, .int, .text, .text])
        rows.addAdoption(
            found.map {
                StateEvent(
                    package: $0[0].text, install: $0[1].text, hour: Date(timeIntervalSince1970: Double($0[2].int)),
                    kind: $0[3].text, version: $0[4].text)
            }, until: until)
    }
}

extension TelemetryStore {
    /// The guard's figures (format §20) for events whose hour is at or after `since`'s: per
    /// package version, the installs that reported it (any kind, or a rollback off it) and those
    /// that failed on it or rolled back off it for health or a crash loop.
    package func guardFigures(since: Date) async throws -> [PackageVersion: (devices: Int, failures: Int)] {
        let from = Int64(TelemetryEvent.hour(of: since).timeIntervalSince1970)
        let binds: [SQLValue] = [.int(from)]
        var out: [PackageVersion: (devices: Int, failures: Int)] = [:]
        let devices = try await runner.query(
            """
            SELECT package, version, COUNT(DISTINCT install) FROM (
              SELECT package, version, install FROM larder_events WHERE hour >= $1
              UNION ALL
              SELECT package, from_version AS version, install FROM larder_events
                WHERE kind = 'rolled-back' AND from_version IS NOT NULL AND hour >= $1
            ) seen GROUP BY package, version
            """, binds, columns: [.text, .text, .int])
        for r in devices { out[PackageVersion(r[0].text, r[1].text)] = (Int(r[2].int), 0) }
        let failures = try await runner.query(
            """
            SELECT package, version, COUNT(DISTINCT install) FROM (
              SELECT package, version, install FROM larder_events WHERE kind IN \(Self.failureKinds) AND hour >= $1
              UNION ALL
              SELECT package, from_version AS version, install FROM larder_events
                WHERE kind = 'rolled-back' AND reason IN ('health', 'crash-loop') AND from_version IS NOT NULL
                AND hour >= $1
            ) failed GROUP BY package, version
            """, binds, columns: [.text, .text, .int])
        for r in failures {
            let key = PackageVersion(r[0].text, r[1].text)
            out[key, default: (0, 0)].failures = Int(r[2].int)
        }
        return out
    }
}
