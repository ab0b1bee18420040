import AsyncHTTPClient
import Foundation
import LarderCore
import LarderFetch
import LarderGateway
import LarderResolve
import LarderStore
import LarderTestSupport
import NIOCore
import NIOHTTP1
import Testing

/// `larder serve`'s gateway on loopback, over a sandbox with the sample app installed, answering
/// real HTTP requests: the layer `scripts/integration/browser` drives with Chromium, in Swift.
@Suite("The loopback gateway", .hangGuard)
struct GatewayTests {
    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test(
        "a file of the package by its production URL: its bytes, MIME type, length, ETag and outcome",
        arguments: [
            ("/", "index.html", "text/html; charset=utf-8"),
            ("/css/app.css", "css/app.css", "text/css; charset=utf-8"),
            ("/js/app.js", "js/app.js", "text/javascript; charset=utf-8"),
            ("/img/logo.png", "img/logo.png", "image/png"),
            ("/data/catalog.json", "data/catalog.json", "application/json; charset=utf-8"),
            ("/fonts/larder-sans.woff2", "fonts/larder-sans.woff2", "font/woff2"),
        ])
    func servesFiles(target: String, file: String, mime: String) async throws {
        try await withGateway { world in
            let bytes = try world.installed(file)
            let r = try await world.gateway.send(.GET, target)
            #expect(r.status == 200, "\(r)")
            #expect(r.body == bytes)
            #expect(r.header("Content-Type") == mime)
            #expect(r.header("Content-Length") == "\(bytes.count)")
            #expect(r.header("ETag") == etag(bytes))
            #expect(r.header("X-Larder-Outcome") == "sample-app@1.0.0")
            #expect(r.header("Access-Control-Allow-Origin") == nil, "CORS only for the larder: form")
            #expect(
                world.gateway.log.contains { $0.hasPrefix("GET https://\(appHost)\(target) 200 sample-app@1.0.0 ") },
                "\(world.gateway.log)")
        }
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test("<id>.localhost on the gateway's port is the package's own origin: larder://<id>/<path>")
    func packageOrigins() async throws {
        try await withGateway { world in
            let port = world.gateway.port
            let r = try await world.gateway.send(.GET, "/js/app.js", host: "sample-app.localhost:\(port)")
            #expect(r.status == 200, "\(r) \(world.gateway.log)")
            #expect(r.body == (try world.installed("js/app.js")))
            #expect(r.header("Access-Control-Allow-Origin") == nil)
            #expect(world.gateway.log.contains { $0.hasPrefix("GET larder://sample-app/js/app.js 200 ") })
            let other = try await world.gateway.send(.GET, "/js/app.js", host: "nothing-here.localhost:\(port)")
            #expect(other.status != 200)
            #expect(Gateway.packageHost("sample-app.localhost:\(port)", ownPort: port) == "sample-app")
            #expect(Gateway.packageHost("sample-app.localhost:1", ownPort: port) == nil)
            #expect(Gateway.packageHost("bad!id.localhost:\(port)", ownPort: port) == nil)
        }
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test(
        "the gateway's own address takes the larder: form /<id>/<path>, with no CORS a package does not list",
        arguments: ["127.0.0.1", "localhost"])
    func larderForm(host: String) async throws {
        try await withGateway { world in
            let r = try await world.gateway.send(
                .GET, "/sample-app/js/app.js", host: "\(host):\(world.gateway.port)")
            #expect(r.status == 200, "\(r)")
            #expect(r.body == (try world.installed("js/app.js")))
            #expect(r.header("Access-Control-Allow-Origin") == nil)
            #expect(world.gateway.log.contains { $0.hasPrefix("GET larder://sample-app/js/app.js 200 ") })
        }
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test("If-None-Match with the file's ETag: 304 with no body; another tag: the file")
    func notModified() async throws {
        try await withGateway { world in
            let bytes = try world.installed("css/app.css")
            let tag = etag(bytes)
            let same = try await world.gateway.send(.GET, "/css/app.css", headers: [("If-None-Match", tag)])
            #expect(same.status == 304 && same.body.isEmpty, "\(same)")
            #expect(same.header("ETag") == tag)
            let other = try await world.gateway.send(.GET, "/css/app.css", headers: [("If-None-Match", "\"nope\"")])
            #expect(other.status == 200 && other.body == bytes, "\(other)")
        }
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test("Range: a satisfiable range gets 206 with Content-Range, an unsatisfiable one 416")
    func ranges() async throws {
        try await withGateway { world in
            let bytes = try world.installed("img/logo.png")
            let n = bytes.count
            let head = try await world.gateway.send(.GET, "/img/logo.png", headers: [("Range", "bytes=0-9")])
            #expect(head.status == 206 && head.body == bytes.prefix(10), "\(head)")
            #expect(head.header("Content-Range") == "bytes 0-9/\(n)")
            let tail = try await world.gateway.send(.GET, "/img/logo.png", headers: [("Range", "bytes=-5")])
            #expect(tail.status == 206 && tail.body == bytes.suffix(5), "\(tail)")
            #expect(tail.header("Content-Range") == "bytes \(n - 5)-\(n - 1)/\(n)")
            let past = try await world.gateway.send(.GET, "/img/logo.png", headers: [("Range", "bytes=\(n)-")])
            #expect(past.status == 416 && past.body.isEmpty, "\(past)")
            #expect(past.header("Content-Range") == "bytes */\(n)")
        }
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test("HEAD: the GET's status and header fields (its length included), no body")
    func head() async throws {
        try await withGateway { world in
            let bytes = try world.installed("data/catalog.json")
            let r = try await world.gateway.send(.HEAD, "/data/catalog.json")
            #expect(r.status == 200 && r.body.isEmpty, "\(r)")
            #expect(r.header("Content-Length") == "\(bytes.count)", "\(r)")
            #expect(r.header("ETag") == etag(bytes))
            #expect(world.gateway.log.contains { $0.hasPrefix("HEAD https://\(appHost)/data/catalog.json 200 ") })
        }
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test("a method other than GET or HEAD on a package file: 405 naming the allowed ones")
    func methodNotAllowed() async throws {
        try await withGateway { world in
            let r = try await world.gateway.send(.POST, "/css/app.css", body: Data("x".utf8))
            #expect(r.status == 405 && r.header("Allow") == "GET, HEAD", "\(r)")
        }
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test("a path a local-only route does not have: 404 from the package, never the network")
    func localOnlyMissing() async throws {
        try await withGateway(docs: true) { world in
            let r = try await world.gateway.send(.GET, "/docs/no-such-page.html")
            #expect(r.status == 404, "\(r)")
            #expect(r.header("X-Larder-Outcome")?.hasPrefix("not found") == true, "\(r)")
        }
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test(
        "offline: what no package serves (a missing file, a bypassed path, another host) is answered 502",
        arguments: [
            ("/no-such-file.js", appHost), ("/api/items", appHost), ("/x.js", "elsewhere.example.org"),
        ])
    func offlinePassthrough(target: String, host: String) async throws {
        try await withGateway { world in
            let r = try await world.gateway.send(.GET, target, host: host)
            #expect(r.status == 502, "\(r)")
            #expect(r.text.hasPrefix("larder gateway: offline: "), "\(r.text)")
            #expect(
                world.gateway.log.contains { $0.hasPrefix("GET https://\(host)\(target) 502 passthrough (offline: ") },
                "\(world.gateway.log)")
        }
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test("a bypassed path of a package routed on http:// is logged as bypassed, not as unrouted https")
    func bypassReason() async throws {
        let prepare = { (env: ResolveEnv) throws in
            try env.publish(
                "1.0.0", id: "plain", routes: ["http://plain.example.com/"],
                policy: Policy(mode: .localThenNetwork, bypass: ["/api/"]))
            try env.install("1.0.0", id: "plain")
        }
        try await withGateway(prepare) { world in
            let r = try await world.gateway.send(.GET, "/api/items", host: "plain.example.com")
            #expect(r.status == 502, "\(r)")
            let line = try #require(world.gateway.log.last)
            #expect(line.contains("matches the bypass prefix /api/ of plain"), "\(line)")
            #expect(!line.contains("no package routes"), "\(line)")
            // A host no package routes still says so.
            _ = try await world.gateway.send(.GET, "/x.js", host: "elsewhere.example.org")
            #expect(world.gateway.log.last?.contains("no package routes https://elsewhere.example.org/x.js") == true)
        }
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test("a file the list names but the disk lacks: served from the fallback, and the failure recorded")
    func fallback() async throws {
        try await withGateway(pendingUpdate) { world in
            try FileManager.default.removeItem(
                at: world.env.tree("sample-app", "2.0.0").appendingPathComponent("data/catalog.json"))
            let r = try await world.gateway.send(.GET, "/data/catalog.json")
            #expect(r.status == 200, "\(r)")
            #expect(r.body == (try world.installed("data/catalog.json", version: "1.0.0")))
            #expect(r.header("X-Larder-Outcome") == "sample-app@1.0.0 fallback (missing in 2.0.0)")
            // Another file of 2.0.0 is still served from it.
            let css = try await world.gateway.send(.GET, "/css/app.css")
            #expect(css.header("X-Larder-Outcome") == "sample-app@2.0.0")
            world.reporter.flush()
            #expect(try world.state().packages["sample-app"]?.failures == 1)
        }
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test("a version activated while the gateway runs is served from the next request on")
    func followsActivation() async throws {
        try await withGateway { world in
            let before = try await world.gateway.send(.GET, "/data/catalog.json")
            #expect(before.header("X-Larder-Outcome") == "sample-app@1.0.0")
            try world.env.publish("2.0.0")
            try world.env.install("2.0.0")
            let after = try await world.gateway.send(.GET, "/data/catalog.json")
            #expect(after.header("X-Larder-Outcome") == "sample-app@2.0.0")
            #expect(after.body == (try world.installed("data/catalog.json", version: "2.0.0")))
            #expect(after.text.contains("\"version\": \"2.0.0\""), "\(after.text)")
        }
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test(
        "traversal in any spelling never serves a file outside the package",
        arguments: [
            ("/../../state.json", appHost), ("/%2e%2e/%2e%2e/state.json", appHost), ("/..%2f..%2fstate.json", appHost),
            ("/a%00b", appHost), ("/a%5cb", appHost), ("/sample-app/../../state.json", nil),
            ("/sample-app/%2e%2e/%2e%2e/state.json", nil), ("/sample-app/..%2f..%2fstate.json", nil),
        ] as [(String, String?)])
    func traversal(target: String, host: String?) async throws {
        try await withGateway { world in
            let state = try Data(contentsOf: URL(fileURLWithPath: world.env.root.appending("state.json").string))
            let r = try await world.gateway.send(.GET, target, host: host ?? "127.0.0.1:\(world.gateway.port)")
            #expect(r.status != 200 && r.status != 206, "\(target): \(r)")
            #expect(r.body != state && !r.text.contains("\"packages\""), "\(target): \(r.text)")
        }
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test("the bound port is reported once listening, and the gateway stops listening when its task is cancelled")
    func lifecycle() async throws {
        let env = try makeSandbox()
        defer { env.cleanup() }
        let gateway = try await RunningGateway.start(loader: ResourceLoader(resolver: try Resolver(root: env.root)))
        #expect(gateway.port > 0)
        // A client of its own, that does not retry a refused connection (the shared one would for 10 s).
        var configuration = HTTPClient.Configuration(timeout: .init(connect: .seconds(5), read: .seconds(5)))
        configuration.connectionPool.retryConnectionEstablishment = false
        configuration.maximumUsesPerConnection = 1
        let client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
        let r = try await gateway.send(.GET, "/css/app.css", client: client)
        #expect(r.status == 200)
        await gateway.stop()
        await #expect(throws: (any Error).self) { _ = try await gateway.send(.GET, "/css/app.css", client: client) }
        try await client.shutdown()
    }
}
