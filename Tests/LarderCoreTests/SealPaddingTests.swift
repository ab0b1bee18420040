import Crypto
import Foundation
import LarderCore
import Testing

/// Padmé padding of sealed blobs (`pack --pad`, manifests §16): inside the authenticated segments,
/// stripped by the opener, sizes rounded to Padmé lengths.
@Suite("Sealing: Padmé padding")
struct SealPaddingTests {
    static let key = SymmetricKey(size: .bits256)
    static let ad = Data("larder sealed bundle app@1.0.0".utf8)

    static func content(_ n: Int) -> Data { Data((0..<n).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ 11) }) }

    @Test("Padmé as the paper defines it: E = floor(log2 L), S = floor(log2 E) + 1, the low E - S bits rounded up")
    func padme() {
        let cases: [(Int64, Int64)] = [
            (0, 0), (1, 1), (2, 2), (3, 3), (9, 10), (17, 18), (1000, 1024), (1025, 1088), (100_000, 100_352),
            (65_568, 67_584), (10_000_000, 10_223_616),
        ]
        for (l, p) in cases { #expect(Padme.padded(l) == p, "\(l)") }
        var l: Int64 = 3
        while l < 1 << 40 {
            let p = Padme.padded(l)
            #expect(p >= l && Padme.padded(p) == p && Double(p - l) <= 0.12 * Double(l), "\(l)")
            l = l * 3 / 2 + 7
        }
    }

    @Test(
        "a padded blob's sealed size is Padmé of its unpadded sealed size (with its length), and it opens to its content"
    )
    func roundTrip() throws {
        for n in [0, 1, 100, 3000, 65_535, 65_536, 65_537, 200_000] {
            let c = Self.content(n)
            let sealed = try SegmentedSeal.seal(c, key: Self.key, associated: Self.ad, flags: SealHeader.paddedFlag)
            let unpadded = SegmentedSeal.sealedSize(Int64(n) + SegmentedSeal.lengthFieldSize)
            #expect(Int64(sealed.count) == Padme.padded(unpadded), "\(n)")
            #expect(Int64(sealed.count) == SegmentedSeal.paddedSealedSize(Int64(n)), "\(n)")
            #expect(sealed[4] == 2 && sealed[13] == SealHeader.paddedFlag)
            for chunk in [5, 1000, 70_000, 1 << 20] {
                let opener = SegmentedSeal.Opener(key: Self.key, associated: Self.ad)
                var out = Data()
                var i = 0
                while i < sealed.count {
                    out += try opener.feed(sealed.subdata(in: i..<min(i + chunk, sealed.count)))
                    i += chunk
                }
                out += try opener.finish()
                #expect(out == c, "\(n) in pieces of \(chunk)")
            }
            // Streamed, the same bytes.
            let prefix = [UInt8](sealed[6..<13])
            var sealer = SegmentedSeal.Sealer(
                key: Self.key, associated: Self.ad, prefix: prefix, paddedLength: Int64(n))
            var streamed = sealer.header
            streamed += try sealer.feed(c)
            streamed += try sealer.finish()
            #expect(streamed == sealed, "\(n)")
        }
    }

    @Test("the padding is authenticated: the header's flag cleared, or set on an unpadded blob, does not open")
    func flagIsAuthenticated() throws {
        let c = Self.content(5000)
        var padded = try SegmentedSeal.seal(c, key: Self.key, associated: Self.ad, flags: SealHeader.paddedFlag)
        padded[13] = 0
        padded[4] = 1
        let opener = SegmentedSeal.Opener(key: Self.key, associated: Self.ad)
        #expect(throws: SealError.self) { _ = try opener.feed(padded) + opener.finish() }
        var plain = try SegmentedSeal.seal(c, key: Self.key, associated: Self.ad)
        plain[4] = 2
        plain[13] = SealHeader.paddedFlag
        let other = SegmentedSeal.Opener(key: Self.key, associated: Self.ad)
        #expect(throws: SealError.segment(0)) { _ = try other.feed(plain) + other.finish() }
        // A sealer fed another length than it declared refuses to finish.
        var sealer = SegmentedSeal.Sealer(key: Self.key, associated: Self.ad, paddedLength: 10)
        _ = try sealer.feed(Self.content(9))
        #expect(throws: SealError.self) { _ = try sealer.finish() }
    }

    @Test("a patch file's sealed size: its patches' sum sealed, padded or not")
    func paddedPatchFileSize() {
        for n: Int64 in [1, 1404, 70_000] {
            #expect(SegmentedSeal.paddedSealedSize(n) >= SegmentedSeal.sealedSize(n + 8))
            #expect(SegmentedSeal.contentSize(sealed: SegmentedSeal.sealedSize(n)) == n)
        }
    }
}
