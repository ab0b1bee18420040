/// A Semantic Versioning 2.0.0 version: `MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]`.
///
/// Ordering is SemVer precedence (§11): numeric core, then a version with a pre-release is lower
/// than the same core without one, pre-release identifiers compared left to right (numeric ones
/// numerically and below alphanumeric ones), a shorter identifier list lower when all shared
/// ones are equal. Build metadata is kept for display but ignored by `==`, `<` and hashing,
/// because it carries no precedence.
public struct SemanticVersion: Sendable, Hashable, Comparable, CustomStringConvertible, Codable {
    /// The MAJOR number (incompatible changes).
    public let major: UInt64
    /// The MINOR number (compatible additions).
    public let minor: UInt64
    /// The PATCH number (compatible fixes).
    public let patch: UInt64
    /// Dot-separated pre-release identifiers (empty for a release).
    public let prerelease: [String]
    /// Dot-separated build metadata identifiers (ignored for precedence).
    public let build: [String]

    /// Creates a version from its parts; the identifiers are not re-validated.
    public init(_ major: UInt64, _ minor: UInt64, _ patch: UInt64, prerelease: [String] = [], build: [String] = []) {
        self.major = major
        self.minor = minor
        self.patch = patch
        self.prerelease = prerelease
        self.build = build
    }

    /// Parses the exact SemVer 2.0.0 grammar; `nil` for anything else (a leading `v`, leading
    /// zeros in numeric identifiers, empty identifiers, characters outside `[0-9A-Za-z-]`).
    public init?(_ text: String) {
        guard !text.isEmpty, text.utf8.count <= 256 else { return nil }
        var rest = Substring(text)
        var build: [String] = []
        if let plus = rest.firstIndex(of: "+") {
            let meta = rest[rest.index(after: plus)...]
            rest = rest[..<plus]
            let ids = meta.split(separator: ".", omittingEmptySubsequences: false)
            guard !ids.isEmpty, ids.allSatisfy({ Self.isIdentifier($0) }) else { return nil }
            build = ids.map(String.init)
        }
        var prerelease: [String] = []
        if let dash = rest.firstIndex(of: "-") {
            let pre = rest[rest.index(after: dash)...]
            rest = rest[..<dash]
            let ids = pre.split(separator: ".", omittingEmptySubsequences: false)
            guard !ids.isEmpty else { return nil }
            for id in ids {
                guard Self.isIdentifier(id) else { return nil }
                if id.allSatisfy(\.isASCIIDigit), id.count > 1, id.first == "0" { return nil }
            }
            prerelease = ids.map(String.init)
        }
        let core = rest.split(separator: ".", omittingEmptySubsequences: false)
        guard core.count == 3 else { return nil }
        var numbers: [UInt64] = []
        for part in core {
            guard !part.isEmpty, part.allSatisfy(\.isASCIIDigit), !(part.count > 1 && part.first == "0"),
                let n = UInt64(part)
            else { return nil }
            numbers.append(n)
        }
        self.init(numbers[0], numbers[1], numbers[2], prerelease: prerelease, build: build)
    }

    private static func isIdentifier(_ s: Substring) -> Bool {
        !s.isEmpty
            && s.utf8.allSatisfy { c in
                (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || c == 0x2D
            }
    }

    /// Whether this is a pre-release version.
    public var isPrerelease: Bool { !prerelease.isEmpty }

    /// The version text, `MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]`, which `init?(_:)` parses back.
    public var description: String {
        var s = "\(major).\(minor).\(patch)"
        if !prerelease.isEmpty { s += "-" + prerelease.joined(separator: ".") }
        if !build.isEmpty { s += "+" + build.joined(separator: ".") }
        return s
    }

    /// Equal in precedence: same core and pre-release identifiers; build metadata is ignored.
    public static func == (lhs: SemanticVersion, rhs: SemanticVersion) -> Bool {
        lhs.major == rhs.major && lhs.minor == rhs.minor && lhs.patch == rhs.patch && lhs.prerelease == rhs.prerelease
    }

    /// Hashes what `==` compares (core and pre-release identifiers), never the build metadata.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(major)
        hasher.combine(minor)
        hasher.combine(patch)
        hasher.combine(prerelease)
    }

    /// SemVer precedence (§11), as described on the type.
    public static func < (lhs: SemanticVersion, rhs: SemanticVersion) -> Bool {
        if lhs.major != rhs.major { return lhs.major < rhs.major }
        if lhs.minor != rhs.minor { return lhs.minor < rhs.minor }
        if lhs.patch != rhs.patch { return lhs.patch < rhs.patch }
        switch (lhs.prerelease.isEmpty, rhs.prerelease.isEmpty) {
        case (true, _): return false  // a release is never below a version with the same core
        case (false, true): return true
        case (false, false): break
        }
        for (a, b) in zip(lhs.prerelease, rhs.prerelease) where a != b {
            let an = a.allSatisfy(\.isASCIIDigit) ? UInt64(a) : nil
            let bn = b.allSatisfy(\.isASCIIDigit) ? UInt64(b) : nil
            switch (an, bn) {
            case (let x?, let y?): return x < y
            case (.some, nil): return true
            case (nil, .some): return false
            case (nil, nil): return a.utf8.lexicographicallyPrecedes(b.utf8)
            }
        }
        return lhs.prerelease.count < rhs.prerelease.count
    }

    /// Decodes a version from a JSON string, refusing text outside the SemVer 2.0.0 grammar.
    public init(from decoder: Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        guard let v = SemanticVersion(text) else {
            throw DecodingError.dataCorruptedError(
                in: container,
                debugDescription: "\(quoted(text)) is not a SemVer 2.0.0 version (e.g. 1.4.0 or 2.0.0-beta.1)")
        }
        self = v
    }

    /// Encodes the version as its text, build metadata included, a JSON string.
    public func encode(to encoder: Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}

/// A version range for dependencies: space-separated comparators that must all hold, e.g.
/// `>=1.2.0 <2.0.0`, `^1.2.0` (same major, at least 1.2.0), `~1.2.0` (same minor), `1.2.3` (exact),
/// or `*` (any release).
package struct VersionRange: Sendable, Hashable, Codable, CustomStringConvertible {
    enum Op: Sendable, Hashable { case eq, gt, ge, lt, le }
    private let terms: [Term]
    /// The text as written.
    package let description: String

    struct Term: Sendable, Hashable {
        let op: Op
        let version: SemanticVersion
    }

    /// Parses a range; `nil` when a comparator is not understood.
    package init?(_ text: String) {
        let parts = text.split(separator: " ", omittingEmptySubsequences: true)
        guard !parts.isEmpty else { return nil }
        var terms: [Term] = []
        for part in parts {
            if part == "*" { continue }
            var s = Substring(part)
            if s.hasPrefix("^") || s.hasPrefix("~") {
                let caret = s.hasPrefix("^")
                guard let v = SemanticVersion(String(s.dropFirst())) else { return nil }
                terms.append(Term(op: .ge, version: v))
                let upper: SemanticVersion
                if caret {
                    upper =
                        v.major > 0
                        ? SemanticVersion(v.major + 1, 0, 0)
                        : (v.minor > 0 ? SemanticVersion(0, v.minor + 1, 0) : SemanticVersion(0, 0, v.patch + 1))
                } else {
                    upper = SemanticVersion(v.major, v.minor + 1, 0)
                }
                terms.append(
                    Term(op: .lt, version: SemanticVersion(upper.major, upper.minor, upper.patch, prerelease: ["0"])))
                continue
            }
            let op: Op
            if s.hasPrefix(">=") {
                op = .ge
                s = s.dropFirst(2)
            } else if s.hasPrefix("<=") {
                op = .le
                s = s.dropFirst(2)
            } else if s.hasPrefix(">") {
                op = .gt
                s = s.dropFirst()
            } else if s.hasPrefix("<") {
                op = .lt
                s = s.dropFirst()
            } else if s.hasPrefix("=") {
                op = .eq
                s = s.dropFirst()
            } else {
                op = .eq
            }
            guard let v = SemanticVersion(String(s)) else { return nil }
            terms.append(Term(op: op, version: v))
        }
        self.terms = terms
        self.description = parts.joined(separator: " ")
    }

    /// Whether `version` satisfies every comparator.
    package func contains(_ version: SemanticVersion) -> Bool {
        terms.allSatisfy { t in
            switch t.op {
            case .eq: return version == t.version
            case .gt: return version > t.version
            case .ge: return version >= t.version
            case .lt: return version < t.version
            case .le: return version <= t.version
            }
        }
    }

    /// Equal when the texts (single-spaced) are; equivalent ranges written differently are not equal.
    package static func == (lhs: VersionRange, rhs: VersionRange) -> Bool { lhs.description == rhs.description }
    /// Hashes the text, as `==` compares it.
    package func hash(into hasher: inout Hasher) { hasher.combine(description) }

    /// Decodes a range from a JSON string, refusing one with a comparator it does not understand.
    package init(from decoder: Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        guard let r = VersionRange(text) else {
            throw DecodingError.dataCorruptedError(
                in: container,
                debugDescription: "\(quoted(text)) is not a version range (e.g. \">=1.0.0 <2.0.0\" or \"^1.2.0\")")
        }
        self = r
    }

    /// Encodes the range as its text, a JSON string.
    package func encode(to encoder: Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}
