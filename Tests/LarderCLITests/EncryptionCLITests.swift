import Foundation
import LarderCore
import LarderTestSupport
import Testing

/// `keygen --recipient`, `pack --encrypt-to`, `verify` with and without `--recipient-key`, and
/// `sync --recipient-key`, through the built binary.
@Suite("Encrypted packages through the CLI")
struct EncryptionCLITests {
    @Test("keygen --recipient; pack --encrypt-to; verify without and with the key; sync with and without it")
    func roundTrip() throws {
        try withWorkspace { ws in
            let device = ws.dir.appendingPathComponent("keys/device")
            let made = try larder(["keygen", "--recipient", "--out", device.path])
            #expect(made.status == 0, "\(made)")
            #expect(try permissions(URL(fileURLWithPath: device.path + ".key")) == 0o600)
            let pubFile = try ManifestCoding.decode(
                RecipientKeyFile.self, from: Data(contentsOf: URL(fileURLWithPath: device.path + ".pub")),
                document: "pub")
            #expect(pubFile.type == RecipientKeyFile.publicType && made.stdout.contains(pubFile.keyId), "\(made)")
            // A recipient key is not a signing key, nor the other way round.
            let mixed = try ws.pack(
                try copySampleApp(to: ws.dir, name: "mixed"), version: "0.9.0", ["--encrypt-to", ws.pub.path])
            #expect(mixed.status != 0 && mixed.stderr.contains("x25519-recipient-public"), "\(mixed)")

            let src = try copySampleApp(to: ws.dir)
            let packed = try ws.pack(src, version: "1.0.0", ["--encrypt-to", device.path + ".pub", "--json"])
            #expect(packed.status == 0, "\(packed)")
            #expect(packed.stdout.contains("\"encryptedTo\"") && packed.stdout.contains(pubFile.keyId), "\(packed)")

            let closed = try ws.verify()
            #expect(closed.status == 0, "\(closed)")
            #expect(closed.stdout.contains("1 checked without the key"), "\(closed)")
            let open = try ws.verify(nil, publicKey: nil, ["--recipient-key", device.path + ".key"])
            #expect(open.status == 0 && open.stdout.contains("all opened"), "\(open)")

            // One object damaged: only the check with the key sees it.
            let objects = try FileManager.default.subpathsOfDirectory(
                atPath: ws.repo.appendingPathComponent("objects").path
            )
            .filter { $0.count > 3 }
            let object = ws.repo.appendingPathComponent("objects/" + (try #require(objects.first)))
            let good = try Data(contentsOf: object)
            var bad = good
            bad[bad.count / 2] ^= 1
            try bad.write(to: object)
            #expect(try ws.verify().status == 0)
            let seen = try ws.verify(nil, publicKey: nil, ["--recipient-key", device.path + ".key"])
            #expect(seen.status == 1 && problemLine(seen, "hash-mismatch") != nil, "\(seen)")
            try good.write(to: object)

            // A device: without the key the version is refused with its code (exit 2: a package
            // failed); with it, installed.
            let sandbox = ws.dir.appendingPathComponent("device")
            let initialised = try larder([
                "init", "--root", sandbox.path, "--repo", ws.repo.absoluteString, "--public-key", ws.pub.path,
            ])
            #expect(initialised.status == 0, "\(initialised)")
            let refused = try larder(["sync", "--root", sandbox.path])
            #expect(
                refused.status == 2 && refused.stdout.contains("recipient-key-missing"),
                "\(refused.status) \(refused.stdout) \(refused.stderr)")
            let synced = try larder(["sync", "--root", sandbox.path, "--recipient-key", device.path + ".key"])
            #expect(synced.status == 0, "\(synced)")
            let index = sandbox.appendingPathComponent("packages/sample-app/1.0.0/index.html")
            #expect(try Data(contentsOf: index) == Data(contentsOf: src.appendingPathComponent("index.html")))
        }
    }
}
