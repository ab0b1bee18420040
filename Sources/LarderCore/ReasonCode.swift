/// A stable, machine-readable reason: why an operation was refused or failed, or what a sync
/// decided (`hash-mismatch`, `no-space`, `index-expired`, …). Lowercase ASCII letters, digits
/// and `-`, starting with a letter or digit, at most 64 bytes: the same text in `--json` output
/// (a JSON string), in the CLI's `error [code]: message` lines and in a sync's report. Every
/// error type's `code` is one. A code read from text is checked (`init?(rawValue:)`, and so
/// decoding); one written in the source is a literal, checked by `ReasonCodeTests` for every
/// literal in `Sources/`.
public struct ReasonCode: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible,
    ExpressibleByStringLiteral
{
    /// The code's text.
    public let rawValue: String

    /// `rawValue` as a code, or nil when it is not one (empty, too long, or other characters).
    public init?(rawValue: String) {
        let bytes = rawValue.utf8
        guard !bytes.isEmpty, bytes.count <= 64, bytes.first != UInt8(ascii: "-"),
            bytes.allSatisfy({ ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D })
        else { return nil }
        self.rawValue = rawValue
    }

    /// A code written in the source.
    public init(stringLiteral value: String) { rawValue = value }

    /// The code's text.
    public var description: String { rawValue }
}
