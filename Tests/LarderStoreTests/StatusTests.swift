import Foundation
import LarderCore
import LarderStore
import LarderTestSupport
import SystemPackage
import Testing

@Suite("Store: status")
struct StatusTests {
    @Test("versions, roles, disk use and pending")
    func rolesAndDiskUse() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.installConfirmed(sandbox, ["1.0.0", "1.1.0"])
        try env.install(sandbox, "1.2.0")

        let status = sandbox.status()
        #expect(status.root == env.root.string)
        #expect(status.generation == sandbox.state.generation)
        #expect(try env.reader.status() == status)
        let pkg = try #require(status.packages.first)
        #expect(status.packages.count == 1)
        #expect(pkg.id == sampleID)
        #expect(pkg.active == "1.2.0" && pkg.fallback == "1.1.0")
        #expect(pkg.pending == "1.2.0" && pkg.health == .pending)
        #expect(pkg.versions.map(\.version) == ["1.0.0", "1.1.0", "1.2.0"])
        #expect(pkg.versions.map(\.role) == [.retained, .fallback, .active])
        #expect(pkg.versions.allSatisfy { !$0.pinned })
        var total: Int64 = 0
        for v in pkg.versions {
            let list = try env.list(v.version)
            #expect(v.size == list.totalSize && v.fileCount == list.files.count)
            total += list.totalSize
        }
        #expect(pkg.diskUse == total)
        #expect(pkg.failures == 0 && pkg.launches == 0 && pkg.failed.isEmpty)

        _ = try sandbox.confirm(id: try packageID(sampleID))
        let confirmed = try #require(sandbox.status().packages.first)
        #expect(confirmed.pending == nil && confirmed.health == .confirmed)
    }

    @Test("history lists every event in order")
    func historyOrder() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.install(sandbox, "1.0.0")
        _ = try sandbox.confirm(id: try packageID(sampleID))
        try env.install(sandbox, "1.1.0")
        _ = try sandbox.reportFailure(id: try packageID(sampleID), reason: "404 on /app.js")
        _ = try sandbox.beginLaunch()
        _ = try sandbox.rollback(id: try packageID(sampleID), to: nil)
        try env.install(sandbox, "1.2.0")
        _ = try sandbox.confirm(id: try packageID(sampleID))

        let history = try #require(try env.reader.status().packages.first).history
        #expect(
            history.map(\.event) == [
                .install, .activate, .confirm, .install, .activate, .failure, .rollback, .install, .activate, .confirm,
            ])
        #expect(
            history.map { $0.version?.description ?? "-" } == [
                "1.0.0", "1.0.0", "1.0.0", "1.1.0", "1.1.0", "1.1.0", "1.0.0", "1.2.0", "1.2.0", "1.2.0",
            ])
        #expect(history[4].from == ver("1.0.0"))
        #expect(history[5].reason == "404 on /app.js")
        #expect(history[6].from == ver("1.1.0"))
        #expect(zip(history, history.dropFirst()).allSatisfy { $0.at < $1.at }, "timestamps are not increasing")
        // The in-memory and on-disk views agree.
        #expect(sandbox.status().packages.first?.history == history)
    }

    @Test("history is bounded to PackageState.historyLimit, dropping the oldest")
    func historyBound() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.install(sandbox, "1.0.0")  // install + activate
        let confirms = PackageState.historyLimit + 5
        for _ in 0..<confirms { _ = try sandbox.confirm(id: try packageID(sampleID)) }
        let history = try env.reader.state()[pid(sampleID)].history
        #expect(history.count == PackageState.historyLimit)
        #expect(history.allSatisfy { $0.event == .confirm })
        #expect(sandbox.state[pid(sampleID)].history == history)
        // The newest entries are the ones kept.
        try env.install(sandbox, "1.1.0")
        let after = try env.reader.state()[pid(sampleID)].history
        #expect(after.count == PackageState.historyLimit)
        #expect(after.suffix(2).map(\.event) == [.install, .activate])
        #expect(after.first?.at ?? .distantPast > history.first?.at ?? .distantFuture)
    }

    @Test("an empty sandbox has an empty status")
    func empty() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        #expect(try env.reader.status().packages.isEmpty)
        let sandbox = try env.open()
        #expect(sandbox.status().packages.isEmpty)
        #expect(sandbox.status().generation == 0)
    }
}
