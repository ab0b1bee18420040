import Foundation

/// A set of package ids a delegated team may publish (format §18): a package id in which `*`
/// stands for any run of characters, possibly empty (`pay-*`, `*.shop`, `checkout`, `*`).
/// At most 64 bytes of `[a-z0-9._*-]`; without its stars it is a package id's characters.
package struct PackagePattern: Hashable, Sendable, Codable, CustomStringConvertible {
    /// The pattern's text.
    package let text: String
    private let bytes: [UInt8]

    /// Validates `text`; nil when it is not a pattern.
    package init?(_ text: String) {
        let u = Array(text.utf8)
        guard (1...64).contains(u.count) else { return nil }
        func allowed(_ c: UInt8) -> Bool {
            (c >= 0x61 && c <= 0x7A) || (c >= 0x30 && c <= 0x39) || c == 0x2E || c == 0x5F || c == 0x2D
                || c == Self.star
        }
        guard u.allSatisfy(allowed) else { return nil }
        // A literal first character must be one an id may start with.
        if let first = u.first, first != Self.star,
            !((first >= 0x61 && first <= 0x7A) || (first >= 0x30 && first <= 0x39))
        {
            return nil
        }
        self.text = text
        bytes = u
    }

    private static let star = UInt8(ascii: "*")

    /// The pattern as written.
    package var description: String { text }

    /// Whether `id` is in the set.
    package func matches(_ id: PackageID) -> Bool {
        Self.match(bytes[...], Array(id.rawValue.utf8)[...])
    }

    /// Whether some package id is in both sets (so two release teams would both claim it).
    package func overlaps(_ other: PackagePattern) -> Bool {
        Self.intersect(bytes, other.bytes)
    }

    private static func match(_ p: ArraySlice<UInt8>, _ s: ArraySlice<UInt8>) -> Bool {
        // Greedy wildcard matching with one back-tracking point (linear in practice).
        var pi = p.startIndex
        var si = s.startIndex
        var starP: Int?
        var starS = s.startIndex
        while si < s.endIndex {
            if pi < p.endIndex, p[pi] != star, p[pi] == s[si] {
                pi += 1
                si += 1
            } else if pi < p.endIndex, p[pi] == star {
                starP = pi
                starS = si
                pi += 1
            } else if let sp = starP {
                pi = sp + 1
                starS += 1
                si = starS
            } else {
                return false
            }
        }
        while pi < p.endIndex, p[pi] == star { pi += 1 }
        return pi == p.endIndex
    }

    /// Whether two star patterns have a common word: a search over pairs of positions, where a
    /// star may consume one character of the other side or nothing (at most 65 × 65 states).
    private static func intersect(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        var seen = Set<Int>()
        var stack = [(0, 0)]
        while let (i, j) = stack.popLast() {
            guard seen.insert(i * 128 + j).inserted else { continue }
            if i == a.count && j == b.count { return true }
            let ca = i < a.count ? a[i] : nil
            let cb = j < b.count ? b[j] : nil
            if ca == star { stack.append((i + 1, j)) }
            if cb == star { stack.append((i, j + 1)) }
            if let x = ca, let y = cb {
                if x == star && y != star {
                    stack.append((i, j + 1))  // the star takes b's character and may take more
                } else if y == star && x != star {
                    stack.append((i + 1, j))
                } else if x == y {
                    stack.append((i + 1, j + 1))
                }
            }
        }
        return false
    }

    /// Decodes a pattern, refusing text that is not one.
    package init(from decoder: Decoder) throws {
        let c = try decoder.singleValueContainer()
        let text = try c.decode(String.self)
        guard let p = PackagePattern(text) else {
            throw DecodingError.dataCorruptedError(
                in: c,
                debugDescription:
                    "\(quoted(text)) is not a package pattern: a package id in which * stands for any characters")
        }
        self = p
    }

    /// Encodes the text.
    package func encode(to encoder: Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(text)
    }
}
