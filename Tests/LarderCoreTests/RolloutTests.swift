import Foundation
import LarderCore
import Testing

/// Guarded rollouts in the core (manifests §20): schedules by the clock, holds, what a device
/// plans with, and what it refuses from a rollout key.
@Suite("Rollouts: schedules and holds")
struct RolloutTests {
    static let t0 = Date(timeIntervalSince1970: 1_900_000_000)
    typealias D = DifferTests

    static func hold(
        _ state: HoldState, _ id: String = "app", version: String = "2.0.0", percent: Int? = nil, by: String = "manual"
    ) -> RolloutHold {
        RolloutHold(
            id: D.id(id), channel: .default, version: D.v(version), state: state, percent: percent, since: t0, by: by)
    }

    static func scheduled(_ steps: [Int], every: Int = 3600) -> PackageEntry {
        var e = D.entry("app", "2.0.0")
        e.rollout = Rollout(
            percent: steps[0], salt: "s", schedule: RolloutSchedule(start: t0, every: every, steps: steps))
        return e
    }

    @Test("a schedule's share follows the clock: 0 before its start, each step for `every`, the last held")
    func scheduleByClock() {
        let s = RolloutSchedule(start: Self.t0, every: 3600, steps: [1, 5, 25, 100])
        let at = { (seconds: Double) in s.share(at: Self.t0.addingTimeInterval(seconds)) }
        #expect(at(-1) == 0)
        #expect(at(0) == 1)
        #expect(at(3599) == 1)
        #expect(at(3600) == 5)
        #expect(at(7200) == 25)
        #expect(at(10_800) == 100)
        #expect(at(86_400 * 400) == 100)
        #expect(s.nextChange(after: Self.t0.addingTimeInterval(10)) == Self.t0.addingTimeInterval(3600))
        #expect(s.nextChange(after: Self.t0.addingTimeInterval(-10)) == Self.t0)
        #expect(s.nextChange(after: Self.t0.addingTimeInterval(10_800)) == nil)
        #expect(Self.scheduled([1, 5, 25, 100]).rollout.ceiling == 100)
        // A device's bucket decides, as with a percent: share 25 takes about a quarter of devices.
        let e = Self.scheduled([1, 5, 25, 100])
        let idx = RepositoryIndex(serial: 1, expires: .distantFuture, packages: [e])
        let taking = (0..<2000).filter { n in
            idx.effective(at: Self.t0.addingTimeInterval(7200)).packages[0].rollout.includes(
                deviceID: "d\(n)", id: e.id, version: e.version)
        }.count
        #expect((400...600).contains(taking), "\(taking) of 2000 at 25 %")
    }

    @Test("holds: a pause takes the share to 0, a cap to the lower of both, a halt revokes; the strictest wins")
    func heldShares() {
        let e = Self.scheduled([10, 50, 100])
        let late = Self.t0.addingTimeInterval(3600)
        #expect(HeldRelease(e, holds: [], at: late).share == 50)
        #expect(HeldRelease(e, holds: [Self.hold(.paused)], at: late).share == 0)
        #expect(HeldRelease(e, holds: [Self.hold(.capped, percent: 20)], at: late).share == 20)
        #expect(HeldRelease(e, holds: [Self.hold(.capped, percent: 80)], at: late).share == 50)
        let both = HeldRelease(e, holds: [Self.hold(.capped, percent: 20), Self.hold(.halted)], at: late)
        #expect(both.state == .halted && both.share == 0)
        // A hold on another version is inert.
        #expect(HeldRelease(e, holds: [Self.hold(.paused, version: "1.0.0")], at: late).share == 50)

        let idx = RepositoryIndex(
            serial: 1, expires: .distantFuture, packages: [e, D.entry("other", "1.0.0")], holds: [Self.hold(.halted)])
        let eff = idx.effective(at: late)
        #expect(eff.packages[0].revoked == [D.v("2.0.0")])
        #expect(eff.packages[0].rollout == Rollout(percent: 0, salt: "s"))
        #expect(eff.packages[1] == idx.packages[1])
        #expect(idx.nextScheduleChange(after: late, channel: .default) == Self.t0.addingTimeInterval(7200))
    }

    @Test("what a device plans: paused keeps who runs it and holds back the rest; halted goes back")
    func plansUnderHolds() throws {
        let e = D.entry("app", "2.0.0")
        func plan(_ holds: [RolloutHold], active: String, onDisk: [String]) throws -> PlanAction {
            let idx = RepositoryIndex(serial: 1, expires: .distantFuture, packages: [e], holds: holds)
            let p = Differ.plan(
                index: idx.effective(at: Self.t0), state: D.state(["app": (active, "1.0.0", onDisk, [])]),
                context: D.ctx, fileLists: [D.id("app"): D.appList])
            return try #require(p.actions.first { $0.id == D.id("app") })
        }
        #expect(try plan([], active: "1.0.0", onDisk: ["1.0.0"]).kind == .update)
        #expect(try plan([Self.hold(.paused)], active: "1.0.0", onDisk: ["1.0.0"]).skip == .notInRollout)
        #expect(try plan([Self.hold(.paused)], active: "2.0.0", onDisk: ["1.0.0", "2.0.0"]).skip == .unchanged)
        #expect(try plan([Self.hold(.capped, percent: 0)], active: "1.0.0", onDisk: ["1.0.0"]).skip == .notInRollout)
        let back = try plan([Self.hold(.halted)], active: "2.0.0", onDisk: ["1.0.0", "2.0.0"])
        #expect(back.kind == .rollback && back.to == D.v("1.0.0"))
        #expect(try plan([Self.hold(.halted)], active: "1.0.0", onDisk: ["1.0.0"]).skip == .revoked)
    }

    @Test(
        "a hold is decoded only as the format says",
        arguments: [
            #"{"id":"app","channel":"stable","version":"2.0.0","state":"capped","since":"2030-03-17T17:46:40Z","by":"manual"}"#,
            #"{"id":"app","channel":"stable","version":"2.0.0","state":"paused","percent":5,"since":"2030-03-17T17:46:40Z","by":"manual"}"#,
            #"{"id":"app","channel":"stable","version":"2.0.0","state":"capped","percent":101,"since":"2030-03-17T17:46:40Z","by":"manual"}"#,
            #"{"id":"app","channel":"stable","version":"2.0.0","state":"frozen","since":"2030-03-17T17:46:40Z","by":"manual"}"#,
            #"{"id":"app","channel":"stable","version":"2.0.0","state":"paused","since":"2030-03-17T17:46:40Z","by":"Ops Team"}"#,
            #"{"id":"APP","channel":"stable","version":"2.0.0","state":"paused","since":"2030-03-17T17:46:40Z","by":"manual"}"#,
        ])
    func holdDecoding(text: String) {
        #expect(throws: (any Error).self) {
            try ManifestCoding.decode(RolloutHold.self, from: Data(text.utf8), document: "hold")
        }
    }

    @Test("index rules: a schedule as the table says, one hold per release, no cap above the ceiling")
    func indexRules() {
        func codes(_ i: RepositoryIndex) -> [String] { IndexRules.issues(i).map(\.code.rawValue) }
        let ok = RepositoryIndex(
            serial: 1, expires: .distantFuture, packages: [Self.scheduled([1, 5, 100])],
            holds: [Self.hold(.capped, percent: 50)])
        #expect(codes(ok).isEmpty)
        var bad = ok
        bad.packages[0].rollout.schedule?.steps = [5, 5, 100]
        #expect(codes(bad) == ["bad-rollout", "bad-rollout"])
        bad = ok
        bad.packages[0].rollout.percent = 100
        #expect(codes(bad) == ["bad-rollout"])
        bad = ok
        bad.packages[0].rollout.schedule?.every = 10
        #expect(codes(bad) == ["bad-rollout"])
        bad = ok
        bad.holds?.append(Self.hold(.paused))
        #expect(codes(bad) == ["bad-hold"])
        var low = ok
        low.packages[0].rollout = Rollout(percent: 30, salt: "s")
        #expect(codes(low) == ["bad-hold"])
        #expect(low.holdRaise()?.contains("above the 30%") == true)
        #expect(ok.holdRaise() == nil)
    }

    @Test("a single-key index whose hold would raise a release is refused whole: rollout-raise")
    func acceptanceRefusesRaise() throws {
        let key = PrivateKey()
        var index = RepositoryIndex(
            serial: 1, expires: Self.t0.addingTimeInterval(86_400), packages: [D.entry("app", "2.0.0", rollout: 10)],
            holds: [Self.hold(.capped, percent: 40)])
        func decide() throws(IndexRefusal) -> AcceptedIndexDecision {
            let bytes = try! ManifestCoding.encode(index)
            let sig = try! ManifestCoding.encode(try! IndexSignature.sign(bytes, with: [key]))
            return try IndexAcceptance.decide(
                IndexAcceptance.Input(
                    bytes: bytes, signature: sig, notModified: false, trustedKeys: [], trusted: [key.publicKey],
                    accepted: nil, now: Self.t0))
        }
        do {
            _ = try decide()
            Issue.record("a cap above the signed percent was accepted")
        } catch {
            #expect(error == .delegation(.rolloutRaise(Self.hold(.capped, percent: 40).raise(index.packages[0])!)))
        }
        index.holds = [Self.hold(.capped, percent: 5)]
        #expect(try decide().index.holds?.count == 1)
    }
}

/// What a device takes from a rollout team's part, and what it refuses (manifests §20).
@Suite("Rollouts: a rollout key can only hold back")
struct RolloutKeyTests {
    let f = DelegationFixture()

    func code(_ body: () throws -> Void) -> ReasonCode? {
        do { try body() } catch let e as DelegationRefusal { return e.code } catch { return "not-a-refusal" }
        return nil
    }

    func holdsPart(_ team: String, _ serial: UInt64, _ holds: [RolloutHold], entries: [PackageEntry] = []) -> Data {
        (try? ManifestCoding.encode(TeamPart(team: team, serial: serial, packages: entries, holds: holds))) ?? Data()
    }

    func hold(_ id: String, _ state: HoldState = .paused, percent: Int? = nil) -> RolloutHold {
        RolloutHold(
            id: PackageID(id)!, channel: .default, version: SemanticVersion("1.0.0")!, state: state, percent: percent,
            since: f.now, by: "guard")
    }

    /// The parts (pay, shop and the guard's) checked, and the index composed from them.
    func composed(_ holds: [RolloutHold], indexHolds: [RolloutHold]? = nil, payRollout: Int = 100) throws -> (
        RepositoryIndex, [String: TeamPart]
    ) {
        var card = DelegationFixture.entry("pay-card")
        card.rollout = Rollout(percent: payRollout, salt: "s")
        let (_, pay) = f.part("pay", 1, [card])
        let (_, shop) = f.part("shop", 1, [DelegationFixture.entry("shop")])
        let g = holdsPart("guard", 1, holds)
        let parts = try DelegationCheck.checkParts(
            [f.row("pay", 1, pay, f.payKeys), f.row("shop", 1, shop, [f.shopKey]), f.row("guard", 1, g, [f.guardKey])],
            partBytes: ["pay": pay, "shop": shop, "guard": g], root: f.root, accepted: [:], now: f.now)
        let index = RepositoryIndex(
            serial: 1, expires: f.now, packages: parts.values.flatMap(\.packages).sorted { $0.id < $1.id },
            holds: indexHolds ?? (holds.isEmpty ? nil : holds))
        return (index, parts)
    }

    @Test("holds from the rollout team are taken; the index must repeat exactly them")
    func holdsComposed() throws {
        let (index, parts) = try composed([hold("pay-card"), hold("shop", .capped, percent: 5)])
        try DelegationCheck.checkComposition(index, parts: parts, root: f.root)
        #expect(index.effective(at: f.now).packages.map(\.rollout.percent) == [0, 5])
        // The index role adds, drops or alters a hold: refused.
        for forged in [[hold("pay-card")], [hold("pay-card"), hold("shop", .halted)], []] {
            let (i, p) = try composed([hold("pay-card"), hold("shop", .capped, percent: 5)], indexHolds: forged)
            #expect(
                code { try DelegationCheck.checkComposition(i, parts: p, root: f.root) } == "delegation-part-mismatch")
        }
    }

    @Test("a rollout key cannot raise a release, publish a version, new bytes or a route, or hold outside its patterns")
    func refusals() throws {
        // A cap above the ceiling the release team signed.
        let (raised, parts) = try composed([hold("pay-card", .capped, percent: 50)], payRollout: 10)
        #expect(code { try DelegationCheck.checkComposition(raised, parts: parts, root: f.root) } == "rollout-raise")
        // Entries in a rollout part: a new version, other bytes, a changed route — all one refusal.
        var newVersion = DelegationFixture.entry("pay-card")
        newVersion.version = SemanticVersion("9.9.9")!
        var newBytes = DelegationFixture.entry("pay-card")
        newBytes.bundle.sha256 = SHA256Digest.of(Data("evil".utf8))
        var newRoute = DelegationFixture.entry("shop")
        newRoute.routes = ["https://evil.example/"]
        for e in [newVersion, newBytes, newRoute] {
            let g = holdsPart("guard", 2, [], entries: [e])
            #expect(
                code {
                    _ = try DelegationCheck.checkParts(
                        [f.row("guard", 2, g, [f.guardKey])], partBytes: ["guard": g], root: f.root, accepted: [:],
                        now: f.now)
                } == "delegation-outside")
        }
        // A release team's part with holds.
        let payHolds = holdsPart("pay", 2, [hold("pay-card")], entries: [DelegationFixture.entry("pay-card")])
        #expect(
            code {
                _ = try DelegationCheck.checkParts(
                    [f.row("pay", 2, payHolds, f.payKeys)], partBytes: ["pay": payHolds], root: f.root, accepted: [:],
                    now: f.now)
            } == "delegation-outside")
        // A rollout team holding a package outside its patterns.
        var root = f.root
        root.teams[2].packages = [PackagePattern("shop*")!]
        let outside = holdsPart("guard", 3, [hold("pay-card")])
        #expect(
            code {
                _ = try DelegationCheck.checkParts(
                    [f.row("guard", 3, outside, [f.guardKey])], partBytes: ["guard": outside], root: root,
                    accepted: [:], now: f.now)
            } == "delegation-outside")
        // Holds signed by a release team's key for the rollout team: not its key.
        let g = holdsPart("guard", 4, [hold("shop")])
        #expect(
            code {
                _ = try DelegationCheck.checkParts(
                    [f.row("guard", 4, g, [f.shopKey])], partBytes: ["guard": g], root: f.root, accepted: [:],
                    now: f.now)
            } == "delegation-threshold")
        // Two holds on one release in one part.
        let twice = holdsPart("guard", 5, [hold("shop"), hold("shop", .halted)])
        #expect(
            code {
                _ = try DelegationCheck.checkParts(
                    [f.row("guard", 5, twice, [f.guardKey])], partBytes: ["guard": twice], root: f.root,
                    accepted: [:], now: f.now)
            } == "delegation-part-mismatch")
    }
}
