import Foundation
import LarderCore
import LarderFileSystem
import LarderPublish
import LarderStore
import LarderSync
import LarderTestSupport
import SystemPackage
import Testing

/// A sync writes the state once per phase (the index; then placement and activation together),
/// not once or twice per package: the state grows with the package count, so per-package writes made a first sync of
/// 1,000 packages quadratic.
@Suite("Sync: one state write per phase")
struct BatchedCommitTests {
    static let ids = (0..<6).map { "pkg-\($0)" }

    /// Publishes `version` of every package of `ids` in one index (one serial).
    func publishAll(_ env: SyncEnv, _ version: String) throws -> [PackReport] {
        var requests: [PackRequest] = []
        for id in Self.ids {
            let src = try env.repository.source(id, version)
            try SampleRepository.setCatalogVersion("\(id) \(version)")(src)
            requests.append(
                PackRequest(source: FilePath(src.path), repository: env.repository.path, id: id, version: version))
        }
        return try Publisher(key: env.key, now: { env.clock }).pack(batch: requests)
    }

    @Test("a batch publishes every package under one serial")
    func batchPack() throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        let reports = try publishAll(env, "1.0.0")
        #expect(reports.map(\.id) == Self.ids && Set(reports.map(\.serial)) == [1])
        let updates = try publishAll(env, "1.1.0")
        #expect(Set(updates.map(\.serial)) == [2])
        // A version that exists is refused, and nothing of the batch becomes visible.
        #expect(throws: PublishError.versionExists(id: "pkg-0", version: "1.1.0")) { try publishAll(env, "1.1.0") }
    }

    @Test("a first sync of six packages, and an update of all six, each write the state twice")
    func twoWritesPerSync() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        _ = try publishAll(env, "1.0.0")
        try env.initialise()
        let first = try await env.sync()
        #expect(!first.hasFailures && first.packages.count == Self.ids.count)
        #expect(try env.state().generation == 2, "the index, then placement and activation together")
        _ = try publishAll(env, "1.1.0")
        let update = try await env.sync()
        #expect(!update.hasFailures && update.packages.allSatisfy { $0.action == .update && $0.outcome == .done })
        #expect(try env.state().generation == 4)
        #expect(try Self.ids.allSatisfy { try env.active($0) == "1.1.0" })
    }

    @Test(
        "when the phase's one state write fails, no package is placed or activated, and the next sync installs all",
        arguments: [Errno.noSpace, Errno.ioError])
    func phaseWriteFails(errno: Errno) async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        _ = try publishAll(env, "1.0.0")
        try env.initialise()
        let layout = SandboxLayout(root: env.root)
        // Renames onto state.json: the first records the index, the second the phase.
        let fault = Fault.fail(kind: .rename, nth: 2, errno: errno)
        let report = try await FaultInjector.withFaults(fault, under: layout.state) { _ in try await env.sync() }
        #expect(report.packages.count == Self.ids.count)
        #expect(report.packages.allSatisfy { $0.outcome == .failed && $0.code == "io" }, "\(report.packages)")
        let state = try env.state()
        #expect(state.generation == 1 && state.packages.isEmpty, "\(state.packages.keys)")
        // The trees renamed into place before the failed write are unknown to the state in
        // memory, but the handle cannot tell whether state.json names them (a rename may reach
        // the disk before a failed directory sync): it leaves them; the next open, reading the
        // file, removes them, and the next sync installs everything.
        let version = try #require(SemanticVersion("1.0.0"))
        let pids = try Self.ids.map { try #require(PackageID($0)) }
        #expect(pids.allSatisfy { AtomicFile.exists(layout.tree($0, version)) })
        try Sandbox.open(env.root).close()
        let gone = pids.allSatisfy {
            !AtomicFile.exists(layout.tree($0, version)) && !AtomicFile.exists(layout.list($0, version))
        }
        #expect(gone)
        let again = try await env.sync()
        #expect(!again.hasFailures && again.packages.allSatisfy { $0.action == .install && $0.outcome == .done })
        #expect(try Self.ids.allSatisfy { try env.active($0) == "1.0.0" })
    }

    @Test("a version placed whose group could not activate is recorded placed, and activated later unfetched")
    func placedWithoutItsGroup() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try env.publish("1.0.0", id: "ui")
        try env.publish("1.0.0", id: "app", deps: ["ui@^1.0.0"])
        // ui's bundle, corrupted at the same size, fails its hash; app is placed in the same
        // phase write, not activated.
        try env.flipBundleByte("ui", "1.0.0")
        try env.initialise()
        let report = try await env.sync()
        #expect(report.packages.allSatisfy { $0.outcome == .failed }, "\(report.packages)")
        let app = try #require(try env.state().packages["app"])
        #expect(app.active == nil && app.versions.map(\.version.description) == ["1.0.0"])
        #expect(try env.state().generation == 2)
        try env.flipBundleByte("ui", "1.0.0")
        let healed = try await env.sync()
        let by = Dictionary(healed.packages.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        #expect(!healed.hasFailures && by["app"]?.bytesFetched == 0 && by["app"]?.method == .local, "\(healed)")
        #expect(try env.active("app") == "1.0.0" && env.active("ui") == "1.0.0")
    }

    @Test("a failed batch commit keeps its generation taken: the next state write names a new one")
    func failedCommitKeepsItsGeneration() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        _ = try publishAll(env, "1.0.0")
        try env.initialise()
        _ = try await env.sync()
        let layout = SandboxLayout(root: env.root)
        let sandbox = try Sandbox.open(env.root)
        defer { sandbox.close() }
        let durable = sandbox.state.generation
        let id = try #require(Self.ids.first)
        _ = FaultInjector.withFaults(Fault.fail(kind: .rename, nth: 1, errno: .ioError), under: layout.state) { _ in
            #expect(throws: StoreError.self) { try sandbox.batched { _ = try? sandbox.confirm(id: try packageID(id)) } }
        }
        // The failed write used durable + 1; whether or not it reached the disk, that number
        // now names no state a reader may take for the next one.
        #expect(sandbox.state.generation == durable + 1)
        #expect(try env.state().generation == durable)
        _ = try sandbox.confirm(id: try packageID(id))
        #expect(try env.state().generation == durable + 2)
    }
}
