import Foundation
import LarderTestSupport
import Testing

/// `larder verify URL` copies what a server serves into a scratch directory: a hostile index that
/// names paths out of it (`..`, absolute) gets a problem, and nothing is written outside.
@Suite("verify URL: paths a hostile index names")
struct RemoteVerifyPathTests {
    @Test("a bundle path, a shard path and a team part path that leave the repository are refused, not fetched")
    func escapingPaths() async throws {
        let dir = try TemporaryDirectory("remote-verify-paths")
        defer { dir.remove() }
        let escape = dir.appending("escaped")
        let out = escape.path + "/bundle.zip"
        let climb = String(repeating: "../", count: 24)
        let sha = String(repeating: "0", count: 64)
        func ref(_ path: String) -> String { "{\"path\": \"\(path)\", \"size\": 10, \"sha256\": \"\(sha)\"}" }
        let index = """
            {"schemaVersion": 1, "serial": 1, "expires": "2099-01-01T00:00:00Z",
             "packages": [{"id": "x", "version": "1.0.0", "bundle": \(ref(climb + out.dropFirst())),
                           "files": \(ref("/etc/passwd"))}],
             "delegations": {"root": {"version": 1, "size": 1, "sha256": "\(sha)"},
                             "parts": [{"team": "..", "serial": 1, "part": \(ref("../../part.json")), "signatures": []}]}}
            """
        try FileManager.default.createDirectory(at: dir.appending("repo"), withIntermediateDirectories: true)
        try Data(index.utf8).write(to: dir.appending("repo/index.json"))
        let sig =
            "{\"schemaVersion\": 1, \"signatures\": [{\"keyId\": \"0123456789abcdef\", \"algorithm\": \"ed25519\", \"signature\": \"AA==\"}]}"
        try Data(sig.utf8).write(to: dir.appending("repo/index.json.sig"))
        let origin = try await FaultOrigin.start(serving: dir.appending("repo"), otherHost: nil)
        let r = try larder(["verify", origin.url("/").absoluteString, "--skip-signature", "--json"])
        await origin.stop()
        #expect(r.status == 1)
        #expect(r.stdout.contains("unsafe-path"), "\(r.stdout)")
        #expect(!FileManager.default.fileExists(atPath: escape.path), "a file was written outside the scratch copy")
        #expect(!origin.requests.contains { $0.path.contains("..") || $0.path.contains("passwd") })
    }
}
