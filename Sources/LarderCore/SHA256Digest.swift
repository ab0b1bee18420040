import Crypto
import Foundation

/// A SHA-256 digest, kept as 32 raw bytes (inline, as four big-endian words: no allocation per
/// digest, which mattered with tens of thousands of them in a file list) and written as 64
/// lowercase hex digits.
public struct SHA256Digest: Hashable, Sendable, Codable, CustomStringConvertible, Comparable {
    /// The 32 bytes as four words, most significant byte first (so words compare as bytes do).
    private let w0: UInt64, w1: UInt64, w2: UInt64, w3: UInt64

    /// The 32 raw bytes of the digest.
    public var bytes: [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(32)
        for w in [w0, w1, w2, w3] {
            for shift in stride(from: 56, through: 0, by: -8) {
                out.append(UInt8(truncatingIfNeeded: w >> UInt64(shift)))
            }
        }
        return out
    }

    /// Builds the words from 32 bytes read by `byte(i)`.
    private init(_ byte: (Int) -> UInt8) {
        func word(_ k: Int) -> UInt64 {
            var w: UInt64 = 0
            for i in 0..<8 { w = w << 8 | UInt64(byte(k * 8 + i)) }
            return w
        }
        w0 = word(0)
        w1 = word(1)
        w2 = word(2)
        w3 = word(3)
    }

    /// Wraps 32 raw bytes; `nil` for any other length.
    public init?(bytes: [UInt8]) {
        guard bytes.count == 32 else { return nil }
        self.init { bytes[$0] }
    }

    /// Parses 64 lowercase hex digits; `nil` for anything else (upper case is refused so that
    /// one digest has one spelling in every file).
    public init?(hex: String) {
        var nibbles = [UInt8](repeating: 0, count: 64)
        var count = 0
        for c in hex.utf8 {
            guard count < 64, let n = Self.nibble(c) else { return nil }
            nibbles[count] = n
            count += 1
        }
        guard count == 64 else { return nil }
        self.init { nibbles[2 * $0] << 4 | nibbles[2 * $0 + 1] }
    }

    private static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        default: return nil
        }
    }

    /// The digest of `data`.
    public static func of<D: DataProtocol>(_ data: D) -> SHA256Digest {
        SHA256Digest(finished: SHA256.hash(data: data))
    }

    /// Wraps a finished swift-crypto digest.
    package init(finished digest: SHA256.Digest) {
        let raw = Array(digest)
        self.init { raw[$0] }
    }

    /// 64 lowercase hex digits.
    public var hex: String {
        let digits: StaticString = "0123456789abcdef"
        return String(unsafeUninitializedCapacity: 64) { out in
            digits.withUTF8Buffer { d in
                var i = 0
                for w in [w0, w1, w2, w3] {
                    for shift in stride(from: 60, through: 0, by: -4) {
                        out[i] = d[Int((w >> UInt64(shift)) & 0xF)]
                        i += 1
                    }
                }
            }
            return 64
        }
    }

    /// The 64 lowercase hex digits, as written in documents.
    public var description: String { hex }

    /// Orders digests by their raw bytes (the same order as their hex text).
    public static func < (lhs: SHA256Digest, rhs: SHA256Digest) -> Bool {
        (lhs.w0, lhs.w1, lhs.w2, lhs.w3) < (rhs.w0, rhs.w1, rhs.w2, rhs.w3)
    }

    /// Decodes a digest from a JSON string of 64 lowercase hex digits, refusing anything else.
    public init(from decoder: Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        guard let value = SHA256Digest(hex: text) else {
            throw DecodingError.dataCorruptedError(
                in: container, debugDescription: "expected 64 lowercase hex digits (sha256), got \(quoted(text))")
        }
        self = value
    }

    /// Encodes the digest as its 64 lowercase hex digits, a JSON string.
    public func encode(to encoder: Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(hex)
    }
}

/// Incremental SHA-256 for streams: feed bytes as they pass, then `finish()`.
package struct SHA256Stream: Sendable {
    private var hasher = SHA256()
    /// Bytes fed so far.
    package private(set) var count: Int64 = 0

    /// A fresh hasher.
    package init() {}

    /// Feeds a buffer.
    package mutating func update(_ buffer: UnsafeRawBufferPointer) {
        hasher.update(bufferPointer: buffer)
        count += Int64(buffer.count)
    }

    /// Feeds bytes.
    package mutating func update<D: DataProtocol>(_ data: D) {
        hasher.update(data: data)
        count += Int64(data.count)
    }

    /// The digest of everything fed.
    package func finish() -> SHA256Digest {
        SHA256Digest(finished: hasher.finalize())
    }
}
