import Foundation
import LarderCore
import LarderTestSupport
import Testing

@Suite("larder revoke")
struct RevokeTests {
    /// A repository with sample-app 1.0.0 and 1.1.0 (serial 2).
    private func twoVersions(_ ws: Workspace) throws {
        let src = try copySampleApp(to: ws.dir)
        try ws.packOK(src, version: "1.0.0")
        try setCatalogVersion(src, "1.1.0")
        try ws.packOK(src, version: "1.1.0")
    }

    private func revoke(_ ws: Workspace, _ version: String, id: String = "sample-app", _ extra: [String] = []) throws
        -> RunResult
    {
        try larder(["revoke", id, version, "--repo", ws.repo.path, "--key", ws.key.path] + extra)
    }

    /// The "revoked" array of the first entry for `id`, read straight from the JSON text.
    private func revokedList(_ ws: Workspace, id: String = "sample-app") throws -> [String]? {
        let object = try JSONSerialization.jsonObject(with: try Data(contentsOf: ws.index)) as? [String: Any]
        let packages = object?["packages"] as? [[String: Any]] ?? []
        return packages.first { $0["id"] as? String == id }?["revoked"] as? [String]
    }

    @Test("revoking 1.1.0 bumps the serial, lists it as revoked, and the repository still verifies")
    func revokes() throws {
        try withWorkspace { ws in
            try twoVersions(ws)
            #expect(try ws.loadIndex().serial == 2)
            #expect(try revokedList(ws) == [])

            let r = try revoke(ws, "1.1.0")
            #expect(r.status == 0, "\(r)")
            let keyID = try ws.privateKey().publicKey.keyID
            #expect(r.stdout.contains("revoked sample-app 1.1.0: index serial 3, signed by \(keyID)"), "\(r)")

            let index = try ws.loadIndex()
            #expect(index.serial == 3)
            #expect(try revokedList(ws) == ["1.1.0"])
            #expect(
                index.packages.first?.version.description == "1.1.0", "revoking does not change the current version")
            // Nothing is deleted.
            #expect(
                FileManager.default.fileExists(
                    atPath: ws.repo.appendingPathComponent("packages/sample-app/1.1.0/bundle.zip").path))

            let v = try ws.verify()
            #expect(v.status == 0, "\(v)")
            #expect(v.stdout.contains("0 problem(s)"), "\(v)")
            #expect(v.stdout.contains("serial 3"), "\(v)")
        }
    }

    @Test("--json report decodes; an older version can be revoked too and the list stays sorted")
    func json() throws {
        try withWorkspace { ws in
            try twoVersions(ws)
            let r = try revoke(ws, "1.1.0", ["--json"])
            #expect(r.status == 0, "\(r)")
            let report = try decode(RevokeJSON.self, r)
            #expect(report.id == "sample-app")
            #expect(report.version == "1.1.0")
            #expect(report.serial == 3)
            #expect(report.signedBy == (try ws.privateKey().publicKey.keyID))

            let older = try revoke(ws, "1.0.0", ["--json"])
            #expect(older.status == 0, "\(older)")
            #expect(try decode(RevokeJSON.self, older).serial == 4)
            #expect(try revokedList(ws) == ["1.0.0", "1.1.0"])
        }
    }

    @Test("the revoked list survives the next pack")
    func survivesPack() throws {
        try withWorkspace { ws in
            let src = try copySampleApp(to: ws.dir)
            try ws.packOK(src, version: "1.0.0")
            #expect(try revoke(ws, "1.0.0").status == 0)
            try setCatalogVersion(src, "1.2.0")
            try ws.packOK(src, version: "1.2.0")
            #expect(try revokedList(ws) == ["1.0.0"])
            #expect(try ws.loadIndex().serial == 3)
        }
    }

    @Test(
        "refusals exit 1, name the version and leave the index byte-identical",
        arguments: [
            ("1.1.0", "already-revoked", "sample-app 1.1.0 is already revoked"),
            ("9.9.9", "unknown-version", "sample-app 9.9.9 was never published"),
            ("v9", "bad-version", "\"v9\""),
        ])
    func refusals(_ version: String, _ code: String, _ mention: String) throws {
        try withWorkspace { ws in
            try twoVersions(ws)
            #expect(try revoke(ws, "1.1.0").status == 0)
            let index = bytes(ws.index)
            let sig = bytes(ws.signature)

            let r = try revoke(ws, version)
            #expect(r.status == 1, "\(r)")
            #expect(r.stderr.contains("larder revoke: error [\(code)]"), "\(r)")
            #expect(r.stderr.contains(mention), "\(r)")
            #expect(bytes(ws.index) == index)
            #expect(bytes(ws.signature) == sig)

            let j = try revoke(ws, version, ["--json"])
            #expect(j.status == 1)
            #expect(try decode(FailureJSON.self, j).error.code == code)
        }
    }

    @Test("an unknown package, and a repository without an index, are refused")
    func unknownPackageAndNoIndex() throws {
        try withWorkspace { ws in
            try twoVersions(ws)
            let index = bytes(ws.index)
            let r = try revoke(ws, "1.0.0", id: "other-app")
            #expect(r.status == 1, "\(r)")
            #expect(r.stderr.contains("error [unknown-version]"), "\(r)")
            #expect(r.stderr.contains("other-app 1.0.0"), "\(r)")
            #expect(bytes(ws.index) == index)

            let empty = ws.dir.appendingPathComponent("empty-repo")
            try FileManager.default.createDirectory(at: empty, withIntermediateDirectories: true)
            let n = try larder(["revoke", "sample-app", "1.0.0", "--repo", empty.path, "--key", ws.key.path])
            #expect(n.status == 1, "\(n)")
            #expect(n.stderr.contains("index.json does not exist"), "\(n)")
            #expect(bytes(empty.appendingPathComponent("index.json")) == nil)
        }
    }

    @Test("a missing --repo is a usage error (exit 64)")
    func usage() throws {
        try withWorkspace { ws in
            let r = try larder(["revoke", "sample-app", "1.0.0", "--key", ws.key.path])
            #expect(r.status == 64, "\(r)")
            #expect(r.stderr.contains("--repo"), "\(r)")
        }
    }
}
