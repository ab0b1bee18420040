import Foundation
import LarderCore
import LarderResolve
import LarderStore
import LarderTestSupport
import LarderWebView
import Synchronization
import SystemPackage
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A scheme task that records every call, and every call after `stop` separately (there must
/// be none). `onHead` / `onChunk` let a test act in the middle of a delivery.
final class FakeTask: SchemeTask, @unchecked Sendable {
    // @unchecked: `calls` is behind a lock; the closures are set before `start`.
    enum Call: Equatable {
        case head(Int, [String: String])
        case data(Data)
        case finish
        case fail(SchemeTaskError)
    }
    let schemeRequest: SchemeRequest
    let calls = Mutex<[Call]>([])
    let afterStop = Mutex<[Call]>([])
    let stopped = Mutex(false)
    var onHead: (@Sendable (FakeTask) -> Void)?
    var onChunk: (@Sendable (FakeTask, Int) -> Void)?
    let ended = Mutex(false)

    init(_ request: SchemeRequest) { schemeRequest = request }

    private func record(_ c: Call) {
        if stopped.withLock({ $0 }) { afterStop.withLock { $0.append(c) } }
        calls.withLock { $0.append(c) }
    }
    func didReceive(_ head: SchemeResponseHead) {
        record(.head(head.status, head.headers))
        onHead?(self)
    }
    func didReceive(_ data: Data) {
        record(.data(data))
        onChunk?(self, calls.withLock { $0.count })
    }
    func didFinish() {
        record(.finish)
        ended.withLock { $0 = true }
    }
    func didFail(_ error: SchemeTaskError) {
        record(.fail(error))
        ended.withLock { $0 = true }
    }

    /// Waits for the end (finish or fail), at most `seconds` (polling: blocking a thread of the
    /// tests' cooperative pool could starve the driver's own tasks).
    func waitForEnd(_ seconds: Double = 30) async -> Bool {
        await until(seconds) { self.ended.withLock { $0 } }
    }

    var body: Data { calls.withLock { $0 }.reduce(into: Data()) { if case .data(let d) = $1 { $0.append(d) } } }
    var head: (Int, [String: String])? {
        calls.withLock { $0 }.compactMap { if case .head(let s, let h) = $0 { (s, h) } else { nil } }.first
    }
    var last: Call? { calls.withLock { $0.last } }
}

/// Polls `condition` every 10 ms for at most `seconds`; whether it became true.
func until(_ seconds: Double, _ condition: @Sendable () -> Bool) async -> Bool {
    for _ in 0..<Int(seconds * 100) {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return condition()
}

/// A gate a fake network body waits at, without blocking a thread.
final class Gate: Sendable {
    let open = Mutex(false)
    func release() { open.withLock { $0 = true } }
    func wait() async { _ = await until(30) { self.open.withLock { $0 } } }
}

/// A network that records what it was sent and answers as told; fails loudly when not expected.
final class FakeExchange: NetworkExchange, @unchecked Sendable {
    // @unchecked: `sent` is behind a lock; the rest is set before use.
    let sent = Mutex<[ForwardRequest]>([])
    let status: Int
    let headers: [(String, String)]
    let chunks: [Data]
    let failAfter: Int?
    let gate: Gate?
    let expected: Bool

    init(
        status: Int = 200, headers: [(String, String)] = [], chunks: [Data] = [], failAfter: Int? = nil,
        gate: Gate? = nil, expected: Bool = true
    ) {
        self.status = status
        self.headers = headers
        self.chunks = chunks
        self.failAfter = failAfter
        self.gate = gate
        self.expected = expected
    }

    struct Broken: Error, CustomStringConvertible { var description: String { "connection reset" } }

    func send(_ request: ForwardRequest, maxBytes: Int) async throws -> ForwardResponse {
        #expect(expected, "the network was not expected to be asked for \(request.url)")
        sent.withLock { $0.append(request) }
        let index = Mutex(0)
        let (chunks, failAfter, gate) = (self.chunks, self.failAfter, self.gate)
        return ForwardResponse(
            status: status, headers: headers,
            body: ForwardBody {
                let i = index.withLock { i in
                    defer { i += 1 }
                    return i
                }
                if i == 1 { await gate?.wait() }
                if let f = failAfter, i == f { throw Broken() }
                return i < chunks.count ? chunks[i] : nil
            })
    }
}

@Suite("WebKit path: the scheme-task driver, on Linux with fake tasks")
struct SchemeTaskDriverTests {
    let env: ResolveEnv
    let loader: ResourceLoader
    let delivery = DeliveryQueue(label: "test.delivery")

    init() throws {
        env = try ResolveEnv()
        try env.publish("1.0.0")
        try env.install("1.0.0")
        loader = ResourceLoader(resolver: try Resolver(root: env.root, schemes: ["app"]))
    }

    func driver(_ forwarder: Forwarder = Forwarder(network: .offline, exchange: nil)) -> SchemeTaskDriver {
        SchemeTaskDriver(loader: loader, forwarder: forwarder, delivery: delivery)
    }

    func fileBytes(_ path: String) throws -> Data {
        try Data(contentsOf: env.tree("sample-app", "1.0.0").appendingPathComponent(path))
    }

    @Test("a local file: head, then the body in chunks, then the end — nothing after")
    func localFile() async throws {
        defer { env.cleanup() }
        let d = driver()
        let task = FakeTask(SchemeRequest(url: "larder://sample-app/js/app.js"))
        d.start(task)
        #expect(await task.waitForEnd())
        let (status, headers) = try #require(task.head)
        #expect(status == 200)
        #expect(headers["Content-Type"]?.hasPrefix("text/javascript") == true)
        // No package lists corsOrigins: no Access-Control-Allow-Origin (manifests §17).
        #expect(headers["Access-Control-Allow-Origin"] == nil)
        #expect(task.body == (try fileBytes("js/app.js")))
        #expect(task.last == .finish)
        #expect(d.activeTasks == 0)
        // A range, through another custom scheme the resolver routes.
        let ranged = FakeTask(SchemeRequest(url: "app://sample-app/js/app.js", headers: [("Range", "bytes=3-9")]))
        d.start(ranged)
        #expect(await ranged.waitForEnd())
        #expect(ranged.head?.0 == 206)
        #expect(ranged.body == (try fileBytes("js/app.js")).subdata(in: 3..<10))
    }

    @Test("a body larger than a chunk arrives in order, in several chunks")
    func chunked() async throws {
        defer { env.cleanup() }
        let env2 = try ResolveEnv()
        defer { env2.cleanup() }
        try env2.repository.publish(
            "1.0.0", id: "sample-app",
            edit: { try Data(repeating: 0x61, count: 300_000).write(to: $0.appendingPathComponent("data/big.txt")) }
        ) { $0.routes = ["https://app.example.com/"] }
        try env2.install("1.0.0")
        let d = SchemeTaskDriver(loader: ResourceLoader(resolver: try Resolver(root: env2.root)), delivery: delivery)
        let task = FakeTask(SchemeRequest(url: "larder://sample-app/data/big.txt"))
        d.start(task)
        #expect(await task.waitForEnd())
        let chunks = task.calls.withLock { $0 }.filter { if case .data = $0 { true } else { false } }
        #expect(chunks.count >= 5)
        #expect(task.body == Data(repeating: 0x61, count: 300_000))
        #expect(task.last == .finish)
    }

    @Test("stop in the middle of a body: no call reaches the task afterwards")
    func stopMidBody() async throws {
        defer { env.cleanup() }
        let env2 = try ResolveEnv()
        defer { env2.cleanup() }
        try env2.repository.publish(
            "1.0.0", id: "sample-app",
            edit: { try Data(repeating: 0x62, count: 1_000_000).write(to: $0.appendingPathComponent("data/big.txt")) }
        ) { $0.routes = ["https://app.example.com/"] }
        try env2.install("1.0.0")
        let d = SchemeTaskDriver(loader: ResourceLoader(resolver: try Resolver(root: env2.root)), delivery: delivery)
        let task = FakeTask(SchemeRequest(url: "larder://sample-app/data/big.txt"))
        let stoppedAt = Mutex(false)
        task.onChunk = { t, n in
            guard n == 3 else { return }
            // WebKit stops the task on the delivery thread (the main thread) — here, from inside a delivery.
            t.stopped.withLock { $0 = true }
            d.stop(t)
            stoppedAt.withLock { $0 = true }
        }
        d.start(task)
        #expect(await until(30) { stoppedAt.withLock { $0 } })
        // Give the reader time to try more chunks; none may arrive.
        try await Task.sleep(for: .milliseconds(300))
        delivery.sync {}
        #expect(task.afterStop.withLock { $0 }.isEmpty)
        #expect(task.calls.withLock { $0.count } == 3)
        #expect(d.activeTasks == 0)
    }

    @Test("stop before the head: nothing at all is delivered")
    func stopBeforeHead() async throws {
        defer { env.cleanup() }
        let gate = Gate()
        let exchange = FakeExchange(status: 200, chunks: [Data("a".utf8), Data("b".utf8)], gate: gate)
        let d = driver(Forwarder(network: .forward(scheme: "https"), exchange: exchange))
        let task = FakeTask(SchemeRequest(url: "larder://sample-app/api/items"))
        task.onHead = { t in
            t.stopped.withLock { $0 = true }
            d.stop(t)
            gate.release()
        }
        d.start(task)
        _ = await until(30) { task.head != nil }
        try await Task.sleep(for: .milliseconds(200))
        delivery.sync {}
        #expect(task.head?.0 == 200)
        #expect(task.afterStop.withLock { $0 }.isEmpty)
        #expect(task.calls.withLock { $0.count } == 1)
    }

    @Test("local-only path with no file: a 404 response, not a failure")
    func notFound() async throws {
        defer { env.cleanup() }
        let d = driver()
        let task = FakeTask(SchemeRequest(url: "larder://no-such-package/x.js"))
        d.start(task)
        #expect(await task.waitForEnd())
        #expect(task.head?.0 == 404)
        #expect(String(decoding: task.body, as: UTF8.self).contains("no package no-such-package"))
        #expect(task.last == .finish)
    }

    @Test("passthrough offline: the task fails, naming why; the network is not asked")
    func offline() async throws {
        defer { env.cleanup() }
        let exchange = FakeExchange(expected: false)
        let d = driver(Forwarder(network: .offline, exchange: exchange))
        let task = FakeTask(SchemeRequest(url: "larder://sample-app/api/items"))
        d.start(task)
        #expect(await task.waitForEnd())
        guard case .fail(let e) = task.last else {
            Issue.record("not failed: \(String(describing: task.last))")
            return
        }
        #expect(e.kind == .noLocalCopy)
        #expect(e.message.contains("offline") && e.message.contains("bypass prefix /api/"))
        #expect(exchange.sent.withLock { $0 }.isEmpty)
    }

    @Test("local-then-network: forwarded to the package's origin with method, fields and body; the answer streamed")
    func forwarded() async throws {
        defer { env.cleanup() }
        let exchange = FakeExchange(
            status: 201, headers: [("Content-Type", "application/json"), ("Connection", "close"), ("X-Up", "1")],
            chunks: [Data("{\"ok\":".utf8), Data("true}".utf8)])
        let d = driver(Forwarder(network: .forward(scheme: "https"), exchange: exchange))
        let body = Data("{\"name\":\"flour\"}".utf8)
        let task = FakeTask(
            SchemeRequest(
                method: .post, url: "app://sample-app/api/items?x=1#frag",
                headers: [("Content-Type", "application/json"), ("Connection", "keep-alive"), ("X-Trace", "t1")],
                body: body))
        d.start(task)
        #expect(await task.waitForEnd())
        let sent = try #require(exchange.sent.withLock { $0 }.first)
        #expect(sent.method == .post)
        #expect(sent.url == "https://app.example.com/api/items?x=1")
        #expect(sent.body == body)
        #expect(sent.headers.contains { $0 == ("X-Trace", "t1") })
        #expect(sent.headers.contains { $0 == ("Content-Type", "application/json") })
        #expect(!sent.headers.contains { $0.0.lowercased() == "connection" })
        #expect(sent.headers.contains { $0 == (Forwarder.loopMarker, "1") })
        #expect(task.head?.0 == 201)
        #expect(task.head?.1["X-Up"] == "1" && task.head?.1["Connection"] == nil)
        #expect(String(decoding: task.body, as: UTF8.self) == "{\"ok\":true}")
        #expect(task.last == .finish)
    }

    @Test("the network failing mid-body fails the task after what arrived")
    func networkFailsMidBody() async throws {
        defer { env.cleanup() }
        let exchange = FakeExchange(status: 200, chunks: [Data("part".utf8), Data("rest".utf8)], failAfter: 1)
        let d = driver(Forwarder(network: .forward(scheme: "https"), exchange: exchange))
        let task = FakeTask(SchemeRequest(url: "larder://sample-app/api/items"))
        d.start(task)
        #expect(await task.waitForEnd())
        #expect(task.body == Data("part".utf8))
        guard case .fail(let e) = task.last else {
            Issue.record("not failed: \(String(describing: task.last))")
            return
        }
        #expect(e.kind == .network && e.message.contains("connection reset"))
    }

    @Test("a request carrying the loop marker is refused, not forwarded again")
    func loop() async throws {
        defer { env.cleanup() }
        let exchange = FakeExchange(expected: false)
        let d = driver(Forwarder(network: .forward(scheme: "https"), exchange: exchange))
        let task = FakeTask(SchemeRequest(url: "larder://sample-app/api/items", headers: [(Forwarder.loopMarker, "1")]))
        d.start(task)
        #expect(await task.waitForEnd())
        guard case .fail(let e) = task.last else {
            Issue.record("not failed")
            return
        }
        #expect(e.message.contains("loop"))
    }

    @Test("a file that shrinks under the reader fails the task instead of a short body")
    func shortFile() async throws {
        defer { env.cleanup() }
        let d = driver()
        let task = FakeTask(SchemeRequest(url: "larder://sample-app/js/app.js"))
        let path = env.tree("sample-app", "1.0.0").appendingPathComponent("js/app.js").path
        task.onHead = { _ in _ = truncate(path, 10) }
        d.start(task)
        #expect(await task.waitForEnd())
        guard case .fail(let e) = task.last else {
            Issue.record("not failed: \(String(describing: task.last))")
            return
        }
        #expect(e.kind == .unreadable && e.message.contains("ended at byte"))
    }

    @Test("pins: a page's subresources keep its version after an update; a navigation takes the new one")
    func pinsRenewOnNavigation() async throws {
        defer { env.cleanup() }
        let pins = try SessionPins(resolver: loader.resolver)
        let d = SchemeTaskDriver(loader: loader, pins: pins, delivery: delivery)
        try env.publish("2.0.0")
        try env.install("2.0.0")
        func catalog(_ navigation: Bool) async throws -> String {
            let t = FakeTask(SchemeRequest(url: "larder://sample-app/data/catalog.json", isNavigation: navigation))
            d.start(t)
            #expect(await t.waitForEnd())
            return String(decoding: t.body, as: UTF8.self)
        }
        #expect(try await catalog(false).contains("\"1.0.0\""))
        #expect(pins.current?.versions[PackageID("sample-app")!] == SemanticVersion("1.0.0"))
        #expect(try await catalog(true).contains("\"2.0.0\""))
        #expect(try await catalog(false).contains("\"2.0.0\""))
        // The old pin was given back: gc may now delete 1.0.0.
        #expect(pins.current?.versions[PackageID("sample-app")!] == SemanticVersion("2.0.0"))
        pins.release()
        #expect(pins.current == nil)
    }
}
