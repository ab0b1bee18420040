import AsyncHTTPClient
import Foundation
import LarderCore
import LarderFetch
import LarderFetchNIO
import LarderGateway
import LarderResolve
import LarderTestSupport
import NIOHTTP1
import Testing

/// Passthrough: what no package serves goes to the network through the forwarder (an origin on
/// loopback started by the test stands for the network), and comes back as the network answered.
@Suite("The gateway's passthrough to the network", .hangGuard)
struct ForwardTests {
    static let forwarder = Forwarder(network: .forward(scheme: "http"), exchange: NIOExchange(timeout: 120))

    /// Runs `body` with an origin serving a directory (holding `hello.txt` and a 4 MiB `big.bin`)
    /// and a forwarding gateway.
    @available(macOS 14, iOS 17, tvOS 17, *)
    func withNetwork(
        forwarder: Forwarder = ForwardTests.forwarder, _ body: (World, FaultOrigin) async throws -> Void
    ) async throws {
        let dir = try TemporaryDirectory("network")
        defer { dir.remove() }
        try Data("from the network\n".utf8).write(to: dir.appending("hello.txt"))
        try Data((0..<(4 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7) }).write(to: dir.appending("big.bin"))
        let origin = try await FaultOrigin.start(serving: dir.url, otherHost: nil)
        do {
            try await withGateway(forwarder: forwarder) { world in try await body(world, origin) }
        } catch {
            await origin.stop()
            throw error
        }
        await origin.stop()
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test("a GET for another host is forwarded to it, with the loop marker, and its answer relayed")
    func forwardsGet() async throws {
        try await withNetwork { world, origin in
            let authority = "127.0.0.1:\(origin.port)"
            let r = try await world.gateway.send(.GET, "/hello.txt", host: authority, headers: [("X-Trace", "t42")])
            #expect(r.status == 200 && r.text == "from the network\n", "\(r)")
            #expect(r.header("X-Origin") == "fault-origin", "the origin's header fields come back")
            #expect(r.header("X-Larder-Outcome") == nil)
            let seen = try #require(origin.requests.first)
            #expect(origin.requests.count == 1)
            #expect(seen.method == "GET" && seen.path == "/hello.txt")
            #expect(seen.headers["x-trace"] == "t42" && seen.headers[Forwarder.loopMarker.lowercased()] == "1")
            #expect(world.gateway.log.contains { $0.hasPrefix("GET http://\(authority)/hello.txt 200 passthrough") })
        }
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test("a POST is forwarded with its method, query, header fields and body; the status comes back")
    func forwardsPost() async throws {
        try await withNetwork { world, origin in
            let r = try await world.gateway.send(
                .POST, "/items?q=1", host: "127.0.0.1:\(origin.port)", headers: [("X-Trace", "t42")],
                body: Data("name=flour".utf8))
            #expect(r.status == 201 && r.text == "POST /items?q=1 body=name=flour", "\(r)")
            #expect(origin.requests.first?.body == Data("name=flour".utf8))
        }
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test("a method beyond the standard ones (an RFC 9110 token) is forwarded as it came")
    func forwardsExtensionMethod() async throws {
        try await withNetwork { world, origin in
            let authority = "127.0.0.1:\(origin.port)"
            let r = try await world.gateway.send(.RAW(value: "PROPFIND"), "/dav/", host: authority)
            #expect(r.status == 201 && r.text == "PROPFIND /dav/ body=", "\(r)")
            #expect(origin.requests.first?.method == "PROPFIND")
            #expect(world.gateway.log.contains { $0.hasPrefix("PROPFIND http://\(authority)/dav/ 201 passthrough") })
        }
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test("a large answer is relayed intact, and the network's error statuses as they are")
    func relaysBodiesAndStatuses() async throws {
        try await withNetwork { world, origin in
            let authority = "127.0.0.1:\(origin.port)"
            let big = try await world.gateway.send(.GET, "/big.bin", host: authority)
            #expect(big.status == 200 && big.body.count == 4 << 20)
            #expect(big.body == Data((0..<(4 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7) }))
            let missing = try await world.gateway.send(.GET, "/missing", host: authority)
            #expect(missing.status == 404 && missing.text == "not found\n", "\(missing)")
            origin.inject(.status(503, retryAfter: "7"), at: "/hello.txt")
            let busy = try await world.gateway.send(.GET, "/hello.txt", host: authority)
            #expect(busy.status == 503 && busy.header("Retry-After") == "7", "\(busy)")
        }
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test("a request already carrying the loop marker is refused with 508, and nothing is sent")
    func loop() async throws {
        try await withNetwork { world, origin in
            let r = try await world.gateway.send(
                .GET, "/hello.txt", host: "127.0.0.1:\(origin.port)", headers: [(Forwarder.loopMarker, "1")])
            #expect(r.status == 508, "\(r)")
            #expect(origin.requests.isEmpty)
        }
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test("a redirect is handed to the page with its fields, each Set-Cookie a field of its own, not followed")
    func relaysRedirect() async throws {
        try await withNetwork { world, origin in
            let authority = "127.0.0.1:\(origin.port)"
            let cookies = ["session=abc123; Path=/; HttpOnly", "theme=dark; Path=/; Max-Age=3600"]
            origin.inject(.redirectSettingCookies(cookies), at: "/login")
            // The test's own client must not follow the redirect either.
            let client = HTTPClient(configuration: .init(redirectConfiguration: .disallow))
            let r: Reply
            do { r = try await world.gateway.send(.GET, "/login", host: authority, client: client) } catch {
                try await client.shutdown()
                throw error
            }
            try await client.shutdown()
            #expect(r.status == 302, "\(r)")
            #expect(r.header("Location") == "http://\(authority)/login?redirected=1", "\(r)")
            #expect(r.headers["Set-Cookie"] == cookies, "each Set-Cookie field kept apart: \(r)")
            #expect(origin.requests.count == 1, "the gateway did not follow it: \(origin.requests)")
        }
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test("a connection that cannot be made fails at once: no retried attempts until the exchange's timeout")
    func unreachableFailsFast() async throws {
        let patient = Forwarder(network: .forward(scheme: "http"), exchange: NIOExchange(timeout: 60))
        try await withNetwork(forwarder: patient) { world, _ in
            let closed = try await FaultOrigin.start(serving: FileManager.default.temporaryDirectory, otherHost: nil)
            let port = closed.port
            await closed.stop()
            let started = ContinuousClock.now
            let r = try await world.gateway.send(.GET, "/hello.txt", host: "127.0.0.1:\(port)")
            let waited = ContinuousClock.now - started
            #expect(r.status == 502, "\(r)")
            // A refused connection is known at once; before, the client retried it until the
            // 60 s timeout. The bound is far from both, for a loaded machine.
            #expect(waited < .seconds(15), "\(waited)")
            #expect(world.gateway.log.contains { $0.contains("passthrough failed") }, "\(world.gateway.log)")
        }
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test("a network that does not answer: 502 naming the URL")
    func unreachable() async throws {
        let impatient = Forwarder(network: .forward(scheme: "http"), exchange: NIOExchange(timeout: 1))
        try await withNetwork(forwarder: impatient) { world, origin in
            // A port that was just listening and is closed now: the connection is refused.
            let closed = try await FaultOrigin.start(serving: FileManager.default.temporaryDirectory, otherHost: nil)
            let port = closed.port
            await closed.stop()
            let r = try await world.gateway.send(.GET, "/hello.txt", host: "127.0.0.1:\(port)")
            #expect(r.status == 502, "\(r)")
            #expect(
                r.text.hasPrefix("larder gateway: the network did not answer http://127.0.0.1:\(port)/hello.txt: "),
                "\(r.text)")
            #expect(origin.requests.isEmpty)
        }
    }
}
