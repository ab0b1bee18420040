import Crypto
import Foundation
import LarderCore
import Testing

@Suite("Sealing: segmented encryption and wrapped content keys (issue 31's building blocks)")
struct SealingTests {
    static let key = SymmetricKey(size: .bits256)
    static let ad = Data("bundle packages/app/1.0.0".utf8)

    static func content(_ n: Int) -> Data { Data((0..<n).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }) }

    /// Opens `sealed` fed in pieces of `chunk` bytes.
    static func open(_ sealed: Data, chunk: Int, key: SymmetricKey = key, ad: Data = ad) throws -> Data {
        let opener = SegmentedSeal.Opener(key: key, associated: ad)
        var out = Data()
        var i = sealed.startIndex
        while i < sealed.endIndex {
            let end = min(i + chunk, sealed.endIndex)
            out += try opener.feed(Data(sealed[i..<end]))
            i = end
        }
        out += try opener.finish()
        return out
    }

    @Test("content of every size around the segment size opens to itself, fed whole or in pieces")
    func roundTrip() throws {
        let s = 1 << 10
        for n in [0, 1, s - 1, s, s + 1, 3 * s, 3 * s + 5] {
            let c = Self.content(n)
            let sealed = try SegmentedSeal.seal(c, key: Self.key, associated: Self.ad, segmentShift: 10)
            let segments = max(1, (n + s - 1) / s)
            #expect(sealed.count == SegmentedSeal.headerSize + n + segments * SegmentedSeal.tagSize)
            #expect(SegmentedSeal.sealedSize(Int64(n), segmentShift: 10) == Int64(sealed.count))
            // Pieces that end inside the header, at a sealed segment's end, a byte before or after it.
            let sealedSegment = s + SegmentedSeal.tagSize
            for chunk in [
                1, 7, 1000, sealedSegment - 1, sealedSegment, sealedSegment + 1, 2 * sealedSegment + 3, 1 << 20,
            ] {
                #expect(try Self.open(sealed, chunk: chunk) == c, "n \(n) chunk \(chunk)")
            }
        }
        // No content in the clear.
        let text = Data(String(repeating: "<script>secret()</script>", count: 100).utf8)
        let sealed = try SegmentedSeal.seal(text, key: Self.key, associated: Self.ad)
        #expect(sealed.range(of: Data("secret".utf8)) == nil)
    }

    @Test("a flipped byte, a dropped, moved or foreign segment, a cut, trailing bytes, another key or context: refused")
    func refusals() throws {
        let s = 1 << 10
        let sealed = try SegmentedSeal.seal(Self.content(3 * s), key: Self.key, associated: Self.ad, segmentShift: 10)
        let seg = s + SegmentedSeal.tagSize
        let h = SegmentedSeal.headerSize
        func refused(_ bytes: Data, key: SymmetricKey = Self.key, ad: Data = Self.ad) -> SealError? {
            do { _ = try Self.open(bytes, chunk: 100, key: key, ad: ad) } catch let e as SealError { return e } catch {
                return nil
            }
            return nil
        }
        var flipped = sealed
        flipped[h + seg + 10] ^= 1
        #expect(refused(flipped) == .segment(1))
        // Segment 1 dropped: segment 2 is read as number 1.
        #expect(refused(sealed.prefix(h + seg) + sealed.suffix(from: h + 2 * seg)) == .segment(1))
        // Segments 0 and 1 swapped.
        let swapped =
            sealed.prefix(h) + sealed[(h + seg)..<(h + 2 * seg)] + sealed[h..<(h + seg)]
            + sealed.suffix(from: h + 2 * seg)
        #expect(refused(swapped) == .segment(0))
        // Cut at a segment's end: the segment before is not the last one.
        #expect(refused(sealed.prefix(h + 2 * seg)) == .segment(1))
        #expect(refused(sealed.prefix(h + 10)) == .truncated)
        #expect(refused(sealed.prefix(h)) == .truncated)
        #expect(refused(sealed.prefix(h - 3)) == .truncated)
        #expect(refused(sealed + Data([0])) != nil)
        #expect(refused(sealed, key: SymmetricKey(size: .bits256)) == .segment(0))
        #expect(refused(sealed, ad: Data("bundle packages/app/2.0.0".utf8)) == .segment(0))
        // A segment from another blob under the same key.
        let other = try SegmentedSeal.seal(Self.content(3 * s), key: Self.key, associated: Self.ad, segmentShift: 10)
        #expect(
            refused(sealed.prefix(h + seg) + other[(h + seg)..<(h + 2 * seg)] + sealed.suffix(from: h + 2 * seg))
                == .segment(1))
        var badMagic = sealed
        badMagic[0] = 0
        if case .header = refused(badMagic) {} else { Issue.record("a bad magic must be refused as a header") }
    }

    @Test("a recipient key file whose key is not 32 bytes of base64 is refused with that reason, either half")
    func keyFileBytes() throws {
        let good = RecipientKeyFile(private: Curve25519.KeyAgreement.PrivateKey())
        for type in [RecipientKeyFile.privateType, RecipientKeyFile.publicType] {
            for key in ["not base64!", Data(count: 31).base64EncodedString()] {
                var file = good
                file.type = type
                file.key = key
                let data = try JSONEncoder().encode(file)
                do {
                    _ = try RecipientKeyFile.publicKey(from: data, path: "k.json")
                    Issue.record("\(type) with key \(key) was taken")
                } catch {
                    #expect("\(error)".contains("32 bytes of base64") && "\(error)".contains("k.json"), "\(error)")
                }
            }
        }
    }

    @Test("a content key wrapped for two recipients opens for each, for no other key and in no other context")
    func wrapped() throws {
        let a = Curve25519.KeyAgreement.PrivateKey()
        let b = Curve25519.KeyAgreement.PrivateKey()
        let info = Data("app@1.0.0".utf8)
        let wrapped = try ContentKeys.wrap(Self.key, to: [a.publicKey, b.publicKey], info: info)
        #expect(wrapped.map(\.keyId) == [ContentKeys.keyID(a.publicKey), ContentKeys.keyID(b.publicKey)])
        let raw = Self.key.withUnsafeBytes { Data($0) }
        for k in [a, b] {
            let got = try ContentKeys.unwrap(wrapped, with: k, info: info)
            #expect(got.withUnsafeBytes { Data($0) } == raw)
        }
        let c = Curve25519.KeyAgreement.PrivateKey()
        #expect(throws: SealError.noRecipient(ContentKeys.keyID(c.publicKey))) {
            try ContentKeys.unwrap(wrapped, with: c, info: info)
        }
        // Another version's context, or a wrapped key relabelled for another recipient.
        #expect(throws: SealError.wrongKey(ContentKeys.keyID(a.publicKey))) {
            try ContentKeys.unwrap(wrapped, with: a, info: Data("app@2.0.0".utf8))
        }
        var relabelled = wrapped
        relabelled[1].keyId = wrapped[0].keyId
        #expect(throws: SealError.wrongKey(ContentKeys.keyID(a.publicKey))) {
            try ContentKeys.unwrap([relabelled[1]], with: a, info: info)
        }
    }
}
