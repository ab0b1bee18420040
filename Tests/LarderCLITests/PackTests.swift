import Foundation
import LarderCore
import LarderTestSupport
import Testing

@Suite("larder pack: the happy path")
struct PackTests {
    @Test("the same tree packs to identical bundle.zip and files.json bytes, whatever the mtimes")
    func deterministic() throws {
        try withWorkspace { ws in
            let src = try copySampleApp(to: ws.dir)
            let repoA = ws.dir.appendingPathComponent("repo-a")
            let repoB = ws.dir.appendingPathComponent("repo-b")
            try touchAll(src, to: Date(timeIntervalSince1970: 1_000_000_000))
            let a = try ws.packOK(src, version: "1.0.0", repo: repoA, ["--json"])
            try touchAll(src, to: Date(timeIntervalSince1970: 1_700_000_000))
            let b = try ws.packOK(src, version: "1.0.0", repo: repoB, ["--json"])

            let version = "packages/sample-app/1.0.0"
            for name in ["bundle.zip", "files.json"] {
                let x = try #require(
                    bytes(repoA.appendingPathComponent("\(version)/\(name)")), "\(name) missing in repo-a")
                let y = try #require(
                    bytes(repoB.appendingPathComponent("\(version)/\(name)")), "\(name) missing in repo-b")
                #expect(SHA256Digest.of(x) == SHA256Digest.of(y), "\(name) differs between two packs of the same tree")
            }
            let ra = try decode(PackJSON.self, a)
            let rb = try decode(PackJSON.self, b)
            #expect(ra.bundle == rb.bundle)
            #expect(ra.fileList == rb.fileList)
            #expect(ra.bundle.path == "\(version)/bundle.zip")
            #expect(ra.fileList.path == "\(version)/files.json")
            #expect(try sha256Hex(repoA.appendingPathComponent(ra.bundle.path)) == ra.bundle.sha256.hex)
            #expect(try sha256Hex(repoA.appendingPathComponent(ra.fileList.path)) == ra.fileList.sha256.hex)
        }
    }

    @Test("--json report: serial 1 then 2; a one-file change writes one object and reuses the rest")
    func reportAndObjectReuse() throws {
        try withWorkspace { ws in
            let src = try copySampleApp(to: ws.dir)
            let first = try decode(PackJSON.self, try ws.packOK(src, version: "1.0.0", ["--json"]))
            let keyID = try ws.privateKey().publicKey.keyID
            #expect(first.id == "sample-app")
            #expect(first.version == "1.0.0")
            #expect(first.channel == "stable")
            #expect(first.serial == 1)
            #expect(first.signedBy == keyID)
            #expect(first.fileCount == 9)
            #expect(first.objectsWritten == first.fileCount, "every file's content is distinct in the sample app")
            #expect(first.objectsReused == 0)
            #expect(first.objectBytesWritten > 0)
            #expect(first.expires > Date().addingTimeInterval(29 * 24 * 3600))

            let list = try ManifestCoding.decode(
                FileList.self, from: try Data(contentsOf: ws.repo.appendingPathComponent(first.fileList.path)),
                document: "files.json")
            #expect(list.files.count == first.fileCount)
            #expect(list.totalSize == first.totalSize)
            for f in list.files {
                let hex = f.sha256.hex
                #expect(
                    FileManager.default.fileExists(
                        atPath: ws.repo.appendingPathComponent("objects/\(hex.prefix(2))/\(hex)").path),
                    "object of \(f.path) missing")
            }

            try setCatalogVersion(src, "1.1.0")
            let second = try decode(PackJSON.self, try ws.packOK(src, version: "1.1.0", ["--json"]))
            #expect(second.serial == 2)
            #expect(second.version == "1.1.0")
            #expect(second.objectsWritten == 1, "only data/catalog.json changed")
            #expect(second.objectsReused == second.fileCount - 1)
            #expect(second.objectsReused > 0)

            let index = try ws.loadIndex()
            #expect(index.serial == 2)
            #expect(index.packages.count == 1, "one entry per package and channel")
            #expect(index.packages.first?.version.description == "1.1.0")

            let verify = try ws.verify()
            #expect(verify.status == 0, "\(verify)")
        }
    }

    @Test("the text report names the package, the bundle and the serial")
    func textReport() throws {
        try withWorkspace { ws in
            let src = try copySampleApp(to: ws.dir)
            let r = try ws.packOK(src, version: "1.0.0", ["--route", "https://app.example.com/", "--channel", "beta"])
            #expect(r.stdout.contains("packed sample-app 1.0.0 (channel beta): 9 files"), "\(r)")
            #expect(r.stdout.contains("packages/sample-app/1.0.0/bundle.zip"), "\(r)")
            #expect(r.stdout.contains("serial 1"), "\(r)")
            #expect(r.stdout.contains("9 written"), "\(r)")
            let entry = try #require(try ws.loadIndex().packages.first)
            #expect(entry.channel == "beta")
            #expect(entry.routes == ["https://app.example.com/"])
            #expect(entry.rollout.salt == "sample-app@1.0.0")
        }
    }

    @Test("the next pack completes or discards an interrupted publication")
    func interruptedPublication() throws {
        try withWorkspace { ws in
            let src = try copySampleApp(to: ws.dir)
            try ws.packOK(src, version: "1.0.0")
            let pending = ws.repo.appendingPathComponent("index.json.pending")
            let pendingSig = ws.repo.appendingPathComponent("index.json.sig.pending")
            try writeText("{\"half\": ", to: pending)
            try writeText("{}", to: pendingSig)
            #expect(try ws.verify().status == 1, "verify reports the interrupted publication")

            try setCatalogVersion(src, "1.1.0")
            let r = try ws.pack(src, version: "1.1.0", ["--json"])
            #expect(r.status == 0, "\(r)")
            #expect(try decode(PackJSON.self, r).serial == 2)
            #expect(r.stderr.contains("interrupted"), "a notice on stderr: \(r)")
            #expect(bytes(pending) == nil)
            #expect(bytes(pendingSig) == nil)
            let v = try ws.verify()
            #expect(v.status == 0, "\(v)")
        }
    }

    /// `larder version` and `larder --version` (answered before ArgumentParser, which keeps no
    /// root flag: it shadowed `pack --version` and turned a missing required option into exit 0).
    @Test("larder version and --version print the build's version and the format versions")
    func version() throws {
        for arguments in [["version"], ["--version"]] {
            let r = try larder(arguments)
            #expect(r.status == 0, "\(r)")
            let lines = r.stdout.split(separator: "\n").map(String.init)
            #expect(lines.first == "larder \(larderVersion)", "\(r)")
            #expect(lines.dropFirst().first == "formats: index.json 1, files.json 1, delta 1, state.json 1", "\(r)")
        }
        // Not a root flag: with other arguments it is still a usage error.
        #expect(try larder(["--version", "status"]).status == 64)
    }
}
