import Foundation
import LarderCore
import LarderTestSupport
import Testing

@Suite("larder keygen")
struct KeygenTests {
    @Test("writes NAME.key (0600) and NAME.pub and prints the key id and public key")
    func writesKeyPair() throws {
        try withSandbox { dir in
            let out = dir.appendingPathComponent("keys/main").path
            let r = try larder(["keygen", "--out", out])
            #expect(r.status == 0, "\(r)")
            let keyURL = URL(fileURLWithPath: out + ".key")
            let pubURL = URL(fileURLWithPath: out + ".pub")
            #expect(try permissions(keyURL) == 0o600, "the private key must be mode 0600")
            let pubData = try #require(bytes(pubURL), "NAME.pub was not written")
            let keyData = try #require(bytes(keyURL), "NAME.key was not written")

            // The files are Larder key files whose halves match.
            let publicKey = try KeyFile.publicKey(from: pubData, path: pubURL.path)
            let privateKey = try KeyFile.privateKey(from: keyData, path: keyURL.path)
            #expect(privateKey.publicKey == publicKey)
            let pubFile = try ManifestCoding.decode(KeyFile.self, from: pubData, document: "pub")
            #expect(pubFile.type == KeyFile.publicType)
            #expect(pubFile.keyId == publicKey.keyID)

            // stdout: the key id (16 hex digits) and the public key, and the two file names.
            #expect(isHex(publicKey.keyID, count: 16))
            #expect(r.stdout.contains("key id:      \(publicKey.keyID)\n"), "\(r)")
            #expect(r.stdout.contains("public key:  \(publicKey.base64)\n"), "\(r)")
            #expect(r.stdout.contains(keyURL.path))
            #expect(r.stdout.contains(pubURL.path))
            #expect(r.stderr.isEmpty, "\(r)")
        }
    }

    @Test("refuses to overwrite an existing pair and leaves both files byte-identical")
    func neverOverwrites() throws {
        try withSandbox { dir in
            let out = dir.appendingPathComponent("repo").path
            let first = try larder(["keygen", "--out", out])
            #expect(first.status == 0, "\(first)")
            let key = try #require(bytes(URL(fileURLWithPath: out + ".key")))
            let pub = try #require(bytes(URL(fileURLWithPath: out + ".pub")))

            let second = try larder(["keygen", "--out", out])
            #expect(second.status == 1, "\(second)")
            #expect(second.stderr.contains("error [keygen]"), "\(second)")
            #expect(second.stderr.contains(out + ".key"), "the message names the existing file: \(second)")
            #expect(second.stderr.contains("already exists"), "\(second)")
            #expect(second.stdout.isEmpty)
            #expect(bytes(URL(fileURLWithPath: out + ".key")) == key)
            #expect(bytes(URL(fileURLWithPath: out + ".pub")) == pub)
            #expect(try permissions(URL(fileURLWithPath: out + ".key")) == 0o600)
        }
    }

    @Test("refuses when only NAME.pub exists, and writes no NAME.key")
    func refusesWhenPublicHalfExists() throws {
        try withSandbox { dir in
            let out = dir.appendingPathComponent("half").path
            try writeText("not a key\n", to: URL(fileURLWithPath: out + ".pub"))
            let r = try larder(["keygen", "--out", out])
            #expect(r.status == 1, "\(r)")
            #expect(r.stderr.contains(out + ".pub"), "\(r)")
            #expect(bytes(URL(fileURLWithPath: out + ".key")) == nil, "no private key may be left behind")
            #expect(bytes(URL(fileURLWithPath: out + ".pub")) == Data("not a key\n".utf8))
        }
    }

    @Test("--json prints a decodable report; a refusal with --json prints ok: false")
    func json() throws {
        try withSandbox { dir in
            let out = dir.appendingPathComponent("j").path
            let r = try larder(["keygen", "--out", out, "--json"])
            #expect(r.status == 0, "\(r)")
            let report = try decode(KeygenJSON.self, r)
            let publicKey = try KeyFile.publicKey(
                from: try Data(contentsOf: URL(fileURLWithPath: out + ".pub")), path: out)
            #expect(report.keyId == publicKey.keyID)
            #expect(isHex(report.keyId, count: 16))
            #expect(report.publicKey == publicKey.base64)
            #expect(report.privateKeyFile == out + ".key")
            #expect(report.publicKeyFile == out + ".pub")

            let again = try larder(["keygen", "--out", out, "--json"])
            #expect(again.status == 1, "\(again)")
            let failure = try decode(FailureJSON.self, again)
            #expect(failure.ok == false)
            #expect(failure.error.code == "keygen")
            #expect(failure.error.message.contains(out + ".key"))
        }
    }

    @Test("a missing --out is a usage error (exit 64)")
    func usage() throws {
        let r = try larder(["keygen"])
        #expect(r.status == 64, "\(r)")
        #expect(r.stderr.contains("--out"), "\(r)")
    }
}
