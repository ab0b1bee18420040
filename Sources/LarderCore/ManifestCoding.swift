import Foundation

/// Errors reading a repository document (index, file list, signature, key).
public enum ManifestError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The bytes are not the JSON document expected; `detail` names the field and the problem.
    case malformed(document: String, detail: String)
    /// The document's `schemaVersion` is one this build cannot read.
    case unsupportedSchema(document: String, found: Int, supported: Int)
    /// The document is larger than readers accept.
    case tooLarge(document: String, size: Int, limit: Int)
    /// A key appears twice in one object of the document (the key, quoted and capped, and
    /// where the object is as a JSON pointer): manifests §2 makes such a document invalid.
    case duplicateKey(document: String, key: String, at: String)

    /// `duplicate-key` for a duplicate key, whatever the document; else `fallback`, the code the
    /// caller gives this document's other errors (`index-schema`, `file-list-schema`, …).
    package func code(or fallback: ReasonCode) -> ReasonCode {
        if case .duplicateKey = self { return "duplicate-key" }
        return fallback
    }

    /// Names the document, what is wrong with it, and for a schema mismatch that larder needs an upgrade.
    public var description: String {
        switch self {
        case .malformed(let doc, let detail):
            "\(doc) is not a valid document: \(detail)"
        case .unsupportedSchema(let doc, let found, let supported):
            "\(doc) has schemaVersion \(found); this build reads schemaVersion \(supported) — upgrade larder"
        case .tooLarge(let doc, let size, let limit):
            "\(doc) is \(size) bytes; readers accept at most \(limit)"
        case .duplicateKey(let doc, let key, let at):
            "\(doc) is not a valid document: the key \(key) appears twice in the object at \(at) (duplicate keys are refused: readers disagree on which value wins)"
        }
    }
}

/// The one JSON dialect of every Larder document: sorted keys, two-space indentation, no escaped
/// slashes, RFC 3339 dates in UTC with whole seconds, trailing newline. The same value always
/// encodes to the same bytes.
package enum ManifestCoding {
    /// Largest document readers accept: an index of about 17,000 packages (≈ 900 bytes each), or
    /// the file list of a version at the 50,000-file limit (≈ 170 bytes a file).
    package static let maxDocumentBytes = 16 << 20

    /// Encodes `value` canonically; `compact` leaves out the indentation and line breaks (but not
    /// the final newline), for the device's `state.json`, which every change rewrites.
    package static func encode<T: Encodable>(_ value: T, compact: Bool = false) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting =
            compact ? [.sortedKeys, .withoutEscapingSlashes] : [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
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
    package static func decode<T: Decodable>(_ type: T.Type, from data: Data, document: String) throws(ManifestError)
        -> T
    {
        guard data.count <= maxDocumentBytes else {
            throw .tooLarge(document: document, size: data.count, limit: maxDocumentBytes)
        }
        if T.self is any RepositoryDocument.Type, let dup = DuplicateKeys.first(in: data) {
            throw .duplicateKey(document: document, key: quoted(dup.key), at: quoted(dup.path))
        }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { dec in
            let c = try dec.singleValueContainer()
            let text = try c.decode(String.self)
            guard let d = parseRFC3339(text) else {
                throw DecodingError.dataCorruptedError(
                    in: c, debugDescription: "\(quoted(text)) is not an RFC 3339 date-time")
            }
            return d
        }
        do {
            // A document that says its schema version is decoded once (scanning a large state or
            // index twice cost as much as decoding it); the probe runs only when decoding fails,
            // so that another version is reported as such rather than as a malformed field.
            if T.self is any SchemaVersioned.Type {
                let value: T
                do { value = try decoder.decode(T.self, from: data) } catch {
                    try checkSchema(
                        decoder, data, document,
                        supported: (T.self as? any SchemaVersioned.Type)?.supportedSchemaVersions
                            ?? currentSchemaVersion...currentSchemaVersion)
                    throw error
                }
                if let versioned = value as? any SchemaVersioned {
                    let supported = Swift.type(of: versioned).supportedSchemaVersion
                    if !Swift.type(of: versioned).supportedSchemaVersions.contains(versioned.schemaVersion) {
                        throw ManifestError.unsupportedSchema(
                            document: document, found: versioned.schemaVersion, supported: supported)
                    }
                }
                return value
            }
            try checkSchema(decoder, data, document)
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

    /// Throws `unsupportedSchema` when the document declares a schema version other than ours.
    private static func checkSchema(
        _ decoder: JSONDecoder, _ data: Data, _ document: String,
        supported: ClosedRange<Int> = currentSchemaVersion...currentSchemaVersion
    ) throws {
        if let probe = try? decoder.decode(SchemaProbe.self, from: data), let v = probe.schemaVersion,
            !supported.contains(v)
        {
            throw ManifestError.unsupportedSchema(document: document, found: v, supported: supported.upperBound)
        }
    }

    static func describe(_ error: DecodingError) -> String {
        func path(_ p: [CodingKey]) -> String {
            let s = p.map { k in k.intValue.map { "[\($0)]" } ?? ".\(k.stringValue)" }.joined()
            return s.isEmpty ? "(top level)" : String(s.drop(while: { $0 == "." }))
        }
        switch error {
        case .keyNotFound(let key, let ctx):
            return "missing field \(quoted(key.stringValue)) at \(path(ctx.codingPath))"
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

    /// `2026-01-02T03:04:05Z`: UTC, whole seconds — the time is rounded to the millisecond, then
    /// the milliseconds are dropped, as `ISO8601DateFormatter` does. Computed directly —
    /// a formatter per date made encoding a large `state.json` spend most of its time building
    /// formatters — and equal, byte for byte, to `ISO8601DateFormatter`'s output (a test checks).
    package static func formatRFC3339(_ date: Date) -> String {
        let millis = (date.timeIntervalSince1970 * 1000).rounded()
        let seconds = Int64((millis / 1000).rounded(.down))
        let days = seconds >= 0 ? seconds / 86_400 : -((-seconds + 86_399) / 86_400)
        let secondOfDay = seconds - days * 86_400
        let (y, m, d) = civil(fromDays: days)
        guard (0...9999).contains(y) else { return foundationFormat(date) }
        var out = [UInt8]()
        out.reserveCapacity(20)
        func put(_ v: Int64, _ width: Int) {
            var digits = [UInt8](repeating: 0x30, count: width)
            var n = v
            for i in stride(from: width - 1, through: 0, by: -1) {
                digits[i] = 0x30 + UInt8(n % 10)
                n /= 10
            }
            out += digits
        }
        put(y, 4)
        out.append(0x2D)
        put(m, 2)
        out.append(0x2D)
        put(d, 2)
        out.append(0x54)
        put(secondOfDay / 3600, 2)
        out.append(0x3A)
        put(secondOfDay / 60 % 60, 2)
        out.append(0x3A)
        put(secondOfDay % 60, 2)
        out.append(0x5A)
        return String(decoding: out, as: UTF8.self)
    }

    /// Parses RFC 3339 with or without fractional seconds, any offset. The form Larder writes
    /// (`YYYY-MM-DDTHH:MM:SSZ`, in range) is read directly; anything else goes to
    /// `ISO8601DateFormatter`, so every input gets the same answer as before.
    package static func parseRFC3339(_ text: String) -> Date? {
        if let d = parseCanonical(text) { return d }
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime]
        if let d = f.date(from: text) { return d }
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return f.date(from: text)
    }

    /// `YYYY-MM-DDTHH:MM:SSZ` with every field in range (seconds 0–59), else nil.
    static func parseCanonical(_ text: String) -> Date? {
        // A native string's bytes are contiguous; any other goes the slow way (nil here).
        let parsed = text.utf8.withContiguousStorageIfAvailable { b -> Date? in
            guard b.count == 20, b[4] == 0x2D, b[7] == 0x2D, b[10] == 0x54, b[13] == 0x3A, b[16] == 0x3A,
                b[19] == 0x5A
            else { return nil }
            func number(_ from: Int, _ count: Int) -> Int64? {
                var v: Int64 = 0
                for i in from..<(from + count) {
                    let c = b[i]
                    guard c >= 0x30, c <= 0x39 else { return nil }
                    v = v * 10 + Int64(c - 0x30)
                }
                return v
            }
            guard let y = number(0, 4), let m = number(5, 2), let d = number(8, 2), let hh = number(11, 2),
                let mm = number(14, 2), let ss = number(17, 2), (1...12).contains(m), d >= 1,
                d <= daysInMonth(y, m), hh < 24, mm < 60, ss < 60
            else { return nil }
            let days = Self.days(fromCivil: y, m, d)
            return Date(timeIntervalSince1970: Double(days * 86_400 + hh * 3600 + mm * 60 + ss))
        }
        return parsed ?? nil
    }

    private static func foundationFormat(_ date: Date) -> String {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime]
        f.timeZone = TimeZone(identifier: "UTC")
        return f.string(from: date)
    }

    private static func daysInMonth(_ y: Int64, _ m: Int64) -> Int64 {
        switch m {
        case 2: (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
    static func days(fromCivil year: Int64, _ month: Int64, _ day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    /// The proleptic Gregorian date of a day count since 1970-01-01 (`civil_from_days`).
    static func civil(fromDays days: Int64) -> (Int64, Int64, Int64) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (m <= 2 ? yoe + era * 400 + 1 : yoe + era * 400, m, d)
    }
}

/// A document that carries its `schemaVersion` (decoded with the rest, so `ManifestCoding.decode`
/// checks it without a second pass over the bytes).
package protocol SchemaVersioned {
    /// The document's format version.
    var schemaVersion: Int { get }
    /// The newest version of this document a reader here accepts.
    static var supportedSchemaVersion: Int { get }
    /// Every version of this document a reader here accepts.
    static var supportedSchemaVersions: ClosedRange<Int> { get }
}

extension SchemaVersioned {
    /// `currentSchemaVersion`, for every document but those versioned apart (delta manifests).
    package static var supportedSchemaVersion: Int { currentSchemaVersion }
    /// `supportedSchemaVersion` alone, for every document but the index.
    package static var supportedSchemaVersions: ClosedRange<Int> { supportedSchemaVersion...supportedSchemaVersion }
}

extension RepositoryIndex: SchemaVersioned {
    /// 2, a sharded index.
    package static var supportedSchemaVersion: Int { ShardedIndex.schemaVersion }
    /// 1 (every entry in the index) and 2 (on-demand entries in shards).
    package static var supportedSchemaVersions: ClosedRange<Int> { currentSchemaVersion...ShardedIndex.schemaVersion }
}
extension FileList: SchemaVersioned {}
extension SignatureFile: SchemaVersioned {}
extension SandboxState: SchemaVersioned {}
