import Foundation

/// k of n, with its 95 % Wilson score interval (format §19, "Reports").
package struct Proportion: Codable, Sendable, Equatable {
    /// Installs counted.
    package var count: Int
    /// Out of.
    package var of: Int
    /// count / of; nil when `of` is 0.
    package var rate: Double?
    /// The interval's lower bound.
    package var lower: Double?
    /// The interval's upper bound.
    package var upper: Double?

    /// `count` of `of` (count is capped at `of`).
    package init(_ count: Int, of: Int, z: Double = 1.96) {
        self.count = min(count, of)
        self.of = of
        guard of > 0 else { return }
        let n = Double(of)
        let p = Double(self.count) / n
        let z2 = z * z
        let centre = p + z2 / (2 * n)
        let spread = z * (p * (1 - p) / n + z2 / (4 * n * n)).squareRoot()
        let denominator = 1 + z2 / n
        rate = p
        lower = max(0, (centre - spread) / denominator)
        upper = min(1, (centre + spread) / denominator)
    }
}

/// Installs per kind and reason, for one version's failures or rollbacks.
package struct ReasonCount: Codable, Sendable, Equatable {
    /// The event kind.
    package var kind: String
    /// The reason.
    package var reason: String
    /// Distinct installs.
    package var devices: Int

    /// Creates one.
    package init(kind: String, reason: String, devices: Int) {
        self.kind = kind
        self.reason = reason
        self.devices = devices
    }
}

/// One hour of a version's adoption.
package struct AdoptionPoint: Codable, Sendable, Equatable {
    /// The hour.
    package var hour: Date
    /// Distinct installs on this version that hour.
    package var devices: Int
    /// Over the installs on any version of the package that hour.
    package var share: Double
}

/// What the telemetry says about one version of a package.
package struct VersionReport: Codable, Sendable, Equatable {
    /// The package.
    package var package: String
    /// The version.
    package var version: String
    /// Distinct installs that sent anything about it.
    package var devices: Int
    /// Installs that activated it or failed to.
    package var attempts: Int
    /// Installs with a failure for it, over attempts.
    package var failureRate: Proportion
    /// Installs that rolled back off it, over attempts.
    package var rollbackRate: Proportion
    /// Failures and rollbacks per kind and reason.
    package var byReason: [ReasonCount]
    /// Uncaught script errors counted on its pages.
    package var pageErrors: Int
    /// Hour by hour.
    package var adoption: [AdoptionPoint]
    /// The last hour's share, when the version was seen in it.
    package var current: Double?
}

/// A whole report: the window and each version seen in it.
package struct ReleaseReport: Codable, Sendable, Equatable {
    /// The window's start.
    package var since: Date
    /// When the report was made.
    package var until: Date
    /// Batches stored in the window.
    package var batches: Int
    /// Events devices said they dropped, in the window's batches.
    package var dropped: Int
    /// One per package version, by package then version.
    package var versions: [VersionReport]
}

/// The grouped counts a store answers; `ReleaseReport.make` turns them into a report.
package struct ReportRows: Sendable {
    /// (package, version) → distinct installs.
    package var devices: [PackageVersion: Int] = [:]
    /// (package, version) → installs that activated it or failed to.
    package var attempts: [PackageVersion: Int] = [:]
    /// (package, version) → installs with a failure.
    package var failures: [PackageVersion: Int] = [:]
    /// (package, version left) → installs that rolled back.
    package var rollbacks: [PackageVersion: Int] = [:]
    /// Failures and rollbacks by kind and reason.
    package var reasons: [PackageVersion: [ReasonCount]] = [:]
    /// (package, version) → page errors counted.
    package var pageErrors: [PackageVersion: Int] = [:]
    /// (package, version, hour) → installs on it that hour.
    package var adoption: [PackageVersion: [Date: Int]] = [:]
    /// (package, hour) → installs on any version that hour.
    package var packageHours: [String: [Date: Int]] = [:]
    /// Batches and dropped events in the window.
    package var batches = 0
    package var dropped = 0

    /// Creates empty rows.
    package init() {}
}

/// A package and a version, as the store spells them.
package struct PackageVersion: Hashable, Sendable, Comparable {
    package var package: String
    package var version: String

    /// Creates one.
    package init(_ package: String, _ version: String) {
        self.package = package
        self.version = version
    }

    /// By package, then by SemVer precedence (text when unparsable).
    package static func < (a: PackageVersion, b: PackageVersion) -> Bool {
        if a.package != b.package { return a.package < b.package }
        if let x = SemanticVersion(a.version), let y = SemanticVersion(b.version), x != y { return x < y }
        return a.version < b.version
    }
}

/// One event that says which version an install runs (`checked`, `activated`, or `rolled-back`,
/// whose `version` is the one it went back to).
package struct StateEvent: Sendable {
    package var package: String
    package var install: String
    package var hour: Date
    package var kind: String
    package var version: String

    /// Creates one.
    package init(package: String, install: String, hour: Date, kind: String, version: String) {
        self.package = package
        self.install = install
        self.hour = hour
        self.kind = kind
        self.version = version
    }

    /// Which of an hour's events says where the install ended that hour: a rollback after the
    /// activation it undid, an activation after the check that preceded it.
    var rank: Int {
        switch kind {
        case "rolled-back": 2
        case "activated": 1
        default: 0
        }
    }
}

extension ReportRows {
    /// Adoption hour by hour (format §19, "Reports"): each install runs, from the hour of an event
    /// that says so until the next, the version its last event of that hour names; a version's
    /// share of an hour is the installs running it over the installs seen by then.
    package mutating func addAdoption(_ events: [StateEvent], until: Date) {
        let last = TelemetryEvent.hour(of: until)
        for (package, ofPackage) in Dictionary(grouping: events, by: \.package) {
            guard let first = ofPackage.map(\.hour).min(), first <= last else { continue }
            let hours = Int((last.timeIntervalSince(first) / 3600).rounded()) + 1
            func slot(_ d: Date) -> Int { min(hours - 1, max(0, Int((d.timeIntervalSince(first) / 3600).rounded()))) }
            // +1 where an install starts running a version, -1 where it stops: summed hour by hour.
            var change: [String: [Int]] = [:]
            var seen = [Int](repeating: 0, count: hours + 1)
            for (_, ofInstall) in Dictionary(grouping: ofPackage, by: \.install) {
                var ends: [Int: StateEvent] = [:]
                for e in ofInstall {
                    let s = slot(e.hour)
                    if let have = ends[s], have.rank >= e.rank { continue }
                    ends[s] = e
                }
                let states = ends.sorted { $0.key < $1.key }
                seen[states[0].key] += 1
                for (i, (s, e)) in states.enumerated() {
                    let next = i + 1 < states.count ? states[i + 1].key : hours
                    change[e.version, default: [Int](repeating: 0, count: hours + 1)][s] += 1
                    change[e.version, default: [Int](repeating: 0, count: hours + 1)][next] -= 1
                }
            }
            var total = 0
            var totals: [Date: Int] = [:]
            for h in 0..<hours {
                total += seen[h]
                totals[first.addingTimeInterval(Double(h) * 3600)] = total
            }
            packageHours[package] = totals
            for (version, deltas) in change {
                var running = 0
                var points: [Date: Int] = [:]
                for h in 0..<hours {
                    running += deltas[h]
                    points[first.addingTimeInterval(Double(h) * 3600)] = running
                }
                adoption[PackageVersion(package, version)] = points
            }
        }
    }
}

extension ReleaseReport {
    /// The report the rows make, for the window from `since` to `until`.
    package static func make(_ rows: ReportRows, since: Date, until: Date) -> ReleaseReport {
        let lastHour = TelemetryEvent.hour(of: until)
        let keys = Set(rows.devices.keys).union(rows.attempts.keys).union(rows.rollbacks.keys).sorted()
        let versions = keys.map { k -> VersionReport in
            let attempts = rows.attempts[k] ?? 0
            let totals = rows.packageHours[k.package] ?? [:]
            let adoption = (rows.adoption[k] ?? [:]).sorted { $0.key < $1.key }.map { hour, n in
                AdoptionPoint(hour: hour, devices: n, share: n == 0 ? 0 : Double(n) / Double(max(n, totals[hour] ?? n)))
            }
            let latest = totals.keys.max()
            return VersionReport(
                package: k.package, version: k.version, devices: max(rows.devices[k] ?? 0, attempts),
                attempts: attempts,
                failureRate: Proportion(rows.failures[k] ?? 0, of: attempts),
                rollbackRate: Proportion(rows.rollbacks[k] ?? 0, of: attempts),
                byReason: (rows.reasons[k] ?? []).sorted { ($0.kind, $0.reason) < ($1.kind, $1.reason) },
                pageErrors: rows.pageErrors[k] ?? 0, adoption: adoption,
                current: latest.flatMap { h in h <= lastHour ? adoption.first { $0.hour == h }?.share ?? 0 : nil })
        }
        return ReleaseReport(
            since: since, until: until, batches: rows.batches, dropped: rows.dropped, versions: versions)
    }
}

/// One `--fail-if` comparison: `failure-rate>2%`, `devices<100`, …
package struct FailCondition: Sendable, Equatable, CustomStringConvertible {
    /// What is compared.
    package enum Metric: String, Sendable, CaseIterable {
        case failureRate = "failure-rate"
        case failureRateLower = "failure-rate-lower"
        case rollbackRate = "rollback-rate"
        case rollbackRateLower = "rollback-rate-lower"
        case adoption
        case devices
        case pageErrors = "page-errors"

        /// Whether the value is a share (written as a percentage or a fraction).
        var isShare: Bool { ![.devices, .pageErrors].contains(self) }
    }

    /// How.
    package enum Operator: String, Sendable, CaseIterable {
        case greaterOrEqual = ">="
        case lessOrEqual = "<="
        case greater = ">"
        case less = "<"
    }

    package var metric: Metric
    package var op: Operator
    /// A share as a fraction (2 % is 0.02), or a count.
    package var value: Double
    /// As written.
    package var text: String

    package var description: String { text }

    /// Parses one comparison, or throws what is wrong with it.
    package static func parse(_ text: String) throws(UsageProblem) -> FailCondition {
        let t = text.filter { !$0.isWhitespace }
        for op in Operator.allCases {  // two-character operators first
            guard let r = t.range(of: op.rawValue) else { continue }
            let name = String(t[..<r.lowerBound])
            var number = String(t[r.upperBound...])
            guard let metric = Metric(rawValue: name) else {
                throw UsageProblem(
                    "--fail-if \(quoted(text)): \(quoted(name)) is not one of \(Metric.allCases.map(\.rawValue).joined(separator: ", "))"
                )
            }
            let percent = number.hasSuffix("%")
            if percent { number.removeLast() }
            guard var value = Double(number), value.isFinite, value >= 0 else {
                throw UsageProblem("--fail-if \(quoted(text)): \(quoted(number)) is not a number")
            }
            if percent {
                guard metric.isShare else {
                    throw UsageProblem("--fail-if \(quoted(text)): \(name) is a count, not a share")
                }
                value /= 100
            } else if metric.isShare, value > 1 {
                throw UsageProblem("--fail-if \(quoted(text)): a share is written 2% or 0.02")
            }
            return FailCondition(metric: metric, op: op, value: value, text: t)
        }
        throw UsageProblem("--fail-if \(quoted(text)): expected METRIC>VALUE (or >=, <, <=), such as failure-rate>2%")
    }

    /// Parses a list joined by `,`.
    package static func parseList(_ text: String) throws(UsageProblem) -> [FailCondition] {
        var out: [FailCondition] = []
        for part in text.split(separator: ",") where !part.allSatisfy(\.isWhitespace) {
            out.append(try parse(String(part)))
        }
        guard !out.isEmpty else { throw UsageProblem("--fail-if: no comparison given") }
        return out
    }

    /// The figure this compares, for one version (nil: no figure, which never holds).
    package func figure(_ v: VersionReport) -> Double? {
        switch metric {
        case .failureRate: v.failureRate.rate
        case .failureRateLower: v.failureRate.lower
        case .rollbackRate: v.rollbackRate.rate
        case .rollbackRateLower: v.rollbackRate.lower
        case .adoption: v.current
        case .devices: Double(v.devices)
        case .pageErrors: Double(v.pageErrors)
        }
    }

    /// Whether the comparison holds for `v`.
    package func holds(_ v: VersionReport) -> Bool {
        guard let x = figure(v) else { return false }
        switch op {
        case .greater: return x > value
        case .greaterOrEqual: return x >= value
        case .less: return x < value
        case .lessOrEqual: return x <= value
        }
    }
}

/// A problem with what a person typed (an option's value).
package struct UsageProblem: Error, Sendable, Equatable, CustomStringConvertible {
    /// What is wrong.
    package var description: String

    /// Creates one.
    package init(_ description: String) { self.description = description }
}
