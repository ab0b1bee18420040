import Foundation
import Testing

/// What a newcomer meets first: a mistyped command, an `init` that is accepted but probably wrong,
/// and the errors of a repository that is not there.
@Suite("A newcomer's mistakes get words that help")
struct NewcomerTests {
    @Test("a mistyped command names the nearest one and exits 64", arguments: [("snyc", "sync"), ("stauts", "status")])
    func mistypedCommand(_ typed: String, _ meant: String) throws {
        let r = try larder([typed, "--root", "x"])
        #expect(r.status == 64, "\(r)")
        #expect(r.stderr.contains("unknown command \"\(typed)\""), "\(r)")
        #expect(r.stderr.contains("Did you mean '\(meant)'?"), "\(r)")
    }

    @Test("a word far from every command gets no suggestion")
    func unrelatedWord() throws {
        let r = try larder(["xylophone"])
        #expect(r.status == 64, "\(r)")
        #expect(r.stderr.contains("unknown command \"xylophone\"") && !r.stderr.contains("Did you mean"), "\(r)")
    }

    @Test("init with a private key and a file:// repository with no index warns on stderr, and still initialises")
    func initWarnings() throws {
        try withWorkspace { ws in
            let root = ws.dir.appendingPathComponent("sb").path
            let missing = "file://" + ws.dir.appendingPathComponent("nowhere/").path + "/"
            let r = try larder(["init", "--root", root, "--repo", missing, "--public-key", ws.key.path])
            #expect(r.status == 0, "\(r)")
            #expect(r.stderr.contains("is a private key"), "\(r)")
            #expect(r.stderr.contains("has no index.json"), "\(r)")

            // The sync then says the file is missing, not that a server answered 404.
            let s = try larder(["sync", "--root", root])
            #expect(s.status == 1, "\(s)")
            #expect(s.stderr.contains("no such file") && !s.stderr.contains("the server answered"), "\(s)")

            // A public key and a repository with an index: no warning.
            _ = try ws.pack(try copySampleApp(to: ws.dir), version: "1.0.0")
            let clean = try larder([
                "init", "--root", ws.dir.appendingPathComponent("sb2").path, "--repo", ws.repo.absoluteString,
                "--public-key", ws.pub.path,
            ])
            #expect(clean.status == 0 && !clean.stderr.contains("warning"), "\(clean)")
        }
    }
}
