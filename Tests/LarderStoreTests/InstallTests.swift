import Foundation
import LarderCore
import LarderStore
import LarderTestSupport
import SystemPackage
import Testing

@Suite("Store: install")
struct InstallTests {
    @Test("the sample app installs, with its files.json and without one", arguments: [true, false])
    func sampleAppInstalls(withList: Bool) throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        let list = try env.list("1.0.0")

        let report = try env.install(sandbox, "1.0.0", withList: withList)
        #expect(report.outcome == .installed)
        #expect(report.id == sampleID && report.version == "1.0.0")
        #expect(report.previous == nil && report.fallback == nil)
        #expect(report.fileCount == list.files.count && report.fileCount == 9)
        #expect(report.size == list.totalSize)
        #expect(report.verifiedAgainstFileList == withList)

        // The tree is exactly what files.json lists.
        let tree = env.layout.tree(pid(sampleID), ver("1.0.0"))
        #expect(TreeCheck.problems(tree: tree, list: list) == [])
        #expect(names(env.layout.packages.appending(sampleID)) == ["1.0.0"])
        let index = try Data(contentsOf: packageRoot.appendingPathComponent("Examples/sample-app/index.html"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: tree.appending("index.html").string)) == index)

        // Its list is recorded.
        let recorded = try ManifestCoding.decode(
            FileList.self,
            from: Data(contentsOf: URL(fileURLWithPath: env.layout.list(pid(sampleID), ver("1.0.0")).string)),
            document: "list")
        #expect(recorded.id == pid(sampleID) && recorded.version == ver("1.0.0"))
        if withList {
            #expect(recorded == list)
        } else {
            #expect(
                recorded.files.map { [$0.path.string, "\($0.size)", $0.sha256.hex] }
                    == list.files.map { [$0.path.string, "\($0.size)", $0.sha256.hex] })
        }

        // Active and pending, in memory and on disk.
        for state in [sandbox.state, try env.reader.state()] {
            let pkg = state[pid(sampleID)]
            #expect(pkg.active == ver("1.0.0"))
            #expect(pkg.health == .pending)
            #expect(pkg.fallback == nil)
            #expect(pkg.versions.map(\.version) == [ver("1.0.0")])
            #expect(pkg.versions.first?.fileCount == 9 && pkg.versions.first?.size == list.totalSize)
            #expect(pkg.history.map(\.event) == [.install, .activate])
        }
        #expect(names(env.layout.staging) == [])
        #expect(names(env.layout.trash) == [])
        // Nothing but the sandbox and the bundles in the test directory.
        #expect(names(env.dir.path) == ["bundles", "sandbox"])
    }

    @Test(
        "installing another version keeps the previous one as fallback; an installed version is re-activated without extracting"
    )
    func secondVersionAndReactivation() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.install(sandbox, "1.0.0")
        let second = try env.install(sandbox, "1.1.0")
        #expect(second.outcome == .installed)
        #expect(second.previous == "1.0.0" && second.fallback == "1.0.0")
        #expect(sandbox.state[pid(sampleID)].active == ver("1.1.0"))
        #expect(sandbox.state[pid(sampleID)].fallback == ver("1.0.0"))
        for v in ["1.0.0", "1.1.0"] {
            #expect(TreeCheck.problems(tree: env.layout.tree(pid(sampleID), ver(v)), list: try env.list(v)) == [])
        }

        // The same version again: nothing to do.
        let before = try env.stateBytes()
        let again = try env.install(sandbox, "1.1.0")
        #expect(again.outcome == .unchanged)
        #expect(try env.stateBytes() == before)

        // A version on disk is re-activated — even from a bundle that would not extract.
        let junk = try env.write(Data("not a zip".utf8), named: "junk.zip")
        let back = try sandbox.install(bundle: junk, id: try packageID(sampleID), version: try semanticVersion("1.0.0"))
        #expect(back.outcome == .activated)
        #expect(back.previous == "1.1.0")
        let pkg = sandbox.state[pid(sampleID)]
        #expect(pkg.active == ver("1.0.0") && pkg.health == .pending)
        #expect(pkg.versions.map(\.version) == [ver("1.0.0"), ver("1.1.0")])
        #expect(pkg.history.last?.event == .activate && pkg.history.last?.from == ver("1.1.0"))
        #expect(names(env.layout.staging) == [])
    }

    @Test("a pending version replaced by a new one does not displace the last confirmed fallback")
    func fallbackIsLastKnownGood() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.installConfirmed(sandbox, ["1.0.0"])
        try env.install(sandbox, "1.1.0")  // pending
        try env.install(sandbox, "1.2.0")  // 1.1.0 never proved itself
        let pkg = sandbox.state[pid(sampleID)]
        #expect(pkg.active == ver("1.2.0"))
        #expect(pkg.fallback == ver("1.0.0"))
    }

    @Test("two packages live side by side")
    func twoPackages() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.install(sandbox, "1.0.0")
        try env.install(sandbox, "1.0.0", id: otherID)
        #expect(Set(sandbox.state.packages.keys) == [sampleID, otherID])
        #expect(
            TreeCheck.problems(
                tree: env.layout.tree(pid(otherID), ver("1.0.0")), list: try env.list("1.0.0", id: otherID)) == [])
        #expect(sandbox.status().packages.map(\.id) == [otherID, sampleID])
    }

    @Test("zips written by other tools install", arguments: ZipFixtures.names(ok: true))
    func externalZipInstalls(_ name: String) throws {
        let fixtures = try ZipFixtures.get()
        let data = try #require(fixtures.data[name])
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        let zip = try env.write(data, named: name)
        let report = try sandbox.install(
            bundle: zip, id: try packageID("fixture"), version: try semanticVersion("1.0.0"))
        #expect(report.outcome == .installed)
        #expect(report.verifiedAgainstFileList == false)

        let listData = try Data(contentsOf: URL(fileURLWithPath: env.layout.list(pid("fixture"), ver("1.0.0")).string))
        let list = try ManifestCoding.decode(FileList.self, from: listData, document: "list")
        let tree = env.layout.tree(pid("fixture"), ver("1.0.0"))
        #expect(TreeCheck.problems(tree: tree, list: list) == [])
        #expect(report.fileCount == list.files.count)
        let paths = Set(list.files.map(\.path.string))
        let expected: [String: String] = [
            "index.html": "<h1>hi</h1>",
            "css/app.css": String(repeating: "body{}", count: 50),
            "caf\u{e9}/na\u{ef}ve.txt": "x",
        ]
        for (path, content) in expected {
            #expect(paths.contains(path), "\(path) missing from \(paths.sorted())")
            #expect(try Data(contentsOf: URL(fileURLWithPath: tree.appending(path).string)) == Data(content.utf8))
        }
        let pkg = sandbox.state[pid("fixture")]
        #expect(pkg.active == ver("1.0.0") && pkg.health == .pending)
        #expect(names(env.layout.staging) == [])
    }

    @Test("the make-zips fixture set covers the external tools and the hostile cases")
    func fixtureSetIsComplete() throws {
        let fixtures = try ZipFixtures.get()
        let ok = ZipFixtures.names(ok: true)
        for name in [
            "python-deflated.zip", "python-stored.zip", "python-zip64.zip", "python-data-descriptor.zip", "infozip.zip",
            "bsdtar.zip",
        ] {
            #expect(ok.contains(name), "\(name) is not an accepted fixture (is zip/bsdtar installed?)")
        }
        let hostile = ZipFixtures.names(ok: false)
        #expect(hostile.count >= 20)
        #expect(
            Set(hostile.map { fixtures.expected[$0]! }).isSuperset(of: [
                "path-dot-component", "path-absolute", "entry-type", "limit-compression-ratio",
            ]))
    }

    @Test("the limits in Sandbox.Options are applied to bundles")
    func limitsHonoured() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        var options = env.options()
        options.limits.maxFiles = 3
        let sandbox = try env.open(options)
        expectStoreError("limit-files") { try env.install(sandbox, "1.0.0") }
        #expect(sandbox.state.packages.isEmpty)
        #expect(names(env.layout.packages) == [])
        #expect(names(env.layout.staging) == [])
    }

    @Test("a sandbox opened over a corrupt state (for doctor) does not replace that state by installing")
    func noInstallOverCorruptState() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        try env.withSandbox { try env.installConfirmed($0, ["1.0.0"]) }
        let garbage = Data("{ corrupt".utf8)
        try garbage.write(to: URL(fileURLWithPath: env.layout.state.string))
        var options = env.options()
        options.allowCorruptState = true
        let sandbox = try env.open(options)
        #expect(sandbox.stateProblem != nil)
        expectStoreError(
            "state-corrupt", "installing would replace the unreadable state.json with one that forgets 1.0.0"
        ) {
            try env.install(sandbox, "1.1.0")
        }
        #expect(try env.stateBytes() == garbage)
        #expect(env.fileExists(env.layout.tree(pid(sampleID), ver("1.0.0"))))
    }

    @Test("bad ids, bad versions and a missing bundle are refused without touching the sandbox")
    func refusals() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.install(sandbox, "1.0.0")
        let before = try env.stateBytes()
        let treeBefore = snapshot(env.layout.packages)
        _ = try env.bundle("1.1.0")
        // Text is read at the edge (the CLI refuses it with bad-id / bad-version); the library takes
        // typed values, which a bad id or version cannot become.
        #expect(PackageID("Bad_ID") == nil && PackageID("../escape") == nil)
        #expect(SemanticVersion("v1.1") == nil && SemanticVersion("../1.1.0") == nil)
        let missing = FilePath(env.dir.url.appendingPathComponent("bundles/nope.zip").path)
        #expect(throws: StoreError.self) {
            _ = try sandbox.install(bundle: missing, id: try packageID(sampleID), version: try semanticVersion("1.1.0"))
        }
        #expect(try env.stateBytes() == before)
        #expect(snapshot(env.layout.packages) == treeBefore)
        #expect(names(env.layout.staging) == [])
        #expect(sandbox.state[pid(sampleID)].active == ver("1.0.0"))
    }
}
