import Foundation

/// Why a path inside a package (an archive entry, a file-list entry, a packed file) is refused.
public enum PathProblem: Error, Sendable, Equatable, CustomStringConvertible {
    /// The bytes are not UTF-8.
    case notUTF8
    /// The path is empty.
    case empty
    /// The path starts with `/`.
    case absolute
    /// The path starts with a Windows drive letter (`C:`).
    case driveLetter
    /// The path holds a backslash.
    case backslash
    /// The path holds a NUL byte.
    case nul
    /// The path holds a control character.
    case controlCharacter
    /// The path has an empty component (`a//b`, a trailing `/`).
    case emptyComponent
    /// A component is `.` or `..` (the component).
    case dotComponent(String)
    /// The path is not in Unicode normalization form C.
    case notNFC
    /// The path is longer than the limit, in UTF-8 bytes.
    case tooLong(bytes: Int, limit: Int)
    /// A component is longer than the limit, in UTF-8 bytes.
    case componentTooLong(bytes: Int, limit: Int)
    /// The path has more components than the limit.
    case tooDeep(depth: Int, limit: Int)

    /// A stable machine-readable code.
    public var code: ReasonCode {
        switch self {
        case .notUTF8: "path-not-utf8"
        case .empty: "path-empty"
        case .absolute: "path-absolute"
        case .driveLetter: "path-drive-letter"
        case .backslash: "path-backslash"
        case .nul: "path-nul"
        case .controlCharacter: "path-control-character"
        case .emptyComponent: "path-empty-component"
        case .dotComponent: "path-dot-component"
        case .notNFC: "path-not-nfc"
        case .tooLong: "path-too-long"
        case .componentTooLong: "path-component-too-long"
        case .tooDeep: "path-too-deep"
        }
    }

    /// What is wrong with the name, in a clause for an error message (`the name contains a backslash`).
    public var description: String {
        switch self {
        case .notUTF8: "the name is not valid UTF-8"
        case .empty: "the name is empty"
        case .absolute: "the name is an absolute path (starts with /)"
        case .driveLetter: "the name starts with a drive letter"
        case .backslash: "the name contains a backslash"
        case .nul: "the name contains a NUL byte"
        case .controlCharacter: "the name contains a control character"
        case .emptyComponent: "the name has an empty component (//)"
        case .dotComponent(let c): "the name has a \(quoted(c)) component"
        case .notNFC: "the name is not in Unicode NFC form"
        case .tooLong(let b, let l): "the name is \(b) bytes long (limit \(l))"
        case .componentTooLong(let b, let l): "a component of the name is \(b) bytes long (limit \(l))"
        case .tooDeep(let d, let l): "the name is \(d) directories deep (limit \(l))"
        }
    }
}

/// A validated `/`-separated relative path inside a package: UTF-8, NFC, no empty, `.` or `..`
/// components, no backslash, NUL or control characters, not absolute, within the length and
/// depth limits. Once constructed it can be joined to a root without escaping it.
public struct RelativePath: Hashable, Sendable, Comparable, CustomStringConvertible, Codable {
    /// The path text (`a/b/c.js`).
    public let string: String

    /// Validates raw name bytes as found in an archive; a trailing `/` (directory marker) is
    /// removed first.
    package static func validate(bytes: [UInt8], limits: TreeLimits = .standard) -> Result<RelativePath, PathProblem> {
        var raw = bytes
        while raw.last == UInt8(ascii: "/"), raw.count > 1 { raw.removeLast() }
        guard let text = String(validating: raw, as: UTF8.self) else { return .failure(.notUTF8) }
        return validate(text, limits: limits)
    }

    /// Validates a path string.
    package static func validate(_ text: String, limits: TreeLimits = .standard) -> Result<RelativePath, PathProblem> {
        let u = Array(text.utf8)
        if u.isEmpty { return .failure(.empty) }
        if u.contains(0) { return .failure(.nul) }
        if u.contains(UInt8(ascii: "\\")) { return .failure(.backslash) }
        if u[0] == UInt8(ascii: "/") { return .failure(.absolute) }
        if u.count >= 2, u[1] == UInt8(ascii: ":"),
            (u[0] >= 0x41 && u[0] <= 0x5A) || (u[0] >= 0x61 && u[0] <= 0x7A)
        {
            return .failure(.driveLetter)
        }
        if u.contains(where: { $0 < 0x20 || $0 == 0x7F }) { return .failure(.controlCharacter) }
        if u.count > limits.maxPathBytes { return .failure(.tooLong(bytes: u.count, limit: limits.maxPathBytes)) }
        let parts = u.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        if parts.count > limits.maxDepth { return .failure(.tooDeep(depth: parts.count, limit: limits.maxDepth)) }
        for p in parts {
            if p.isEmpty { return .failure(.emptyComponent) }
            if p.elementsEqual([0x2E]) { return .failure(.dotComponent(".")) }
            if p.elementsEqual([0x2E, 0x2E]) { return .failure(.dotComponent("..")) }
            if p.count > limits.maxComponentBytes {
                return .failure(.componentTooLong(bytes: p.count, limit: limits.maxComponentBytes))
            }
        }
        if !u.allSatisfy({ $0 < 0x80 }),
            text.precomposedStringWithCanonicalMapping.utf8.elementsEqual(text.utf8) == false
        {
            return .failure(.notNFC)
        }
        return .success(RelativePath(unchecked: text))
    }

    /// Creates a path that the caller has already validated.
    init(unchecked text: String) { string = text }

    /// Parses and validates; `nil` when invalid.
    public init?(_ text: String) {
        guard case .success(let p) = Self.validate(text) else { return nil }
        self = p
    }

    /// The key under which two names collide on a case-insensitive, normalisation-insensitive
    /// file system (APFS, HFS+): NFC of the lower-cased NFC form.
    package var collisionKey: String {
        Self.collisionKey(string)
    }

    /// NFC, then lower case, then NFC again: names equal under this key would be merged by a
    /// case-insensitive, normalisation-insensitive file system. ASCII names (nearly all) take a
    /// fast path with the same result: ASCII is already NFC and lower-cases byte by byte.
    package static func collisionKey(_ s: String) -> String {
        // ASCII with no upper case is its own key: the same string (and storage) is returned.
        if s.utf8.allSatisfy({ $0 < 0x80 && !($0 >= 0x41 && $0 <= 0x5A) }) { return s }
        var ascii = true
        var bytes: [UInt8] = []
        bytes.reserveCapacity(s.utf8.count)
        for c in s.utf8 {
            if c >= 0x80 {
                ascii = false
                break
            }
            bytes.append(c >= 0x41 && c <= 0x5A ? c + 32 : c)
        }
        if ascii { return String(decoding: bytes, as: UTF8.self) }
        return s.precomposedStringWithCanonicalMapping.lowercased().precomposedStringWithCanonicalMapping
    }

    /// The path's components.
    package var components: [Substring] { string.split(separator: "/") }

    /// The last component.
    package var lastComponent: Substring { string.split(separator: "/").last ?? Substring(string) }

    /// The file extension in lower case, without the dot ("" when none).
    package var pathExtension: String {
        let last = lastComponent
        guard let dot = last.lastIndex(of: "."), dot != last.startIndex else { return "" }
        return last[last.index(after: dot)...].lowercased()
    }

    /// The path text: `/`-separated, without a leading `/`.
    public var description: String { string }

    /// Byte order of the UTF-8 form, so every platform sorts file lists alike.
    public static func < (l: RelativePath, r: RelativePath) -> Bool {
        l.string.utf8.lexicographicallyPrecedes(r.string.utf8)
    }

    /// Decodes a path from a JSON string, refusing an invalid one with its `PathProblem` in the message.
    public init(from decoder: Decoder) throws {
        let c = try decoder.singleValueContainer()
        let text = try c.decode(String.self)
        switch Self.validate(text) {
        case .success(let p): self = p
        case .failure(let problem):
            throw DecodingError.dataCorruptedError(in: c, debugDescription: "path \(quoted(text)): \(problem)")
        }
    }

    /// Encodes the path as its text, a JSON string.
    public func encode(to encoder: Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(string)
    }
}
