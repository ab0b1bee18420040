/// A package identifier: `[a-z0-9][a-z0-9._-]{0,63}`.
///
/// Ids are used as directory names on devices and servers, so the grammar has no upper case (case-
/// insensitive file systems), no `/` and cannot be `.` or `..`.
public struct PackageID: Hashable, Sendable, Comparable, Codable, CustomStringConvertible {
    /// The id text.
    public let rawValue: String

    /// Validates `text`; `nil` when it does not match the grammar.
    public init?(_ text: String) {
        guard Self.isValid(text) else { return nil }
        rawValue = text
    }

    /// Whether `text` matches `[a-z0-9][a-z0-9._-]{0,63}`.
    package static func isValid(_ text: String) -> Bool {
        let u = Array(text.utf8)
        guard (1...64).contains(u.count) else { return false }
        func lowerOrDigit(_ c: UInt8) -> Bool { (c >= 0x61 && c <= 0x7A) || (c >= 0x30 && c <= 0x39) }
        guard lowerOrDigit(u[0]) else { return false }
        return u.dropFirst().allSatisfy { lowerOrDigit($0) || $0 == 0x2E || $0 == 0x5F || $0 == 0x2D }
    }

    /// The id text, as written in documents and directory names.
    public var description: String { rawValue }
    /// Orders ids by their text (byte order: ids are ASCII).
    public static func < (l: PackageID, r: PackageID) -> Bool { l.rawValue < r.rawValue }

    /// Decodes an id from a JSON string, refusing text that does not match the grammar.
    public init(from decoder: Decoder) throws {
        let c = try decoder.singleValueContainer()
        let text = try c.decode(String.self)
        guard let id = PackageID(text) else {
            throw DecodingError.dataCorruptedError(
                in: c, debugDescription: "\(quoted(text)) is not a package id: expected [a-z0-9][a-z0-9._-]{0,63}")
        }
        self = id
    }

    /// Encodes the id as its text, a JSON string.
    public func encode(to encoder: Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(rawValue)
    }
}
