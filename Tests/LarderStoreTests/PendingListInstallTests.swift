import Foundation
import LarderCore
import LarderStore
import SystemPackage
import Testing

/// `Sandbox.install(bundle:id:version:pending:force:)`: the bundle extracted while its file list
/// decodes on a thread of its own (`larder install --files`).
@Suite("Store: install with the file list still decoding")
struct PendingListInstallTests {
    /// A pending list of `bytes`, decoded as `larder install` decodes files.json; `gate`, when
    /// given, holds the decoding until it is signalled (so the extraction surely runs first).
    static func pending(_ bytes: Data, gate: DispatchSemaphore? = nil) -> PendingFileList {
        PendingFileList(bytes: bytes) { data in
            gate?.wait()
            return try ManifestCoding.decode(FileList.self, from: data, document: "files.json")
        }
    }

    @Test("the version installed and its list recorded byte for byte, as with the list decoded first")
    func installsAsWithTheList() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        let release = try SampleReleases.get().release("1.0.0")
        let gate = DispatchSemaphore(value: 0)
        // The decoding waits until the extraction is under way, so the two surely overlap.
        let pending = Self.pending(release.listBytes, gate: gate)
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.05) { gate.signal() }
        let report = try sandbox.install(
            bundle: env.bundle("1.0.0"), id: pid(sampleID), version: ver("1.0.0"), pending: pending, force: false)
        #expect(report.outcome == .installed && report.verifiedAgainstFileList)
        #expect(report.fileCount == release.list.files.count && report.size == release.list.totalSize)
        let tree = env.layout.tree(pid(sampleID), ver("1.0.0"))
        #expect(TreeCheck.problems(tree: tree, list: release.list) == [])
        // The list's own bytes are its file (not an encoding of it).
        let recorded = try Data(
            contentsOf: URL(fileURLWithPath: env.layout.list(pid(sampleID), ver("1.0.0")).string))
        #expect(recorded == release.listBytes)
        #expect(sandbox.state[pid(sampleID)].active == ver("1.0.0"))
        #expect(names(env.layout.staging) == [])

        // Installed again: activated without extracting, as with a decoded list.
        try env.install(sandbox, "1.1.0")
        let again = try sandbox.install(
            bundle: env.bundle("1.0.0"), id: pid(sampleID), version: ver("1.0.0"),
            pending: Self.pending(release.listBytes), force: false)
        #expect(again.outcome == .activated)
        #expect(sandbox.state[pid(sampleID)].active == ver("1.0.0"))
        #expect(names(env.layout.staging) == [])
    }

    @Test(
        "a list that does not decode, or names another version, fails the install; nothing is placed, the active version kept",
        arguments: ["garbage", "foreign", "garbage-and-bad-bundle"])
    func badListRefused(_ kind: String) throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.install(sandbox, "1.0.0")
        let before = try env.stateBytes()
        let bytes =
            kind == "foreign"
            ? try SampleReleases.get().release("1.0.0").listBytes : Data("{\"files\": [".utf8)
        let bundle =
            kind == "garbage-and-bad-bundle"
            ? try env.write(Data("not a zip".utf8), named: "bad.zip") : try env.bundle("1.1.0")
        let error = expectStoreError("file-list") {
            _ = try sandbox.install(
                bundle: bundle, id: pid(sampleID), version: ver("1.1.0"), pending: Self.pending(bytes), force: false)
        }
        if kind == "foreign" {
            #expect(error.map { "\($0)".contains("1.0.0") } == true, "\(String(describing: error))")
        }
        #expect(try env.stateBytes() == before)
        #expect(sandbox.state[pid(sampleID)].active == ver("1.0.0"))
        #expect(!env.fileExists(env.layout.tree(pid(sampleID), ver("1.1.0"))))
        #expect(!env.fileExists(env.layout.list(pid(sampleID), ver("1.1.0"))))
        #expect(names(env.layout.staging) == [])
    }

    @Test("a bundle that does not read fails with its own error when the list is good")
    func badBundleWithGoodList() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        let release = try SampleReleases.get().release("1.0.0")
        let bad = try env.write(Data("not a zip".utf8), named: "bad.zip")
        let error = #expect(throws: StoreError.self) {
            _ = try sandbox.install(
                bundle: bad, id: pid(sampleID), version: ver("1.0.0"), pending: Self.pending(release.listBytes),
                force: false)
        }
        #expect(error != nil && error?.code != "file-list", "\(String(describing: error))")
        #expect(sandbox.state.packages.isEmpty)
        #expect(names(env.layout.staging) == [])
    }

    @Test("a bundle whose files differ from the list is refused, and the list's bytes do not stay")
    func mismatchRefused() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        // 1.1.0's bundle under 1.0.0's list relabelled as 1.1.0: same id and version, other files.
        var list = try SampleReleases.get().release("1.0.0").list
        list.version = ver("1.1.0")
        let bytes = try JSONEncoder().encode(list)
        expectStoreError("verification-failed") {
            _ = try sandbox.install(
                bundle: env.bundle("1.1.0"), id: pid(sampleID), version: ver("1.1.0"), pending: Self.pending(bytes),
                force: false)
        }
        #expect(sandbox.state.packages.isEmpty)
        #expect(!env.fileExists(env.layout.list(pid(sampleID), ver("1.1.0"))))
        #expect(names(env.layout.staging) == [])
    }
}
