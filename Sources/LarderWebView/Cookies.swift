import Foundation

/// A cookie as a cookie store keeps it (RFC 6265 §5.3's storage model, less the times a store
/// keeps for itself).
public struct WebCookie: Sendable, Equatable, CustomStringConvertible {
    /// The `SameSite` attribute.
    public enum SameSite: String, Sendable, Equatable, CaseIterable {
        /// `SameSite=Strict`.
        case strict = "Strict"
        /// `SameSite=Lax`.
        case lax = "Lax"
        /// `SameSite=None`.
        case none = "None"
    }

    /// The name.
    public var name: String
    /// The value.
    public var value: String
    /// The host (a host-only cookie) or the domain (lower case, no leading dot) it is sent to.
    public var domain: String
    /// Whether only `domain` itself gets it (no `Domain` attribute), not its subdomains.
    public var hostOnly: Bool
    /// The path it is sent under.
    public var path: String
    /// When it expires; nil for a session cookie (it ends with the session).
    public var expires: Date?
    /// Sent over secure connections only.
    public var secure: Bool
    /// Never visible to script.
    public var httpOnly: Bool
    /// Its `SameSite` attribute, if any.
    public var sameSite: SameSite?

    /// Creates one.
    public init(
        name: String, value: String, domain: String, hostOnly: Bool = true, path: String = "/", expires: Date? = nil,
        secure: Bool = false, httpOnly: Bool = false, sameSite: SameSite? = nil
    ) {
        self.name = name
        self.value = value
        self.domain = domain
        self.hostOnly = hostOnly
        self.path = path
        self.expires = expires
        self.secure = secure
        self.httpOnly = httpOnly
        self.sameSite = sameSite
    }

    /// A cookie as engines' stores give it (`HTTPCookie`, libsoup): `cookieDomain` with a leading
    /// dot for a domain cookie, without for a host-only one; `sameSite` as text (`Lax`, `strict`…).
    public init(
        name: String, value: String, cookieDomain: String, path: String, expires: Date?, secure: Bool,
        httpOnly: Bool, sameSite: String?
    ) {
        self.init(
            name: name, value: value,
            domain: cookieDomain.hasPrefix(".") ? String(cookieDomain.dropFirst()) : cookieDomain,
            hostOnly: !cookieDomain.hasPrefix("."), path: path, expires: expires, secure: secure, httpOnly: httpOnly,
            sameSite: sameSite.flatMap { s in SameSite.allCases.first { $0.rawValue.lowercased() == s.lowercased() } })
    }

    /// A cookie an engine's store gave (`HTTPCookie`, made `EngineCookie` by the glue).
    public init(_ c: some EngineCookie) {
        self.init(
            name: c.name, value: c.value, cookieDomain: c.domain, path: c.path, expires: c.expiresDate,
            secure: c.isSecure, httpOnly: c.isHTTPOnly, sameSite: c.sameSiteName)
    }

    /// Its domain as engines' stores take it: with a leading dot for a domain cookie.
    public var cookieDomain: String { hostOnly ? domain : "." + domain }

    /// As a `Set-Cookie` field for `setCookieURL` would set it (`HTTPCookie.cookies(withResponseHeaderFields:for:)`
    /// reads it back whole): a host-only cookie without `Domain`.
    public var setCookieFields: [String: String] {
        var parts = ["\(name)=\(value)", "Path=\(path)"]
        if !hostOnly { parts.append("Domain=.\(domain)") }
        if let expires {
            let f = DateFormatter()
            f.locale = Locale(identifier: "en_US_POSIX")
            f.timeZone = TimeZone(identifier: "GMT")
            f.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
            parts.append("Expires=\(f.string(from: expires))")
        }
        if secure { parts.append("Secure") }
        if httpOnly { parts.append("HttpOnly") }
        if let sameSite { parts.append("SameSite=\(sameSite.rawValue)") }
        return ["Set-Cookie": parts.joined(separator: "; ")]
    }

    /// The URL `setCookieFields` are read for: its domain, its path.
    public var setCookieURL: URL {
        URL(string: "\(secure ? "https" : "http")://\(domain)\(path.hasPrefix("/") ? path : "/")")
            ?? URL(fileURLWithPath: "/")
    }

    /// Whether it has expired at `now` (a session cookie never has).
    public func isExpired(at now: Date) -> Bool { expires.map { $0 <= now } ?? false }

    /// Whether a request to `url` carries it (RFC 6265 §5.4: domain, path and Secure).
    public func matches(_ url: URL) -> Bool {
        guard let host = url.host?.lowercased(), let scheme = url.scheme?.lowercased() else { return false }
        if secure && scheme != "https" && !CookieRules.isLoopback(host) { return false }
        let domainOK = hostOnly ? host == domain : SetCookie.domainMatches(host, domain)
        return domainOK && SetCookie.pathMatches(url.path.isEmpty ? "/" : url.path, path)
    }

    /// `name=value; Domain=…; Path=…; …`, as a `Set-Cookie` field would give it.
    public var description: String {
        var parts = ["\(name)=\(value)", hostOnly ? "host \(domain)" : "Domain=\(domain)", "Path=\(path)"]
        if let expires { parts.append("Expires=\(Int(expires.timeIntervalSince1970))") }
        if secure { parts.append("Secure") }
        if httpOnly { parts.append("HttpOnly") }
        if let sameSite { parts.append("SameSite=\(sameSite.rawValue)") }
        return parts.joined(separator: "; ")
    }
}

/// The parts of an engine's cookie the bridge reads: `HTTPCookie`'s, which WebKit's glue declares
/// it has (`extension HTTPCookie: EngineCookie {}`).
public protocol EngineCookie {
    /// The name.
    var name: String { get }
    /// The value.
    var value: String { get }
    /// The domain, with a leading dot for a domain cookie.
    var domain: String { get }
    /// The path.
    var path: String { get }
    /// The expiry; nil for a session cookie.
    var expiresDate: Date? { get }
    /// Secure only.
    var isSecure: Bool { get }
    /// Hidden from script.
    var isHTTPOnly: Bool { get }
    /// Its `SameSite` attribute as text (`lax`, `strict`), nil when the store keeps none.
    var sameSiteName: String? { get }
}

extension EngineCookie {
    /// None kept.
    public var sameSiteName: String? { nil }
}

/// The engine's cookie store, as the cookie bridge needs it (WebKitGTK's `WebKitCookieManager`,
/// WebKit's `WKHTTPCookieStore`; a fake in tests). One call per cookie: the jar is never
/// replaced whole.
public protocol CookieStore: Sendable {
    /// The cookies a request to `url` carries, as the store matches them (HttpOnly ones too).
    func cookies(for url: URL) async -> [WebCookie]
    /// Stores `cookie`, replacing the one with its name, domain and path; an expired cookie
    /// deletes that one instead (whatever its value).
    func save(_ cookie: WebCookie) async
    /// Every cookie the store holds named `name`, whatever its domain and path (for the rules
    /// that keep a cookie from shadowing another).
    func cookies(named name: String) async -> [WebCookie]
}

/// Cookies across the proxy: a web view's forwarded requests carry the cookies the engine's
/// store holds for the package's http(s) origin (SameSite applied), a forwarded answer's
/// `Set-Cookie` fields go to the store before the answer reaches the page, and a page on a
/// custom scheme sees and sets its own origin's script-visible cookies through
/// `document.cookie` (`pageScript` and the reserved path `/.larder/cookies`). Every write is
/// held to RFC 6265bis's storage rules (`CookieRules`), which an engine's store does not apply
/// to cookies handed to it.
public final class CookieBridge: Sendable {
    /// The engine's store.
    public let store: any CookieStore
    /// Public suffixes, for `Domain` attributes and sites.
    public let suffixes: PublicSuffixList
    let clock: @Sendable () -> Date
    /// Hears one line per cookie refused, naming it and why.
    let log: (@Sendable (String) -> Void)?

    /// A bridge over `store`; `clock` gives the current time (for Max-Age); `log` hears refusals.
    public init(
        store: any CookieStore, suffixes: PublicSuffixList = .system,
        clock: @escaping @Sendable () -> Date = { Date() },
        log: (@Sendable (String) -> Void)? = nil
    ) {
        self.store = store
        self.suffixes = suffixes
        self.clock = clock
        self.log = log
    }

    /// The fields of a forwarded request to `url` from a page of its own site: any `Cookie` field
    /// the engine put is replaced by the store's cookies for `url` (longest path first), in one field.
    public func outgoing(_ fields: [(String, String)], to url: String) async -> [(String, String)] {
        await outgoing(fields, to: url, context: .sameSite)
    }

    /// The fields of a forwarded request to `url` in `context`: any `Cookie` field the engine
    /// put is replaced by the store's cookies for `url` that `context` carries (longest path
    /// first), in one field.
    package func outgoing(
        _ fields: [(String, String)], to url: String, context: CookieSiteContext
    ) async -> [(String, String)] {
        var out = fields.filter { $0.0.lowercased() != "cookie" }
        guard let u = URL(string: url) else { return out }
        let now = clock()
        let cookies = await store.cookies(for: u).filter {
            !$0.isExpired(at: now) && $0.matches(u) && context.carries($0.sameSite)
        }
        if !cookies.isEmpty { out.append(("Cookie", Self.header(cookies))) }
        return out
    }

    /// A forwarded answer from `url` to a request of the page's own site: each `Set-Cookie`
    /// field (each kept apart) the rules accept is saved to the store, in order, before this
    /// returns; the fields come back without them (WebKit ignores them on a scheme handler's
    /// response, and script must never read them).
    public func incoming(_ fields: [(String, String)], from url: String) async -> [(String, String)] {
        await incoming(fields, from: url, context: .sameSite)
    }

    /// As `incoming(_:from:)` for a request in `context`: the answer to a cross-site request
    /// other than a top-level navigation sets no Lax or Strict cookie (RFC 6265bis §5.7).
    package func incoming(
        _ fields: [(String, String)], from url: String, context: CookieSiteContext
    ) async -> [(String, String)] {
        if let u = URL(string: url) {
            for (name, value) in fields where name.lowercased() == "set-cookie" {
                _ = await accept(value, for: u, writer: .http, context: context)
            }
        }
        return fields.filter { $0.0.lowercased() != "set-cookie" }
    }

    /// What `document.cookie` reads on a page whose origin is `url`: the script-visible cookies
    /// (no HttpOnly, no Secure one on an http page), `a=1; b=2`.
    public func scriptCookies(for url: String) async -> String {
        guard let u = URL(string: url) else { return "" }
        let now = clock()
        return Self.header(
            await store.cookies(for: u).filter { !$0.httpOnly && !$0.isExpired(at: now) && $0.matches(u) })
    }

    /// `document.cookie = text` on a page whose origin is `url`: saved as a `Set-Cookie` from
    /// script would be (`CookieRules`: no HttpOnly, no shadowing or overwriting an HttpOnly
    /// cookie, prefixes, Secure). Returns why it was refused, or nil when it was saved.
    @discardableResult
    public func scriptSets(_ text: String, for url: String) async -> String? {
        guard let u = URL(string: url) else { return "\(url) is not a URL" }
        return await accept(text, for: u, writer: .script)
    }

    /// Parses `field` for `url` and saves it unless a rule refuses it (then logged): why, or nil.
    func accept(
        _ field: String, for url: URL, writer: CookieWriter, context: CookieSiteContext = .sameSite
    ) async -> String? {
        guard let cookie = SetCookie.parse(field, for: url, now: clock(), suffixes: suffixes) else {
            return note("ignored (malformed, or a Domain that is not the host's or is a public suffix)", field, url)
        }
        if context == .crossSite, cookie.sameSite ?? .lax != .none {
            return note("a cross-site answer cannot set a Lax or Strict cookie", field, url)
        }
        let existing = await store.cookies(named: cookie.name)
        if let why = CookieRules.refusal(cookie, from: url, writer: writer, existing: existing) {
            return note(why, field, url)
        }
        await store.save(cookie)
        return nil
    }

    private func note(_ why: String, _ field: String, _ url: URL) -> String {
        let name = field.split(separator: "=", maxSplits: 1).first.map(String.init) ?? ""
        log?("cookie \(name.trimmingCharacters(in: .whitespaces)) for \(url.host ?? "") refused: \(why)")
        return why
    }

    /// `a=1; b=2`, longer paths first (RFC 6265 §5.4 step 2), the store's order otherwise.
    static func header(_ cookies: [WebCookie]) -> String {
        cookies.enumerated().sorted { ($0.element.path.count, -$0.offset) > ($1.element.path.count, -$1.offset) }
            .map { "\($0.element.name)=\($0.element.value)" }.joined(separator: "; ")
    }

    /// The reserved path a page's `document.cookie` bridge talks to on its own custom-scheme origin.
    public static let path = "/.larder/cookies"

    /// The header field the page script's requests carry: a cross-origin request with it needs
    /// a CORS preflight, which the bridge never grants, and a form or a `<script src>` cannot
    /// send it.
    public static let requestMarker = "X-Larder-Cookies"

    /// The user script that bridges `document.cookie` on pages of a custom scheme (where the
    /// engine keeps no cookies): reading it asks `/.larder/cookies?page=URL` on the page's own
    /// origin (a synchronous GET the scheme handler answers with `scriptCookies`), writing it
    /// posts the text there (`scriptSets`), for the http(s) URL the page's URL maps to. The
    /// handler answers only for the origin that asks (`SchemeTaskDriver`'s cookie bridge).
    /// Pages on http(s) keep the engine's own `document.cookie`.
    public static let pageScript = """
        (function () {
          'use strict';
          if (location.protocol === 'http:' || location.protocol === 'https:' || window.__larderCookies) return;
          window.__larderCookies = true;
          function call(method, body) {
            try {
              var x = new XMLHttpRequest();
              x.open(method, location.protocol + '//' + location.host + '/.larder/cookies?page=' +
                encodeURIComponent(location.href), false);
              x.setRequestHeader('X-Larder-Cookies', '1');
              x.send(body);
              return x.status === 200 ? x.responseText : '';
            } catch (e) { return ''; }
          }
          Object.defineProperty(document, 'cookie', {
            configurable: true,
            get: function () { return call('GET', null); },
            set: function (v) { call('POST', String(v)); }
          });
        })();

        """
}
