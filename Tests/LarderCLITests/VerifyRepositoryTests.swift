import Foundation
import LarderCore
import LarderTestSupport
import Testing

/// The stdout line reporting `[code]`, if any.
func problemLine(_ r: RunResult, _ code: String) -> String? {
    r.stdout.split(separator: "\n").map(String.init).first { $0.contains("[\(code)]") }
}

/// Packs the sample app as 1.0.0 and returns its file list.
@discardableResult
func packSample(_ ws: Workspace) throws -> FileList {
    let src = try copySampleApp(to: ws.dir)
    try ws.packOK(src, version: "1.0.0")
    return try ManifestCoding.decode(
        FileList.self,
        from: try Data(contentsOf: ws.repo.appendingPathComponent("packages/sample-app/1.0.0/files.json")),
        document: "files.json")
}

/// `objects/xx/<sha>` of a listed file.
func objectPath(_ list: FileList, _ path: String) throws -> String {
    let hex = try #require(list.files.first { $0.path.string == path }, "\(path) is not in the file list").sha256.hex
    return "objects/\(hex.prefix(2))/\(hex)"
}

/// Writes a zip with python's zipfile: `entries` are (name, contents); names are set verbatim.
func makeZip(_ url: URL, _ entries: [(String, String)], stored: Bool = false) throws {
    let script = """
        import sys, zipfile
        out, method = sys.argv[1], (zipfile.ZIP_STORED if sys.argv[2] == 'stored' else zipfile.ZIP_DEFLATED)
        args = sys.argv[3:]
        with zipfile.ZipFile(out, 'w', method) as z:
            for name, data in zip(args[0::2], args[1::2]):
                info = zipfile.ZipInfo('placeholder', date_time=(2020, 1, 1, 0, 0, 0))
                info.filename = name
                info.orig_filename = name
                info.compress_type = method
                info.external_attr = (0o40755 << 16) | 0x10 if name.endswith('/') else 0o100644 << 16
                z.writestr(info, data)
        """
    try python(script, [url.path, stored ? "stored" : "deflated"] + entries.flatMap { [$0.0, $0.1] })
}

/// One way to damage a freshly packed repository, and what verify must then report.
struct Corruption: Sendable, CustomTestStringConvertible {
    var name: String
    var code: String
    /// What the problem's line must name (given the 1.0.0 file list).
    var mentions: @Sendable (FileList) throws -> [String]
    var apply: @Sendable (Workspace, FileList) throws -> Void
    /// The public key verify trusts.
    var trusted: @Sendable (Workspace) throws -> URL = { $0.pub }
    var testDescription: String { name }
}

let bundleRel = "packages/sample-app/1.0.0/bundle.zip"
let filesRel = "packages/sample-app/1.0.0/files.json"

let corruptions: [Corruption] = [
    Corruption(
        name: "(a) a flipped byte in bundle.zip", code: "hash-mismatch",
        mentions: { _ in ["sample-app@1.0.0", bundleRel] },
        apply: { ws, _ in
            let url = ws.repo.appendingPathComponent(bundleRel)
            var data = try Data(contentsOf: url)
            data[data.count / 2] ^= 0xFF
            try data.write(to: url)
        }),
    Corruption(
        name: "bytes appended to bundle.zip", code: "size-mismatch", mentions: { _ in [bundleRel] },
        apply: { ws, _ in
            let url = ws.repo.appendingPathComponent(bundleRel)
            var data = try Data(contentsOf: url)
            data.append(contentsOf: [0, 1, 2])
            try data.write(to: url)
        }),
    Corruption(
        name: "bundle.zip deleted", code: "missing", mentions: { _ in [bundleRel] },
        apply: { ws, _ in try FileManager.default.removeItem(at: ws.repo.appendingPathComponent(bundleRel)) }),
    Corruption(
        name: "files.json edited without re-signing", code: "hash-mismatch", mentions: { _ in [filesRel] },
        apply: { ws, _ in
            let url = ws.repo.appendingPathComponent(filesRel)
            let text = try String(contentsOf: url, encoding: .utf8)
            try Data(text.replacingOccurrences(of: "index.html", with: "index.htmx").utf8).write(to: url)
        }),
    Corruption(
        name: "(b) an entry removed from files.json, index re-signed", code: "bundle-extra-file",
        mentions: { _ in ["sample-app@1.0.0", "data/catalog.json", bundleRel] },
        apply: { ws, list in
            var edited = list
            edited.files.removeAll { $0.path.string == "data/catalog.json" }
            let data = try ManifestCoding.encode(edited)
            try data.write(to: ws.repo.appendingPathComponent(filesRel))
            try ws.resign { index in
                index.packages[0].files.size = Int64(data.count)
                index.packages[0].files.sha256 = SHA256Digest.of(data)
                // The edited list has no gzipped copy: the re-signed index names none.
                index.packages[0].filesGzip = nil
            }
        }),
    Corruption(
        name: "(c) verified against an untrusted key", code: "signature-untrusted",
        mentions: { _ in ["index.json.sig", "not signed by a trusted key"] },
        apply: { ws, _ in
            let r = try larder(["keygen", "--out", ws.dir.appendingPathComponent("keys/other").path])
            guard r.status == 0 else { throw HarnessError("keygen: \(r)") }
        },
        trusted: { ws in ws.dir.appendingPathComponent("keys/other.pub") }),
    Corruption(
        name: "(d) index.json edited after signing (serial)", code: "signature-invalid",
        mentions: { _ in ["index.json.sig", "does not match index.json"] },
        apply: { ws, _ in
            var index = try ws.loadIndex()
            index.serial = 7
            try ManifestCoding.encode(index).write(to: ws.index)
        }),
    Corruption(
        name: "(d) index.json edited after signing (expires text)", code: "signature-invalid",
        mentions: { _ in ["index.json.sig"] },
        apply: { ws, _ in
            let text = try String(contentsOf: ws.index, encoding: .utf8)
            let expires = ManifestCoding.formatRFC3339(try ws.loadIndex().expires)
            guard text.contains(expires) else { throw HarnessError("index.json lacks \(expires)") }
            try Data(text.replacingOccurrences(of: expires, with: "2099-01-01T00:00:00Z").utf8).write(to: ws.index)
        }),
    Corruption(
        name: "(e) a bundle holding ../x, index re-signed", code: "path-dot-component",
        mentions: { _ in [bundleRel, "\"../x\""] },
        apply: { ws, _ in
            let url = ws.repo.appendingPathComponent(bundleRel)
            try FileManager.default.removeItem(at: url)
            try makeZip(url, [("index.html", "<p>hi</p>\n"), ("../x", "escaped\n")])
            let data = try Data(contentsOf: url)
            try ws.resign { index in
                index.packages[0].bundle.size = Int64(data.count)
                index.packages[0].bundle.sha256 = SHA256Digest.of(data)
            }
        }),
    Corruption(
        name: "(f) an object deleted", code: "object-missing",
        mentions: { list in [try objectPath(list, "index.html"), "index.html"] },
        apply: { ws, list in
            try FileManager.default.removeItem(at: ws.repo.appendingPathComponent(try objectPath(list, "index.html")))
        }),
    Corruption(
        name: "(g) an object replaced by gzip of other content", code: "object-corrupt",
        mentions: { list in [try objectPath(list, "css/app.css"), "css/app.css"] },
        apply: { ws, list in
            let url = ws.repo.appendingPathComponent(try objectPath(list, "css/app.css"))
            try python(
                "import gzip, sys; open(sys.argv[1], 'wb').write(gzip.compress(b'other content\\n', mtime=0))",
                [url.path])
        }),
    Corruption(
        name: "an object that is not gzip", code: "object-corrupt",
        mentions: { list in [try objectPath(list, "js/app.js")] },
        apply: { ws, list in
            try Data("plain text".utf8).write(to: ws.repo.appendingPathComponent(try objectPath(list, "js/app.js")))
        }),
    Corruption(
        name: "the index expired (re-signed)", code: "index-expired",
        mentions: { _ in ["index.json", "1970-01-02T00:00:00Z"] },
        apply: { ws, _ in try ws.resign { $0.expires = Date(timeIntervalSince1970: 86_400) } }),
    Corruption(
        name: "an interrupted publication", code: "publication-interrupted", mentions: { _ in ["index.json.pending"] },
        apply: { ws, _ in try Data("{}".utf8).write(to: ws.repo.appendingPathComponent("index.json.pending")) }),
    Corruption(
        name: "index.json.sig deleted", code: "signature-missing", mentions: { _ in ["index.json.sig"] },
        apply: { ws, _ in try FileManager.default.removeItem(at: ws.signature) }),
    Corruption(
        name: "index.json deleted", code: "index-missing", mentions: { _ in ["index.json"] },
        apply: { ws, _ in try FileManager.default.removeItem(at: ws.index) }),
]

@Suite("larder verify: a repository")
struct VerifyRepositoryTests {
    @Test("(j) a clean repository exits 0 with a summary of 0 problems")
    func clean() throws {
        try withWorkspace { ws in
            let list = try packSample(ws)
            let r = try ws.verify()
            #expect(r.status == 0, "\(r)")
            let keyID = try ws.privateKey().publicKey.keyID
            let summary =
                "repository \(ws.repo.path): 0 problem(s); 1 package(s), \(list.files.count) file(s), \(list.files.count) object(s) checked; serial 1; signed by \(keyID)"
            #expect(r.stdout == summary + "\n", "\(r)")
            #expect(r.stderr.isEmpty, "\(r)")

            let j = try ws.verify(nil, publicKey: nil, ["--json"])
            #expect(j.status == 0, "\(j)")
            let report = try decode(VerifyJSON.self, j)
            #expect(report.ok)
            #expect(report.kind == "repository")
            #expect(report.problems.isEmpty)
            #expect(report.serial == 1)
            #expect(report.signedBy == keyID)
            #expect(report.packagesChecked == 1)
            #expect(report.filesChecked == list.files.count)
        }
    }

    @Test("each corruption exits 1 with a line naming the file", arguments: corruptions)
    func corrupted(_ c: Corruption) throws {
        try withWorkspace { ws in
            let list = try packSample(ws)
            #expect(try ws.verify().status == 0, "the fresh repository should verify")
            try c.apply(ws, list)
            let trusted = try c.trusted(ws)
            let r = try ws.verify(nil, publicKey: trusted)
            #expect(r.status == 1, "\(r)")
            let line = try #require(problemLine(r, c.code), "no [\(c.code)] line: \(r)")
            for m in try c.mentions(list) { #expect(line.contains(m), "the line should name \(m): \(line)") }
            #expect(r.stdout.split(separator: "\n").last?.contains("problem(s)") == true, "\(r)")
            #expect(!r.stdout.contains(" 0 problem(s)"), "\(r)")

            let j = try ws.verify(nil, publicKey: trusted, ["--json"])
            #expect(j.status == 1, "\(j)")
            let report = try decode(VerifyJSON.self, j)
            #expect(!report.ok)
            #expect(report.problems.contains { $0.code == c.code })
        }
    }

    @Test("(b) only the tree/list mismatch remains after a consistent re-sign")
    func onlyTheExtraFile() throws {
        try withWorkspace { ws in
            let list = try packSample(ws)
            let apply = try #require(corruptions.first { $0.code == "bundle-extra-file" }).apply
            try apply(ws, list)
            let j = try ws.verify(nil, publicKey: nil, ["--json"])
            #expect(j.status == 1, "\(j)")
            let report = try decode(VerifyJSON.self, j)
            #expect(report.problems.count == 1, "\(j)")
            let p = try #require(report.problems.first)
            #expect(p.code == "bundle-extra-file")
            #expect(p.file == "data/catalog.json")
            #expect(p.package == "sample-app")
            #expect(p.version == "1.0.0")
        }
    }

    @Test("(e) the crafted bundle also fails `larder verify bundle.zip` on its own")
    func dotDotBundleAlone() throws {
        try withSandbox { dir in
            let zip = dir.appendingPathComponent("evil.zip")
            try makeZip(zip, [("index.html", "<p>hi</p>\n"), ("../x", "escaped\n")])
            let r = try larder(["verify", zip.path])
            #expect(r.status == 1, "\(r)")
            let line = try #require(problemLine(r, "path-dot-component"), "\(r)")
            #expect(line.contains("\"../x\""), "\(line)")
            #expect(r.stdout.contains("bundle \(zip.path): 1 problem(s)"), "\(r)")
        }
    }

    @Test("(h) a broken relative link is reported with the file and the reference")
    func brokenLink() throws {
        try withWorkspace { ws in
            let src = try copySampleApp(to: ws.dir)
            let indexURL = src.appendingPathComponent("index.html")
            let html = try String(contentsOf: indexURL, encoding: .utf8)
            try Data(
                html.replacingOccurrences(
                    of: "</head>", with: "  <link rel=\"stylesheet\" href=\"missing.css\">\n</head>"
                ).utf8
            )
            .write(to: indexURL)
            try ws.packOK(src, version: "1.0.0")
            let r = try ws.verify()
            #expect(r.status == 1, "\(r)")
            let line = try #require(problemLine(r, "link-broken"), "\(r)")
            #expect(line.hasPrefix("sample-app@1.0.0 index.html: [link-broken]"), "\(line)")
            #expect(line.contains("\"missing.css\""), "\(line)")
            #expect(r.stdout.contains("1 problem(s)"), "exactly one problem: \(r)")
        }
    }

    @Test("(i) --json output of a failing verify carries code, package, version and file")
    func jsonFailure() throws {
        try withWorkspace { ws in
            let list = try packSample(ws)
            try FileManager.default.removeItem(at: ws.repo.appendingPathComponent(try objectPath(list, "index.html")))
            let url = ws.repo.appendingPathComponent(bundleRel)
            var data = try Data(contentsOf: url)
            data[data.count / 2] ^= 0xFF
            try data.write(to: url)

            let j = try ws.verify(nil, publicKey: nil, ["--json"])
            #expect(j.status == 1, "\(j)")
            // The raw document says "ok": false.
            let raw = try #require(try JSONSerialization.jsonObject(with: j.stdoutData) as? [String: Any])
            #expect(raw["ok"] as? Bool == false)
            let report = try decode(VerifyJSON.self, j)
            #expect(report.ok == false)
            #expect(report.kind == "repository")
            let hash = try #require(report.problems.first { $0.code == "hash-mismatch" }, "\(j)")
            #expect(hash.package == "sample-app")
            #expect(hash.version == "1.0.0")
            #expect(hash.file == bundleRel)
            let missing = try #require(report.problems.first { $0.code == "object-missing" }, "\(j)")
            #expect(missing.file == (try objectPath(list, "index.html")))
            #expect(missing.package == "sample-app")
            #expect(report.problems.count == 2, "\(j)")
        }
    }

    @Test("(k) a repository without --public-key is a usage error (exit 64)")
    func needsKey() throws {
        try withWorkspace { ws in
            try packSample(ws)
            let r = try larder(["verify", ws.repo.path])
            #expect(r.status == 64, "\(r)")
            #expect(r.stderr.contains("--public-key"), "\(r)")
            #expect(r.stdout.isEmpty)
        }
    }

    @Test("--skip-signature checks the structure and says the signature was not checked")
    func skipSignature() throws {
        try withWorkspace { ws in
            try packSample(ws)
            try FileManager.default.removeItem(at: ws.signature)
            let r = try larder(["verify", ws.repo.path, "--skip-signature"])
            #expect(r.status == 0, "\(r)")
            #expect(r.stdout.contains("0 problem(s)"), "\(r)")
            #expect(r.stdout.contains("signature NOT checked"), "\(r)")
        }
    }

    @Test("a public key file that is not a key fails with code key")
    func badPublicKey() throws {
        try withWorkspace { ws in
            try packSample(ws)
            let bogus = ws.dir.appendingPathComponent("bogus.pub")
            try writeText("{}\n", to: bogus)
            let r = try ws.verify(nil, publicKey: bogus)
            #expect(r.status == 1, "\(r)")
            #expect(r.stderr.contains("error [key]"), "\(r)")
            #expect(r.stderr.contains(bogus.path), "\(r)")
        }
    }

    @Test("the private key file is also accepted as the trusted key")
    func privateKeyAsTrusted() throws {
        try withWorkspace { ws in
            try packSample(ws)
            let r = try ws.verify(nil, publicKey: ws.key)
            #expect(r.status == 0, "\(r)")
        }
    }
}

@Suite("pack --index-layout sharded, and verify of a sharded index")
struct ShardedIndexCLITests {
    /// The repository's index.json as a JSON object.
    func indexObject(_ ws: Workspace) throws -> [String: Any]? {
        try JSONSerialization.jsonObject(with: Data(contentsOf: ws.repo.appendingPathComponent("index.json")))
            as? [String: Any]
    }

    @Test("pack shards on-demand entries; verify checks every shard and names a damaged one; inline packs them back")
    func shardedRoundTrip() throws {
        try withWorkspace { ws in
            let src = try copySampleApp(to: ws.dir)
            try ws.packOK(src, id: "shell", version: "1.0.0")
            for i in 0..<3 {
                try ws.packOK(
                    src, id: "mini-\(i)", version: "1.0.0",
                    ["--install", "on-demand", "--route", "https://m.example/\(i)/", "--index-layout", "sharded"])
            }
            let index = try indexObject(ws)
            #expect(index?["schemaVersion"] as? Int == 2)
            #expect((index?["packages"] as? [Any])?.count == 1, "only the eager shell stays in the index")
            let shards = try #require((index?["shards"] as? [String: Any])?["files"] as? [[String: Any]])
            #expect(shards.count == 1)

            let ok = try ws.verify()
            #expect(
                ok.status == 0 && ok.stdout.contains("4 package(s)") && ok.stdout.contains("1 index shard(s)"), "\(ok)")

            // A later pack without the option keeps the layout.
            try ws.packOK(
                src, id: "mini-0", version: "1.1.0", ["--install", "on-demand", "--route", "https://m.example/0/"])
            let kept = try indexObject(ws)
            #expect(kept?["schemaVersion"] as? Int == 2)

            // A damaged shard: verify names it and exits 1.
            let path = try #require(
                ((kept?["shards"] as? [String: Any])?["files"] as? [[String: Any]])?.first?["path"] as? String)
            let shard = ws.repo.appendingPathComponent(path)
            let good = try Data(contentsOf: shard)
            var bad = good
            bad[bad.count / 2] ^= 1
            try bad.write(to: shard)
            let r = try ws.verify()
            #expect(r.status == 1, "\(r)")
            let line = try #require(problemLine(r, "index-shard"), "\(r)")
            #expect(line.contains(path), "\(line)")
            // Nor does a publisher build on it.
            let refused = try ws.pack(src, id: "mini-1", version: "1.1.0", ["--install", "on-demand"])
            #expect(refused.status != 0 && refused.stderr.contains(path), "\(refused)")
            try good.write(to: shard)

            // Back to inline: schema 1, every entry in the index.
            try ws.packOK(
                src, id: "mini-1", version: "1.1.0",
                ["--install", "on-demand", "--route", "https://m.example/1/", "--index-layout", "inline"])
            let inline = try indexObject(ws)
            #expect(inline?["schemaVersion"] as? Int == 1 && inline?["shards"] == nil)
            #expect((inline?["packages"] as? [Any])?.count == 4)
            #expect(try ws.verify().status == 0)
        }
    }
}
