import Foundation
import LarderCore
import LarderStore
import LarderTestSupport
import Testing

@Suite("Store: page-health verdicts")
struct PageHealthStoreTests {
    func current(_ sandbox: Sandbox) throws -> ActivationRef {
        try #require(sandbox.state[pid(sampleID)].activationRef(pid(sampleID)))
    }

    @Test("every change of the active version is a new activation, also back to the same version")
    func activationNumbers() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.installConfirmed(sandbox, ["1.0.0"])
        let first = try current(sandbox)
        try env.install(sandbox, "1.1.0")
        let second = try current(sandbox)
        _ = try sandbox.rollback(id: try packageID(sampleID), to: nil)
        let third = try current(sandbox)
        #expect([first.number, second.number, third.number] == [1, 2, 3])
        #expect(third.version == first.version && third != first)
        // Durable: a reader sees the same number.
        #expect(try env.reader.state()[pid(sampleID)].activationNumber == 3)
        #expect(try env.reader.servingState().packages[sampleID]?.activation == 3)
    }

    @Test("healthy confirms a pending version; about a confirmed one it writes nothing")
    func healthyConfirms() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.installConfirmed(sandbox, ["1.0.0"])
        try env.install(sandbox, "1.1.0")
        let a = try current(sandbox)
        let o = try sandbox.recordPageHealth(.healthy, for: a)
        #expect(o.effect == .confirmed)
        #expect(try env.reader.state()[pid(sampleID)].health == .confirmed)
        let before = try env.stateBytes()
        #expect(try sandbox.recordPageHealth(.healthy, for: a).effect == .unchanged)
        #expect(try env.stateBytes() == before)
    }

    @Test("failed rolls a pending version back at once, with the reason recorded")
    func failedRollsBack() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.installConfirmed(sandbox, ["1.0.0"])
        try env.install(sandbox, "1.1.0")
        let a = try current(sandbox)
        let o = try sandbox.recordPageHealth(.failed(reason: "no ready signal within 30 s; boom"), for: a)
        #expect(o.effect == .rolledBack(to: "1.0.0"))
        let pkg = try env.reader.state()[pid(sampleID)]
        #expect(pkg.active == ver("1.0.0") && pkg.health == .confirmed)
        #expect(pkg.failed.map(\.version) == [ver("1.1.0")])
        #expect(pkg.failed.first?.reason == "page health: no ready signal within 30 s; boom")
        #expect(pkg.history.suffix(2).map(\.event) == [.failure, .autoRollback])
        #expect(pkg.history.last?.reason == "page health: no ready signal within 30 s; boom")
    }

    @Test("failed on a confirmed version, or one with no fallback, is recorded and nothing rolls back")
    func failedRecorded() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.install(sandbox, "1.0.0")
        let pending = try current(sandbox)
        #expect(try sandbox.recordPageHealth(.failed(reason: "r1"), for: pending).effect == .failureRecorded)
        _ = try sandbox.confirm(id: try packageID(sampleID))
        let confirmed = try current(sandbox)
        #expect(confirmed == pending)
        #expect(try sandbox.recordPageHealth(.failed(reason: "r2"), for: confirmed).effect == .failureRecorded)
        let pkg = try env.reader.state()[pid(sampleID)]
        #expect(pkg.active == ver("1.0.0") && pkg.failures == 1)
        #expect(
            pkg.history.filter { $0.event == .failure }.compactMap(\.reason) == ["page health: r1", "page health: r2"])
    }

    @Test("a verdict about an activation that is no longer current changes nothing")
    func staleVerdict() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.installConfirmed(sandbox, ["1.0.0"])
        try env.install(sandbox, "1.1.0")
        let old = try current(sandbox)
        // The operator rolls back and the device installs 1.1.0 again: same version, new activation.
        _ = try sandbox.rollback(id: try packageID(sampleID), to: nil)
        try env.install(sandbox, "1.1.0", force: true)
        let now = try current(sandbox)
        #expect(now.version == old.version && now.number > old.number)
        let before = try env.stateBytes()
        for verdict in [HealthVerdict.healthy, .failed(reason: "late")] {
            let o = try sandbox.recordPageHealth(verdict, for: old)
            #expect(o.effect == .stale(current: "\(now)"))
        }
        #expect(try env.stateBytes() == before)
        #expect(try env.reader.state()[pid(sampleID)].health == .pending)
    }
}
