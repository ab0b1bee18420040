import Foundation
import LarderCore
import Testing

/// `SHA256Digest` keeps its 32 bytes inline; its bytes, hex, order and hashing must be those of
/// the bytes.
@Suite("SHA-256 digests")
struct DigestStorageTests {
    @Test("bytes, hex and order agree with the raw bytes over 2,000 random digests")
    func agreesWithBytes() throws {
        var generator = SystemRandomNumberGenerator()
        var digests: [SHA256Digest] = []
        for _ in 0..<2000 {
            let raw = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let d = try #require(SHA256Digest(bytes: raw))
            #expect(d.bytes == raw)
            let hex = raw.map { String(format: "%02x", $0) }.joined()
            #expect(d.hex == hex && SHA256Digest(hex: hex) == d)
            digests.append(d)
        }
        let byBytes = digests.sorted { $0.bytes.lexicographicallyPrecedes($1.bytes) }
        #expect(digests.sorted() == byBytes)
        #expect(Set(digests).count == Set(digests.map(\.bytes)).count)
        #expect(
            SHA256Digest.of(Data("abc".utf8)).hex == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    @Test("upper case, wrong lengths and non-hex are refused")
    func refusals() {
        let good = String(repeating: "ab", count: 32)
        #expect(SHA256Digest(hex: good) != nil)
        for bad in [good.uppercased(), String(good.dropLast()), good + "0", String(repeating: "g", count: 64), ""] {
            #expect(SHA256Digest(hex: bad) == nil, "\(bad)")
        }
        #expect(SHA256Digest(bytes: [UInt8](repeating: 1, count: 31)) == nil)
    }
}
