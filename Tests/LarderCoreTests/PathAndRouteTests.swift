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
    func refused(_ s: String, _ code: String) {
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
