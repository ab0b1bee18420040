import Foundation
import LarderCore
import LarderStore
import LarderTestSupport
import SystemPackage
import Testing

@Suite("Store: verification against files.json")
struct VerificationTests {
    enum Tamper: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case changedHash, changedSize, removedEntry, extraEntry
        var testDescription: String { rawValue }
    }

    static let target = "js/app.js"
    static let ghost = "js/ghost.js"

    static func tamper(_ list: FileList, _ how: Tamper) -> FileList {
        var files = list.files
        switch how {
        case .changedHash:
            let i = files.firstIndex { $0.path.string == target }!
            files[i].sha256 = SHA256Digest.of(Data("tampered".utf8))
        case .changedSize:
            let i = files.firstIndex { $0.path.string == target }!
            files[i].size += 1
        case .removedEntry:
            files.removeAll { $0.path.string == target }
        case .extraEntry:
            files.append(FileEntry(path: RelativePath(ghost)!, size: 3, sha256: SHA256Digest.of(Data("abc".utf8))))
        }
        return FileList(id: list.id, version: list.version, files: files)
    }

    @Test(
        "a file list that differs from the bundle is refused naming the path; the state is untouched",
        arguments: Tamper.allCases)
    func mismatch(_ how: Tamper) throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.installConfirmed(sandbox, ["1.0.0"])
        let before = try env.stateBytes()
        let stateBefore = sandbox.state
        let packagesBefore = snapshot(env.layout.packages)
        let bad = Self.tamper(try env.list("1.1.0"), how)

        let error = expectStoreError("verification-failed") {
            _ = try sandbox.install(
                bundle: env.bundle("1.1.0"), id: try packageID(sampleID), version: try semanticVersion("1.1.0"),
                fileList: bad)
        }
        let path = how == .extraEntry ? Self.ghost : Self.target
        guard case .verification(let id, let version, let problems)? = error else {
            Issue.record("expected .verification, got \(String(describing: error))")
            return
        }
        #expect(id == sampleID && version == "1.1.0")
        #expect(problems.count == 1, "\(problems)")
        #expect(problems.allSatisfy { $0.contains(path) }, "\(problems)")
        #expect(error?.description.contains(path) == true)

        #expect(try env.stateBytes() == before)
        #expect(sandbox.state == stateBefore)
        #expect(snapshot(env.layout.packages) == packagesBefore)
        #expect(!env.fileExists(env.layout.tree(pid(sampleID), ver("1.1.0"))))
        #expect(!env.fileExists(env.layout.list(pid(sampleID), ver("1.1.0"))))
        #expect(names(env.layout.staging) == [])
    }

    @Test("several differences are all named")
    func severalProblems() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        var list = Self.tamper(try env.list("1.0.0"), .changedHash)
        list = Self.tamper(list, .extraEntry)
        list.files.removeAll { $0.path.string == "index.html" }
        let error = expectStoreError("verification-failed") {
            _ = try sandbox.install(
                bundle: env.bundle("1.0.0"), id: try packageID(sampleID), version: try semanticVersion("1.0.0"),
                fileList: list)
        }
        guard case .verification(_, _, let problems)? = error else { return }
        for path in [Self.target, Self.ghost, "index.html"] {
            #expect(problems.contains { $0.contains(path) }, "\(path) not named in \(problems)")
        }
        #expect(sandbox.state.packages.isEmpty)
        #expect(try env.reader.state().packages.isEmpty)
        #expect(names(env.layout.packages) == [])
    }

    @Test("a bundle altered after packing is refused, with its file list and without one")
    func alteredBundle() throws {
        let fixtures = try ZipFixtures.get()
        let original = try #require(fixtures.data["python-stored.zip"])
        // Stored entries keep file contents verbatim: change one byte of index.html's.
        let needle = Data("<h1>hi</h1>".utf8)
        let range = try #require(original.range(of: needle))
        var altered = original
        altered.replaceSubrange(range, with: Data("<h1>HI</h1>".utf8))

        let contents: [(String, String)] = [
            ("index.html", "<h1>hi</h1>"), ("css/app.css", String(repeating: "body{}", count: 50)),
            ("caf\u{e9}/na\u{ef}ve.txt", "x"),
        ]
        let list = FileList(
            id: pid("fixture"), version: ver("1.0.0"),
            files: contents.map {
                FileEntry(
                    path: RelativePath($0.0)!, size: Int64($0.1.utf8.count), sha256: SHA256Digest.of(Data($0.1.utf8)))
            })

        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        let good = try env.write(original, named: "good.zip")
        let bad = try env.write(altered, named: "bad.zip")

        // With the list, the SHA-256 check catches it and names the file.
        let error = expectStoreError("verification-failed") {
            _ = try sandbox.install(
                bundle: bad, id: try packageID("fixture"), version: try semanticVersion("1.0.0"), fileList: list)
        }
        #expect(error?.description.contains("index.html") == true)
        // Without a list, the zip's own CRC-32 does.
        let crc = #expect(throws: StoreError.self) {
            _ = try sandbox.install(bundle: bad, id: try packageID("fixture"), version: try semanticVersion("1.0.0"))
        }
        #expect(crc?.code != nil && crc?.code != "verification-failed")
        #expect(sandbox.state.packages.isEmpty)
        #expect(names(env.layout.packages) == [] || names(env.layout.packages.appending("fixture")) == [])
        #expect(names(env.layout.staging) == [])

        // The unaltered bundle passes the same list.
        let report = try sandbox.install(
            bundle: good, id: try packageID("fixture"), version: try semanticVersion("1.0.0"), fileList: list)
        #expect(report.outcome == .installed && report.verifiedAgainstFileList)
    }

    @Test(
        "a file list of another version or another package is refused",
        arguments: [("1.0.0", sampleID), ("1.1.0", otherID)])
    func foreignList(_ listVersion: String, _ listID: String) throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let sandbox = try env.open()
        try env.install(sandbox, "1.0.0")
        let before = try env.stateBytes()
        let foreign = try env.list(listVersion, id: listID)
        expectStoreError("file-list") {
            _ = try sandbox.install(
                bundle: env.bundle("1.1.0"), id: try packageID(sampleID), version: try semanticVersion("1.1.0"),
                fileList: foreign)
        }
        #expect(try env.stateBytes() == before)
        #expect(sandbox.state[pid(sampleID)].active == ver("1.0.0"))
        #expect(!env.fileExists(env.layout.tree(pid(sampleID), ver("1.1.0"))))
        #expect(names(env.layout.staging) == [])
    }
}
