import Foundation
import LarderCore
import Testing

@testable import LarderStore

/// `state.json` is encoded again only for the packages that changed; the bytes must not depend on
/// what the encoder wrote before.
@Suite("State encoding")
struct StateEncoderTests {
    static let t0 = Date(timeIntervalSince1970: 1_790_000_000)

    /// `n` packages, each installed and activated once.
    static func state(_ n: Int) -> SandboxState {
        var s = SandboxState()
        s.generation = 41
        s.index = AcceptedIndex(
            serial: 7, sha256: SHA256Digest(bytes: Array(repeating: 0xAB, count: 32))!, expires: t0 + 86400,
            etag: "\"x\"", acceptedAt: t0)
        for i in 0..<n {
            var p = PackageState()
            let v = SemanticVersion("1.\(i % 7).0")!
            p.versions.append(InstalledVersion(version: v, fileCount: i, size: Int64(i * 100), installedAt: t0))
            p.activate(v, reason: "sync", at: t0)
            s.packages["pkg-\(i)"] = p
        }
        return s
    }

    func decoded(_ data: Data) throws -> SandboxState {
        try ManifestCoding.decode(SandboxState.self, from: data, document: "state.json")
    }

    @Test("a first encoding reads back as the state, on one line, as JSONEncoder's whole-document encoding does")
    func cold() throws {
        let s = Self.state(25)
        let encoder = StateEncoder()
        let bytes = try encoder.encode(s)
        #expect(try decoded(bytes) == s)
        #expect(encoder.lastEncodedCount == 25)
        #expect(bytes.last == 0x0A && !bytes.dropLast().contains(0x0A))
        let whole = try ManifestCoding.encode(s, compact: true)
        #expect(try decoded(whole) == decoded(bytes))
        // The empty state, and one without an accepted index.
        var empty = SandboxState()
        #expect(try decoded(StateEncoder().encode(empty)) == empty)
        empty.packages = Self.state(2).packages
        #expect(try decoded(StateEncoder().encode(empty)) == empty)
    }

    @Test("after changes, the kept encoder writes what a fresh one writes, encoding only the packages changed")
    func warm() throws {
        var s = Self.state(40)
        let encoder = StateEncoder()
        _ = try encoder.encode(s)
        // One package changed, one added, one removed, the index and generation changed.
        var p = try #require(s.packages["pkg-3"])
        p.activate(SemanticVersion("1.3.0")!, reason: "again", at: Self.t0 + 1)
        _ = p.recordLaunch(policy: .standard, at: Self.t0 + 2)
        s.packages["pkg-3"] = p
        s.packages["pkg-new"] = PackageState()
        s.packages["pkg-17"] = nil
        s.generation += 1
        s.index?.etag = "\"y\""
        let warm = try encoder.encode(s)
        #expect(encoder.lastEncodedCount == 2, "pkg-3 and pkg-new")
        let fresh = try StateEncoder().encode(s)
        #expect(warm == fresh)
        #expect(try decoded(warm) == s)
        // Nothing changed: nothing encoded, the same bytes.
        let same = try encoder.encode(s)
        #expect(same == warm && encoder.lastEncodedCount == 0)
        // A package removed and put back with another state is encoded again.
        var q = PackageState()
        q.failures = 2
        s.packages["pkg-3"] = q
        let again = try encoder.encode(s)
        let freshAgain = try StateEncoder().encode(s)
        #expect(encoder.lastEncodedCount == 1 && again == freshAgain)
        #expect(try decoded(again) == s)
    }

    @Test("ids and values that need escaping, and an etag holding the packages member's own text")
    func escaping() throws {
        var s = Self.state(3)
        s.index?.etag = #""packages":{}"#
        s.packages[#"we"ird\id"#] = s.packages["pkg-1"]
        s.packages["ünïcode/ids"] = s.packages["pkg-2"]
        let encoder = StateEncoder()
        let bytes = try encoder.encode(s)
        #expect(try decoded(bytes) == s)
        s.packages["pkg-0"] = nil
        #expect(try decoded(encoder.encode(s)) == s)
    }
}
