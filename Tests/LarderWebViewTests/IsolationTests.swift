import Foundation
import LarderCore
import LarderResolve
import LarderTestSupport
import LarderWebView
import Synchronization
import Testing

/// Two packages on two origins in one sandbox: `sample-app` (`app://sample-app`, network origin
/// https://app.example.com) and `other` (`larder://other`, https://other.example.org).
struct TwoPackages {
    let env: ResolveEnv
    let loader: ResourceLoader
    let store = FakeCookieStore(now: Date())

    init(networkHosts: [String]? = nil, corsOrigins: [String]? = nil) throws {
        env = try ResolveEnv()
        try env.publish("1.0.0") {
            $0.networkHosts = networkHosts
            $0.corsOrigins = corsOrigins
        }
        try env.install("1.0.0")
        try env.publish(
            "1.0.0", id: "other", routes: ["https://other.example.org/"], policy: Policy(mode: .localThenNetwork))
        try env.install("1.0.0", id: "other")
        loader = ResourceLoader(resolver: try Resolver(root: env.root, schemes: ["app"]))
    }

    func driver(_ exchange: ScriptedExchange = ScriptedExchange([:])) -> SchemeTaskDriver {
        SchemeTaskDriver(
            loader: loader, forwarder: Forwarder(network: .forward(scheme: "https"), exchange: exchange),
            delivery: DeliveryQueue(label: "test.isolation"), cookies: CookieBridge(store: store))
    }

    /// Both origins' login cookies, as their servers set them.
    func logIn() async {
        let bridge = CookieBridge(store: store)
        _ = await bridge.incoming(
            [("Set-Cookie", "app-sid=1; Path=/; HttpOnly"), ("Set-Cookie", "app-theme=dark; Path=/")],
            from: "https://app.example.com/")
        _ = await bridge.incoming(
            [("Set-Cookie", "other-token=secret; Path=/"), ("Set-Cookie", "other-sid=2; Path=/; HttpOnly")],
            from: "https://other.example.org/")
    }

    func run(_ request: SchemeRequest, _ d: SchemeTaskDriver) async -> (Int?, [String: String], String) {
        let task = FakeTask(request)
        d.start(task)
        _ = await task.waitForEnd()
        return (task.head?.0, task.head?.1 ?? [:], String(decoding: task.body, as: UTF8.self))
    }
}

@Suite("Isolation: the cookie bridge answers only the origin that asks")
struct CookieBridgeOriginTests {
    static let marker = (CookieBridge.requestMarker, "1")

    @Test("a request's page is its own origin's; a parameter, Origin, Referer or main document of another is refused")
    func cookiePage() {
        let endpoint = "app://sample-app/.larder/cookies"
        func page(_ r: SchemeRequest) -> String? { try? SchemeTaskDriver.cookiePage(r).get() }
        let own = "app%3A%2F%2Fsample-app%2Fshop%2Findex.html"
        #expect(
            page(SchemeRequest(url: "\(endpoint)?page=\(own)", headers: [Self.marker]))
                == "app://sample-app/shop/index.html")
        // No marker: a form, an <img> or a <script src> can make this request.
        #expect(page(SchemeRequest(url: "\(endpoint)?page=\(own)")) == nil)
        // Naming another origin's page.
        #expect(page(SchemeRequest(url: "\(endpoint)?page=larder%3A%2F%2Fother%2F", headers: [Self.marker])) == nil)
        // Another origin asks.
        #expect(page(SchemeRequest(url: endpoint, headers: [Self.marker, ("Origin", "larder://other")])) == nil)
        #expect(
            page(SchemeRequest(url: endpoint, headers: [Self.marker, ("Referer", "larder://other/x.html")])) == nil)
        #expect(page(SchemeRequest(url: endpoint, headers: [Self.marker], mainDocumentURL: "larder://other/")) == nil)
        // A POST needs a same-origin Origin.
        #expect(page(SchemeRequest(method: .post, url: endpoint, headers: [Self.marker])) == nil)
        #expect(
            page(SchemeRequest(method: .post, url: endpoint, headers: [Self.marker, ("Origin", "app://sample-app")]))
                == "app://sample-app/")
    }

    @Test("a page of one package cannot read or set another's cookies through its own bridge; 403 and a log line")
    func crossPackage() async throws {
        let two = try TwoPackages()
        defer { two.env.cleanup() }
        await two.logIn()
        let lines = Mutex<[String]>([])
        let d = SchemeTaskDriver(
            loader: two.loader, forwarder: Forwarder(network: .forward(scheme: "https"), exchange: nil),
            delivery: DeliveryQueue(label: "test.isolation"), cookies: CookieBridge(store: two.store),
            log: { line in lines.withLock { $0.append(line) } })
        let steal = SchemeRequest(
            url: "app://sample-app/.larder/cookies?page=larder%3A%2F%2Fother%2F", headers: [Self.marker],
            mainDocumentURL: "app://sample-app/index.html")
        let (status, _, body) = await two.run(steal, d)
        #expect(status == 403 && !body.contains("other-token"))
        #expect(lines.withLock { $0 }.contains { $0.contains("403 cookie bridge refused") })
        let plant = SchemeRequest(
            method: .post, url: "larder://other/.larder/cookies",
            headers: [Self.marker, ("Origin", "app://sample-app")],
            body: Data("other-token=planted; Path=/".utf8))
        #expect(await two.run(plant, d).0 == 403)
        #expect(two.store.jar.withLock { $0 }.first { $0.name == "other-token" }?.value == "secret")
        // Its own: only its own script-visible cookies.
        let own = SchemeRequest(
            url: "app://sample-app/.larder/cookies?page=app%3A%2F%2Fsample-app%2F", headers: [Self.marker],
            mainDocumentURL: "app://sample-app/")
        let (ok, headers, mine) = await two.run(own, d)
        #expect(ok == 200 && mine == "app-theme=dark" && headers["X-Content-Type-Options"] == "nosniff")
    }
}

@Suite("Isolation: cookie rules as RFC 6265bis keeps them")
struct CookieRuleTests {
    let store = FakeCookieStore(now: Date())
    var bridge: CookieBridge { CookieBridge(store: store, suffixes: Self.suffixes) }
    static let suffixes = try! PublicSuffixList(text: "// test list\ncom\norg\nuk\nco.uk\n*.ck\n!www.ck\ngithub.io\n")
    let page = "https://app.example.com/account/index.html"

    @Test("script cannot create, shadow or overwrite an HttpOnly cookie, under any path or domain")
    func httpOnly() async {
        _ = await bridge.incoming([("Set-Cookie", "sid=server; Path=/; HttpOnly")], from: page)
        #expect(await bridge.scriptSets("sid=evil; Path=/account", for: page) != nil)
        #expect(await bridge.scriptSets("sid=evil; Path=/", for: page) != nil)
        #expect(await bridge.scriptSets("sid=evil; Domain=example.com; Path=/", for: page) != nil)
        #expect(await bridge.scriptSets("new=1; HttpOnly", for: page) != nil)
        #expect(store.jar.withLock { $0 }.map(\.value) == ["server"])
    }

    @Test("an insecure origin cannot set a Secure cookie nor overwrite one; a secure one can")
    func secure() async {
        let http = "http://app.example.com/"
        _ = await bridge.incoming([("Set-Cookie", "pref=s; Path=/; Secure")], from: page)
        _ = await bridge.incoming([("Set-Cookie", "pref=plain; Path=/")], from: http)
        #expect(await bridge.scriptSets("pref=plain; Path=/", for: http) != nil)
        #expect(await bridge.scriptSets("mine=1; Secure", for: http) != nil)
        #expect(store.jar.withLock { $0 }.map(\.value) == ["s"])
        #expect(await bridge.scriptSets("pref=t; Path=/; Secure", for: page) == nil)
        #expect(store.jar.withLock { $0 }.map(\.value) == ["t"])
    }

    @Test("__Secure- and __Host- prefixes; SameSite=None needs Secure")
    func prefixes() async {
        #expect(await bridge.scriptSets("__Secure-a=1", for: page) != nil)
        #expect(await bridge.scriptSets("__Secure-a=1; Secure", for: page) == nil)
        #expect(await bridge.scriptSets("__Secure-b=1; Secure", for: "http://app.example.com/") != nil)
        #expect(await bridge.scriptSets("__Host-c=1; Secure; Path=/", for: page) == nil)
        #expect(await bridge.scriptSets("__Host-d=1; Secure; Path=/account", for: page) != nil)
        #expect(await bridge.scriptSets("__Host-e=1; Secure; Path=/; Domain=example.com", for: page) != nil)
        #expect(await bridge.scriptSets("__host-f=1; Path=/", for: page) != nil)
        #expect(await bridge.scriptSets("n=1; SameSite=None", for: page) != nil)
        #expect(await bridge.scriptSets("n=1; SameSite=None; Secure", for: page) == nil)
        #expect(Set(store.names) == ["__Secure-a", "__Host-c", "n"])
    }

    @Test("a Domain that is a public suffix is refused (the host itself makes a host-only cookie)")
    func publicSuffix() async {
        let uk = URL(string: "https://shop.example.co.uk/")!
        #expect(SetCookie.parse("a=1; Domain=co.uk", for: uk, suffixes: Self.suffixes) == nil)
        #expect(
            SetCookie.parse("a=1; Domain=example.co.uk", for: uk, suffixes: Self.suffixes)?.domain == "example.co.uk")
        let pages = URL(string: "https://me.github.io/")!
        #expect(SetCookie.parse("a=1; Domain=github.io", for: pages, suffixes: Self.suffixes) == nil)
        let suffixHost = SetCookie.parse(
            "a=1; Domain=github.io", for: URL(string: "https://github.io/")!, suffixes: Self.suffixes)
        #expect(suffixHost?.hostOnly == true && suffixHost?.domain == "github.io")
        #expect(Self.suffixes.isPublicSuffix("x.ck") && !Self.suffixes.isPublicSuffix("www.ck"))
        #expect(Self.suffixes.registrableDomain("a.b.example.co.uk") == "example.co.uk")
        #expect(Self.suffixes.registrableDomain("127.0.0.1") == "127.0.0.1")
        // No list: no Domain but the host's own.
        #expect(
            SetCookie.parse("a=1; Domain=example.com", for: URL(string: "https://a.example.com/")!, suffixes: .strict)
                == nil)
    }

    @Test("Debian's list is read (scripts/bootstrap installs publicsuffix)")
    func systemList() {
        #expect(PublicSuffixList.system.isLoaded)
        #expect(PublicSuffixList.system.isPublicSuffix("co.uk") && PublicSuffixList.system.isPublicSuffix("github.io"))
        #expect(PublicSuffixList.system.registrableDomain("shop.example.co.uk") == "example.co.uk")
    }

    @Test("deletion: Max-Age=0 or a past Expires, from a response or from script, removes the cookie")
    func deletion() async {
        _ = await bridge.incoming([("Set-Cookie", "a=1; Path=/"), ("Set-Cookie", "b=2; Path=/")], from: page)
        _ = await bridge.incoming([("Set-Cookie", "a=; Path=/; Expires=Thu, 01 Jan 1970 00:00:01 GMT")], from: page)
        #expect(store.names == ["b"])
        #expect(await bridge.scriptSets("b=; Path=/; Max-Age=0", for: page) == nil)
        let visible = await bridge.scriptCookies(for: page)
        #expect(store.names.isEmpty && visible.isEmpty)
    }

    @Test("SameSite: a cross-site subresource carries only None; a cross-site GET navigation Lax and None too")
    func sameSite() async {
        _ = await bridge.incoming(
            [
                ("Set-Cookie", "strict=1; Path=/; SameSite=Strict"), ("Set-Cookie", "lax=1; Path=/; SameSite=Lax"),
                ("Set-Cookie", "plain=1; Path=/"), ("Set-Cookie", "none=1; Path=/; SameSite=None; Secure"),
            ], from: page)
        func sent(_ c: CookieSiteContext) async -> String? {
            await bridge.outgoing([], to: page, context: c).first { $0.0 == "Cookie" }?.1
        }
        #expect(await sent(.sameSite) == "strict=1; lax=1; plain=1; none=1")
        #expect(await sent(.crossSiteNavigation) == "lax=1; plain=1; none=1")
        #expect(await sent(.crossSite) == "none=1")
    }
}

@Suite("Isolation: files, network and health across packages")
struct PackageBoundaryTests {
    @Test("a forwarded request from another site's page carries no Lax or Strict cookie; from its own, all")
    func forwardedSameSite() async throws {
        let two = try TwoPackages()
        defer { two.env.cleanup() }
        await two.logIn()
        let exchange = ScriptedExchange(["/api/me": (200, [], "me")])
        let d = two.driver(exchange)
        _ = await two.run(SchemeRequest(url: "app://sample-app/api/me", mainDocumentURL: "larder://other/"), d)
        _ = await two.run(SchemeRequest(url: "app://sample-app/api/me", mainDocumentURL: "app://sample-app/"), d)
        #expect(exchange.cookie(at: 0) == nil)
        #expect(exchange.cookie(at: 1) == "app-sid=1; app-theme=dark")
    }

    @Test("no file answers Access-Control-Allow-Origin unless the package's corsOrigins lists the origin")
    func cors() async throws {
        let two = try TwoPackages(corsOrigins: ["larder://other"])
        defer { two.env.cleanup() }
        let d = two.driver()
        let read = await two.run(
            SchemeRequest(url: "app://sample-app/index.html", headers: [("Origin", "larder://other")]), d)
        #expect(
            read.0 == 200 && read.1["Access-Control-Allow-Origin"] == "larder://other" && read.1["Vary"] == "Origin")
        let evil = await two.run(
            SchemeRequest(url: "app://sample-app/index.html", headers: [("Origin", "larder://evil")]), d)
        #expect(evil.0 == 200 && evil.1["Access-Control-Allow-Origin"] == nil)
        // `other` lists none: no origin reads it.
        let none = await two.run(
            SchemeRequest(url: "larder://other/index.html", headers: [("Origin", "app://sample-app")]), d)
        #expect(none.0 == 200 && none.1["Access-Control-Allow-Origin"] == nil)
    }

    @Test("an encrypted entry is never readable across origins, whatever it lists")
    func encryptedNeverCORS() throws {
        let json = """
            {"id": "x", "corsOrigins": ["*"], "encryption": {"scheme": "s"}}
            """
        let sealed = try JSONDecoder().decode(ServingSettings.self, from: Data(json.utf8))
        #expect(sealed.corsOrigins.isEmpty)
        let clear = try JSONDecoder().decode(
            ServingSettings.self, from: Data(#"{"id": "x", "corsOrigins": ["*"]}"#.utf8))
        #expect(clear.corsOrigins == ["*"])
    }

    @Test("networkHosts: a page's passthrough to a host its package does not list is refused 403 and counted")
    func networkHosts() async throws {
        let two = try TwoPackages(networkHosts: ["api.example.net"])
        defer { two.env.cleanup() }
        let exchange = ScriptedExchange(["/x": (200, [], "x"), "/api/items": (200, [], "items")])
        let d = two.driver(exchange)
        let refused = await two.run(SchemeRequest(url: "larder://other/x", mainDocumentURL: "app://sample-app/"), d)
        #expect(refused.0 == 403 && refused.2.contains("networkHosts"))
        #expect(d.forwarder.refusedHostCount == 1 && exchange.sent.withLock { $0.count } == 0)
        // Its own routes' host is its own.
        let own = await two.run(
            SchemeRequest(url: "app://sample-app/api/items", mainDocumentURL: "app://sample-app/"), d)
        #expect(own.0 == 200 && exchange.sent.withLock { $0.count } == 1)
        // A package with no networkHosts reaches any host, as before.
        let open = await two.run(SchemeRequest(url: "larder://other/x", mainDocumentURL: "larder://other/"), d)
        #expect(open.0 == 200)
        let table = two.loader.resolver.snapshot().table
        #expect(
            d.forwarder.hostRefusal(
                "https://api.example.net/v1", page: "app://sample-app/", url: "app://sample-app/v1", table: table)
                == nil)
    }

    @Test("a redirect to a host the page's package does not list is refused 403 at that hop, and counted")
    func redirectHosts() async throws {
        let two = try TwoPackages(networkHosts: ["api.example.net"])
        defer { two.env.cleanup() }
        let exchange = ScriptedExchange([
            "/api/go": (302, [("Location", "https://evil.example.org/steal")], ""), "/steal": (200, [], "stolen"),
        ])
        let d = two.driver(exchange)
        let r = await two.run(SchemeRequest(url: "app://sample-app/api/go", mainDocumentURL: "app://sample-app/"), d)
        #expect(r.0 == 403 && r.2.contains("evil.example.org"), "\(r)")
        #expect(exchange.sent.withLock { $0.map(\.url) } == ["https://app.example.com/api/go"])
        #expect(d.forwarder.refusedHostCount == 1)
    }

    @Test("SameSite: an initiator with no site (null, a package with no route) is another site, not none")
    func initiatorWithoutSite() async throws {
        let two = try TwoPackages()
        defer { two.env.cleanup() }
        await two.logIn()
        let exchange = ScriptedExchange(["/api/transfer": (200, [], "ok")])
        let d = two.driver(exchange)
        // A POST navigation from an opaque origin: no Lax (nor default) cookie.
        _ = await two.run(
            SchemeRequest(
                method: .post, url: "app://sample-app/api/transfer", headers: [("Origin", "null")], isNavigation: true,
                mainDocumentURL: "app://sample-app/api/transfer"), d)
        // A GET navigation from a package with no http(s) route: Lax ones only (theme has none: Lax).
        _ = await two.run(
            SchemeRequest(
                url: "app://sample-app/api/transfer", headers: [("Referer", "larder://routeless/x.html")],
                isNavigation: true, mainDocumentURL: "app://sample-app/api/transfer"), d)
        // Typed by the user (no initiator): same-site.
        _ = await two.run(
            SchemeRequest(
                url: "app://sample-app/api/transfer", isNavigation: true, mainDocumentURL: "app://sample-app/"),
            d)
        #expect(exchange.cookie(at: 0) == nil)
        #expect(exchange.cookie(at: 1) == "app-sid=1; app-theme=dark")
        #expect(exchange.cookie(at: 2) == "app-sid=1; app-theme=dark")
        let strict = CookieBridge(store: two.store)
        _ = await strict.incoming([("Set-Cookie", "s=1; Path=/; SameSite=Strict")], from: "https://app.example.com/")
        _ = await two.run(
            SchemeRequest(
                url: "app://sample-app/api/transfer", headers: [("Referer", "larder://routeless/x.html")],
                isNavigation: true, mainDocumentURL: "app://sample-app/api/transfer"), d)
        #expect(exchange.cookie(at: 3)?.contains("s=1") == false)
    }

    @Test("the answer to a cross-site request sets no Lax or Strict cookie; None ones it may")
    func crossSiteSetCookie() async throws {
        let two = try TwoPackages()
        defer { two.env.cleanup() }
        let exchange = ScriptedExchange([
            "/api/login": (
                200,
                [
                    ("Set-Cookie", "fixated=1; Path=/"), ("Set-Cookie", "strict=1; Path=/; SameSite=Strict"),
                    ("Set-Cookie", "open=1; Path=/; SameSite=None; Secure"),
                ], "ok"
            )
        ])
        let d = two.driver(exchange)
        _ = await two.run(SchemeRequest(url: "app://sample-app/api/login", mainDocumentURL: "larder://other/"), d)
        #expect(two.store.names == ["open"])
        _ = await two.run(SchemeRequest(url: "app://sample-app/api/login", mainDocumentURL: "app://sample-app/"), d)
        #expect(Set(two.store.names) == ["open", "fixated", "strict"])
    }

    @Test("corsOrigins hold for the version the signed entry publishes only")
    func corsForTheEntrysVersion() throws {
        let json = #"{"id": "x", "version": "2.0.0", "corsOrigins": ["*"]}"#
        let settings = try JSONDecoder().decode(ServingSettings.self, from: Data(json.utf8))
        let v2 = RoutedPackage(id: PackageID("x")!, version: SemanticVersion(2, 0, 0), settings: settings)
        let v1 = RoutedPackage(id: PackageID("x")!, version: SemanticVersion(1, 0, 0), settings: settings)
        #expect(v2.corsOrigins == ["*"] && v1.corsOrigins.isEmpty)
    }
}
