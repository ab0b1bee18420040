import ArgumentParser
import Foundation
import Larder
import LarderPublish
import LarderTestSupport
import Synchronization
import SystemPackage
import Testing

@testable import larder

/// What a command run in-process printed, and its exit code.
struct InProcessResult: CustomStringConvertible {
    var status: Int32
    var stdout: String
    var stderr: String

    var description: String { "exit \(status)\n--- stdout\n\(stdout)--- stderr\n\(stderr)" }

    /// The stdout JSON document, decoded.
    func json<T: Decodable>(_ type: T.Type) throws -> T {
        try ManifestCoding.decode(type, from: Data(stdout.utf8), document: "stdout")
    }
}

/// Both streams of a command, captured.
private final class Capture: Sendable {
    private let streams = Mutex((out: Data(), err: Data()))

    var sink: OutputSink {
        OutputSink(
            out: { [self] d in streams.withLock { $0.out.append(d) } },
            err: { [self] d in streams.withLock { $0.err.append(d) } })
    }

    var texts: (String, String) {
        streams.withLock { (String(decoding: $0.out, as: UTF8.self), String(decoding: $0.err, as: UTF8.self)) }
    }
}

/// Parses `arguments` as `larder` would and runs the command in this process, with its output
/// captured; the exit code is the one the binary would return.
func runInProcess(_ arguments: [String]) async -> InProcessResult {
    let capture = Capture()
    var status: Int32 = 0
    await Output.$sink.withValue(capture.sink) {
        do {
            var command = try LarderCommand.parseAsRoot(arguments)
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            status = LarderCommand.exitCode(for: error).rawValue
            let message = LarderCommand.fullMessage(for: error)
            if !message.isEmpty { capture.sink.err(Data((message + "\n").utf8)) }
        }
    }
    let (out, err) = capture.texts
    return InProcessResult(status: status, stdout: out, stderr: err)
}

/// The device commands (`sync`, `plan`, `status`, `doctor`) and `rotate-key`, run in-process
/// against a file:// repository of the sample app.
@Suite("CLI in-process", .temporaryDirectory("cli-inprocess"))
struct InProcessCommandTests {
    struct Env {
        let dir: TemporaryDirectory
        let repository: SampleRepository
        let keys: URL
        var root: String { dir.appending("sandbox").path }

        init() throws {
            dir = try TemporaryDirectory.forCurrentTest()
            repository = SampleRepository(in: dir.url)
            keys = dir.appending("keys")
            try FileManager.default.createDirectory(at: keys, withIntermediateDirectories: true)
            let pub = try ManifestCoding.encode(KeyFile(public: repository.key.publicKey))
            try pub.write(to: keys.appendingPathComponent("repo.pub"))
            let key = try ManifestCoding.encode(KeyFile(private: repository.key))
            try key.write(to: keys.appendingPathComponent("repo.key"))
        }

        func initialise() async throws {
            let r = await runInProcess([
                "init", "--root", root, "--repo", repository.url.absoluteString, "--public-key",
                keys.appendingPathComponent("repo.pub").path,
            ])
            try #require(r.status == 0, "\(r)")
        }
    }

    @Test("sync installs, a second sync changes nothing, status and plan report it")
    func syncPlanStatus() async throws {
        let env = try Env()
        try env.repository.publish("1.0.0")
        try await env.initialise()

        let planned = await runInProcess(["plan", "--root", env.root])
        #expect(planned.status == 0 && planned.stdout.hasPrefix("install  sample-app 1.0.0"), "\(planned)")

        let first = await runInProcess(["sync", "--root", env.root, "--json", "--progress", "none"])
        #expect(first.status == 0, "\(first)")
        let report = try first.json(SyncReport.self)
        #expect(report.indexChanged && report.packages.map(\.action) == [.install])
        #expect(report.packages.first?.outcome == .done && report.packages.first?.method == .bundle)

        let again = await runInProcess(["sync", "--root", env.root])
        #expect(again.status == 0 && again.stdout.hasPrefix("index serial 1 (unchanged)"), "\(again)")
        // Nothing changed since a sync that left nothing to do: one request, no package acted on.
        #expect(
            again.stdout == "index serial 1 (unchanged): up to date, nothing changed since the last sync\n", "\(again)")

        let status = await runInProcess(["status", "--root", env.root, "--json"])
        let packages = try status.json(StatusReport.self).packages
        #expect(packages.map(\.id) == ["sample-app"] && packages.first?.active == "1.0.0")
        #expect(packages.first?.health == .pending && packages.first?.versions.first?.role == .active)

        let text = await runInProcess(["status", "--root", env.root])
        #expect(text.stdout.hasPrefix("sample-app: active 1.0.0 (pending), fallback -"), "\(text)")
    }

    @Test("sync exits 1 with the error's code when the index is refused, and 2 when a package fails")
    func syncExitCodes() async throws {
        let env = try Env()
        try env.repository.publish("1.0.0")
        try await env.initialise()
        // An index edited after signing, with no copy of the signed one to fall back on: the
        // signature names other bytes, so the pair is torn.
        let index = env.repository.url.appendingPathComponent("index.json")
        let copies = env.repository.url.appendingPathComponent("indexes")
        let original = try Data(contentsOf: index)
        var bytes = original
        bytes.append(contentsOf: Array("\n".utf8))
        try bytes.write(to: index)
        let kept = env.dir.appending("indexes-kept")
        try FileManager.default.moveItem(at: copies, to: kept)
        let torn = await runInProcess(["sync", "--root", env.root, "--json"])
        #expect(torn.status == 1, "\(torn)")
        #expect(torn.stderr.contains("error [index-torn]"), "\(torn)")
        #expect(torn.stdout.contains("\"ok\" : false"), "\(torn)")
        // With the copy the signature names, the edited index.json is passed over: the plan is
        // made from what was signed.
        try FileManager.default.moveItem(at: kept, to: copies)
        let mended = await runInProcess(["plan", "--root", env.root, "--json"])
        #expect(mended.status == 0 && mended.stdout.contains("sample-app"), "\(mended)")

        // A signature that names the index but does not verify: refused as a bad signature.
        try original.write(to: index)
        let sigURL = env.repository.url.appendingPathComponent("index.json.sig")
        let goodSig = try Data(contentsOf: sigURL)
        var sig = try ManifestCoding.decode(SignatureFile.self, from: goodSig, document: "index.json.sig")
        let forged = try #require(Data(base64Encoded: sig.signatures[0].signature)).map { $0 ^ 0x01 }
        sig.signatures[0].signature = Data(forged).base64EncodedString()
        try ManifestCoding.encode(sig).write(to: sigURL)
        let refused = await runInProcess(["sync", "--root", env.root, "--json"])
        #expect(refused.status == 1, "\(refused)")
        #expect(refused.stderr.contains("error [signature]"), "\(refused)")
        #expect(refused.stdout.contains("\"ok\" : false"), "\(refused)")
        try goodSig.write(to: sigURL)

        // A good index whose bundle is corrupt: that package fails, the sync exits 2.
        try env.repository.publish("1.0.1")
        let bundle = try env.repository.bundle("sample-app", "1.0.1")
        var zip = try Data(contentsOf: URL(fileURLWithPath: bundle.string))
        zip[zip.count / 2] ^= 0xFF
        try zip.write(to: URL(fileURLWithPath: bundle.string))
        let partial = await runInProcess(["sync", "--root", env.root, "--json", "--progress", "none"])
        #expect(partial.status == 2, "\(partial)")
        let report = try partial.json(SyncReport.self)
        #expect(
            report.packages.first?.outcome == .failed && report.packages.first?.code == "hash-mismatch", "\(report)")
    }

    @Test("doctor: ok on a healthy sandbox (exit 0), names a damaged file (exit 1), repairs with --repair")
    func doctor() async throws {
        let env = try Env()
        try env.repository.publish("1.0.0")
        try await env.initialise()
        #expect(await runInProcess(["sync", "--root", env.root]).status == 0)

        let healthy = await runInProcess(["doctor", "--root", env.root])
        #expect(healthy.status == 0 && healthy.stdout.hasSuffix("ok\n"), "\(healthy)")

        let file = URL(fileURLWithPath: env.root).appendingPathComponent("packages/sample-app/1.0.0/index.html")
        try Data("damaged".utf8).write(to: file)
        let damaged = await runInProcess(["doctor", "--root", env.root, "--json"])
        #expect(damaged.status == 1, "\(damaged)")
        let report = try damaged.json(DoctorJSON.self)
        #expect(!report.ok && report.problems.contains { $0.contains("index.html") }, "\(report)")
        #expect(
            report.findings.contains {
                $0.code == "file-differs" && $0.id == "sample-app" && $0.version == "1.0.0"
                    && $0.message.contains("index.html")
            }, "\(report)")

        let repaired = await runInProcess(["doctor", "--root", env.root, "--repair"])
        #expect(repaired.status == 0 && repaired.stdout.contains("repaired"), "\(repaired)")
    }

    @Test("rotate-key publishes the new key set; a device adopts it and then trusts only the new key")
    func rotateKey() async throws {
        let env = try Env()
        try env.repository.publish("1.0.0")
        try await env.initialise()
        #expect(await runInProcess(["sync", "--root", env.root]).status == 0)

        let newKey = PrivateKey()
        let newPub = env.keys.appendingPathComponent("new.pub")
        let newKeyFile = env.keys.appendingPathComponent("new.key")
        try ManifestCoding.encode(KeyFile(public: newKey.publicKey)).write(to: newPub)
        try ManifestCoding.encode(KeyFile(private: newKey)).write(to: newKeyFile)
        let rotated = await runInProcess([
            "rotate-key", "--repo", env.repository.url.path, "--key", env.keys.appendingPathComponent("repo.key").path,
            "--co-sign", newKeyFile.path, "--new-public-key", newPub.path, "--json",
        ])
        #expect(rotated.status == 0, "\(rotated)")
        let report = try rotated.json(Publisher.RotationReport.self)
        #expect(report.keys == [newKey.publicKey.keyID] && report.signedBy.count == 2, "\(report)")

        let adopted = await runInProcess(["sync", "--root", env.root])
        #expect(adopted.status == 0, "\(adopted)")
        let config = try SyncConfig.load(root: FilePath(env.root))
        #expect(try config.publicKeys() == [newKey.publicKey])

        // An index signed by the old key alone is now refused.
        let old = await runInProcess([
            "rotate-key", "--repo", env.repository.url.path, "--key", env.keys.appendingPathComponent("repo.key").path,
            "--new-public-key", env.keys.appendingPathComponent("repo.pub").path,
        ])
        #expect(old.status == 0, "\(old)")
        let refused = await runInProcess(["sync", "--root", env.root])
        #expect(refused.status == 1 && refused.stderr.contains("error [signature]"), "\(refused)")
    }

    @Test("a refused entry name reaches the terminal escaped: ESC, BEL and CR cannot rewrite the line")
    func hostileNamesAreEscaped() async throws {
        let env = try Env()
        let zip = env.dir.appending("hostile.zip")
        try python(
            """
            import sys, zipfile
            with zipfile.ZipFile(sys.argv[1], "w") as z:
                z.writestr("index.html", "<p>hi")
                z.writestr("\\x1b]0;owned\\x07\\x1b[2K\\rok.js", "x")
            """, [zip.path])
        for json in [false, true] {
            let r = await runInProcess(
                ["install", "--root", env.root, "--id", "app", "--version", "1.0.0", zip.path]
                    + (json ? ["--json"] : []))
            #expect(r.status == 1, "\(r)")
            #expect(r.stderr.contains("error [path-control-character]"), "\(r)")
            #expect(r.stderr.contains(#"\u{1B}]0;owned\u{7}\u{1B}[2K\u{D}ok.js"#), "\(r)")
            for text in [r.stdout, r.stderr] {
                #expect(!text.unicodeScalars.contains { $0 != "\n" && ($0.value < 0x20 || $0.value == 0x7F) }, "\(r)")
            }
        }
    }

    @Test("an id or version that is not one is refused at the edge with the store's code (exit 1)")
    func badIDsAndVersions() async throws {
        let env = try Env()
        try env.repository.publish("1.0.0")
        try await env.initialise()
        #expect(await runInProcess(["sync", "--root", env.root]).status == 0)
        let zip = env.dir.appending("bundle.zip")
        try python(
            """
            import sys, zipfile
            with zipfile.ZipFile(sys.argv[1], "w") as z:
                z.writestr("index.html", "<p>hi")
            """, [zip.path])
        for (args, code) in [
            (["install", "--id", "Bad_ID", "--version", "1.0.0", zip.path], "bad-id"),
            (["install", "--id", "app", "--version", "v1", zip.path], "bad-version"),
            (["confirm", "../x"], "bad-id"),
            (["rollback", "sample-app", "--to", "latest"], "bad-version"),
        ] {
            let r = await runInProcess(args + ["--root", env.root])
            #expect(r.status == 1 && r.stderr.contains("error [\(code)]"), "\(args): \(r)")
        }
    }

    @Test("usage errors exit 64 and name the option")
    func usage() async throws {
        let r = await runInProcess(["sync", "--root", "/nonexistent", "--progress", "sometimes"])
        #expect(r.status == 64 && r.stderr.contains("--progress"), "\(r)")
    }
}

/// `larder doctor --json`'s shape, as a script reads it.
private struct DoctorJSON: Decodable {
    struct Finding: Decodable {
        var code: String
        var id: String?
        var version: String?
        var message: String
    }
    var ok: Bool
    var problems: [String]
    var findings: [Finding]
    var verifiedVersions: [String]
    var repaired: Bool
}
