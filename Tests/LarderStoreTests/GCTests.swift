import Foundation
import LarderCore
import LarderFileSystem
import LarderStore
import LarderTestSupport
import SystemPackage
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

@Suite("Store: gc and pins")
struct GCTests {
    /// With 1.0.0 … 1.4.0 installed and each confirmed: 1.4.0 is active, 1.3.0 the fallback, and
    /// 1.2.0, 1.1.0, 1.0.0 (most recent first) are eligible.
    @Test(
        "gc keeps active, fallback and the `keep` most recently installed others",
        arguments: [
            (0, ["1.0.0", "1.1.0", "1.2.0"]),
            (1, ["1.0.0", "1.1.0"]),
            (2, ["1.0.0"]),
            (3, []),
            (10, []),
        ])
    func keep(_ keep: Int, _ removed: [String]) throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.installConfirmed(sandbox, sampleVersions)
        let before = sandbox.state[pid(sampleID)]

        let report = try sandbox.gc(keep: keep)
        #expect(Set(report.removed) == Set(removed.map { "\(sampleID)@\($0)" }))
        #expect(report.keptPinned == [])
        let freed = try removed.reduce(Int64(0)) { $0 + (try env.list($1).totalSize) }
        #expect(report.freedBytes == freed)

        let kept = sampleVersions.filter { !removed.contains($0) }
        let pkg = try env.reader.state()[pid(sampleID)]
        #expect(pkg.versions.map(\.version.description) == kept)
        #expect(pkg.active == ver("1.4.0") && pkg.fallback == ver("1.3.0"))
        #expect(pkg.health == before.health)
        #expect(pkg.history.filter { $0.event == .gc }.compactMap { $0.version?.description }.sorted() == removed)
        #expect(names(env.layout.packages.appending(sampleID)) == kept)
        #expect(names(env.layout.lists.appending(sampleID)) == kept.map { "\($0).json" })
        for v in kept {
            #expect(TreeCheck.problems(tree: env.layout.tree(pid(sampleID), ver(v)), list: try env.list(v)) == [])
        }
        #expect(names(env.layout.trash) == [])
        #expect(names(env.layout.staging) == [])

        // Nothing more to do.
        let generation = try env.reader.state().generation
        let again = try sandbox.gc(keep: keep)
        #expect(again.removed == [] && again.keptPinned == [] && again.freedBytes == 0)
        #expect(try env.reader.state().generation == generation)
    }

    @Test("active and fallback are never removed, even with keep 0")
    func protectedVersions() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.installConfirmed(sandbox, ["1.0.0", "1.1.0"])
        try env.install(sandbox, "1.0.0", id: otherID)
        #expect(try sandbox.gc(keep: 0).removed == [])
        // An older fallback survives a newer pending version: 1.2.0 pending keeps 1.1.0 as fallback.
        try env.install(sandbox, "1.2.0")
        try env.install(sandbox, "1.3.0")
        let report = try sandbox.gc(keep: 0)
        #expect(Set(report.removed) == ["\(sampleID)@1.0.0", "\(sampleID)@1.2.0"])
        let pkg = sandbox.state[pid(sampleID)]
        #expect(pkg.active == ver("1.3.0") && pkg.fallback == ver("1.1.0"))
        #expect(pkg.versions.map(\.version) == [ver("1.1.0"), ver("1.3.0")])
        #expect(sandbox.state[pid(otherID)].versions.map(\.version) == [ver("1.0.0")])
    }

    @Test("gc keeps the most recently installed versions, whatever their version numbers")
    func recencyNotSemver() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        // Installed in the order 1.2.0, 1.0.0, 1.1.0, 1.4.0, 1.3.0: 1.4.0 is the fallback, 1.3.0 active.
        try env.installConfirmed(sandbox, ["1.2.0", "1.0.0", "1.1.0", "1.4.0", "1.3.0"])
        let report = try sandbox.gc(keep: 1)
        #expect(Set(report.removed) == ["\(sampleID)@1.2.0", "\(sampleID)@1.0.0"])
        #expect(sandbox.state[pid(sampleID)].versions.map(\.version.description) == ["1.1.0", "1.4.0", "1.3.0"])
    }

    /// state.json keeps whole seconds, so versions installed within one second (any scripted
    /// install, every install after a reopen) carry equal `installedAt`. "Most recently
    /// installed" must still follow the installation order.
    @Test("keep follows installation order when timestamps are equal")
    func keepWithEqualTimestamps() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        var options = env.options()
        let fixed = Date(timeIntervalSince1970: 1_750_000_000)
        options.clock = { fixed }
        let sandbox = try env.open(options)
        try env.installConfirmed(sandbox, ["1.0.0", "1.1.0", "1.2.0", "1.3.0"])
        // Active 1.3.0, fallback 1.2.0; 1.1.0 is the most recently installed of the others.
        let report = try sandbox.gc(keep: 1)
        #expect(report.removed == ["\(sampleID)@1.0.0"])
        #expect(sandbox.state[pid(sampleID)].versions.map(\.version.description) == ["1.1.0", "1.2.0", "1.3.0"])
    }

    @Test("keep follows installation order after a reopen, with the real clock")
    func keepAfterReopen() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        var options = env.options()
        options.clock = { Date() }
        try env.withSandbox(options) { try env.installConfirmed($0, ["1.0.0", "1.1.0", "1.2.0", "1.3.0"]) }
        let sandbox = try env.open(options)
        let report = try sandbox.gc(keep: 1)
        #expect(report.removed == ["\(sampleID)@1.0.0"])
        #expect(sandbox.state[pid(sampleID)].versions.map(\.version.description) == ["1.1.0", "1.2.0", "1.3.0"])
    }

    /// 1.0.0 pinned by a session, then 1.1.0 and 1.2.0 installed: 1.0.0 is neither active nor
    /// fallback, so only the pin keeps it.
    @Test("a version pinned by this process is kept until the lease is released")
    func pinnedByThisProcess() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.installConfirmed(sandbox, ["1.0.0"])
        let lease = try env.reader.pin(id: try packageID(sampleID))
        #expect(lease.id == pid(sampleID) && lease.version == ver("1.0.0"))
        #expect(names(env.layout.pinDirectory(pid(sampleID), ver("1.0.0"))).count == 1)
        try env.installConfirmed(sandbox, ["1.1.0", "1.2.0"])

        let status = try #require(sandbox.status().packages.first)
        #expect(status.versions.first { $0.version == "1.0.0" }?.pinned == true)
        let first = try sandbox.gc(keep: 0)
        #expect(first.removed == [])
        #expect(first.keptPinned == ["\(sampleID)@1.0.0"])
        #expect(
            TreeCheck.problems(tree: env.layout.tree(pid(sampleID), ver("1.0.0")), list: try env.list("1.0.0")) == [])
        #expect(sandbox.state[pid(sampleID)].has(ver("1.0.0")))

        lease.release()
        lease.release()  // idempotent
        #expect(names(env.layout.pinDirectory(pid(sampleID), ver("1.0.0"))) == [])
        let second = try sandbox.gc(keep: 0)
        #expect(second.removed == ["\(sampleID)@1.0.0"])
        #expect(second.keptPinned == [])
        #expect(!env.fileExists(env.layout.tree(pid(sampleID), ver("1.0.0"))))
        #expect(!env.fileExists(env.layout.list(pid(sampleID), ver("1.0.0"))))
        #expect(names(env.layout.trash) == [])
    }

    @Test("gc on the handle that left a tree unknown (a removal while pinned) removes it, listing no other package")
    func settlesWhatThisHandleLeft() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.install(sandbox, "1.0.0")
        try env.install(sandbox, "1.0.0", id: otherID)
        let lease = try env.reader.pin(id: try packageID(otherID))
        #expect(try sandbox.removePackage(id: otherID, reason: "left the index") == [])
        let tree = env.layout.tree(pid(otherID), ver("1.0.0"))
        #expect(env.fileExists(tree) && sandbox.state.packages[otherID] == nil)
        #expect(try sandbox.gc(keep: 1).removed == [] && env.fileExists(tree), "still pinned")
        lease.release()
        // Listing sample-app's directory fails and is counted.
        let probe = Fault.fail(kind: .opendir, nth: 1, times: 1_000, errno: .noSuchFileOrDirectory)
        let scope = FaultInjector.install([probe], under: env.layout.packages.appending(sampleID))
        let report = try sandbox.gc(keep: 1)
        let hits = scope.hits.first ?? 0
        scope.remove()
        #expect(hits == 0, "gc listed sample-app's directory \(hits) time(s)")
        #expect(report.removed == [])
        #expect(!env.fileExists(tree) && !env.fileExists(env.layout.list(pid(otherID), ver("1.0.0"))))
        #expect(names(env.layout.trash) == [] && sandbox.state[pid(sampleID)].active == ver("1.0.0"))
    }

    @Test("a package directory open could not list is listed again by gc, which removes the unknown tree in it")
    func incompleteScanIsRepeated() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        try env.withSandbox { try env.install($0, "1.0.0") }
        let orphan = try env.unknownCopy(of: "1.0.0", as: "1.1.0")
        let probe = Fault.fail(kind: .opendir, nth: 1, times: 1, errno: .ioError)
        let scope = FaultInjector.install([probe], under: env.layout.packages.appending(sampleID))
        let sandbox = try env.open()
        let hits = scope.hits.first ?? 0
        scope.remove()
        defer { sandbox.close() }
        #expect(hits == 1 && env.fileExists(orphan), "open could not list sample-app's directory")
        _ = try sandbox.gc(keep: 1)
        #expect(!env.fileExists(orphan))
        #expect(sandbox.state[pid(sampleID)].active == ver("1.0.0"))
    }

    @Test("a pin held by a process that died expires")
    func deadHolder() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.installConfirmed(sandbox, ["1.0.0", "1.1.0", "1.2.0"])

        let child = try Child("/bin/sleep", ["30"])
        defer { child.stop() }
        let childPID = child.pid
        let start = try processStartTime(childPID)
        let dir = env.layout.pinDirectory(pid(sampleID), ver("1.0.0"))
        try FileManager.default.createDirectory(atPath: dir.string, withIntermediateDirectories: true)
        let pinFile = dir.appending("\(childPID)-\(start)-1")
        #expect(FileManager.default.createFile(atPath: pinFile.string, contents: Data()))

        let whileAlive = try sandbox.gc(keep: 0)
        #expect(whileAlive.removed == [])
        #expect(whileAlive.keptPinned == ["\(sampleID)@1.0.0"])
        #expect(env.fileExists(pinFile))
        #expect(env.fileExists(env.layout.tree(pid(sampleID), ver("1.0.0"))))

        child.stop()
        let afterDeath = try sandbox.gc(keep: 0)
        #expect(afterDeath.removed == ["\(sampleID)@1.0.0"])
        #expect(afterDeath.keptPinned == [])
        #expect(!env.fileExists(pinFile))
        #expect(!env.fileExists(env.layout.tree(pid(sampleID), ver("1.0.0"))))
        #expect(!env.fileExists(env.layout.list(pid(sampleID), ver("1.0.0"))))
        #expect(names(env.layout.trash) == [])
    }

    @Test("a pin naming a live pid with another start time (a reused pid) is treated as dead")
    func reusedPID() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.installConfirmed(sandbox, ["1.0.0", "1.1.0", "1.2.0"])
        let me = getpid()
        let start = try processStartTime(me)
        let dir = env.layout.pinDirectory(pid(sampleID), ver("1.0.0"))
        try FileManager.default.createDirectory(atPath: dir.string, withIntermediateDirectories: true)
        let pinFile = dir.appending("\(me)-\(start + 4242)-7")
        #expect(FileManager.default.createFile(atPath: pinFile.string, contents: Data()))

        let report = try sandbox.gc(keep: 0)
        #expect(report.removed == ["\(sampleID)@1.0.0"])
        #expect(report.keptPinned == [])
        #expect(!env.fileExists(pinFile))

        // The same name with the right start time is a live pin.
        let dir2 = env.layout.pinDirectory(pid(sampleID), ver("1.1.0"))
        try env.install(sandbox, "1.3.0")
        _ = try sandbox.confirm(id: try packageID(sampleID))
        try env.install(sandbox, "1.4.0")
        _ = try sandbox.confirm(id: try packageID(sampleID))
        try FileManager.default.createDirectory(atPath: dir2.string, withIntermediateDirectories: true)
        let livePin = dir2.appending("\(me)-\(start)-7")
        #expect(FileManager.default.createFile(atPath: livePin.string, contents: Data()))
        let second = try sandbox.gc(keep: 0)
        #expect(second.keptPinned == ["\(sampleID)@1.1.0"])
        #expect(second.removed == ["\(sampleID)@1.2.0"])
        #expect(env.fileExists(livePin))
    }

    @Test("status shows a pinned version until its lease is released")
    func pinnedInStatus() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.installConfirmed(sandbox, ["1.0.0", "1.1.0"])
        let lease = try env.reader.pin(id: try packageID(sampleID))
        #expect(lease.version == ver("1.1.0"))
        #expect(sandbox.status().packages.first?.versions.first { $0.version == "1.1.0" }?.pinned == true)
        #expect(try env.reader.status().packages.first?.versions.first { $0.version == "1.1.0" }?.pinned == true)
        lease.release()
        #expect(sandbox.status().packages.first?.versions.allSatisfy { !$0.pinned } == true)
    }
}
