import Foundation
import LarderCore
import LarderStore
import LarderTestSupport
import SystemPackage
import Testing

@Suite("Store: rollback")
struct RollbackTests {
    @Test("rollback activates the fallback and records the version left as failed")
    func toFallback() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.installConfirmed(sandbox, ["1.0.0"])
        try env.install(sandbox, "1.1.0")
        let report = try sandbox.rollback(id: try packageID(sampleID), to: nil)
        #expect([report.id, report.from, report.to] == [sampleID, "1.1.0", "1.0.0"])
        let pkg = try env.reader.state()[pid(sampleID)]
        #expect(pkg.active == ver("1.0.0") && pkg.health == .confirmed)
        #expect(pkg.fallback == nil)
        #expect(pkg.failed.map(\.version) == [ver("1.1.0")])
        #expect(pkg.failed.first?.reason == "rolled back by the operator")
        #expect(pkg.history.last?.event == .rollback)
        #expect(pkg.history.last?.from == ver("1.1.0") && pkg.history.last?.version == ver("1.0.0"))
        // Both trees are untouched.
        for v in ["1.0.0", "1.1.0"] {
            #expect(TreeCheck.problems(tree: env.layout.tree(pid(sampleID), ver(v)), list: try env.list(v)) == [])
        }
        // No fallback is left.
        expectStoreError("no-fallback") { _ = try sandbox.rollback(id: try packageID(sampleID), to: nil) }
    }

    @Test("rollback to a named retained version")
    func toRetained() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.installConfirmed(sandbox, ["1.0.0", "1.1.0", "1.2.0"])
        let report = try sandbox.rollback(
            id: try packageID(sampleID), to: try semanticVersion("1.0.0"), reason: "bad release")
        #expect([report.id, report.from, report.to] == [sampleID, "1.2.0", "1.0.0"])
        let pkg = try env.reader.state()[pid(sampleID)]
        #expect(pkg.active == ver("1.0.0") && pkg.health == .confirmed)
        #expect(pkg.fallback == ver("1.1.0"))
        #expect(pkg.failed == [FailedVersion(version: ver("1.2.0"), reason: "bad release", at: pkg.failed[0].at)])
        #expect(pkg.history.last?.reason == "bad release")
    }

    @Test("rollback refusals: no fallback, unknown package, version not on disk, bad names")
    func refusals() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        expectStoreError("unknown-package") { _ = try sandbox.rollback(id: try packageID(sampleID), to: nil) }
        try env.install(sandbox, "1.0.0")
        let before = try env.stateBytes()
        expectStoreError("no-fallback") { _ = try sandbox.rollback(id: try packageID(sampleID), to: nil) }
        expectStoreError("unknown-package") { _ = try sandbox.rollback(id: try packageID("ghost"), to: nil) }
        expectStoreError("unknown-package") {
            _ = try sandbox.rollback(id: try packageID("ghost"), to: try semanticVersion("1.0.0"))
        }
        expectStoreError("not-installed") {
            _ = try sandbox.rollback(id: try packageID(sampleID), to: try semanticVersion("1.1.0"))
        }
        #expect(SemanticVersion("latest") == nil)  // text is read at the edge (the CLI: bad-version)
        #expect(PackageID("../x") == nil)  // the CLI: bad-id
        #expect(try env.stateBytes() == before)
        #expect(sandbox.state[pid(sampleID)].active == ver("1.0.0"))
    }

    @Test("after a rollback gc keeps the fallback, and a version gc removed cannot be rolled back to")
    func rollbackAfterGC() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.installConfirmed(sandbox, ["1.0.0", "1.1.0", "1.2.0"])
        _ = try sandbox.rollback(id: try packageID(sampleID), to: try semanticVersion("1.0.0"))
        _ = try sandbox.gc(keep: 0)
        // 1.1.0 is the fallback, so gc kept it; 1.2.0 was removed.
        #expect(sandbox.state[pid(sampleID)].versions.map(\.version) == [ver("1.0.0"), ver("1.1.0")])
        expectStoreError("not-installed") {
            _ = try sandbox.rollback(id: try packageID(sampleID), to: try semanticVersion("1.2.0"))
        }
    }
}
