import Foundation
import LarderCore
import LarderResolve
import LarderTestSupport
import LarderWebView
import Synchronization
import Testing

/// An engine's cookie jar in memory, recording every call (the bridge must make one per cookie).
final class FakeCookieStore: CookieStore, Sendable {
    let jar = Mutex<[WebCookie]>([])
    let saves = Mutex<[WebCookie]>([])
    let now: Date

    init(now: Date = Date(timeIntervalSince1970: 1_800_000_000)) { self.now = now }

    func cookies(for url: URL) async -> [WebCookie] {
        jar.withLock { $0 }.filter { $0.matches(url) && !$0.isExpired(at: now) }
    }

    func cookies(named name: String) async -> [WebCookie] { jar.withLock { $0 }.filter { $0.name == name } }

    func save(_ cookie: WebCookie) async {
        saves.withLock { $0.append(cookie) }
        jar.withLock { jar in
            jar.removeAll { $0.name == cookie.name && $0.domain == cookie.domain && $0.path == cookie.path }
            if !cookie.isExpired(at: now) { jar.append(cookie) }
        }
    }

    var names: [String] { jar.withLock { $0.map(\.name) } }
}

@Suite("WebKit path: Set-Cookie as RFC 6265 reads it")
struct SetCookieTests {
    let now = Date(timeIntervalSince1970: 1_800_000_000)
    let url = URL(string: "https://shop.example.com/account/login")!

    @Test("name, value and every attribute")
    func attributes() throws {
        let c = try #require(
            SetCookie.parse(
                "sid = a=b ; Domain=.Example.COM; Path=/; Secure; HttpOnly; SameSite=strict; Max-Age=60", for: url,
                now: now))
        #expect(c.name == "sid" && c.value == "a=b")
        #expect(c.domain == "example.com" && !c.hostOnly)
        #expect(c.path == "/" && c.secure && c.httpOnly && c.sameSite == .strict)
        #expect(c.expires == now.addingTimeInterval(60))
    }

    @Test("no Domain: host-only; no Path: the request path's directory; neither expiry: a session cookie")
    func defaults() throws {
        let c = try #require(SetCookie.parse("theme=dark", for: url, now: now))
        #expect(c.domain == "shop.example.com" && c.hostOnly)
        #expect(c.path == "/account")
        #expect(c.expires == nil)
        #expect(SetCookie.parse("a=1", for: URL(string: "https://h.example/")!, now: now)?.path == "/")
        #expect(SetCookie.parse("a=1; Path=relative", for: url, now: now)?.path == "/account")
    }

    @Test("Max-Age wins over Expires; zero or negative means expired; a bad Max-Age is ignored")
    func expiry() throws {
        let both = try #require(
            SetCookie.parse("a=1; Expires=Wed, 09 Jun 2100 10:18:14 GMT; Max-Age=10", for: url, now: now))
        #expect(both.expires == now.addingTimeInterval(10))
        #expect(SetCookie.parse("a=1; Max-Age=0", for: url, now: now)?.isExpired(at: now) == true)
        #expect(SetCookie.parse("a=1; Max-Age=-5", for: url, now: now)?.isExpired(at: now) == true)
        #expect(SetCookie.parse("a=1; Max-Age=1e3", for: url, now: now)?.expires == nil)
    }

    @Test(
        "cookie dates in the forms servers send",
        arguments: [
            "Wed, 09 Jun 2100 10:18:14 GMT", "Wednesday, 09-Jun-00 10:18:14 GMT", "Wed Jun  9 10:18:14 2100",
            "09 Jun 2100 10:18:14", "Wed, 09-Jun-2100 10:18:14 GMT",
        ])
    func dates(_ text: String) throws {
        let c = try #require(SetCookie.parse("a=1; Expires=\(text)", for: url, now: now))
        let expires = try #require(c.expires)
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = try #require(TimeZone(identifier: "UTC"))
        let parts = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: expires)
        #expect(parts.month == 6 && parts.day == 9 && parts.hour == 10 && parts.minute == 18 && parts.second == 14)
        #expect(parts.year == 2100 || parts.year == 2000)
    }

    @Test(
        "ignored as a user agent ignores them",
        arguments: ["noequals", "=novalue", "a=1; Domain=other.org", "a=1; Domain=com"])
    func ignored(_ field: String) {
        #expect(SetCookie.parse(field, for: url, now: now) == nil)
    }

    @Test("an invalid date is no expiry at all")
    func badDate() {
        #expect(SetCookie.parse("a=1; Expires=31 Feb 2100 10:00:00", for: url, now: now)?.expires == nil)
        #expect(SetCookie.parse("a=1; Expires=soon", for: url, now: now)?.expires == nil)
    }

    @Test("which requests carry a cookie: host-only or domain, path prefix at a slash, Secure over https only")
    func matching() {
        let hostOnly = WebCookie(name: "a", value: "1", domain: "shop.example.com", path: "/account")
        #expect(hostOnly.matches(URL(string: "https://shop.example.com/account")!))
        #expect(hostOnly.matches(URL(string: "http://shop.example.com/account/x")!))
        #expect(!hostOnly.matches(URL(string: "https://shop.example.com/accounts")!))
        #expect(!hostOnly.matches(URL(string: "https://sub.shop.example.com/account")!))
        let domain = WebCookie(name: "a", value: "1", domain: "example.com", hostOnly: false, secure: true)
        #expect(domain.matches(URL(string: "https://sub.example.com/")!))
        #expect(!domain.matches(URL(string: "http://sub.example.com/")!))
        #expect(!domain.matches(URL(string: "https://notexample.com/")!))
    }
}

@Suite("WebKit path: the cookie bridge over a fake store")
struct CookieBridgeTests {
    let store = FakeCookieStore()
    var bridge: CookieBridge { CookieBridge(store: store, clock: { [store] in store.now }) }

    @Test("each Set-Cookie of an answer is saved apart, in order, and taken out of the fields")
    func incoming() async {
        let fields = await bridge.incoming(
            [
                ("Content-Type", "text/html"), ("Set-Cookie", "sid=1; HttpOnly; Path=/"),
                ("set-cookie", "theme=dark; Path=/; Expires=Wed, 09 Jun 2100 10:18:14 GMT"), ("X-Other", "y"),
            ], from: "https://app.example.com/login")
        #expect(fields.map(\.0) == ["Content-Type", "X-Other"])
        #expect(store.saves.withLock { $0.map(\.name) } == ["sid", "theme"])
        let theme = store.jar.withLock { $0 }.first { $0.name == "theme" }
        #expect(theme?.expires != nil && store.jar.withLock { $0 }.first { $0.name == "sid" }?.expires == nil)
    }

    @Test("an expired Set-Cookie deletes the stored cookie")
    func deletes() async {
        _ = await bridge.incoming([("Set-Cookie", "sid=1; Path=/")], from: "https://app.example.com/")
        _ = await bridge.incoming([("Set-Cookie", "sid=; Path=/; Max-Age=0")], from: "https://app.example.com/")
        #expect(store.names.isEmpty && store.saves.withLock { $0.count } == 2)
    }

    @Test("a forwarded request carries the store's cookies for its URL, longest path first, in one field")
    func outgoing() async {
        _ = await bridge.incoming(
            [("Set-Cookie", "a=1; Path=/"), ("Set-Cookie", "b=2; Path=/api"), ("Set-Cookie", "c=3; Path=/other")],
            from: "https://app.example.com/")
        let fields = await bridge.outgoing(
            [("Cookie", "engine=ignored"), ("Accept", "*/*")], to: "https://app.example.com/api/items")
        #expect(fields.filter { $0.0 == "Cookie" }.map(\.1) == ["b=2; a=1"])
        #expect(fields.contains { $0 == ("Accept", "*/*") })
        let none = await bridge.outgoing([("Accept", "*/*")], to: "https://elsewhere.example.org/")
        #expect(!none.contains { $0.0 == "Cookie" })
    }

    @Test("document.cookie: HttpOnly cookies never reach script; script cannot set or replace one")
    func script() async {
        let origin = "https://app.example.com/index.html"
        _ = await bridge.incoming(
            [("Set-Cookie", "sid=secret; Path=/; HttpOnly"), ("Set-Cookie", "theme=dark; Path=/")], from: origin)
        #expect(await bridge.scriptCookies(for: origin) == "theme=dark")
        #expect(await bridge.scriptSets("page=script; Path=/", for: origin) == nil)
        #expect(await bridge.scriptSets("evil=1; Path=/; HttpOnly", for: origin) != nil)
        #expect(await bridge.scriptSets("sid=stolen; Path=/", for: origin) != nil)
        #expect(await bridge.scriptCookies(for: origin) == "theme=dark; page=script")
        let sent = await bridge.outgoing([], to: origin)
        #expect(sent.first?.1 == "sid=secret; theme=dark; page=script")
    }
}

/// What an engine's request and cookie look like to the glue (`URLRequest`, `HTTPCookie`).
struct FakeEngineRequest: EngineRequest {
    var httpMethod: String?
    var url: URL?
    var allHTTPHeaderFields: [String: String]?
    var httpBody: Data?
    var mainDocumentURL: URL?
}

struct FakeEngineCookie: EngineCookie {
    var name = "sid", value = "1", domain = ".example.com", path = "/"
    var expiresDate: Date? = nil
    var isSecure = true, isHTTPOnly = true
}

@Suite("WebKit path: an engine's requests and cookies in plain values")
struct EngineValuesTests {
    @Test("a request: method (nil is GET), fields, body, navigation when the main document is the URL")
    func request() throws {
        let url = URL(string: "larder://app/index.html")
        let r = try #require(
            SchemeRequest(
                FakeEngineRequest(
                    httpMethod: nil, url: url, allHTTPHeaderFields: ["Range": "bytes=0-1"], httpBody: Data("b".utf8),
                    mainDocumentURL: url)))
        #expect(r.method == .get && r.url == "larder://app/index.html" && r.header("range") == "bytes=0-1")
        #expect(r.body == Data("b".utf8) && r.isNavigation)
        #expect(SchemeRequest(FakeEngineRequest(httpMethod: "PO ST", url: url)) == nil)
        #expect(SchemeRequest(FakeEngineRequest(httpMethod: "PUT", url: url))?.isNavigation == false)
    }

    @Test("a store's cookie: a leading dot makes a domain cookie; the way back is a Set-Cookie that parses the same")
    func cookie() throws {
        let c = WebCookie(FakeEngineCookie(expiresDate: Date(timeIntervalSince1970: 4_000_000_000)))
        #expect(c.domain == "example.com" && !c.hostOnly && c.secure && c.httpOnly)
        let field = try #require(c.setCookieFields["Set-Cookie"])
        #expect(SetCookie.parse(field, for: c.setCookieURL) == c)
        var hostOnly = WebCookie(name: "t", value: "x", domain: "app.example.com", path: "/a", sameSite: .strict)
        hostOnly.expires = nil
        let back = SetCookie.parse(try #require(hostOnly.setCookieFields["Set-Cookie"]), for: hostOnly.setCookieURL)
        #expect(back == hostOnly)
    }
}
