import Foundation

/// Errors reading a repository document (index, file list, signature, key).
public enum ManifestError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The bytes are not the JSON document expected; `detail` names the field and the problem.
    case malformed(document: String, detail: String)
    /// The document's `schemaVersion` is one this build cannot read.
    case unsupportedSchema(document: String, found: Int, supported: Int)
    /// The document is larger than readers accept.
    case tooLarge(document: String, size: Int, limit: Int)

    /// Names the document, what is wrong with it, and for a schema mismatch that larder needs an upgrade.
    public var description: String {
        switch self {
        case .malformed(let doc, let detail):
            "\(doc) is not a valid document: \(detail)"
        case .unsupportedSchema(let doc, let found, let supported):
            "\(doc) has schemaVersion \(found); this build reads schemaVersion \(supported) — upgrade larder"
        case .tooLarge(let doc, let size, let limit):
            "\(doc) is \(size) bytes; readers accept at most \(limit)"
        }
    }
}

/// The one JSON dialect of every Larder document: sorted keys, two-space indentation, no escaped
/// slashes, RFC 3339 dates in UTC with whole seconds, trailing newline. The same value always
/// encodes to the same bytes.
public enum ManifestCoding {
    /// Largest document readers accept (an index of thousands of packages stays far below).
    public static let maxDocumentBytes = 8 << 20

    /// Encodes `value` canonically.
    public static func encode<T: Encodable>(_ value: T) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, enc in
            var c = enc.singleValueContainer()
            try c.encode(formatRFC3339(date))
        }
        var data = try encoder.encode(value)
        data.append(0x0A)
        return data
    }

    /// Decodes a document, turning decoder errors into `ManifestError.malformed` that names the
    /// field, and refusing other schema versions.
    public static func decode<T: Decodable>(_ type: T.Type, from data: Data, document: String) throws(ManifestError)
        -> T
    {
        guard data.count <= maxDocumentBytes else {
            throw .tooLarge(document: document, size: data.count, limit: maxDocumentBytes)
        }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { dec in
            let c = try dec.singleValueContainer()
            let text = try c.decode(String.self)
            guard let d = parseRFC3339(text) else {
                throw DecodingError.dataCorruptedError(
                    in: c, debugDescription: "\"\(text)\" is not an RFC 3339 date-time")
            }
            return d
        }
        do {
            if let probe = try? decoder.decode(SchemaProbe.self, from: data), let v = probe.schemaVersion,
                v != currentSchemaVersion
            {
                throw ManifestError.unsupportedSchema(document: document, found: v, supported: currentSchemaVersion)
            }
            return try decoder.decode(T.self, from: data)
        } catch let e as ManifestError {
            throw e
        } catch let e as DecodingError {
            throw .malformed(document: document, detail: describe(e))
        } catch {
            throw .malformed(document: document, detail: "\(error)")
        }
    }

    private struct SchemaProbe: Decodable { let schemaVersion: Int? }

    static func describe(_ error: DecodingError) -> String {
        func path(_ p: [CodingKey]) -> String {
            let s = p.map { k in k.intValue.map { "[\($0)]" } ?? ".\(k.stringValue)" }.joined()
            return s.isEmpty ? "(top level)" : String(s.drop(while: { $0 == "." }))
        }
        switch error {
        case .keyNotFound(let key, let ctx):
            return "missing field \"\(key.stringValue)\" at \(path(ctx.codingPath))"
        case .typeMismatch(let t, let ctx):
            return "\(path(ctx.codingPath)): expected \(t)"
        case .valueNotFound(let t, let ctx):
            return "\(path(ctx.codingPath)): expected \(t), found null"
        case .dataCorrupted(let ctx):
            let underlying = (ctx.underlyingError as NSError?)?.localizedDescription
            return "\(path(ctx.codingPath)): \(ctx.debugDescription)" + (underlying.map { " (\($0))" } ?? "")
        @unknown default:
            return "\(error)"
        }
    }

    /// `2026-01-02T03:04:05Z`.
    public static func formatRFC3339(_ date: Date) -> String {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime]
        f.timeZone = TimeZone(identifier: "UTC")
        return f.string(from: date)
    }

    /// Parses RFC 3339 with or without fractional seconds, any offset.
    public static func parseRFC3339(_ text: String) -> Date? {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime]
        if let d = f.date(from: text) { return d }
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return f.date(from: text)
    }
}
