import Foundation

/// Padmé (Nikitin et al., "Reducing Metadata Leakage from Encrypted Files and Communication with
/// PURBs", 2019): a length rounded up so that only its top bits say anything. For `L`, with
/// `E = floor(log2 L)` and `S = floor(log2 E) + 1`, the low `E - S` bits are rounded up to zero:
/// at most about 12 % more bytes, and about `log2 log2 L` bits of the length left to see.
package enum Padme {
    /// `length` rounded up to the next Padmé length (0, 1 and 2 are their own).
    package static func padded(_ length: Int64) -> Int64 {
        guard length > 2 else { return length }
        let e = Int64(63 - length.leadingZeroBitCount)
        let s = Int64(63 - e.leadingZeroBitCount) + 1
        let mask = (Int64(1) << (e - s)) - 1
        return (length + mask) & ~mask
    }
}

/// The fixed 16-byte header of a sealed blob, parsed (manifests §16).
package struct SealHeader: Sendable, Equatable {
    /// Header version: 1 (bytes 13–15 zero) or 2 (byte 13 holds `flags`).
    package var version: UInt8
    /// The segment size's power of two.
    package var segmentShift: Int
    /// The 7-byte nonce prefix.
    package var prefix: [UInt8]
    /// `paddedFlag` and `derivedKeyFlag`; 0 in a version 1 header.
    package var flags: UInt8

    /// The content is padded (Padmé) and starts with its 8-byte big-endian length.
    package static let paddedFlag: UInt8 = 0x01
    /// An object's key is derived from its content's digest and the nonce prefix, and the prefix
    /// from the sealed input's digest (not the content's alone).
    package static let derivedKeyFlag: UInt8 = 0x02

    /// Whether the content carries a length and Padmé padding.
    package var padded: Bool { flags & Self.paddedFlag != 0 }
    /// Whether an object's key is derived from the prefix (header version 2) rather than from its
    /// content's digest alone (version 1, as earlier builds sealed objects).
    package var derivedKey: Bool { flags & Self.derivedKeyFlag != 0 }

    /// The header's 16 bytes: version 1 when no flag is set (what earlier builds read), else 2.
    package var bytes: Data {
        let v: UInt8 = flags == 0 ? 1 : 2
        return Data(SegmentedSeal.magic + [v, UInt8(segmentShift)] + prefix + [flags, 0, 0])
    }

    /// A header to seal with (the version follows from `flags`).
    package init(segmentShift: Int, prefix: [UInt8], flags: UInt8) {
        version = flags == 0 ? 1 : 2
        self.segmentShift = segmentShift
        self.prefix = prefix
        self.flags = flags
    }

    /// Parses the first 16 bytes of a sealed blob.
    package init(parsing h: [UInt8]) throws(SealError) {
        guard h.count == SegmentedSeal.headerSize else { throw .header("\(h.count) header bytes") }
        guard Array(h[0..<4]) == SegmentedSeal.magic else { throw .header("no LRDE magic") }
        guard h[4] == 1 || h[4] == SegmentedSeal.version else { throw .header("version \(h[4])") }
        guard (10...24).contains(Int(h[5])) else { throw .header("segment size 2^\(h[5])") }
        let known = Self.paddedFlag | Self.derivedKeyFlag
        let flags = h[4] == 1 ? 0 : h[13]
        guard h[14] == 0, h[15] == 0, h[4] == 2 || h[13] == 0, flags & ~known == 0 else {
            throw .header("reserved bytes set")
        }
        version = h[4]
        segmentShift = Int(h[5])
        prefix = Array(h[6..<13])
        self.flags = flags
    }
}

extension SegmentedSeal {
    /// Bytes of the length a padded blob's content starts with.
    package static let lengthFieldSize: Int64 = 8

    /// The content size whose sealed size is exactly `sealed`; nil when none is (the 16 sizes
    /// after each full segment, which a tag skips).
    package static func contentSize(sealed: Int64, segmentShift: Int = defaultSegmentShift) -> Int64? {
        let segment = Int64(1) << segmentShift
        let body = sealed - Int64(headerSize)
        guard body >= Int64(tagSize) else { return nil }
        let n = max(1, (body + segment + Int64(tagSize) - 1) / (segment + Int64(tagSize)))
        let content = body - Int64(tagSize) * n
        return content >= 0 && sealedSize(content, segmentShift: segmentShift) == sealed ? content : nil
    }

    /// What a stored form of `stored` bytes is sealed as when padded: its length field, itself
    /// and zeros, so many that the sealed size is `paddedSealedSize(stored)`.
    package static func paddedContentSize(_ stored: Int64, segmentShift: Int = defaultSegmentShift) -> Int64 {
        var target = Padme.padded(sealedSize(stored + lengthFieldSize, segmentShift: segmentShift))
        while true {
            if let content = contentSize(sealed: target, segmentShift: segmentShift) { return content }
            target = Padme.padded(target + 1)
        }
    }

    /// The sealed size of a stored form of `stored` bytes, padded: Padmé of its sealed size with
    /// the length field and no padding (or the next Padmé size when no content seals to that one).
    package static func paddedSealedSize(_ stored: Int64, segmentShift: Int = defaultSegmentShift) -> Int64 {
        sealedSize(paddedContentSize(stored, segmentShift: segmentShift), segmentShift: segmentShift)
    }

    /// The length field of a padded content of `stored` bytes.
    static func lengthField(_ stored: Int64) -> Data {
        Data((0..<8).reversed().map { UInt8(truncatingIfNeeded: UInt64(stored) >> (8 * $0)) })
    }
}

/// Strips a padded blob's opened content to its stored form: reads the length field, hands on
/// that many bytes, and checks that only zeros follow and that the content is all there.
struct Unpadder {
    var field: [UInt8] = []
    var remaining: Int64 = -1

    /// The stored bytes among `opened` (the next opened segment's content).
    mutating func take(_ opened: Data) throws(SealError) -> Data {
        var rest = opened[...]
        if remaining < 0 {
            let k = min(8 - field.count, rest.count)
            field += rest.prefix(k)
            rest = rest.dropFirst(k)
            guard field.count == 8 else { return Data() }
            remaining = Int64(bitPattern: field.reduce(UInt64(0)) { $0 << 8 | UInt64($1) })
            guard remaining >= 0 else { throw .padding("a length of \(remaining)") }
        }
        let k = Int(min(Int64(rest.count), remaining))
        remaining -= Int64(k)
        guard rest.dropFirst(k).allSatisfy({ $0 == 0 }) else { throw .padding("padding that is not zeros") }
        return k == opened.count ? opened : Data(rest.prefix(k))
    }

    /// Checks that the whole stored form arrived.
    func finish() throws(SealError) {
        guard field.count == 8 else { throw .padding("no length field") }
        guard remaining == 0 else { throw .padding("the content ends \(remaining) bytes before its length") }
    }
}
