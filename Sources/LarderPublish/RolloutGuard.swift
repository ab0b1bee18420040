import Foundation
import LarderCore

/// What `larder rollout guard` decides from a collector's figures (format §20): pure, so a test
/// gives it figures and a clock and reads the decisions.
package struct RolloutGuard: Sendable {
    /// Pause when the failure rate's 95 % Wilson lower bound is above this (0 … 1).
    package var maxFailureRate: Double
    /// Fewer devices than this in the window: no pause or resume (`insufficient`).
    package var minDevices: Int
    /// With a schedule, the guard steps a cap through these shares…
    package var steps: [Int]?
    /// …one step each this many seconds of health.
    package var every: TimeInterval = 3600
    /// The window's length in seconds (for the reasons it writes).
    package var window: TimeInterval = 3600

    /// Creates one.
    package init(maxFailureRate: Double, minDevices: Int, steps: [Int]? = nil) {
        self.maxFailureRate = maxFailureRate
        self.minDevices = minDevices
        self.steps = steps
    }

    /// One version's figures in the window.
    package struct Figures: Sendable, Equatable {
        /// Distinct installs that reported the version.
        package var devices: Int
        /// Distinct installs that failed on it or rolled back off it for health or a crash loop.
        package var failures: Int

        /// Creates them.
        package init(devices: Int, failures: Int) {
            self.devices = devices
            self.failures = failures
        }
    }

    /// One decision, with its figures.
    package struct Decision: Sendable, Codable, Equatable {
        /// `pause`, `resume`, `advance`, `hold` or `insufficient`.
        package var action: String
        /// The release.
        package var id: String
        package var channel: String
        package var version: String
        /// Installs that reported it, and those that failed on it, in the window.
        package var devices: Int
        package var failures: Int
        /// failures / devices and its 95 % Wilson interval (nil with no device).
        package var rate: Double?
        package var lower: Double?
        package var upper: Double?
        /// The threshold.
        package var threshold: Double
        /// The strictest hold before the decision, and the share in effect then.
        package var state: HoldState?
        package var share: Int
        /// `advance`: the new cap (the ceiling when the cap is removed).
        package var to: Int?
        /// Why, for people.
        package var reason: String
    }

    /// The decision for each release that is not halted or revoked, and the changes to publish.
    package func decide(_ releases: [RolloutRelease], figures: [PackageVersion: Figures], now: Date) -> (
        [Decision], [RolloutChange]
    ) {
        var decisions: [Decision] = []
        var changes: [RolloutChange] = []
        for r in releases where r.state != .halted && !r.revoked && r.ceiling > 0 {
            let f = figures[PackageVersion(r.id, r.version)] ?? Figures(devices: 0, failures: 0)
            let p = Proportion(f.failures, of: f.devices)
            var d = Decision(
                action: "hold", id: r.id, channel: r.channel, version: r.version, devices: f.devices,
                failures: p.count, rate: p.rate, lower: p.lower, upper: p.upper, threshold: maxFailureRate,
                state: r.state, share: r.share, to: nil, reason: "")
            let figuresText =
                "\(p.count) of \(f.devices) devices failed in \(Self.minutes(window)) min"
                + (p.lower.map { ", 95 % interval \(Self.pct($0))–\(Self.pct(p.upper ?? 1))" } ?? "")
            let enough = f.devices >= minDevices
            let failing = enough && (p.lower ?? 0) > maxFailureRate
            let paused = r.holds.first { $0.state == .paused }
            func change(_ action: RolloutAction, _ reason: String) {
                var c = RolloutChange(id: r.id, channel: r.channel, version: r.version, action: action)
                c.by = RolloutHold.guardName
                c.reason = reason
                changes.append(c)
            }
            if let paused {
                if paused.by != RolloutHold.guardName {
                    d.reason = "paused by \(paused.by): the guard lifts only its own pauses; \(figuresText)"
                } else if !enough {
                    d.action = "insufficient"
                    d.reason = "paused; \(f.devices) devices reported, fewer than \(minDevices): stays paused"
                } else if (p.upper ?? 1) <= maxFailureRate {
                    d.action = "resume"
                    d.reason = "upper bound \(Self.pct(p.upper ?? 1)) ≤ \(Self.pct(maxFailureRate)): \(figuresText)"
                    change(.resume, d.reason)
                } else {
                    d.reason =
                        "paused; upper bound \(Self.pct(p.upper ?? 1)) > \(Self.pct(maxFailureRate)): health not yet proven; \(figuresText)"
                }
            } else if failing {
                d.action = "pause"
                d.reason = "lower bound \(Self.pct(p.lower ?? 0)) > \(Self.pct(maxFailureRate)): \(figuresText)"
                change(.pause, d.reason)
            } else if let next = advance(r, now: now), (p.lower ?? 0) <= maxFailureRate {
                d.action = "advance"
                d.to = next
                d.reason = "\(r.share)% → \(next)% on the schedule; \(figuresText)"
                change(.advance(percent: next), d.reason)
            } else if !enough {
                d.action = "insufficient"
                d.reason = "\(f.devices) devices reported, fewer than \(minDevices)"
            } else {
                d.reason = "lower bound \(Self.pct(p.lower ?? 0)) ≤ \(Self.pct(maxFailureRate)): \(figuresText)"
            }
            decisions.append(d)
        }
        return (decisions, changes)
    }

    /// With a schedule: the next cap when the current one has stood for `every` (a release with no
    /// cap gets the first step below its ceiling); nil when there is nothing to advance.
    func advance(_ r: RolloutRelease, now: Date) -> Int? {
        guard let steps, !steps.isEmpty else { return nil }
        guard let cap = r.holds.first(where: { $0.state == .capped }) else {
            // Not capped yet: the first step, when it holds the release back.
            guard let first = steps.first, first < r.ceiling, r.share > first || r.signedNow > first else { return nil }
            return first
        }
        guard let percent = cap.percent, now.timeIntervalSince(cap.since) >= every else { return nil }
        let next = steps.first { $0 > percent } ?? r.ceiling
        return min(next, r.ceiling)
    }

    /// A rate as a percentage with one decimal.
    static func pct(_ x: Double) -> String { String(format: "%.1f%%", x * 100) }
    /// Seconds as whole minutes.
    static func minutes(_ s: TimeInterval) -> Int { Int((s / 60).rounded()) }
}
