import Foundation
import Testing

@testable import LarderCore

@Suite("Route table")
struct RouteTableTests {
    static func list(_ id: String, _ files: [String]) -> FileList {
        FileList(
            id: PackageID(id)!, version: SemanticVersion("1.2.0")!,
            files: files.map {
                FileEntry(path: RelativePath($0)!, size: Int64($0.count), sha256: SHA256Digest.of(Data($0.utf8)))
            })
    }

    static let table = RouteTable(
        packages: [
            RoutedPackage(
                list: list(
                    "app",
                    [
                        "index.html", "css/app.css", "js/app.js", "pages/about/index.html", "img/logo.png",
                        "caf\u{e9}.txt",
                    ]),
                routes: [RoutePrefix("https://app.example.com/")!], entry: "index.html", spaFallback: true,
                policy: Policy(mode: .localThenNetwork, bypass: ["/api/"])),
            RoutedPackage(
                list: list("docs", ["index.html", "guide.html"]),
                routes: [RoutePrefix("https://app.example.com/docs/")!],
                entry: "index.html", spaFallback: false, policy: Policy(mode: .localOnly)),
        ], schemes: ["myapp"])

    func file(_ r: Resolution) -> String? {
        if case .local(let f) = r { return "\(f.package)/\(f.path)" }
        return nil
    }

    @Test(arguments: [
        ("https://app.example.com/index.html", "app/index.html"),
        ("https://APP.example.com:443/css/app.css?v=3#top", "app/css/app.css"),
        ("https://app.example.com/", "app/index.html"),
        ("https://app.example.com", "app/index.html"),
        ("https://app.example.com/pages/about/", "app/pages/about/index.html"),
        ("https://app.example.com/pages/about", "app/pages/about/index.html"),
        ("https://app.example.com/js/./x/../app.js", "app/js/app.js"),
        ("https://app.example.com/caf%C3%A9.txt", "app/caf\u{e9}.txt"),
        ("https://app.example.com/some/route", "app/index.html"),
        ("https://app.example.com/docs/guide.html", "docs/guide.html"),
        ("https://app.example.com/docs", "docs/index.html"),
        ("larder://app/img/logo.png", "app/img/logo.png"),
        ("HTTPS://user:pw@App.Example.COM:443/js/app.js", "app/js/app.js"),
        ("https://app.example.com?x=1", "app/index.html"),
        ("https://app.example.com#top", "app/index.html"),
        ("https://app.example.com/docs?x=1", "docs/index.html"),
        ("https://app.example.com/docsx/route", "app/index.html"),
        ("https://app.example.com/docs/", "docs/index.html"),
        ("LARDER://app/css/app.css", "app/css/app.css"),
        ("myapp://docs/guide.html", "docs/guide.html"),
        // As a browser requests them (WHATWG URL): an empty segment is a segment for `..`, dot
        // segments act on the whole path before any route is matched, `%2e` is a dot, `\` a
        // slash, tabs and newlines vanish, `..` at the root stays there.
        ("https://app.example.com/pages/about/x//../..", "app/pages/about/index.html"),
        ("https://app.example.com/pages/about//..", "app/pages/about/index.html"),
        ("https://app.example.com/docs/../js/app.js", "app/js/app.js"),
        ("https://app.example.com/docs/%2e%2E/js/app.js", "app/js/app.js"),
        ("https://app.example.com/js/.%2e/docs/guide.html", "docs/guide.html"),
        ("https://app.example.com/docs/..", "app/index.html"),
        ("https://app.example.com/../../js/app.js", "app/js/app.js"),
        ("https://app.example.com\\js\\app.js", "app/js/app.js"),
        ("  https://app.example.com/j\ts/ap\np.js\n", "app/js/app.js"),
        ("larder://app/js/../img/./logo.png", "app/img/logo.png"),
    ])
    func resolvesLocally(_ url: String, _ expected: String) {
        #expect(file(Self.table.resolve(url)) == expected, "\(url) → \(Self.table.resolve(url))")
    }

    @Test(arguments: [
        "https://app.example.com/%2e%2e/secret", "https://app.example.com/..%2fsecret", "https://app.example.com/a%5cb",
        "https://app.example.com/a%00b", "https://app.example.com/%252e%252e/x",
        "https://app.example.com/../../etc/passwd",
        "larder://app/../../etc/passwd", "https://app.example.com/%zz",
    ])
    func refusesTraversal(_ url: String) {
        // Never a file outside the package: refused, or (a double-encoded name decodes once to a
        // harmless literal) the SPA entry page.
        switch Self.table.resolve(url) {
        case .local(let f): #expect(f.path.string == "index.html", "\(url) resolved to \(f.path)")
        case .passthrough, .notFound: break
        }
    }

    @Test func overlongPathsAreRefused() {
        let long = "https://app.example.com/" + String(repeating: "a/", count: 2100) + "x.js"
        if case .notFound(let r) = Self.table.resolve(long) {
            #expect(r.contains("longer than 4096"))
        } else {
            Issue.record("overlong path")
        }
        // A long URL whose dot segments leave a short path names what the browser would request.
        let climbing = "larder://app/" + String(repeating: "a/../", count: 1000) + "index.html"
        #expect(file(Self.table.resolve(climbing)) == "app/index.html")
        // Just under the limit, a deep but legal path is looked up (and is simply absent here).
        let deep = "https://app.example.com/docs/" + String(repeating: "d/", count: 1000) + "x.html"
        if case .notFound(let r) = Self.table.resolve(deep) {
            #expect(r.contains("local-only"))
        } else {
            Issue.record("deep path")
        }
    }

    /// A route on an internationalised domain is kept in ASCII, as browsers send it in `Host`,
    /// and a URL that spells the host in Unicode (or percent-encoded) reaches the same package.
    @Test func internationalisedHosts() throws {
        let route = try #require(RoutePrefix("https://B\u{FC}cher.example/shop/"))
        #expect(route.description == "https://xn--bcher-kva.example/shop/")
        #expect(RoutePrefix("https://xn--bcher-kva.example/shop/") == route)
        let table = RouteTable(
            packages: [
                RoutedPackage(
                    list: Self.list("shop", ["index.html", "a.js"]), routes: [route], entry: "index.html",
                    spaFallback: false, policy: Policy(mode: .localOnly))
            ], schemes: [])
        for url in [
            "https://xn--bcher-kva.example/shop/a.js", "https://b\u{FC}cher.example/shop/a.js",
            "https://B\u{DC}CHER.example/shop/a.js", "https://b%C3%BCcher.example/shop/a.js",
            "https://XN--BCHER-KVA.example:443/shop/a.js",
        ] {
            #expect(file(table.resolve(url)) == "shop/a.js", "\(url) → \(table.resolve(url))")
        }
        #expect(file(table.resolve("https://bucher.example/shop/a.js")) == nil)
    }

    @Test func encodedSeparatorsAreRefusedOutright() {
        for url in [
            "https://app.example.com/..%2fsecret", "https://app.example.com/a%5cb", "https://app.example.com/a%00b",
            "https://app.example.com/%zz",
        ] {
            if case .notFound(let r) = Self.table.resolve(url) {
                #expect(r.contains("refused"), "\(url): \(r)")
            } else {
                Issue.record("\(url) must be refused")
            }
        }
    }

    @Test func policies() {
        // Missing file: local-then-network passes through, local-only is not found.
        if case .passthrough = Self.table.resolve("https://app.example.com/missing.js") {
        } else {
            Issue.record("passthrough expected")
        }
        if case .notFound = Self.table.resolve("https://app.example.com/docs/missing.html") {
        } else {
            Issue.record("notFound expected")
        }
        // Bypass prefixes always go to the network; other hosts and schemes are not routed.
        for api in [
            "https://app.example.com/api/items", "https://app.example.com//api/items",
            "https://app.example.com/./api/items", "https://app.example.com/%61pi/items",
        ] {
            if case .passthrough(let r) = Self.table.resolve(api) {
                #expect(r.contains("bypass"), "\(api)")
            } else {
                Issue.record("bypass: \(api)")
            }
        }
        if case .passthrough = Self.table.resolve("https://other.example.com/index.html") {
        } else {
            Issue.record("other host")
        }
        if case .passthrough = Self.table.resolve("http://app.example.com/index.html") {
        } else {
            Issue.record("other scheme")
        }
        for other in [
            "https://app.example.com:8443/index.html", "https://app.example.com:x/index.html",
            "https://app.example.com:99999/",
            "ftp://app.example.com/index.html", "app.example.com/index.html", "https:/app.example.com/", "", "https://",
        ] {
            if case .passthrough = Self.table.resolve(other) {} else { Issue.record("\(other) must pass through") }
        }
        if case .notFound = Self.table.resolve("larder://nope/index.html") {} else { Issue.record("unknown package") }
        // SPA fallback only for extension-less paths, and only where enabled.
        if case .passthrough = Self.table.resolve("https://app.example.com/missing.css") {
        } else {
            Issue.record("no SPA for files")
        }
        if case .notFound = Self.table.resolve("https://app.example.com/docs/some/route") {
        } else {
            Issue.record("no SPA in docs")
        }
    }

    @Test func headersData() {
        guard case .local(let f) = Self.table.resolve("https://app.example.com/css/app.css") else {
            Issue.record("expected a file")
            return
        }
        #expect(f.mime == "text/css; charset=utf-8")
        #expect(f.length == Int64("css/app.css".count))
        #expect(f.etag == "\"\(SHA256Digest.of(Data("css/app.css".utf8)).hex)\"")
        #expect(f.version == SemanticVersion("1.2.0"))
    }
}

/// The fast path (`fastResolve`, for http(s) URLs already in canonical form naming a file) must
/// answer only where the general path (`resolveGeneral`) would answer the same, and `resolve` must
/// answer every URL as the general path does.
@Suite("Route table fast path")
struct RouteTableFastPathTests {
    static func package(
        _ id: String, _ files: [String], _ routes: [String], spa: Bool = false, mode: PolicyMode = .localThenNetwork,
        bypass: [String] = []
    ) -> RoutedPackage {
        RoutedPackage(
            list: RouteTableTests.list(id, files), routes: routes.map { RoutePrefix($0)! }, entry: "index.html",
            spaFallback: spa, policy: Policy(mode: mode, bypass: bypass))
    }

    /// Nested prefixes on one origin, several schemes and ports on one host, a shared CDN host,
    /// a root route on its own host, an internationalised host, and a name that a non-ASCII
    /// spelling matches by Unicode canonical equivalence (`\u{212A}`, the Kelvin sign, is `K`).
    static let table = RouteTable(
        packages: [
            package(
                "app",
                [
                    "index.html", "js/app.js", "css/app.css", "a/b/c.js", "caf\u{e9}.txt", "api.js",
                    "docs-old/x.js", "UPPER.JS", "sp ace.txt", "api/data.json", "live.js", "q\"uote.js", "l<t>.js",
                    "b`t.js", "br{a}ce.js", "pi|pe.js", "ca^ret.js", "sq[b].js",
                ],
                ["https://app.example.com/", "http://app.example.com:8080/"], spa: true, bypass: ["/api/", "/live"]),
            package("docs", ["index.html", "guide.html", "v2/guide.html"], ["https://app.example.com/docs/"]),
            package("docs-v2", ["index.html", "guide.html"], ["https://app.example.com/docs/v2/"], mode: .localOnly),
            package("cdn-a", ["index.html", "x.js", "K.txt"], ["https://cdn.example.com/cdn-a/"]),
            package(
                "cdn-b", ["index.html", "x.js"], ["https://cdn.example.com/cdn-b/", "https://cdn.example.com:8443/"]),
            package(
                "own", ["index.html", "x.js", "a.b/c.js"], ["https://own.example.com/", "https://own.example.com./"]),
            package("shop", ["index.html", "a.js"], ["https://b\u{FC}cher.example/shop/"]),
        ], schemes: ["myapp"])

    /// URLs the fast path answers (each names a file under a route, plainly spelled).
    static let plain = [
        "https://app.example.com/js/app.js", "https://app.example.com/a/b/c.js?v=1",
        "https://app.example.com/css/app.css#x",
        "https://app.example.com:443/js/app.js", "https://app.example.com:0443/js/app.js",
        "http://app.example.com:8080/api.js",
        "https://app.example.com/docs/guide.html", "https://app.example.com/docs/v2/guide.html",
        "https://app.example.com/docs-old/x.js", "https://cdn.example.com/cdn-a/x.js",
        "https://cdn.example.com/cdn-b/x.js",
        "https://cdn.example.com:8443/x.js", "https://own.example.com/x.js", "https://own.example.com./x.js",
        "https://own.example.com/a.b/c.js", "https://xn--bcher-kva.example/shop/a.js",
        "https://app.example.com/UPPER.JS",
        "https://app.example.com/js/app.js?x=/../y#/..", "https://app.example.com:0/js/app.js",
        "https://cdn.example.com/cdn-a/K.txt",
    ]

    /// URLs the fast path leaves to the general path: every spelling a browser would change, and
    /// everything that is not a plain file under a route.
    static let tricky = [
        // Scheme, host and port spellings.
        "HTTPS://app.example.com/js/app.js", "Https://app.example.com/js/app.js", "https://APP.example.com/js/app.js",
        "https://app.example.com:/js/app.js", "https://app.example.com:65536/js/app.js",
        "https://app.example.com:000443/js/app.js", "https://app.example.com:44x/js/app.js",
        "https://app.example.com:443:443/js/app.js",
        "https://user@app.example.com/js/app.js", "https://user:pw@app.example.com/js/app.js",
        "https://@app.example.com/js/app.js",
        "https://[::1]/js/app.js", "https://[::1]:443/js/app.js", "https://127.0.0.1/js/app.js", "https:///js/app.js",
        "https://app.example.com../js/app.js", "https://app%2Eexample.com/js/app.js",
        "https://b\u{FC}cher.example/shop/a.js",
        "https://B\u{DC}CHER.example/shop/a.js", "https://b%C3%BCcher.example/shop/a.js",
        "https://app.exam\tple.com/js/app.js",
        "https:app.example.com/js/app.js", "https:/app.example.com/js/app.js", "https:\\\\app.example.com\\js\\app.js",
        "ftp://app.example.com/js/app.js", "larder://app/js/app.js", "LARDER://app/js/app.js",
        "myapp://docs/guide.html",
        "myapp://nope/x", "", "https://", "https://app.example.com",
        // Path spellings: escapes, dot segments, empty segments, separators, controls.
        "https://app.example.com/", "https://app.example.com?x", "https://app.example.com#x",
        "https://app.example.com/?x",
        "https://app.example.com/docs", "https://app.example.com/docs/", "https://app.example.com/docs/v2",
        "https://app.example.com/cdn-a/x.js", "https://cdn.example.com/cdn-a", "https://cdn.example.com/cdn-ax/x.js",
        "https://cdn.example.com/x.js", "https://app.example.com/js/app.js/", "https://app.example.com/js//app.js",
        "https://app.example.com//js/app.js", "https://app.example.com/./js/app.js",
        "https://app.example.com/js/./app.js",
        "https://app.example.com/js/../js/app.js", "https://app.example.com/docs/../js/app.js",
        "https://app.example.com/docs/%2e%2E/js/app.js", "https://app.example.com/js/%2e/app.js",
        "https://app.example.com/js/.%2e/docs/guide.html", "https://app.example.com/../../js/app.js",
        "https://app.example.com/js/app.js/..", "https://app.example.com/.well-known/x",
        "https://app.example.com/js\\app.js",
        "https://app.example.com\\js\\app.js", "https://app.example.com/j\ts/app.js",
        "https://app.example.com/js/app.js\n",
        "  https://app.example.com/js/app.js", "https://app.example.com/js/app.js ",
        "https://app.example.com/js/app.js?x ",
        "https://app.example.com/js/app.js?\t",
        "https://app.example.com/j\u{1}s/app.js", "https://app.example.com/js/app.js\u{7F}",
        "https://app.example.com/sp ace.txt",
        "https://app.example.com/sp%20ace.txt", "https://app.example.com/%6As/app.js", "https://app.example.com/a%2fb",
        "https://app.example.com/a%00b", "https://app.example.com/%zz", "https://app.example.com/caf\u{e9}.txt",
        "https://app.example.com/cafe\u{301}.txt", "https://app.example.com/caf%C3%A9.txt",
        "https://app.example.com/K.txt",
        "https://app.example.com/\u{212A}.txt", "https://cdn.example.com/cdn-a/\u{212A}.txt",
        // Not a file: bypass prefixes, directories, SPA routes, missing files.
        "https://app.example.com/api/x", "https://app.example.com/api", "https://app.example.com/live",
        "https://app.example.com/api/data.json", "https://app.example.com/live.js",
        "https://app.example.com/live/x", "https://app.example.com/lively.js", "https://app.example.com/some/route",
        "https://app.example.com/missing.js", "https://app.example.com/docs/missing.html",
        "https://app.example.com/docs/v2/missing.html", "https://app.example.com/docs/v2/some/route",
        "https://app.example.com/js/APP.js", "https://own.example.com/missing",
        // Origins no route names, whose host a browser rewrites or checks (IPv4 numbers, IDNA, empty labels).
        "https://0x7f.1/js/app.js", "https://127.1/js/app.js", "https://0x/x.js", "https://a.b.0x1f/x.js",
        "https://xn--zz.example/x.js", "https://a.xn--bcher-kva/x.js", "https://a..b/x.js", "https://.a/x.js",
        "https://other.example.com./js/app.js",
        "https://app.example.com/" + String(repeating: "a/", count: 2100) + "x.js",
    ]

    /// Plain URLs on origins no route names: the fast path answers the general path's passthrough.
    static let unrouted = [
        "http://app.example.com/js/app.js", "http://app.example.com:80/js/app.js",
        "https://other.example.com/js/app.js",
        "https://other.example.com/js/app.js?q=1#f", "http://app.example.com:8081/js/app.js",
        "https://app.example.com:8080/js/app.js", "http://cdn.example.com/cdn-a/x.js", "https://a_b.example/x.js",
        "https://-a-.example/x.js", "https://0x7g.example/x.js", "https://1.2.3.example/x.js", "https://localhost/x.js",
        "http://own.example.com:80/a.b/c.js", "https://xn-a.example/x.js",
    ]

    /// The fast path's answer for `url`, if it gives one.
    static func fast(_ url: String) -> Resolution? {
        var copy = url
        return copy.withUTF8 { table.fastResolve($0) }
    }

    @Test func fastPathAnswersPlainURLsAsTheGeneralPath() {
        for url in Self.plain {
            let general = Self.table.resolveGeneral(url)
            #expect(Self.fast(url) == general, "\(url): fast \(String(describing: Self.fast(url))), general \(general)")
            if case .local = general {} else { Issue.record("\(url) should name a file: \(general)") }
            #expect(Self.table.resolve(url) == general, "\(url)")
        }
    }

    @Test func unroutedPlainURLsPassThroughAsInTheGeneralPath() {
        for url in Self.unrouted {
            let general = Self.table.resolveGeneral(url)
            #expect(Self.fast(url) == general, "\(url): fast \(String(describing: Self.fast(url))), general \(general)")
            if case .passthrough(let reason) = general {
                #expect(reason.hasPrefix(RouteTable.unrouted), "\(url): \(reason)")
            } else {
                Issue.record("\(url) should pass through: \(general)")
            }
        }
    }

    @Test func trickyURLsTakeTheGeneralPath() {
        for url in Self.tricky {
            let general = Self.table.resolveGeneral(url)
            #expect(Self.fast(url) == nil, "\(url): the fast path answered \(String(describing: Self.fast(url)))")
            #expect(Self.table.resolve(url) == general, "\(url): \(Self.table.resolve(url)) vs \(general)")
        }
    }

    /// Every combination of scheme, authority, path and suffix spellings: where the fast path
    /// answers it agrees with the general path, and `resolve` always does.
    @Test func everyCombinationAgrees() {
        let schemes = ["https://", "http://", "HTTPS://", "hTtp://", "https:/", "https:\\\\", "larder://", "myapp://"]
        let authorities = [
            "app.example.com", "APP.example.com", "app.example.com:443", "app.example.com:8080", "app.example.com:80",
            "app.example.com:0", "app.example.com:", "u@app.example.com", "cdn.example.com", "cdn.example.com:8443",
            "own.example.com", "own.example.com.", "xn--bcher-kva.example", "b\u{FC}cher.example", "[::1]", "app",
            "docs", "cdn-a", "", "app.example.com%2e", "other.example.com", "0x7f.1", "a..b", "xn--zz.example", "127.1",
        ]
        let paths = [
            "", "/", "/js/app.js", "/index.html", "/docs", "/docs/", "/docs/guide.html", "/docs/v2/guide.html",
            "/docs/v2", "/docs-old/x.js", "/cdn-a/x.js", "/cdn-a", "/cdn-b/x.js", "/x.js", "/a.b/c.js", "/shop/a.js",
            "/js//app.js", "/js/./app.js", "/js/../js/app.js", "/%2e%2E/js/app.js", "/js\\app.js", "/j\ts/app.js",
            "/api/x", "/api", "/live", "/some/route", "/K.txt", "/\u{212A}.txt", "/caf\u{e9}.txt", "/UPPER.JS",
            "/js/app.js/", "/.hidden", "/a%2fb", "/api/data.json", "/live.js", "/q\"uote.js", "/l<t>.js", "/b`t.js",
            "/br{a}ce.js", "/pi|pe.js", "/ca^ret.js", "/sq[b].js", "/q%22uote.js",
        ]
        let suffixes = ["", "?v=1", "#top", "?", "#", "?a#b", " ", "\n", "?x\t"]
        var fastAnswers = 0
        for s in schemes {
            for a in authorities {
                for p in paths {
                    for x in suffixes {
                        let url = s + a + p + x
                        let general = Self.table.resolveGeneral(url)
                        if let f = Self.fast(url) {
                            fastAnswers += 1
                            #expect(f == general, "\(url): fast \(f), general \(general)")
                        }
                        #expect(Self.table.resolve(url) == general, "\(url)")
                    }
                }
            }
        }
        #expect(fastAnswers > 100)
    }

    /// A session's table (`replacing`) and a table whose packages repeat an id route as the
    /// general path does.
    @Test func replacedAndRepeatedPackagesAgree() {
        let pinned = Self.package("docs", ["index.html", "old.html"], ["https://app.example.com/docs/"])
        let replaced = Self.table.replacing([pinned])
        let repeated = RouteTable(packages: [
            Self.package("a", ["x.js"], ["https://h.example/"]),
            Self.package("a", ["y.js"], ["https://h.example/y/"]),
        ])
        for (table, url) in [
            (replaced, "https://app.example.com/docs/old.html"), (replaced, "https://app.example.com/docs/guide.html"),
            (replaced, "https://app.example.com/js/app.js"), (repeated, "https://h.example/x.js"),
            (repeated, "https://h.example/y/y.js"), (repeated, "https://h.example/y/x.js"),
        ] {
            #expect(table.resolve(url) == table.resolveGeneral(url), "\(url)")
        }
        if case .local(let f) = replaced.resolve("https://app.example.com/docs/old.html") {
            #expect(f.path.string == "old.html")
        } else {
            Issue.record("the pinned version serves old.html")
        }
    }

    /// `replacing` answers every URL as a table built whole from the same packages: when the
    /// packages given keep their routes (it then shares the routes' index), when they change
    /// routes, version, files or settings, when one is new, and when two claim one route.
    @Test func replacingAnswersAsATableBuiltWhole() {
        let base = Self.table.allPackages
        func whole(_ changed: [RoutedPackage]) -> RouteTable {
            var all = Dictionary(base.map { ($0.id.rawValue, $0) }, uniquingKeysWith: { a, _ in a })
            for p in changed { all[p.id.rawValue] = p }
            return RouteTable(packages: all.keys.sorted().compactMap { all[$0] }, schemes: ["myapp"])
        }
        var newer = Self.package("docs", ["index.html", "guide.html"], ["https://app.example.com/docs/"])
        newer.version = SemanticVersion("2.0.0")!
        newer.files = newer.files.mapValues {
            LocalFile(
                package: $0.package, version: newer.version, path: $0.path, mime: $0.mime, length: $0.length,
                etag: $0.etag)
        }
        let cases: [(String, [RoutedPackage])] = [
            ("nothing", []),
            ("another version", [newer]),
            (
                "same routes, other files",
                [Self.package("docs", ["index.html", "new.html"], ["https://app.example.com/docs/"])]
            ),
            (
                "same routes, other settings",
                [
                    Self.package(
                        "app", ["index.html", "js/app.js", "live.js"],
                        ["https://app.example.com/", "http://app.example.com:8080/"], spa: false, mode: .localOnly,
                        bypass: ["/js/"])
                ]
            ),
            (
                "two at once, a shared host",
                [
                    Self.package("cdn-a", ["y.js"], ["https://cdn.example.com/cdn-a/"]),
                    Self.package(
                        "cdn-b", ["y.js"], ["https://cdn.example.com/cdn-b/", "https://cdn.example.com:8443/"]),
                ]
            ),
            ("other routes", [Self.package("docs", ["guide.html"], ["https://app.example.com/guides/"])]),
            ("one route fewer", [Self.package("cdn-b", ["x.js"], ["https://cdn.example.com/cdn-b/"])]),
            ("a new package", [Self.package("new", ["index.html", "n.js"], ["https://new.example/"])]),
            ("a new one claiming a route", [Self.package("a-first", ["z.js"], ["https://app.example.com/docs/"])]),
        ]
        let urls =
            Self.plain + Self.tricky + [
                "https://app.example.com/docs/new.html", "https://app.example.com/docs/guide.html",
                "https://app.example.com/docs/", "https://app.example.com/guides/guide.html",
                "https://app.example.com/js/app.js", "https://app.example.com/live.js",
                "https://app.example.com/nothing", "https://cdn.example.com/cdn-a/y.js",
                "https://cdn.example.com:8443/y.js", "https://cdn.example.com:8443/x.js", "https://new.example/n.js",
                "https://app.example.com/docs/z.js", "larder://docs/new.html", "myapp://new/n.js",
                "larder://a-first/z.js",
            ]
        /// The fast path's origin object for `host` (shared when a table's routes are).
        func origin(_ t: RouteTable, _ host: String) -> FastRoutes.Origin? {
            var h = host
            return h.withUTF8 { t.fast.hosts.value(UnsafeRawBufferPointer($0)) }?.first
        }
        let sharing: Set = [
            "another version",
            "nothing", "same routes, other files", "same routes, other settings", "two at once, a shared host",
        ]
        for (name, changed) in cases {
            let replaced = Self.table.replacing(changed)
            let built = whole(changed)
            let shared = origin(replaced, "app.example.com") === origin(Self.table, "app.example.com")
            #expect(shared == sharing.contains(name), "\(name)")
            #expect(replaced.count == built.count, "\(name)")
            #expect(replaced.allPackages.map(\.id) == built.allPackages.map(\.id), "\(name)")
            for url in urls {
                #expect(replaced.resolve(url) == built.resolve(url), "\(name): \(url)")
                #expect(replaced.resolve(url) == replaced.resolveGeneral(url), "\(name): \(url)")
            }
        }
        if case .local(let f) = Self.table.replacing([newer]).resolve("https://app.example.com/docs/guide.html") {
            #expect(f.version.description == "2.0.0")
        } else {
            Issue.record("the replaced table serves docs 2.0.0")
        }
        // The table replaced from is unchanged.
        #expect(
            Self.table.resolve("https://app.example.com/docs/new.html")
                == Self.table.resolveGeneral("https://app.example.com/docs/new.html"))
        if case .local(let f) = Self.table.resolve("https://app.example.com/docs/guide.html") {
            #expect(f.package.rawValue == "docs")
        } else {
            Issue.record("the original table still serves docs/guide.html")
        }
        #expect(Self.table.package(PackageID("new")!) == nil)
    }

    /// Setting a package's files re-indexes them; a key that is not NFC ASCII (only a caller
    /// setting `files` can make one) is found by the general path's canonical equivalence alone,
    /// and the fast path leaves it to it.
    @Test func settingFilesKeepsTheIndexInStep() throws {
        var pkg = Self.package("p", ["a.js"], ["https://p.example/"])
        let file = try #require(pkg.files["a.js"])
        pkg.files = ["b.js": file, "\u{212A}.txt": file]
        let table = RouteTable(packages: [pkg])
        for url in ["https://p.example/a.js", "https://p.example/b.js", "https://p.example/K.txt"] {
            var copy = url
            let fast = copy.withUTF8 { table.fastResolve($0) }
            let general = table.resolveGeneral(url)
            #expect(fast == nil || fast == general, "\(url)")
            #expect(table.resolve(url) == general, "\(url)")
        }
        #expect(table.resolve("https://p.example/b.js") == .local(file))
        #expect(table.resolve("https://p.example/K.txt") == .local(file))
        #expect(table.resolve("https://p.example/a.js") != .local(file))
    }

    /// A file's values are shared by its copies and compared by value; setting one changes that
    /// copy alone.
    @Test func localFileCopiesAreValues() throws {
        let table = Self.table
        guard case .local(let f) = table.resolve("https://app.example.com/js/app.js") else {
            Issue.record("expected a file")
            return
        }
        var g = f
        #expect(g == f)
        g.length += 1
        g.etag = "\"x\""
        #expect(g != f && g.length == f.length + 1 && g.etag == "\"x\"" && f.etag != "\"x\"")
        let same = LocalFile(
            package: f.package, version: f.version, path: f.path, mime: f.mime, length: f.length, etag: f.etag)
        #expect(same == f)
        var h = same
        h.mime = "text/plain"
        #expect(h != f && h.mime == "text/plain" && same.mime == f.mime)
        // Described by its values, as before they were shared.
        let text = String(describing: f)
        #expect(
            text.hasPrefix("LocalFile(package: ") && text.contains("path: ") && text.contains("length: "), "\(text)")
    }

    @Test func byteTableFindsItsKeysOnly() {
        let words = (0..<1000).map { "key-\($0)-" + String(repeating: "x", count: $0 % 23) } + ["", "a"]
        let table = ByteTable(words.enumerated().map { (key: Array($0.element.utf8), value: $0.offset) })
        #expect(table.count == 1002)
        for (i, w) in words.enumerated() {
            #expect(Array(w.utf8).withUnsafeBytes { table.value($0) } == i, "\(w)")
        }
        // The empty key, borrowed with or without a base address.
        #expect(table.value(UnsafeRawBufferPointer(start: nil, count: 0)) == 1000)
        #expect([UInt8]().withUnsafeBytes { table.value($0) } == 1000)
        for absent in ["key-1000-", "key-1-xx", "b", "key-", "KEY-1-x"] {
            #expect(Array(absent.utf8).withUnsafeBytes { table.value($0) } == nil, "\(absent)")
        }
        // Of equal keys, the first wins.
        let repeated = ByteTable([(key: Array("k".utf8), value: 1), (key: Array("k".utf8), value: 2)])
        #expect(repeated.count == 1 && Array("k".utf8).withUnsafeBytes { repeated.value($0) } == 1)
    }
}
