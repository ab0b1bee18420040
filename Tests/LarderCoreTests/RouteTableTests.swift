import Foundation
import LarderCore
import Testing

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
