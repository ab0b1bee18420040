import Foundation
import LarderCore

/// Where a cookie write comes from: a `Set-Cookie` field of a forwarded answer, or a page's
/// `document.cookie` (a "non-HTTP" API, RFC 6265bis §5.7).
package enum CookieWriter: Sendable, Equatable {
    /// A response's `Set-Cookie`.
    case http
    /// A page's script.
    case script
}

/// How a forwarded request relates to the page that makes it (RFC 6265bis §5.2), which decides
/// the SameSite cookies it carries.
package enum CookieSiteContext: Sendable, Equatable {
    /// Same site, and for a navigation started from the same site (or by the user): every cookie.
    case sameSite
    /// A top-level navigation from another site with a safe method (GET, HEAD): Lax and None
    /// cookies, no Strict ones.
    case crossSiteNavigation
    /// Anything else from another site (subresources, frames, a POST navigation): None only.
    case crossSite

    /// Whether a request in this context carries a cookie whose SameSite is `sameSite` (nil is
    /// Lax, as Chromium keeps it).
    package func carries(_ sameSite: WebCookie.SameSite?) -> Bool {
        switch (self, sameSite ?? .lax) {
        case (.sameSite, _), (_, .none): true
        case (.crossSiteNavigation, .lax): true
        default: false
        }
    }
}

/// The storage rules of RFC 6265bis §5.7 that a cookie store's own API does not apply (an
/// engine's store takes any cookie it is handed): why a cookie from `url` is ignored, or nil.
package enum CookieRules {
    /// Why `cookie`, set by `writer` for a response from (or a page of) `url`, must be ignored;
    /// `existing` are the store's cookies of the same name. Nil: store it.
    package static func refusal(
        _ cookie: WebCookie, from url: URL, writer: CookieWriter, existing: [WebCookie]
    ) -> String? {
        let secureOrigin = url.scheme?.lowercased() == "https" || isLoopback(url.host ?? "")
        if writer == .script, cookie.httpOnly { return "HttpOnly cannot be set from script" }
        if cookie.secure, !secureOrigin { return "Secure cannot be set from an insecure origin" }
        if cookie.sameSite == WebCookie.SameSite.none, !cookie.secure { return "SameSite=None needs Secure" }
        let name = cookie.name.lowercased()
        if name.hasPrefix("__secure-"), !(cookie.secure && secureOrigin) {
            return "a __Secure- cookie needs Secure and a secure origin"
        }
        if name.hasPrefix("__host-"), !(cookie.secure && secureOrigin && cookie.hostOnly && cookie.path == "/") {
            return "a __Host- cookie needs Secure, a secure origin, no Domain and Path=/"
        }
        for old in existing where old.name == cookie.name && overlaps(old, cookie) {
            if writer == .script, old.httpOnly {
                return "an HttpOnly cookie of that name cannot be written from script"
            }
            if !secureOrigin, old.secure {
                return "a Secure cookie of that name cannot be written from an insecure origin"
            }
        }
        return nil
    }

    /// Whether two cookies of one name could shadow each other: their domains match one way or
    /// the other and their paths do.
    static func overlaps(_ a: WebCookie, _ b: WebCookie) -> Bool {
        let domains = SetCookie.domainMatches(a.domain, b.domain) || SetCookie.domainMatches(b.domain, a.domain)
        let paths = SetCookie.pathMatches(a.path, b.path) || SetCookie.pathMatches(b.path, a.path)
        return domains && paths
    }

    /// Whether `host` is a loopback name or address (a secure context for cookies, as Chromium has it).
    static func isLoopback(_ host: String) -> Bool {
        let h = host.lowercased()
        return h == "localhost" || h.hasSuffix(".localhost") || h == "127.0.0.1" || h == "::1" || h == "[::1]"
    }

    /// The site (scheme and registrable domain) of `url`, for SameSite; nil without a host.
    package static func site(of url: URL, _ suffixes: PublicSuffixList) -> String? {
        guard let host = url.host?.lowercased(), let scheme = url.scheme?.lowercased() else { return nil }
        return "\(scheme)://\(suffixes.registrableDomain(host))"
    }
}
