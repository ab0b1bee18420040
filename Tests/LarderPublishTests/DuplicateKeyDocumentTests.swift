import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import LarderPublish
import LarderTestSupport
import SystemPackage
import Testing

/// Every document of the repository format is refused with `duplicate-key` when one of its
/// objects has a key twice (manifests §2), whether the device, `verify` or a publisher reads it.
@Suite("Duplicate keys in every signed document")
struct DuplicateKeyDocumentTests {
    /// The document with its first top-level member written twice (canonical form: a member of
    /// the top object is a line indented by two spaces).
    static func doubled(_ data: Data) throws -> Data {
        var lines = String(decoding: data, as: UTF8.self).components(separatedBy: "\n")
        let i = try #require(lines.firstIndex { $0.hasPrefix("  \"") && $0.hasSuffix(",") })
        lines.insert(lines[i], at: i)
        return Data(lines.joined(separator: "\n").utf8)
    }

    static func expectDuplicate<T: Decodable>(_ type: T.Type, _ data: Data) throws {
        _ = try ManifestCoding.decode(T.self, from: data, document: "doc")
        let bad = try doubled(data)
        do throws(ManifestError) {
            _ = try ManifestCoding.decode(T.self, from: bad, document: "doc")
            Issue.record("\(T.self) with a key twice was read")
        } catch {
            guard case .duplicateKey = error else {
                Issue.record("\(T.self): \(error)")
                return
            }
            #expect(error.code(or: "x") == "duplicate-key")
        }
    }

    @Test("index, signature, file list, delta manifest and key file: each refused, each read without the duplicate")
    func eachDocument() throws {
        let tmp = try TemporaryDirectory("dupkeys")
        defer { tmp.remove() }
        let repo = SampleRepository(in: tmp.url)
        try repo.publish("1.0.0")
        try repo.publish("1.1.0", configure: { $0.deltaBases = 1 })
        let root = repo.path
        try Self.expectDuplicate(RepositoryIndex.self, AtomicFile.read(root.appending("index.json")))
        try Self.expectDuplicate(SignatureFile.self, AtomicFile.read(root.appending("index.json.sig")))
        try Self.expectDuplicate(FileList.self, AtomicFile.read(try repo.fileList("sample-app", "1.1.0")))
        let gz = try AtomicFile.read(root.appending("packages/sample-app/1.1.0/deltas/1.0.0.json.gz"))
        try Self.expectDuplicate(
            DeltaManifest.self, BytePipeline.standard.decodeDocument(gz, limit: 1 << 24))
        try Self.expectDuplicate(KeyFile.self, ManifestCoding.encode(KeyFile(public: repo.key.publicKey)))
    }

    @Test("verify names the index with a key twice, re-signed, as duplicate-key")
    func verifyIndex() throws {
        let tmp = try TemporaryDirectory("dupkeys")
        defer { tmp.remove() }
        let repo = SampleRepository(in: tmp.url)
        try repo.publish("1.0.0")
        let bytes = try Self.doubled(AtomicFile.read(repo.path.appending("index.json")))
        try AtomicFile.write(bytes, to: repo.path.appending("index.json"))
        try AtomicFile.write(
            ManifestCoding.encode(IndexSignature.sign(bytes, with: [repo.key])),
            to: repo.path.appending("index.json.sig"))
        let report = Verifier(trustedKeys: [repo.key.publicKey]).verifyRepository(repo.path)
        #expect(report.problems.map(\.code).contains("duplicate-key"), "\(report.problems)")
    }
}
