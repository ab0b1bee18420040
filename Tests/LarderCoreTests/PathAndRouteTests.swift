import LarderCore
import Testing

@Suite("Path rules")
struct RelativePathTests {
    @Test(arguments: ["index.html", "a/b/c.js", "fonts/larder-sans.woff2", "café/naïve.txt", "a..b/c", ".well-known/x"])
    func accepted(_ s: String) throws {
        let p = try RelativePath.validate(s).get()
        #expect(p.string == s)
    }

    @Test(arguments: [
        ("", "path-empty"), ("/etc/passwd", "path-absolute"), ("../x", "path-dot-component"),
        ("a/../../x", "path-dot-component"), ("a/./b", "path-dot-component"), ("a//b", "path-empty-component"),
        ("a\\b", "path-backslash"), ("a\u{0}b", "path-nul"), ("C:/x", "path-drive-letter"),
        ("c:x", "path-drive-letter"),
        ("a\u{1}b", "path-control-character"), ("cafe\u{301}.txt", "path-not-nfc"),
    ])
    func refused(_ s: String, _ code: ReasonCode) {
        switch RelativePath.validate(s) {
        case .success: Issue.record("\(s) should be refused")
        case .failure(let p): #expect(p.code == code)
        }
    }

    @Test func limits() {
        let long = String(repeating: "a/", count: 40) + "x"
        #expect(throws: PathProblem.tooDeep(depth: 41, limit: 32)) { try RelativePath.validate(long).get() }
        let wide = String(repeating: "b", count: 256)
        #expect(throws: PathProblem.componentTooLong(bytes: 256, limit: 255)) { try RelativePath.validate(wide).get() }
        let huge = (0..<10).map { _ in String(repeating: "c", count: 200) }.joined(separator: "/")
        #expect(throws: PathProblem.tooLong(bytes: 2009, limit: 1024)) { try RelativePath.validate(huge).get() }
    }

    @Test func notUTF8() {
        #expect(throws: PathProblem.notUTF8) { try RelativePath.validate(bytes: [0x66, 0xFF, 0x2E]).get() }
        #expect((try? RelativePath.validate(bytes: Array("dir/".utf8)).get())?.string == "dir")
    }

    @Test func collisionKeys() throws {
        #expect(RelativePath.collisionKey("Café.txt") == RelativePath.collisionKey("cafe\u{301}.TXT"))
        #expect(RelativePath.collisionKey("A.txt") == RelativePath.collisionKey("a.txt"))
        #expect(RelativePath.collisionKey("a.txt") != RelativePath.collisionKey("b.txt"))
    }

    @Test func byteOrder() throws {
        let paths = try ["b", "a/z", "a", "B", "é", "a-b"].map { try #require(RelativePath($0)) }
        #expect(paths.sorted().map(\.string) == ["B", "a", "a-b", "a/z", "b", "é"])
    }

    @Test func packageIDs() {
        for ok in ["a", "sample-app", "x.y_z-1", "0abc", String(repeating: "a", count: 64)] {
            #expect(PackageID(ok) != nil, "\(ok)")
        }
        for bad in ["", "A", "Bad_ID", "-x", ".x", "a/b", "a b", String(repeating: "a", count: 65), "é"] {
            #expect(PackageID(bad) == nil, "\(bad)")
        }
    }
}

@Suite("Route prefixes")
struct RouteTests {
    @Test func normalisation() throws {
        #expect(try #require(RoutePrefix("HTTPS://App.Example.com:443/x")).description == "https://app.example.com/x/")
        #expect(try #require(RoutePrefix("http://h:80/")).description == "http://h/")
        #expect(try #require(RoutePrefix("http://h:8080")).description == "http://h:8080/")
        #expect(try #require(RoutePrefix("myapp://bundle/")).description == "myapp://bundle/")
        #expect(RoutePrefix("https://a.com/") == RoutePrefix("https://A.COM:443/"))
    }

    @Test(arguments: [
        "notaurl", "https:///nohost", "larder://x/", "https://a.com/?q=1", "https://a.com/#f",
        "https://u:p@a.com/", "https://a.com/../x/",
    ])
    func refused(_ s: String) {
        #expect(RoutePrefix(s) == nil)
        #expect(RoutePrefix.problem(s) != nil)
    }
}

@Suite("Untrusted text in messages")
struct QuotingTests {
    @Test("a long text is cut at 256 bytes, at a character's end, with its full size noted")
    func capped() {
        let huge = String(repeating: "a", count: 10 << 20)
        #expect(quoted(huge) == "\"" + String(repeating: "a", count: 256) + "…\" (10485760 bytes in all)")
        let exact = String(repeating: "b", count: 256)
        #expect(quoted(exact) == "\"" + exact + "\"")
        // 85 three-byte characters fill 255 bytes; the 86th would pass the limit.
        let wide = String(repeating: "日", count: 100)
        #expect(quoted(wide) == "\"" + String(repeating: "日", count: 85) + "…\" (300 bytes in all)")
    }

    @Test func controlsAreEscaped() {
        #expect(quoted("plain name.js") == #""plain name.js""#)
        #expect(quoted("a\u{1B}[2K\u{7}\rb") == #""a\u{1B}[2K\u{7}\u{D}b""#)
        #expect(quoted("a\0b\n") == #""a\u{0}b\u{A}""#)
        #expect(quoted("say \"hi\" \\ bye") == #""say \"hi\" \\ bye""#)
        // C1 controls (U+009B is CSI to some terminals), bidi overrides, DEL.
        #expect(quoted("x\u{9B}31m\u{202E}cod.exe\u{7F}") == #""x\u{9B}31m\u{202E}cod.exe\u{7F}""#)
        // Everything else, non-ASCII text included, is kept as it is.
        #expect(quoted("café/日本.txt") == "\"café/日本.txt\"")
    }

    @Test func linesAreSanitised() {
        #expect(Quoting.sanitizeLine("ok\tline") == "ok\tline")
        #expect(Quoting.sanitizeLine("bad \u{1B}]0;title\u{7} line\r") == #"bad \u{1B}]0;title\u{7} line\u{D}"#)
    }
}

@Suite("URLs as a browser requests them")
struct BrowserURLTests {
    @Test(arguments: [
        ("/a/b/../c", "/a/c"), ("/a/b//..", "/a/b/"), ("/a/./b/.", "/a/b/"), ("/..", "/"), ("/../../x", "/x"),
        ("/a/%2e%2E/b", "/b"), ("/a/.%2e", "/"), ("/a/%2e", "/a/"), ("/a//b", "/a//b"), ("/a/..b/.c", "/a/..b/.c"),
        ("/", "/"),
    ])
    func dotSegments(_ path: String, _ expected: String) {
        #expect(BrowserURL.removeDotSegments(path) == expected)
    }

    @Test func canonicalOnlyWhenNeeded() {
        #expect(BrowserURL.canonical("https://app.example.com/js/app.js?v=1") == nil)
        #expect(BrowserURL.canonical("larder://app/a/b.js") == nil)
        #expect(BrowserURL.canonical("https://app.example.com/a/../b?x=/../y") == "https://app.example.com/b?x=/../y")
        #expect(BrowserURL.canonical("HTTPS://h\\a\\..\\b") == "https://h/b")
        #expect(BrowserURL.canonical("myapp://h/a\\..\\b") == "myapp://h/a\\..\\b")
        #expect(BrowserURL.canonical("https://b\u{FC}cher.example:8443/") == "https://xn--bcher-kva.example:8443/")
        #expect(BrowserURL.asciiHost("B\u{DC}cher.Example") == "xn--bcher-kva.example")
        // A host that decodes to a control character (found by scripts/tools/fuzz.sh url) or a bracketed
        // one is left as it is: no browser would request it, and reading it again changes nothing.
        for odd in ["https://[::t%1E", "https://a%00b.example/x", "https://a%20b.example/"] {
            let once = BrowserURL.canonical(odd) ?? odd
            #expect(once == odd && (BrowserURL.canonical(once) ?? once) == once, "\(odd) → \(once)")
        }
    }
}
