import Foundation
import Testing

@testable import LarderCore

/// The repository's `manifests/` folder, found from this file's path.
let manifestsDirectory = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("manifests")

@Suite("Manifests")
struct ManifestTests {
    static let minimalEntry = """
        {"id": "app", "version": "1.0.0",
         "bundle": {"path": "packages/app/1.0.0/bundle.zip", "size": 10, "sha256": "\(String(repeating: "a", count: 64))"},
         "files": {"path": "packages/app/1.0.0/files.json", "size": 5, "sha256": "\(String(repeating: "b", count: 64))"}}
        """

    static func index(_ entries: String, extra: String = "", schema: Int = 1) -> Data {
        Data(
            """
            {"schemaVersion": \(schema), "serial": 7, "expires": "2030-01-02T03:04:05Z", \(extra) "packages": [\(entries)]}
            """.utf8)
    }

    @Test func defaultsForOptionalFields() throws {
        let idx = try ManifestCoding.decode(
            RepositoryIndex.self, from: Self.index(Self.minimalEntry), document: "index.json")
        let p = try #require(idx.packages.first)
        #expect(p.entry == "index.html")
        #expect(p.channel == "stable")
        #expect(p.policy == Policy(mode: .localThenNetwork, bypass: []))
        #expect(p.rollout.percent == 100)
        #expect(!p.spaFallback && !p.mandatory)
        #expect(p.routes.isEmpty && p.revoked.isEmpty && p.dependencies.isEmpty)
        #expect(idx.serial == 7)
        #expect(ManifestCoding.formatRFC3339(idx.expires) == "2030-01-02T03:04:05Z")
    }

    @Test func unknownFieldsAreIgnored() throws {
        let entry = Self.minimalEntry.replacingOccurrences(
            of: "\"id\": \"app\"", with: "\"id\": \"app\", \"delta\": {\"from\": \"0.9.0\"}")
        let idx = try ManifestCoding.decode(
            RepositoryIndex.self, from: Self.index(entry, extra: "\"future\": [1, 2],"), document: "index.json")
        #expect(idx.packages.count == 1)
    }

    @Test func otherSchemaVersionRefused() {
        // Versions 1 and 2 (sharded) are read; 3 is not, nor 0.
        for v in [3, 0] {
            #expect(throws: ManifestError.unsupportedSchema(document: "index.json", found: v, supported: 2)) {
                try ManifestCoding.decode(
                    RepositoryIndex.self, from: Self.index(Self.minimalEntry, schema: v), document: "index.json")
            }
        }
        // A file list of another version is refused as before.
        #expect(throws: ManifestError.unsupportedSchema(document: "files.json", found: 2, supported: 1)) {
            try ManifestCoding.decode(
                FileList.self, from: Data(#"{"schemaVersion": 2, "id": "a", "version": "1.0.0", "files": []}"#.utf8),
                document: "files.json")
        }
    }

    @Test func errorsNameTheField() {
        let bad = Self.minimalEntry.replacingOccurrences(of: "\"1.0.0\"", with: "\"1.0\"")
        do {
            _ = try ManifestCoding.decode(RepositoryIndex.self, from: Self.index(bad), document: "index.json")
            Issue.record("a bad version must be refused")
        } catch {
            #expect(error.description.contains("packages[0].version"), "\(error)")
            #expect(error.description.contains("1.0"))
        }
        let badID = Self.minimalEntry.replacingOccurrences(of: "\"app\"", with: "\"Bad_ID\"")
        #expect(throws: ManifestError.self) {
            try ManifestCoding.decode(RepositoryIndex.self, from: Self.index(badID), document: "index.json")
        }
        let missing = Self.minimalEntry.replacingOccurrences(of: "\"version\": \"1.0.0\",", with: "")
        do {
            _ = try ManifestCoding.decode(RepositoryIndex.self, from: Self.index(missing), document: "index.json")
            Issue.record("a missing version must be refused")
        } catch {
            #expect(error.description.contains("missing field \"version\""), "\(error)")
        }
        let dotdot = Data(
            "{\"schemaVersion\":1,\"id\":\"a\",\"version\":\"1.0.0\",\"files\":[{\"path\":\"../x\",\"size\":1,\"sha256\":\"\(String(repeating: "0", count: 64))\"}]}"
                .utf8)
        #expect(throws: ManifestError.self) {
            try ManifestCoding.decode(FileList.self, from: dotdot, document: "files.json")
        }
    }

    @Test func tooLargeRefused() {
        let big = Data(repeating: 0x20, count: ManifestCoding.maxDocumentBytes + 1)
        #expect(
            throws: ManifestError.tooLarge(
                document: "index.json", size: big.count, limit: ManifestCoding.maxDocumentBytes)
        ) {
            try ManifestCoding.decode(RepositoryIndex.self, from: big, document: "index.json")
        }
    }

    @Test func canonicalEncodingIsStable() throws {
        let idx = try ManifestCoding.decode(
            RepositoryIndex.self, from: Self.index(Self.minimalEntry), document: "index.json")
        let once = try ManifestCoding.encode(idx)
        let again = try ManifestCoding.encode(
            try ManifestCoding.decode(RepositoryIndex.self, from: once, document: "index.json"))
        #expect(once == again)
        #expect(once.last == 0x0A)
        #expect(!String(decoding: once, as: UTF8.self).contains("\\/"))
    }

    @Test func fileListsAreSortedByPathBytes() throws {
        let d = try #require(SHA256Digest(hex: String(repeating: "c", count: 64)))
        let list = FileList(
            id: try #require(PackageID("a")), version: try #require(SemanticVersion("1.0.0")),
            files: [
                FileEntry(path: try #require(RelativePath("b.js")), size: 1, sha256: d),
                FileEntry(path: try #require(RelativePath("a/x.js")), size: 2, sha256: d),
            ])
        #expect(list.files.map(\.path.string) == ["a/x.js", "b.js"])
        #expect(list.totalSize == 3)
    }

    /// Every example in manifests/examples decodes with the Swift models; every file in
    /// manifests/examples/invalid is refused by them.
    @Test func examplesDecode() throws {
        let dir = manifestsDirectory.appendingPathComponent("examples")
        let index = try Data(contentsOf: dir.appendingPathComponent("index.json"))
        let decoded = try ManifestCoding.decode(RepositoryIndex.self, from: index, document: "index.json")
        #expect(!decoded.packages.isEmpty)
        #expect(IndexRules.issues(decoded).isEmpty, "\(IndexRules.issues(decoded))")
        let files = try Data(contentsOf: dir.appendingPathComponent("files.json"))
        #expect(try !ManifestCoding.decode(FileList.self, from: files, document: "files.json").files.isEmpty)
        let sig = try Data(contentsOf: dir.appendingPathComponent("index.json.sig"))
        #expect(
            try !ManifestCoding.decode(SignatureFile.self, from: sig, document: "index.json.sig").signatures.isEmpty)
        let key = try Data(contentsOf: dir.appendingPathComponent("key.pub"))
        _ = try KeyFile.publicKey(from: key, path: "key.pub")
        let delta = try Data(contentsOf: dir.appendingPathComponent("delta.json"))
        let manifest = try ManifestCoding.decode(DeltaManifest.self, from: delta, document: "delta.json")
        #expect(!manifest.patches.isEmpty && manifest.from < manifest.to)
        #expect(try ManifestCoding.encode(manifest) == delta)
        // The sharded index, its shard and its catalog, checked as a device checks them.
        let root = try ManifestCoding.decode(
            RepositoryIndex.self, from: try Data(contentsOf: dir.appendingPathComponent("index-sharded.json")),
            document: "index-sharded.json")
        let shard = try Data(contentsOf: dir.appendingPathComponent("shard.json"))
        let entries = try ShardedIndex.entries(of: shard, number: 0, root: root)
        let catalog = try ShardedIndex.catalog(
            of: try Data(contentsOf: dir.appendingPathComponent("catalog.json")), root: root)
        try ShardedIndex.checkCatalog(catalog, covers: entries)
        #expect(!entries.isEmpty && root.schemaVersion == 2)
        // An encrypted version (§16), as pack --encrypt-to writes it.
        let encrypted = try ManifestCoding.decode(
            RepositoryIndex.self, from: try Data(contentsOf: dir.appendingPathComponent("index-encrypted.json")),
            document: "index-encrypted.json")
        #expect(encrypted.packages.first?.encryption?.recipients.count == 1)
        #expect(encrypted.packages.first?.encryption?.padding == Encryption.padme)
        #expect(IndexRules.issues(encrypted).isEmpty, "\(IndexRules.issues(encrypted))")
        try delegatedExamples(dir)
        // Telemetry (§19): the index member, and a batch as a collector takes it.
        let withTelemetry = try ManifestCoding.decode(
            RepositoryIndex.self, from: try Data(contentsOf: dir.appendingPathComponent("index-telemetry.json")),
            document: "index-telemetry.json")
        #expect(withTelemetry.telemetry?.rate == 0.25 && IndexRules.issues(withTelemetry).isEmpty)
        // A schedule and holds (§20).
        let rollout = try ManifestCoding.decode(
            RepositoryIndex.self, from: try Data(contentsOf: dir.appendingPathComponent("index-rollout.json")),
            document: "index-rollout.json")
        #expect(rollout.packages[0].rollout.ceiling == 100 && rollout.holds?.map(\.state) == [.paused, .capped])
        #expect(IndexRules.issues(rollout).isEmpty, "\(IndexRules.issues(rollout))")
        let batch = try TelemetryBatch.accept(
            try Data(contentsOf: dir.appendingPathComponent("batch.json")),
            now: Date(timeIntervalSince1970: 1_796_403_600))
        #expect(batch.events.count == 5)
    }

    /// The delegation examples (§18), checked as a device checks them: the root (anchored on its
    /// own keys), the index's signature by its index keys, and team pay's part.
    func delegatedExamples(_ dir: URL) throws {
        func read(_ name: String) throws -> Data { try Data(contentsOf: dir.appendingPathComponent(name)) }
        let now = Date(timeIntervalSince1970: 1_798_761_600)  // 2027-01-01, before the example root expires
        let rootBytes = try read("root.json")
        let root = try ManifestCoding.decode(RootDocument.self, from: rootBytes, document: "root.json")
        #expect(root.problem() == nil)
        let indexBytes = try read("index-delegated.json")
        let sig = try ManifestCoding.decode(
            SignatureFile.self, from: try read("index-delegated.json.sig"), document: "index-delegated.json.sig")
        let named = try #require(sig.root)
        let held = try DelegationCheck.followRoots(
            held: nil, configured: root.keys.compactMap(\.publicKey),
            chain: [DelegationCheck.Signed(bytes: rootBytes, signature: try read("root.json.sig"))], named: named,
            now: now)
        try DelegationCheck.requireIndexSignature(indexBytes, signatures: sig, root: held.document, now: now)
        let index = try ManifestCoding.decode(RepositoryIndex.self, from: indexBytes, document: "index-delegated.json")
        let partBytes = try read("part.json")
        let part = try ManifestCoding.decode(TeamPart.self, from: partBytes, document: "part.json")
        let rows = (index.delegations?.parts ?? []).filter { $0.team == part.team }
        let parts = try DelegationCheck.checkParts(
            rows, partBytes: [part.team: partBytes], root: held.document, accepted: [:], now: now)
        let ids = Set(part.packages.map(\.id))
        #expect(parts[part.team] == part && index.packages.filter { ids.contains($0.id) } == part.packages)
    }

    /// Examples that only the JSON Schema refuses (scripts/tools/check-manifests.py checks them): the
    /// Swift readers treat `null` like an absent optional member, as Codable does.
    static let schemaOnly: [String: String] = [
        "index-null-routes.json": "null read as absent",
        "index-encrypted-unknown-padding.json": "a device reads each sealed blob's padding from its header",
    ]

    @Test func invalidExamplesAreRefused() throws {
        let dir = manifestsDirectory.appendingPathComponent("examples/invalid")
        let names = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasSuffix(".json") }
            .sorted()
        #expect(names.count > 10)
        for name in names where Self.schemaOnly[name] == nil {
            let data = try Data(contentsOf: dir.appendingPathComponent(name))
            var refused = false
            if name.hasPrefix("index-") {
                if let idx = try? ManifestCoding.decode(RepositoryIndex.self, from: data, document: name) {
                    refused = !IndexRules.issues(idx).isEmpty
                } else {
                    refused = true
                }
            } else if name.hasPrefix("files-") {
                refused = (try? ManifestCoding.decode(FileList.self, from: data, document: name)) == nil
            } else if name.hasPrefix("signature-") {
                refused =
                    (try? ManifestCoding.decode(SignatureFile.self, from: data, document: name)).map { sig in
                        sig.signatures.contains {
                            $0.algorithm != "ed25519" || Data(base64Encoded: $0.signature)?.count != 64
                        }
                    } ?? true
            } else if name.hasPrefix("key-") {
                refused = (try? KeyFile.publicKey(from: data, path: name)) == nil
            } else if name.hasPrefix("shard-") {
                refused = (try? ManifestCoding.decode(IndexShard.self, from: data, document: name)) == nil
            } else if name.hasPrefix("catalog-") {
                refused = (try? ManifestCoding.decode(IndexCatalog.self, from: data, document: name)) == nil
            } else if name.hasPrefix("delta-") {
                refused = (try? ManifestCoding.decode(DeltaManifest.self, from: data, document: name)) == nil
            } else if name.hasPrefix("root-") {
                refused =
                    (try? ManifestCoding.decode(RootDocument.self, from: data, document: name)).map {
                        $0.problem() != nil
                    } ?? true
            } else if name.hasPrefix("batch-") {
                // The collector's clock an hour after the example's events.
                let now = Date(timeIntervalSince1970: 1_796_403_600)
                refused = (try? TelemetryBatch.accept(data, now: now)) == nil
            } else if name.hasPrefix("part-") {
                refused = (try? ManifestCoding.decode(TeamPart.self, from: data, document: name)) == nil
            } else {
                Issue.record("unexpected invalid example \(name)")
            }
            #expect(refused, "\(name) should be refused by the Swift decoder or the index rules")
        }
        for name in Self.schemaOnly.keys {
            #expect(names.contains(name), "\(name) is listed as schema-only but does not exist")
        }
    }
}

@Suite("Index rules")
struct IndexRulesTests {
    static func entry(
        _ id: String, _ version: String, routes: [String] = [], channel: String = "stable", deps: [Dependency] = []
    ) throws -> PackageEntry {
        let pid = try #require(PackageID(id))
        let v = try #require(SemanticVersion(version))
        let d = try #require(SHA256Digest(hex: String(repeating: "a", count: 64)))
        return PackageEntry(
            id: pid, version: v, routes: routes,
            bundle: BlobRef(path: "packages/\(id)/\(version)/bundle.zip", size: 1, sha256: d),
            files: BlobRef(path: "packages/\(id)/\(version)/files.json", size: 1, sha256: d),
            channel: Channel(rawValue: channel),
            dependencies: deps)
    }

    @Test func cleanIndex() throws {
        let idx = RepositoryIndex(
            serial: 1, expires: Date(),
            packages: [
                try Self.entry("a", "1.0.0", routes: ["https://a.example/"]),
                try Self.entry("a", "2.0.0-beta.1", routes: ["https://a.example/"], channel: "beta"),
                try Self.entry(
                    "b", "1.0.0",
                    deps: [Dependency(id: try #require(PackageID("a")), range: try #require(VersionRange("^1.0.0")))]),
            ])
        #expect(IndexRules.issues(idx).isEmpty)
    }

    @Test func problems() throws {
        var bad = try Self.entry("c", "1.0.0")
        bad.bundle.path = "elsewhere.zip"
        let idx = RepositoryIndex(
            serial: 1, expires: Date(),
            packages: [
                try Self.entry("a", "1.0.0", routes: ["https://shared.example/"]),
                try Self.entry("a", "1.1.0"),
                try Self.entry(
                    "b", "1.0.0", routes: ["HTTPS://Shared.example:443/"],
                    deps: [Dependency(id: try #require(PackageID("zz")), range: try #require(VersionRange("*")))]),
                bad,
            ])
        let codes = IndexRules.issues(idx).map(\.code)
        #expect(codes.contains("duplicate-entry"))
        #expect(codes.contains("route-conflict"))
        #expect(codes.contains("missing-dependency"))
        #expect(codes.contains("bad-layout"))
    }
}

@Suite("RFC 3339 dates without a formatter per value")
struct DateCodingTests {
    static func reference(_ date: Date) -> String {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime]
        f.timeZone = TimeZone(identifier: "UTC")
        return f.string(from: date)
    }

    @Test(
        "formatting equals ISO8601DateFormatter's, byte for byte, over 20,000 dates (fractions, leap years, 1970–9999)")
    func formatMatchesFoundation() {
        var rng = SystemRandomNumberGenerator()
        var dates: [Date] = [
            Date(timeIntervalSince1970: 0), Date(timeIntervalSince1970: 951_782_400),  // 2000-02-29
            Date(timeIntervalSince1970: 1_709_164_799.999), Date(timeIntervalSince1970: 4_102_444_800),
            Date(timeIntervalSince1970: 253_402_300_799),  // 9999-12-31T23:59:59Z
        ]
        for _ in 0..<20_000 {
            dates.append(Date(timeIntervalSince1970: Double.random(in: 0..<253_402_300_800, using: &rng)))
        }
        for d in dates {
            #expect(ManifestCoding.formatRFC3339(d) == Self.reference(d), "\(d.timeIntervalSince1970)")
        }
    }

    @Test("parsing the canonical form equals ISO8601DateFormatter's; other forms still parse as before")
    func parseMatchesFoundation() {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime]
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<5_000 {
            let text = Self.reference(
                Date(timeIntervalSince1970: Double(Int64.random(in: 0..<253_402_300_800, using: &rng))))
            #expect(ManifestCoding.parseCanonical(text) == f.date(from: text), "\(text)")
            #expect(ManifestCoding.parseRFC3339(text) == f.date(from: text), "\(text)")
        }
        // Not the canonical form: the fast path declines, and Foundation decides as before.
        for text in [
            "2026-02-29T00:00:00Z", "2026-13-01T00:00:00Z", "2026-01-01T24:00:00Z", "2026-01-01T00:00:60Z",
            "2026-01-01T00:00:00.5Z", "2026-01-01T08:00:00+08:00", "2026-01-01t00:00:00z", "26-01-01T00:00:00Z",
        ] {
            #expect(ManifestCoding.parseCanonical(text) == nil, "\(text)")
        }
        #expect(
            ManifestCoding.parseRFC3339("2026-01-01T08:00:00+08:00")
                == ManifestCoding.parseRFC3339("2026-01-01T00:00:00Z"))
        #expect(ManifestCoding.parseRFC3339("2026-01-01T00:00:00.5Z") != nil)
        #expect(ManifestCoding.parseRFC3339("not a date") == nil)
    }
}
