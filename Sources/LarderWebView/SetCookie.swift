import Foundation

/// `Set-Cookie` fields read as RFC 6265 §5.2 and §5.3 say a user agent reads them.
package enum SetCookie {
    /// The cookie `field` sets for a response from `url`, or nil when a user agent ignores it
    /// (no `=` in its first part, an empty name, a `Domain` that does not cover the host, or
    /// that is a public suffix other than the host itself — then the cookie is host-only, RFC
    /// 6265bis §5.7 step 9). `Max-Age` wins over `Expires`; a cookie with neither is a session
    /// cookie; an expiry in the past means "delete it".
    package static func parse(
        _ field: String, for url: URL, now: Date = Date(), suffixes: PublicSuffixList = .system
    ) -> WebCookie? {
        guard let host = url.host?.lowercased(), !host.isEmpty else { return nil }
        var parts = field.split(separator: ";", omittingEmptySubsequences: false).map(String.init)
        let pair = parts.removeFirst()
        guard let eq = pair.firstIndex(of: "=") else { return nil }
        let name = pair[..<eq].trimmingCharacters(in: .whitespaces)
        let value = pair[pair.index(after: eq)...].trimmingCharacters(in: .whitespaces)
        guard !name.isEmpty else { return nil }
        var cookie = WebCookie(name: name, value: value, domain: host, path: defaultPath(url))
        var maxAge: Date?
        var expires: Date?
        for part in parts {
            let (key, val) = attribute(part)
            switch key {
            case "expires": if let d = parseDate(val) { expires = d }
            case "max-age":
                guard let first = val.first, first == "-" || first.isNumber,
                    val.dropFirst().allSatisfy(\.isNumber), let seconds = Int(val.prefix(18))
                else { continue }
                maxAge = seconds <= 0 ? Date(timeIntervalSince1970: 0) : now.addingTimeInterval(TimeInterval(seconds))
            case "domain":
                var d = val.lowercased()
                if d.hasPrefix(".") { d.removeFirst() }
                guard !d.isEmpty else { continue }
                guard domainMatches(host, d) else { return nil }
                if d == host && (suffixes.isPublicSuffix(d) || PublicSuffixList.isAddress(d)) { continue }
                guard !suffixes.isPublicSuffix(d), !PublicSuffixList.isAddress(d) else { return nil }
                cookie.domain = d
                cookie.hostOnly = false
            case "path": cookie.path = val.hasPrefix("/") ? val : defaultPath(url)
            case "secure": cookie.secure = true
            case "httponly": cookie.httpOnly = true
            case "samesite":
                cookie.sameSite = WebCookie.SameSite.allCases.first { $0.rawValue.lowercased() == val.lowercased() }
            default: continue
            }
        }
        cookie.expires = maxAge ?? expires
        return cookie
    }

    static func attribute(_ part: String) -> (String, String) {
        guard let eq = part.firstIndex(of: "=") else {
            return (part.trimmingCharacters(in: .whitespaces).lowercased(), "")
        }
        return (
            part[..<eq].trimmingCharacters(in: .whitespaces).lowercased(),
            part[part.index(after: eq)...].trimmingCharacters(in: .whitespaces)
        )
    }

    /// RFC 6265 §5.1.3: `host` is `domain` or ends in `.domain` (and is not an IP address then).
    static func domainMatches(_ host: String, _ domain: String) -> Bool {
        if host == domain { return true }
        let isIP = host.allSatisfy { $0.isNumber || $0 == "." } || host.contains(":")
        return !isIP && host.hasSuffix("." + domain)
    }

    /// RFC 6265 §5.1.4: the request path is the cookie path, or under it.
    static func pathMatches(_ requestPath: String, _ cookiePath: String) -> Bool {
        guard requestPath.hasPrefix(cookiePath) else { return false }
        return requestPath.count == cookiePath.count || cookiePath.hasSuffix("/")
            || requestPath[requestPath.index(requestPath.startIndex, offsetBy: cookiePath.count)] == "/"
    }

    /// RFC 6265 §5.1.4's default path: the request path up to (not including) its last `/`.
    static func defaultPath(_ url: URL) -> String {
        let path = url.path
        guard path.hasPrefix("/"), let last = path.lastIndex(of: "/"), last != path.startIndex else { return "/" }
        return String(path[..<last])
    }

    /// RFC 6265 §5.1.1's cookie-date algorithm (any order of time, day, month and year tokens).
    static func parseDate(_ text: String) -> Date? {
        let delimiters = CharacterSet(charactersIn: "\t !\"#$%&'()*+,-./;<=>?@[\\]^_`{|}~")
        var time: (Int, Int, Int)?
        var day: Int?
        var month: Int?
        var year: Int?
        let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
        for token in text.components(separatedBy: delimiters) where !token.isEmpty {
            if time == nil, let t = timeToken(token) {
                time = t
            } else if day == nil, let d = leadingDigits(token, 1...2) {
                day = d
            } else if month == nil, let m = months.firstIndex(of: String(token.prefix(3)).lowercased()) {
                month = m + 1
            } else if year == nil, let y = leadingDigits(token, 2...4) {
                year = y
            }
        }
        guard let (h, mi, s) = time, let day, let month, var year else { return nil }
        if (70...99).contains(year) { year += 1900 } else if (0...69).contains(year) { year += 2000 }
        guard (1...31).contains(day), year >= 1601, h <= 23, mi <= 59, s <= 59 else { return nil }
        var parts = DateComponents()
        (parts.year, parts.month, parts.day, parts.hour, parts.minute, parts.second) = (year, month, day, h, mi, s)
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC") ?? calendar.timeZone
        guard let date = calendar.date(from: parts), calendar.component(.day, from: date) == day else { return nil }
        return date
    }

    private static func leadingDigits(_ token: String, _ count: ClosedRange<Int>) -> Int? {
        let digits = token.prefix { $0.isASCII && $0.isNumber }
        guard count.contains(digits.count) else { return nil }
        return Int(digits)
    }

    private static func timeToken(_ token: String) -> (Int, Int, Int)? {
        let fields = token.split(separator: ":", omittingEmptySubsequences: false)
        guard fields.count == 3 else { return nil }
        let numbers = fields.enumerated().compactMap { i, f -> Int? in
            let digits = f.prefix { $0.isASCII && $0.isNumber }
            guard (1...2).contains(digits.count), i == 2 || digits.count == f.count else { return nil }
            return Int(digits)
        }
        guard numbers.count == 3 else { return nil }
        return (numbers[0], numbers[1], numbers[2])
    }
}
