import Foundation
import LarderCore
import LarderPublish
import Testing

/// The guard's decisions from figures (manifests §20): pure, a clock and figures in, decisions out.
@Suite("Rollouts: the guard's decisions")
struct RolloutGuardTests {
    static let t0 = Date(timeIntervalSince1970: 1_900_000_000)

    static func release(
        percent: Int = 100, holds: [RolloutHold] = [], version: String = "2.0.0", revoked: Bool = false
    ) -> RolloutRelease {
        let d = SHA256Digest.of(Data("x".utf8))
        let v = SemanticVersion(version)!
        let e = PackageEntry(
            id: PackageID("app")!, version: v,
            bundle: BlobRef(path: "packages/app/\(v)/bundle.zip", size: 1, sha256: d),
            files: BlobRef(path: "packages/app/\(v)/files.json", size: 1, sha256: d),
            rollout: Rollout(percent: percent, salt: "s"), revoked: revoked ? [v] : [])
        return RolloutRelease(e, holds: holds, at: t0)
    }

    static func hold(_ state: HoldState, percent: Int? = nil, by: String = "guard", since: Date = t0) -> RolloutHold {
        RolloutHold(
            id: PackageID("app")!, channel: .default, version: SemanticVersion("2.0.0")!, state: state,
            percent: percent, since: since, by: by)
    }

    func decide(
        _ r: RolloutRelease, devices: Int, failures: Int,
        policy: RolloutGuard = RolloutGuard(maxFailureRate: 0.02, minDevices: 20),
        at now: Date = t0
    ) -> (RolloutGuard.Decision, [RolloutChange]) {
        let (d, c) = policy.decide(
            [r], figures: [PackageVersion("app", "2.0.0"): .init(devices: devices, failures: failures)], now: now)
        return (d[0], c)
    }

    @Test("pause when the Wilson lower bound passes the threshold, with enough devices; not on noise")
    func pauses() {
        // 10 of 100 failed: lower bound about 5.5 % > 2 %.
        let (d, c) = decide(Self.release(), devices: 100, failures: 10)
        #expect(d.action == "pause" && (d.lower ?? 0) > 0.05 && (d.lower ?? 0) < 0.06, "\(d)")
        #expect(
            c.count == 1 && c[0].action == .pause && c[0].by == "guard" && c[0].reason?.contains("10 of 100") == true)
        // 3 of 100: rate 3 %, lower bound about 1 %: not enough evidence of harm.
        let (calm, none) = decide(Self.release(), devices: 100, failures: 3)
        #expect(calm.action == "hold" && (calm.lower ?? 1) < 0.02 && none.isEmpty, "\(calm)")
        // 5 of 5: a bad rate, but fewer devices than --min-devices.
        let (few, nothing) = decide(Self.release(), devices: 5, failures: 5)
        #expect(few.action == "insufficient" && nothing.isEmpty)
        // Halted or revoked releases are not the guard's.
        let policy = RolloutGuard(maxFailureRate: 0.02, minDevices: 20)
        let figures = [PackageVersion("app", "2.0.0"): RolloutGuard.Figures(devices: 100, failures: 50)]
        #expect(policy.decide([Self.release(holds: [Self.hold(.halted)])], figures: figures, now: Self.t0).0.isEmpty)
        #expect(policy.decide([Self.release(revoked: true)], figures: figures, now: Self.t0).0.isEmpty)
    }

    @Test("resume only its own pause, and only once the upper bound proves health")
    func resumes() {
        let paused = Self.release(holds: [Self.hold(.paused)])
        let (stay, none) = decide(paused, devices: 100, failures: 1)
        #expect(stay.action == "hold" && (stay.upper ?? 0) > 0.02 && none.isEmpty, "\(stay)")
        let (go, changes) = decide(paused, devices: 1000, failures: 1)
        #expect(go.action == "resume" && (go.upper ?? 1) <= 0.02 && changes.first?.action == .resume, "\(go)")
        let manual = Self.release(holds: [Self.hold(.paused, by: "oncall")])
        let (kept, nothing) = decide(manual, devices: 1000, failures: 0)
        #expect(kept.action == "hold" && kept.reason.contains("paused by oncall") && nothing.isEmpty)
    }

    @Test(
        "with a schedule: the first step caps an uncapped release, each step after `every` of health, the ceiling lifts the cap"
    )
    func advances() {
        var policy = RolloutGuard(maxFailureRate: 0.02, minDevices: 20, steps: [1, 5, 25, 100])
        policy.every = 3600
        let (first, c1) = decide(Self.release(), devices: 0, failures: 0, policy: policy)
        #expect(first.action == "advance" && first.to == 1 && c1.first?.action == .advance(percent: 1))
        let capped = Self.release(holds: [Self.hold(.capped, percent: 5)])
        let (early, c2) = decide(capped, devices: 50, failures: 0, policy: policy, at: Self.t0.addingTimeInterval(1800))
        #expect(early.action == "hold" && c2.isEmpty, "\(early)")
        let (next, c3) = decide(capped, devices: 50, failures: 0, policy: policy, at: Self.t0.addingTimeInterval(3600))
        #expect(next.action == "advance" && next.to == 25 && c3.first?.action == .advance(percent: 25))
        // A release signed at 40 %: the schedule stops at the ceiling (the cap removed).
        let low = Self.release(percent: 40, holds: [Self.hold(.capped, percent: 25)])
        let (top, c4) = decide(low, devices: 50, failures: 0, policy: policy, at: Self.t0.addingTimeInterval(3600))
        #expect(top.to == 40 && c4.first?.action == .advance(percent: 40))
        // Failing at a step: pause, not advance.
        let (bad, c5) = decide(capped, devices: 50, failures: 10, policy: policy, at: Self.t0.addingTimeInterval(7200))
        #expect(bad.action == "pause" && c5.first?.action == .pause)
    }
}
