import Foundation
import LarderCore
import LarderFileSystem
import LarderSync
import LarderTestSupport
import SystemPackage
import Testing

/// A device refuses a signed index or file list with a key twice (`duplicate-key`), keeping what
/// it has.
@Suite("Sync refuses documents with duplicate keys")
struct DuplicateKeySyncTests {
    /// Writes `bytes` as the repository's index and signs it with the repository's key.
    func replaceIndex(_ env: SyncEnv, _ bytes: Data) throws {
        try AtomicFile.write(bytes, to: env.repository.path.appending("index.json"))
        try AtomicFile.write(
            ManifestCoding.encode(IndexSignature.sign(bytes, with: [env.key])),
            to: env.repository.path.appending("index.json.sig"))
    }

    /// `text` with its first member line starting with `prefix` (and ending with a comma) written
    /// twice.
    func doubling(_ text: String, lineStartingWith prefix: String) throws -> Data {
        var lines = text.components(separatedBy: "\n")
        let i = try #require(lines.firstIndex { $0.hasPrefix(prefix) && $0.hasSuffix(",") })
        lines.insert(lines[i], at: i)
        return Data(lines.joined(separator: "\n").utf8)
    }

    @Test("a signed index with a key twice: the sync fails with duplicate-key, the active version kept")
    func index() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try env.publish("1.0.0")
        try env.initialise()
        _ = try await env.sync()
        try env.publish("1.1.0")
        let text = try String(decoding: AtomicFile.read(env.repository.path.appending("index.json")), as: UTF8.self)
        try replaceIndex(env, doubling(text, lineStartingWith: "  \""))
        do {
            _ = try await env.sync()
            Issue.record("an index with a key twice was accepted")
        } catch {
            #expect(error.code == "duplicate-key", "\(error)")
            #expect(error.description.contains("appears twice"), "\(error)")
        }
        #expect(try env.active() == "1.0.0")
    }

    @Test("a signed file list with a key twice: that package fails with duplicate-key")
    func fileList() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try env.publish("1.0.0")
        let listPath = try env.repository.fileList("sample-app", "1.0.0")
        let list = try String(decoding: AtomicFile.read(listPath), as: UTF8.self)
        let doubled = try doubling(list, lineStartingWith: "  \"id\"")
        try AtomicFile.write(doubled, to: listPath)
        try? SystemCalls.unlink(FilePath(listPath.string + ".gz"))
        // The index names the list by size and digest: re-sign one that names the new bytes.
        var index = try ManifestCoding.decode(
            RepositoryIndex.self, from: AtomicFile.read(env.repository.path.appending("index.json")),
            document: "index")
        for i in index.packages.indices {
            index.packages[i].files.size = Int64(doubled.count)
            index.packages[i].files.sha256 = SHA256Digest.of(doubled)
            index.packages[i].filesGzip = nil
        }
        try replaceIndex(env, ManifestCoding.encode(index))
        try env.initialise()
        let r = try await env.sync()
        let p = try #require(r.packages.first)
        #expect(p.outcome == .failed && p.code == "duplicate-key", "\(r)")
        #expect(try env.active() == nil)
    }
}
