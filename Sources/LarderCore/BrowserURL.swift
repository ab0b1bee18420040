import Foundation

/// A URL string brought to the form a browser would request, as the WHATWG URL standard parses
/// it, so that the resolver never serves a raw URL from a different file than the one the
/// browser's request would name.
///
/// Only what decides which file answers is done here: ASCII tab and newlines removed and
/// leading and trailing C0 controls and spaces trimmed; for http(s), `\` read as `/` and an
/// internationalised host converted to its ASCII form (IDNA, `bücher.example` →
/// `xn--bcher-kva.example`, through Foundation); and, for every scheme, dot segments (`.`, `..`,
/// and their `%2e` spellings) removed as the standard's path state does: an empty segment is a
/// segment (`/foo/bar//..` is `/foo/bar/`), and `..` at the root stays at the root. Percent-decoding
/// and the rest are the lookup's business, as they are a server's.
package enum BrowserURL {
    /// The canonical form of `url`, or nil when it is already canonical (the common case, found
    /// in one pass over its bytes without allocating).
    package static func canonical(_ url: String) -> String? {
        var u = url
        return u.withUTF8 { needsWork($0) } ? rewrite(url) : nil
    }

    /// Whether anything in `b` may change: tab or newline, leading or trailing controls or
    /// spaces, a backslash, a non-ASCII or `%` byte in the authority, or a segment starting with
    /// `.` or `%2e`.
    static func needsWork(_ b: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let first = b.first, let last = b.last else { return false }
        if first <= 0x20 || last <= 0x20 { return true }
        var inAuthority = false
        var slashes = 0
        var previous: UInt8 = 0
        for (i, c) in b.enumerated() {
            switch c {
            case 0x09, 0x0A, 0x0D, UInt8(ascii: "\\"): return true
            case UInt8(ascii: "?"), UInt8(ascii: "#"): return false
            case UInt8(ascii: "/"):
                slashes += 1
                inAuthority = slashes == 2
            case UInt8(ascii: "."):
                if previous == UInt8(ascii: "/"), slashes >= 3 { return true }
            case UInt8(ascii: "%"):
                if inAuthority { return true }
                if previous == UInt8(ascii: "/"), slashes >= 3, i + 2 < b.count, b[i + 1] == UInt8(ascii: "2"),
                    b[i + 2] | 0x20 == UInt8(ascii: "e")
                {
                    return true
                }
            default:
                if c >= 0x80, inAuthority { return true }
            }
            previous = c
        }
        return false
    }

    private static func rewrite(_ url: String) -> String {
        var bytes = Array(url.utf8).filter { $0 != 0x09 && $0 != 0x0A && $0 != 0x0D }
        while let f = bytes.first, f <= 0x20 { bytes.removeFirst() }
        while let l = bytes.last, l <= 0x20 { bytes.removeLast() }
        let text = String(decoding: bytes, as: UTF8.self)
        guard let colon = text.firstIndex(of: ":") else { return text }
        let scheme = text[..<colon].lowercased()
        let special = scheme == "http" || scheme == "https"
        var rest = text[text.index(after: colon)...]
        let isSlash: (Character) -> Bool = { $0 == "/" || (special && $0 == "\\") }
        guard rest.count >= 2, isSlash(rest[rest.startIndex]), isSlash(rest[rest.index(after: rest.startIndex)])
        else { return text }
        rest = rest.dropFirst(2)
        let authorityEnd = rest.firstIndex(where: { isSlash($0) || $0 == "?" || $0 == "#" }) ?? rest.endIndex
        var authority = String(rest[..<authorityEnd])
        let afterAuthority = rest[authorityEnd...]
        let pathEnd = afterAuthority.firstIndex(where: { $0 == "?" || $0 == "#" }) ?? afterAuthority.endIndex
        var path = String(afterAuthority[..<pathEnd])
        let tail = afterAuthority[pathEnd...]
        if special {
            authority = asciiAuthority(authority)
            path = path.replacingOccurrences(of: "\\", with: "/")
        }
        if path.hasPrefix("/") { path = removeDotSegments(path) }
        return scheme + "://" + authority + path + tail
    }

    /// The authority with its host in ASCII (IDNA) form; unchanged when the host cannot be
    /// converted (it then matches no route, as a browser would refuse it).
    static func asciiAuthority(_ authority: String) -> String {
        let at = authority.lastIndex(of: "@").map { authority.index(after: $0) } ?? authority.startIndex
        let hostAndPort = authority[at...]
        var hostEnd = hostAndPort.endIndex
        if !hostAndPort.hasPrefix("["), let colon = hostAndPort.lastIndex(of: ":") { hostEnd = colon }
        let host = String(hostAndPort[..<hostEnd])
        guard !host.hasPrefix("["), host.utf8.contains(where: { $0 >= 0x80 || $0 == UInt8(ascii: "%") }) else {
            return authority
        }
        // A decoded host with a forbidden domain code point is no host to a browser: left as it
        // is, it matches no route.
        guard case .success(let decoded) = PercentDecoding.decode(host),
            !decoded.unicodeScalars.contains(where: {
                $0.value <= 0x20 || $0.value == 0x7F || "#%/:<>?@[\\]^|".unicodeScalars.contains($0)
            }),
            let ascii = asciiHost(decoded)
        else {
            return authority
        }
        return String(authority[..<at]) + ascii + hostAndPort[hostEnd...]
    }

    /// The ASCII (IDNA, lower-case) form of a host name, or nil when it has none.
    package static func asciiHost(_ host: String) -> String? {
        if !host.utf8.contains(where: { $0 >= 0x80 }) { return host.lowercased() }
        var c = URLComponents()
        c.scheme = "https"
        c.host = host
        guard let encoded = c.encodedHost, !encoded.utf8.contains(where: { $0 >= 0x80 || $0 == UInt8(ascii: "%") })
        else { return nil }
        return encoded.lowercased()
    }

    /// The WHATWG path state's treatment of `.` and `..` segments (also spelled with `%2e`) on a
    /// path that starts with `/`: a final `.` or `..` leaves a trailing `/`; `..` pops the previous
    /// segment, an empty one included, and at the root stays there.
    package static func removeDotSegments(_ path: String) -> String {
        var out: [Substring] = []
        let segments = path.dropFirst().split(separator: "/", omittingEmptySubsequences: false)
        for (i, s) in segments.enumerated() {
            let last = i == segments.count - 1
            if isDoubleDot(s) {
                if !out.isEmpty { out.removeLast() }
                if last { out.append("") }
            } else if isSingleDot(s) {
                if last { out.append("") }
            } else {
                out.append(s)
            }
        }
        return "/" + out.joined(separator: "/")
    }

    private static func isSingleDot(_ s: Substring) -> Bool { s == "." || s.lowercased() == "%2e" }

    private static func isDoubleDot(_ s: Substring) -> Bool {
        switch s.lowercased() {
        case "..", ".%2e", "%2e.", "%2e%2e": true
        default: false
        }
    }
}
