import Foundation
import HTTPTypes
import LarderCore
import Testing

@Suite("Resource loader responses")
struct ResponsePlanTests {
    static let file = LocalFileFixture.make(length: 1000)

    @Test(
        arguments: [
            ("bytes=0-99", 206, 0..<100, "bytes 0-99/1000"),
            ("bytes=900-", 206, 900..<1000, "bytes 900-999/1000"),
            ("bytes=-100", 206, 900..<1000, "bytes 900-999/1000"),
            ("bytes=-5000", 206, 0..<1000, "bytes 0-999/1000"),
            ("bytes=990-2000", 206, 990..<1000, "bytes 990-999/1000"),
            ("bytes=0-0", 206, 0..<1, "bytes 0-0/1000"),
            ("bytes=1000-", 416, 0..<0, "bytes */1000"),
            ("bytes=-0", 416, 0..<0, "bytes */1000"),
            ("bytes=0-1,5-9", 200, 0..<1000, nil),
            ("bytes=9-3", 200, 0..<1000, nil),
            ("items=0-9", 200, 0..<1000, nil),
            ("bytes=abc", 200, 0..<1000, nil),
        ] as [(String, Int, Range<Int64>, String?)])
    func ranges(_ header: String, _ status: Int, _ body: Range<Int64>, _ contentRange: String?) {
        let p = ResponsePlanner.plan(method: .get, range: header, ifNoneMatch: nil, file: Self.file)
        #expect(p.status == status, "\(header)")
        #expect(p.body == body, "\(header)")
        #expect(p.header("Content-Range") == contentRange, "\(header)")
        #expect(p.header("Content-Length") == "\(body.count)", "\(header)")
    }

    @Test func headAnd304AndMethods() {
        let head = ResponsePlanner.plan(method: .head, range: nil, ifNoneMatch: nil, file: Self.file)
        #expect(head.status == 200 && head.body.isEmpty && head.header("Content-Length") == "1000")
        let cached = ResponsePlanner.plan(
            method: .get, range: nil, ifNoneMatch: "\"other\", \(Self.file.etag)", file: Self.file)
        #expect(cached.status == 304 && cached.body.isEmpty && cached.header("ETag") == Self.file.etag)
        #expect(ResponsePlanner.plan(method: .get, range: nil, ifNoneMatch: "*", file: Self.file).status == 304)
        #expect(
            ResponsePlanner.plan(method: .get, range: nil, ifNoneMatch: "W/\(Self.file.etag)", file: Self.file).status
                == 304)
        #expect(ResponsePlanner.plan(method: .get, range: nil, ifNoneMatch: "\"nope\"", file: Self.file).status == 200)
        #expect(ResponsePlanner.plan(method: .post, range: nil, ifNoneMatch: nil, file: Self.file).status == 405)
        let full = ResponsePlanner.plan(
            method: .get, range: nil, ifNoneMatch: nil, file: Self.file, allowOrigin: "larder://shell")
        #expect(full.header("Content-Type") == "text/css; charset=utf-8" && full.header("Accept-Ranges") == "bytes")
        #expect(full.header("Access-Control-Allow-Origin") == "larder://shell" && full.header("Vary") == "Origin")
        let closed = ResponsePlanner.plan(method: .get, range: nil, ifNoneMatch: nil, file: Self.file)
        #expect(closed.header("Access-Control-Allow-Origin") == nil)
        // An empty file: any range is unsatisfiable, the whole (empty) body is fine.
        let empty = LocalFileFixture.make(length: 0)
        #expect(ResponsePlanner.plan(method: .get, range: "bytes=0-", ifNoneMatch: nil, file: empty).status == 416)
        #expect(ResponsePlanner.plan(method: .get, range: nil, ifNoneMatch: nil, file: empty).status == 200)
    }

    @Test("methods are compared without case; any other token is 405")
    func methodTokens() throws {
        let head = ResponsePlanner.plan(
            method: try #require(HTTPRequest.Method("head")), range: nil, ifNoneMatch: nil, file: Self.file)
        #expect(head.status == 200 && head.body.isEmpty)
        let get = ResponsePlanner.plan(
            method: try #require(HTTPRequest.Method("Get")), range: nil, ifNoneMatch: nil, file: Self.file)
        #expect(get.status == 200 && get.body == 0..<1000)
        for token in ["PROPFIND", "DELETE", "OPTIONS"] {
            let method = try #require(HTTPRequest.Method(token))
            let p = ResponsePlanner.plan(method: method, range: nil, ifNoneMatch: nil, file: Self.file)
            #expect(p.status == 405 && p.header("Allow") == "GET, HEAD", "\(token)")
        }
    }
}

enum LocalFileFixture {
    static func make(length: Int64) -> LocalFile {
        let list = FileList(
            id: PackageID("app")!, version: SemanticVersion("1.0.0")!,
            files: [
                FileEntry(path: RelativePath("a.css")!, size: length, sha256: SHA256Digest.of(Data("a".utf8)))
            ])
        let table = RouteTable(packages: [
            RoutedPackage(list: list, routes: [], entry: "index.html", spaFallback: false, policy: Policy())
        ])
        guard case .local(let f) = table.resolve("larder://app/a.css") else { fatalError("fixture") }
        return f
    }
}
