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

@Suite("Store: writer lock")
struct LockTests {
    @Test("a second writer gives up after the lock timeout, naming the holder; after close it gets in")
    func secondWriter() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let first = try env.open()
        try env.install(first, "1.0.0")

        let start = Date()
        let error = expectStoreError("locked") { _ = try env.open() }
        let waited = Date().timeIntervalSince(start)
        #expect(waited >= 0.25 && waited < 3, "waited \(waited) s with a 0.3 s timeout")
        guard case .locked(let holder, let reported)? = error else { return }
        #expect(holder == getpid())
        #expect(reported >= 0.3 && reported < 3)
        #expect(error?.description.contains("\(getpid())") == true)

        first.close()
        let second = try env.open()
        #expect(second.state[pid(sampleID)].active == ver("1.0.0"))
        second.close()
        // Dropping a sandbox releases the lock too.
        do { _ = try env.open() }
        try env.open().close()
    }

    @Test("on a read-only file system the sandbox opens for reading; every change fails naming the mount")
    func readOnlyFileSystem() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        try env.withSandbox { try env.installConfirmed($0, ["1.0.0", "1.1.0"]) }
        let before = try env.stateBytes()
        // Opening the lock file is the first open under the root: on a read-only mount, EROFS.
        let scope = FaultInjector.install(.fail(kind: .open, nth: 1, errno: .readOnlyFileSystem), under: env.root)
        defer { scope.remove() }
        let sandbox = try env.open()
        defer { sandbox.close() }
        #expect(scope.hits == [1])
        #expect(sandbox.readOnly?.errno == .readOnlyFileSystem)
        #expect(sandbox.state[pid(sampleID)].active == ver("1.1.0"))
        for change in [
            { _ = try sandbox.confirm(id: try packageID(sampleID)) },
            { _ = try sandbox.rollback(id: try packageID(sampleID), to: nil) },
        ] {
            let error = expectStoreError("io") { try change() }
            #expect(error?.description.contains("read-only") == true, "\(String(describing: error))")
        }
        #expect(try env.stateBytes() == before)
    }

    @Test("a lock held by another process blocks writers until that process dies")
    func otherProcess() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        try env.open().close()

        let ready = env.dir.url.appendingPathComponent("holder-ready").path
        let holder = try Child(
            "/usr/bin/python3",
            [
                "-c",
                "import fcntl, sys, time\nf = open(sys.argv[1], 'a')\nfcntl.flock(f, fcntl.LOCK_EX)\nopen(sys.argv[2], 'w').close()\ntime.sleep(30)\n",
                env.layout.lock.string, ready,
            ])
        defer { holder.stop() }
        let deadline = Date().addingTimeInterval(10)
        while !FileManager.default.fileExists(atPath: ready), Date() < deadline { usleep(10_000) }
        try #require(FileManager.default.fileExists(atPath: ready), "the lock holder did not start")

        expectStoreError("locked") { _ = try env.open() }
        // A reader is never blocked.
        #expect(try env.reader.state().packages.isEmpty)

        holder.stop()
        try env.open().close()
    }
}

@Suite("Store: recovery on open")
struct RecoveryTests {
    @Test("leftovers in staging/, trash/ and temporary state files are removed on open; partial downloads are kept")
    func leftovers() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.install(sandbox, "1.0.0")
        sandbox.close()
        let before = try env.stateBytes()

        let fm = FileManager.default
        let stage = env.layout.staging.appending("\(sampleID)@1.1.0-1234-5678/tree/js")
        try fm.createDirectory(atPath: stage.string, withIntermediateDirectories: true)
        try Data("half".utf8).write(to: URL(fileURLWithPath: stage.appending("app.js").string))
        try Data("loose".utf8).write(to: URL(fileURLWithPath: env.layout.staging.appending("loose-file").string))
        let trashed = env.layout.trash.appending("\(sampleID)@0.9.0-42/css")
        try fm.createDirectory(atPath: trashed.string, withIntermediateDirectories: true)
        try Data("old".utf8).write(to: URL(fileURLWithPath: trashed.appending("app.css").string))
        let temp = env.layout.root.appending(".state.json.tmp-99999-1")
        try Data("{ half a state".utf8).write(to: URL(fileURLWithPath: temp.string))
        let part = env.layout.downloads.appending("bundle-\(sampleID)-1.1.0.zip.part")
        try Data("partial download".utf8).write(to: URL(fileURLWithPath: part.string))

        let reopened = try env.open()
        defer { reopened.close() }
        #expect(names(env.layout.staging) == [])
        #expect(names(env.layout.trash) == [])
        #expect(!env.fileExists(temp))
        #expect(env.fileExists(part), "partial downloads are kept for Range resume")
        #expect(try env.stateBytes() == before)
        #expect(reopened.state[pid(sampleID)].active == ver("1.0.0"))
        #expect(
            TreeCheck.problems(tree: env.layout.tree(pid(sampleID), ver("1.0.0")), list: try env.list("1.0.0")) == [])
    }

    @Test("temporary files of an interrupted list write are removed on open")
    func listTemporaryFiles() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        try env.withSandbox { try env.install($0, "1.0.0") }
        // AtomicFile writes lists/<id>/<version>.json through ".<name>.tmp-<pid>-<random>".
        let temp = env.layout.lists.appending(sampleID).appending(".1.1.0.json.tmp-99999-12345")
        try Data("{\"half\": ".utf8).write(to: URL(fileURLWithPath: temp.string))
        try env.open().close()
        #expect(!env.fileExists(temp), "a temporary list file survived recovery")
        #expect(names(env.layout.lists.appending(sampleID)) == ["1.0.0.json"])
    }

    @Test("trees and lists the state does not know (an interrupted install or deletion) are removed on open")
    func unknownTrees() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.install(sandbox, "1.0.0")
        sandbox.close()
        let before = try env.stateBytes()
        let fm = FileManager.default

        // An install interrupted after its rename, before its state write: tree and list present.
        let known = env.layout.tree(pid(sampleID), ver("1.0.0"))
        let orphan = env.layout.tree(pid(sampleID), ver("1.1.0"))
        try fm.copyItem(atPath: known.string, toPath: orphan.string)
        try env.list("1.1.0").write(to: env.layout.list(pid(sampleID), ver("1.1.0")))
        // The same for a package the state has never heard of.
        let ghost = env.layout.tree(pid("ghost"), ver("2.0.0"))
        try fm.createDirectory(atPath: ghost.removingLastComponent().string, withIntermediateDirectories: true)
        try fm.copyItem(atPath: known.string, toPath: ghost.string)
        // A deletion interrupted after its state write: a list without its tree.
        try env.list("1.2.0").write(to: env.layout.list(pid(sampleID), ver("1.2.0")))
        // Something that is not a version: reported by doctor, never deleted.
        let notes = env.layout.packages.appending(sampleID).appending("notes")
        try fm.createDirectory(atPath: notes.string, withIntermediateDirectories: true)

        let reopened = try env.open()
        defer { reopened.close() }
        #expect(!env.fileExists(orphan))
        #expect(!env.fileExists(env.layout.list(pid(sampleID), ver("1.1.0"))))
        #expect(!env.fileExists(ghost))
        #expect(!env.fileExists(env.layout.list(pid(sampleID), ver("1.2.0"))))
        #expect(env.fileExists(notes))
        #expect(names(env.layout.packages.appending(sampleID)) == ["1.0.0", "notes"])
        #expect(names(env.layout.lists.appending(sampleID)) == ["1.0.0.json"])
        #expect(names(env.layout.trash) == [])
        #expect(try env.stateBytes() == before)
        #expect(TreeCheck.problems(tree: known, list: try env.list("1.0.0")) == [])
    }

    @Test("an unknown tree pinned by a live session is left for a later open")
    func unknownPinnedTree() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        try env.withSandbox { try env.install($0, "1.0.0") }
        let orphan = try env.unknownCopy(of: "1.0.0", as: "1.1.0")
        let pinDir = env.layout.pinDirectory(pid(sampleID), ver("1.1.0"))
        try FileManager.default.createDirectory(atPath: pinDir.string, withIntermediateDirectories: true)
        let pin = pinDir.appending("\(getpid())-\(try processStartTime(getpid()))-1")
        #expect(FileManager.default.createFile(atPath: pin.string, contents: Data()))
        try env.open().close()
        #expect(env.fileExists(orphan))
        _ = unlink(pin.string)
        try env.open().close()
        #expect(!env.fileExists(orphan))
    }

    @Test(
        "a corrupt state.json makes open fail and is left byte for byte",
        arguments: [
            "garbage \u{1}\u{2}\u{3}", "{\"schemaVersion\": 1, \"generation\": 3, \"packages\": {", "",
            "{\"schemaVersion\": 999, \"generation\": 1, \"packages\": {}}",
        ])
    func corruptState(_ text: String) throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        try env.withSandbox { try env.installConfirmed($0, ["1.0.0", "1.1.0"]) }
        let garbage = Data(text.utf8)
        try garbage.write(to: URL(fileURLWithPath: env.layout.state.string))
        let packagesBefore = snapshot(env.layout.packages)
        let listsBefore = snapshot(env.layout.lists)

        let error = expectStoreError("state-corrupt") { _ = try env.open() }
        #expect(error?.description.contains("doctor") == true)
        #expect(try env.stateBytes() == garbage)
        #expect(snapshot(env.layout.packages) == packagesBefore)
        #expect(snapshot(env.layout.lists) == listsBefore)
        expectStoreError("state-corrupt") { _ = try env.reader.state() }
        // The failed open released its lock.
        var options = env.options()
        options.allowCorruptState = true
        let sandbox = try env.open(options)
        #expect(sandbox.stateProblem != nil)
        #expect(try env.stateBytes() == garbage)
        #expect(snapshot(env.layout.packages) == packagesBefore)
    }

    @Test("a missing state.json with versions on disk makes open fail")
    func missingState() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        try env.withSandbox { try env.install($0, "1.0.0") }
        try FileManager.default.removeItem(atPath: env.layout.state.string)
        let packagesBefore = snapshot(env.layout.packages)
        expectStoreError("state-missing") { _ = try env.open() }
        #expect(snapshot(env.layout.packages) == packagesBefore)
        #expect(!env.fileExists(env.layout.state))
    }
}

@Suite("Store: doctor")
struct DoctorTests {
    @Test("a healthy sandbox has no problems, and repair changes nothing")
    func healthy() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.installConfirmed(sandbox, ["1.0.0", "1.1.0"])
        let before = try env.stateBytes()
        for repair in [false, true] {
            let report = try sandbox.doctor(repair: repair)
            #expect(report.ok && report.problems == [])
            #expect(report.repaired == false)
            #expect(report.verifiedVersions.sorted() == ["\(sampleID)@1.0.0", "\(sampleID)@1.1.0"])
        }
        #expect(try env.stateBytes() == before)
    }

    @Test("a corrupt state is rebuilt from the verified versions on disk, the highest verified one active")
    func rebuildCorruptState() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        try env.withSandbox { sandbox in
            try env.installConfirmed(sandbox, ["1.0.0", "1.1.0", "1.2.0"])
            try env.install(sandbox, "1.0.0", id: otherID)
        }
        // 1.2.0, the highest, no longer verifies.
        try Data("tampered".utf8).write(
            to: URL(fileURLWithPath: env.layout.tree(pid(sampleID), ver("1.2.0")).appending("index.html").string))
        try Data("not json".utf8).write(to: URL(fileURLWithPath: env.layout.state.string))
        expectStoreError("state-corrupt") { _ = try env.open() }

        var options = env.options()
        options.allowCorruptState = true
        let sandbox = try env.open(options)
        let report = try sandbox.doctor(repair: true)
        #expect(report.repaired)
        #expect(report.problems.contains { $0.hasPrefix("state.json") })
        #expect(
            report.problems.contains { $0.contains("\(sampleID)@1.2.0") && $0.contains("index.html") },
            "\(report.problems)")
        #expect(Set(report.verifiedVersions) == ["\(sampleID)@1.0.0", "\(sampleID)@1.1.0", "\(otherID)@1.0.0"])

        let state = try env.reader.state()
        let pkg = state[pid(sampleID)]
        #expect(pkg.active == ver("1.1.0"))
        #expect(pkg.fallback == ver("1.0.0"))
        #expect(Set(pkg.versions.map(\.version)) == [ver("1.0.0"), ver("1.1.0")])
        #expect(pkg.history.last?.event == .repair)
        #expect(state[pid(otherID)].active == ver("1.0.0"))
        #expect(!env.fileExists(env.layout.tree(pid(sampleID), ver("1.2.0"))))
        #expect(!env.fileExists(env.layout.list(pid(sampleID), ver("1.2.0"))))
        #expect(sandbox.stateProblem == nil)
        sandbox.close()

        // An ordinary open works again, and doctor is content.
        let again = try env.open()
        #expect(try again.doctor(repair: false).ok)
        #expect(again.state[pid(sampleID)].active == ver("1.1.0"))
    }

    enum Damage: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case modified, deleted, extra
        var testDescription: String { rawValue }
    }

    @Test("doctor names a damaged file of an installed tree; repair drops that version", arguments: Damage.allCases)
    func damagedTree(_ damage: Damage) throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.installConfirmed(sandbox, ["1.0.0", "1.1.0", "1.2.0"])
        let tree = env.layout.tree(pid(sampleID), ver("1.1.0"))
        let file: String
        switch damage {
        case .modified:
            file = "js/app.js"
            try Data("alert('owned')".utf8).write(to: URL(fileURLWithPath: tree.appending(file).string))
        case .deleted:
            file = "css/app.css"
            try FileManager.default.removeItem(atPath: tree.appending(file).string)
        case .extra:
            file = "js/injected.js"
            try Data("evil()".utf8).write(to: URL(fileURLWithPath: tree.appending(file).string))
        }
        let before = try env.stateBytes()

        let check = try sandbox.doctor(repair: false)
        #expect(!check.ok && !check.repaired)
        #expect(check.problems.count == 1, "\(check.problems)")
        #expect(
            check.problems.allSatisfy { $0.contains("\(sampleID)@1.1.0") && $0.contains(file) }, "\(check.problems)")
        #expect(Set(check.verifiedVersions) == ["\(sampleID)@1.0.0", "\(sampleID)@1.2.0"])
        #expect(try env.stateBytes() == before)

        let repair = try sandbox.doctor(repair: true)
        #expect(repair.repaired)
        let pkg = try env.reader.state()[pid(sampleID)]
        #expect(pkg.versions.map(\.version) == [ver("1.0.0"), ver("1.2.0")])
        #expect(pkg.active == ver("1.2.0"))
        #expect(pkg.fallback == nil)
        #expect(!env.fileExists(tree))
        #expect(!env.fileExists(env.layout.list(pid(sampleID), ver("1.1.0"))))
        #expect(names(env.layout.trash) == [])
        #expect(try sandbox.doctor(repair: false).ok)
    }

    @Test("a damaged active version is replaced by the highest verified one")
    func damagedActive() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.installConfirmed(sandbox, ["1.0.0", "1.1.0", "1.2.0"])
        try Data("x".utf8).write(
            to: URL(fileURLWithPath: env.layout.tree(pid(sampleID), ver("1.2.0")).appending("index.html").string))
        let report = try sandbox.doctor(repair: true)
        #expect(report.problems.contains { $0.contains("\(sampleID)@1.2.0") && $0.contains("index.html") })
        let pkg = try env.reader.state()[pid(sampleID)]
        #expect(pkg.active == ver("1.1.0"))
        #expect(pkg.versions.map(\.version) == [ver("1.0.0"), ver("1.1.0")])
        #expect(
            TreeCheck.problems(tree: env.layout.tree(pid(sampleID), ver("1.1.0")), list: try env.list("1.1.0")) == [])
    }

    @Test("a missing version is reported even when another version's name starts with its name")
    func missingVersionPrefix() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        let bundle = try env.bundle("1.0.0")
        for v in ["1.0.1", "1.0.10"] {
            _ = try sandbox.install(bundle: bundle, id: try packageID(sampleID), version: try semanticVersion(v))
            _ = try sandbox.confirm(id: try packageID(sampleID))
        }
        try FileManager.default.removeItem(atPath: env.layout.tree(pid(sampleID), ver("1.0.1")).string)
        try Data("x".utf8).write(
            to: URL(fileURLWithPath: env.layout.tree(pid(sampleID), ver("1.0.10")).appending("index.html").string))
        let report = try sandbox.doctor(repair: false)
        #expect(report.problems.contains { $0.hasPrefix("\(sampleID)@1.0.10: index.html") }, "\(report.problems)")
        #expect(report.problems.contains("\(sampleID)@1.0.1: in state.json but not on disk"), "\(report.problems)")
    }

    @Test("repair keeps the installation order that gc retention relies on")
    func repairKeepsInstallationOrder() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        let order = ["1.2.0", "1.0.0", "1.1.0", "1.4.0", "1.3.0"]
        try env.installConfirmed(sandbox, order)
        try env.installConfirmed(sandbox, ["1.0.0", "1.1.0"], id: otherID)
        // Damage elsewhere, so that repair runs.
        try FileManager.default.removeItem(
            atPath: env.layout.tree(pid(otherID), ver("1.0.0")).appending("index.html").string)
        #expect(try sandbox.doctor(repair: true).repaired)

        let pkg = try env.reader.state()[pid(sampleID)]
        #expect(pkg.versions.map(\.version.description) == order)
        #expect(pkg.active == ver("1.3.0") && pkg.fallback == ver("1.4.0"))
        // 1.1.0 is the most recently installed of the versions gc may remove.
        let report = try sandbox.gc(keep: 1)
        #expect(Set(report.removed) == ["\(sampleID)@1.2.0", "\(sampleID)@1.0.0"])
    }

    @Test("a state rebuilt from an unreadable state.json goes on from the last generation published")
    func repairKeepsGenerationsGrowing() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        try env.withSandbox { try env.installConfirmed($0, ["1.0.0", "1.1.0"]) }
        let published = try env.reader.state().generation
        #expect(published >= 2)
        try Data("{ corrupt".utf8).write(to: URL(fileURLWithPath: env.layout.state.string))
        var options = env.options()
        options.allowCorruptState = true
        let sandbox = try env.open(options)
        #expect(sandbox.stateProblem != nil && sandbox.state.generation == published)
        #expect(try sandbox.doctor(repair: true).repaired)
        sandbox.close()
        // A reader that saw `published` takes the repaired state for a new one.
        let repaired = try env.reader.state()
        #expect(repaired.generation > published)
        #expect(repaired[pid(sampleID)].active == ver("1.1.0"))
    }

    @Test("a version in the state but missing on disk is reported, and repair forgets it")
    func missingTree() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.installConfirmed(sandbox, ["1.0.0", "1.1.0", "1.2.0"])
        try FileManager.default.removeItem(atPath: env.layout.tree(pid(sampleID), ver("1.0.0")).string)
        let report = try sandbox.doctor(repair: false)
        #expect(report.problems == ["\(sampleID)@1.0.0: in state.json but not on disk"])
        _ = try sandbox.doctor(repair: true)
        #expect(try env.reader.state()[pid(sampleID)].versions.map(\.version) == [ver("1.1.0"), ver("1.2.0")])
        #expect(try sandbox.doctor(repair: false).ok)
    }
}

extension FileList {
    /// Writes the list as the store records it.
    func write(to path: FilePath) throws {
        try FileManager.default.createDirectory(
            atPath: path.removingLastComponent().string, withIntermediateDirectories: true)
        try ManifestCoding.encode(self).write(to: URL(fileURLWithPath: path.string))
    }
}
