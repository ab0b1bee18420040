import Crypto
import Foundation

/// A SHA-256 digest, kept as 32 raw bytes and written as 64 lowercase hex digits.
public struct SHA256Digest: Hashable, Sendable, Codable, CustomStringConvertible, Comparable {
    /// The 32 raw bytes of the digest.
    public let bytes: [UInt8]

    /// Wraps 32 raw bytes; `nil` for any other length.
    public init?(bytes: [UInt8]) {
        guard bytes.count == 32 else { return nil }
        self.bytes = bytes
    }

    /// Parses 64 lowercase hex digits; `nil` for anything else (upper case is refused so that
    /// one digest has one spelling in every file).
    public init?(hex: String) {
        let utf8 = Array(hex.utf8)
        guard utf8.count == 64 else { return nil }
        var out = [UInt8]()
        out.reserveCapacity(32)
        var i = 0
        while i < 64 {
            guard let hi = Self.nibble(utf8[i]), let lo = Self.nibble(utf8[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
            i += 2
        }
        self.bytes = out
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
    public init(finished digest: SHA256.Digest) {
        self.bytes = Array(digest)
    }

    /// 64 lowercase hex digits.
    public var hex: String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(64)
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0xF)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The 64 lowercase hex digits, as written in documents.
    public var description: String { hex }

    /// Orders digests by their raw bytes (the same order as their hex text).
    public static func < (lhs: SHA256Digest, rhs: SHA256Digest) -> Bool {
        lhs.bytes.lexicographicallyPrecedes(rhs.bytes)
    }

    /// Decodes a digest from a JSON string of 64 lowercase hex digits, refusing anything else.
    public init(from decoder: Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        guard let value = SHA256Digest(hex: text) else {
            throw DecodingError.dataCorruptedError(
                in: container, debugDescription: "expected 64 lowercase hex digits (sha256), got \"\(text)\"")
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
public struct SHA256Stream: Sendable {
    private var hasher = SHA256()
    /// Bytes fed so far.
    public private(set) var count: Int64 = 0

    /// A fresh hasher.
    public init() {}

    /// Feeds a buffer.
    public mutating func update(_ buffer: UnsafeRawBufferPointer) {
        hasher.update(bufferPointer: buffer)
        count += Int64(buffer.count)
    }

    /// Feeds bytes.
    public mutating func update<D: DataProtocol>(_ data: D) {
        hasher.update(data: data)
        count += Int64(data.count)
    }

    /// The digest of everything fed.
    public func finish() -> SHA256Digest {
        SHA256Digest(finished: hasher.finalize())
    }
}
