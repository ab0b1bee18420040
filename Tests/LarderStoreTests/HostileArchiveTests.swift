import Foundation
import LarderCore
import LarderStore
import LarderTestSupport
import SystemPackage
import Testing

@Suite("Store: hostile archives")
struct HostileArchiveTests {
    /// Files a canary directory beside the sandbox root holds; names an escaping entry would hit.
    static let canaryFiles: [String: String] = [
        "x": "canary x\n",
        "index.html": "<p>canary</p>\n",
        "etc/passwd": "root:x:0:0\n",
        "a/b/c.txt": "deep\n",
        "caf\u{e9}/na\u{ef}ve.txt": "accents\n",
    ]

    @Test(
        "every refused fixture of make-zips.py is refused with its code and changes nothing",
        arguments: ZipFixtures.names(ok: false))
    func refused(_ name: String) throws {
        let fixtures = try ZipFixtures.get()
        let expected = try #require(fixtures.expected[name])
        let data = try #require(fixtures.data[name])
        let env = try StoreEnv()
        defer { env.cleanup() }

        let canary = env.dir.url.appendingPathComponent("canary")
        for (rel, text) in Self.canaryFiles {
            let url = canary.appendingPathComponent(rel)
            try FileManager.default.createDirectory(
                at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try Data(text.utf8).write(to: url)
        }
        let sandbox = try env.open()
        try env.install(sandbox, "1.0.0")
        let zip = try env.write(data, named: name)

        let parentBefore = names(env.dir.path)
        let canaryBefore = snapshot(canary.path)
        let stateBefore = try env.stateBytes()
        let packagesBefore = snapshot(env.layout.packages)
        let listsBefore = snapshot(env.layout.lists)
        let absoluteTargetExisted = FileManager.default.fileExists(atPath: "/tmp/x")

        for list in [nil, try env.list("1.0.0")] as [FileList?] {
            let relabelled = list.map { FileList(id: $0.id, version: ver("2.0.0"), files: $0.files) }
            let error = expectStoreError(
                try #require(ReasonCode(rawValue: expected)), "\(name) with\(list == nil ? "out" : "") a file list"
            ) {
                _ = try sandbox.install(
                    bundle: zip, id: try packageID(sampleID), version: try semanticVersion("2.0.0"),
                    fileList: relabelled)
            }
            #expect(error.map { !$0.description.isEmpty } == true)

            #expect(names(env.dir.path) == parentBefore, "something was created beside the sandbox root")
            #expect(snapshot(canary.path) == canaryBefore, "the canary beside the root changed")
            #expect(try env.stateBytes() == stateBefore)
            #expect(snapshot(env.layout.packages) == packagesBefore)
            #expect(snapshot(env.layout.lists) == listsBefore)
            #expect(names(env.layout.staging) == [], "staging/ is not empty")
            #expect(names(env.layout.trash) == [])
            if !absoluteTargetExisted { #expect(!FileManager.default.fileExists(atPath: "/tmp/x")) }
            let pkg = sandbox.state[pid(sampleID)]
            #expect(pkg.active == ver("1.0.0") && pkg.health == .pending)
            #expect(pkg.versions.map(\.version) == [ver("1.0.0")])
        }

        // A fresh writer finds the same state, and the active tree intact.
        sandbox.close()
        let reopened = try env.open()
        defer { reopened.close() }
        #expect(reopened.state[pid(sampleID)].active == ver("1.0.0"))
        #expect(
            TreeCheck.problems(tree: env.layout.tree(pid(sampleID), ver("1.0.0")), list: try env.list("1.0.0")) == [])
        #expect(try env.stateBytes() == stateBefore)
    }
}
