import Foundation
import LarderCore
import LarderStore
import LarderTestSupport
import SystemPackage
import Testing

@Suite("Store: health")
struct HealthTests {
    @Test("confirm makes the active version confirmed")
    func confirm() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.install(sandbox, "1.0.0")
        let outcome = try sandbox.confirm(id: try packageID(sampleID))
        #expect(fields(outcome) == [sampleID, "1.0.0", "confirmed", nil, nil])
        #expect(try env.reader.state()[pid(sampleID)].health == .confirmed)
        #expect(sandbox.state[pid(sampleID)].history.last?.event == .confirm)
    }

    @Test("three failures of a pending version roll it back to the fallback")
    func failuresRollBack() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.installConfirmed(sandbox, ["1.0.0"])
        try env.install(sandbox, "1.1.0")

        for n in 1...2 {
            let o = try sandbox.reportFailure(id: try packageID(sampleID), reason: "blank page \(n)")
            #expect(o.rolledBackTo == nil && o.rolledBackFrom == nil)
            #expect(o.active == "1.1.0" && o.health == .pending)
            #expect(sandbox.state[pid(sampleID)].failures == n)
        }
        let third = try sandbox.reportFailure(id: try packageID(sampleID), reason: "blank page 3")
        #expect(third.rolledBackTo == "1.0.0" && third.rolledBackFrom == "1.1.0")
        #expect(third.active == "1.0.0" && third.health == .confirmed)

        let pkg = try env.reader.state()[pid(sampleID)]
        #expect(pkg.active == ver("1.0.0"))
        #expect(pkg.health == .confirmed)
        #expect(pkg.failures == 0)
        #expect(pkg.failed.map(\.version) == [ver("1.1.0")])
        #expect(pkg.failed.first?.reason.contains("blank page 3") == true)
        #expect(pkg.history.suffix(4).map(\.event) == [.failure, .failure, .failure, .autoRollback])
        #expect(pkg.history.last?.version == ver("1.0.0") && pkg.history.last?.from == ver("1.1.0"))
        // The failed version stays on disk (gc decides), it is simply no longer active.
        #expect(pkg.has(ver("1.1.0")))
    }

    @Test("a pending version with no fallback is counted but not rolled back")
    func failureWithoutFallback() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.install(sandbox, "1.0.0")
        for _ in 1...5 {
            let o = try sandbox.reportFailure(id: try packageID(sampleID), reason: "crash")
            #expect(o.rolledBackTo == nil && o.active == "1.0.0")
        }
        for _ in 1...5 { #expect(try sandbox.beginLaunch().allSatisfy { $0.rolledBackTo == nil }) }
        let pkg = sandbox.state[pid(sampleID)]
        #expect(pkg.active == ver("1.0.0") && pkg.health == .pending && pkg.failures == 5 && pkg.failed.isEmpty)
    }

    @Test("four launches without a confirmation roll back after the fourth")
    func unconfirmedLaunches() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.installConfirmed(sandbox, ["1.0.0"])
        try env.install(sandbox, "1.1.0")
        for n in 1...3 {
            let outcomes = try sandbox.beginLaunch()
            #expect(outcomes.map(fields) == [[sampleID, "1.1.0", "pending", nil, nil]])
            #expect(try env.reader.state()[pid(sampleID)].launches == n)
        }
        let fourth = try sandbox.beginLaunch()
        #expect(fourth.map(fields) == [[sampleID, "1.0.0", "confirmed", "1.0.0", "1.1.0"]])
        let pkg = try env.reader.state()[pid(sampleID)]
        #expect(pkg.active == ver("1.0.0"))
        #expect(pkg.failed.map(\.version) == [ver("1.1.0")])
        #expect(pkg.history.last?.event == .autoRollback)
        // Nothing pending any more: a launch changes nothing.
        let generation = try env.reader.state().generation
        #expect(try sandbox.beginLaunch() == [])
        #expect(try env.reader.state().generation == generation)
    }

    @Test("launches count every pending package, each against its own fallback")
    func launchesPerPackage() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.installConfirmed(sandbox, ["1.0.0"])
        try env.install(sandbox, "1.1.0")
        try env.installConfirmed(sandbox, ["1.0.0", "1.1.0"], id: otherID)  // confirmed: not counted
        for _ in 1...4 { _ = try sandbox.beginLaunch() }
        #expect(sandbox.state[pid(sampleID)].active == ver("1.0.0"))
        #expect(sandbox.state[pid(otherID)].active == ver("1.1.0"))
        #expect(sandbox.state[pid(otherID)].launches == 0)
    }

    @Test(
        "a custom health policy is honoured",
        arguments: [(1, 0), (5, 6)])
    func customPolicy(_ maxFailures: Int, _ maxLaunches: Int) throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        var options = env.options()
        options.healthPolicy = HealthPolicy(maxFailures: maxFailures, maxUnconfirmedLaunches: maxLaunches)
        let sandbox = try env.open(options)

        // Failures.
        try env.installConfirmed(sandbox, ["1.0.0"])
        try env.install(sandbox, "1.1.0")
        for n in 1...maxFailures {
            let o = try sandbox.reportFailure(id: try packageID(sampleID), reason: "failure \(n)")
            #expect((o.rolledBackTo != nil) == (n == maxFailures), "failure \(n) of \(maxFailures)")
        }
        #expect(sandbox.state[pid(sampleID)].active == ver("1.0.0"))

        // Launches.
        try env.install(sandbox, "1.2.0")
        for n in 1...(maxLaunches + 1) {
            let o = try sandbox.beginLaunch()
            #expect((o.first?.rolledBackTo != nil) == (n == maxLaunches + 1), "launch \(n), \(maxLaunches) allowed")
        }
        #expect(sandbox.state[pid(sampleID)].active == ver("1.0.0"))
        #expect(sandbox.state[pid(sampleID)].failed.map(\.version) == [ver("1.1.0"), ver("1.2.0")])
    }

    @Test("a confirmed version is never rolled back automatically")
    func confirmedStays() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.installConfirmed(sandbox, ["1.0.0", "1.1.0"])
        for n in 1...10 {
            let o = try sandbox.reportFailure(id: try packageID(sampleID), reason: "failure \(n)")
            #expect(o.rolledBackTo == nil && o.active == "1.1.0")
        }
        for _ in 1...10 { #expect(try sandbox.beginLaunch() == []) }
        let pkg = try env.reader.state()[pid(sampleID)]
        #expect(pkg.active == ver("1.1.0") && pkg.health == .confirmed && pkg.failed.isEmpty)
        #expect(pkg.fallback == ver("1.0.0"))
    }

    @Test("a failed version is refused by install unless forced; force clears it")
    func previouslyFailed() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.installConfirmed(sandbox, ["1.0.0"])
        try env.install(sandbox, "1.1.0")
        for _ in 1...3 { _ = try sandbox.reportFailure(id: try packageID(sampleID), reason: "white screen") }
        #expect(sandbox.state[pid(sampleID)].active == ver("1.0.0"))

        let before = try env.stateBytes()
        let error = expectStoreError("previously-failed") { try env.install(sandbox, "1.1.0") }
        #expect(error?.description.contains("white screen") == true)
        #expect(try env.stateBytes() == before)

        // Still on disk: force re-activates it and forgets the failure.
        let forced = try env.install(sandbox, "1.1.0", force: true)
        #expect(forced.outcome == .activated)
        var pkg = sandbox.state[pid(sampleID)]
        #expect(pkg.active == ver("1.1.0") && pkg.health == .pending)
        #expect(pkg.failed.isEmpty)
        #expect(pkg.history.map(\.event).suffix(2) == [.unfail, .activate])

        // Failed again, then deleted by gc: force extracts it again.
        for _ in 1...3 { _ = try sandbox.reportFailure(id: try packageID(sampleID), reason: "white screen again") }
        #expect(sandbox.state[pid(sampleID)].hasFailed(ver("1.1.0")))
        let gc = try sandbox.gc(keep: 0)
        #expect(gc.removed == ["\(sampleID)@1.1.0"])
        expectStoreError("previously-failed") { try env.install(sandbox, "1.1.0") }
        let reinstalled = try env.install(sandbox, "1.1.0", force: true)
        #expect(reinstalled.outcome == .installed)
        pkg = try env.reader.state()[pid(sampleID)]
        #expect(pkg.active == ver("1.1.0") && pkg.failed.isEmpty)
        #expect(
            TreeCheck.problems(tree: env.layout.tree(pid(sampleID), ver("1.1.0")), list: try env.list("1.1.0")) == [])
    }

    @Test("force clears the failed mark even when the failed version is already active")
    func forceClearsFailedWhenActive() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.installConfirmed(sandbox, ["1.0.0"])
        try env.install(sandbox, "1.1.0")
        for _ in 1...3 { _ = try sandbox.reportFailure(id: try packageID(sampleID), reason: "white screen") }
        // The operator goes back to 1.1.0 by hand: choosing it clears its failed mark, and
        // leaving 1.0.0 by hand marks that one failed in turn.
        _ = try sandbox.rollback(id: try packageID(sampleID), to: try semanticVersion("1.1.0"))
        #expect(sandbox.state[pid(sampleID)].active == ver("1.1.0"))
        #expect(sandbox.state[pid(sampleID)].failed.map(\.version) == [ver("1.0.0")])

        _ = try env.install(sandbox, "1.1.0", force: true)
        #expect(!sandbox.state[pid(sampleID)].hasFailed(ver("1.1.0")), "force did not clear the failed mark")
        #expect(
            try !env.reader.state()[pid(sampleID)].hasFailed(ver("1.1.0")),
            "force did not clear the failed mark on disk")
        // And a later install without force is accepted.
        _ = try env.install(sandbox, "1.1.0")
    }

    @Test("health events on unknown packages are refused")
    func unknown() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        expectStoreError("unknown-package") { _ = try sandbox.confirm(id: try packageID(sampleID)) }
        expectStoreError("unknown-package") { _ = try sandbox.reportFailure(id: try packageID(sampleID), reason: "x") }
        #expect(PackageID("NOPE!") == nil)  // text is read at the edge (the CLI: bad-id)
        #expect(try sandbox.beginLaunch() == [])
    }
}
