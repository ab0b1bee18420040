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
import Synchronization
import SystemPackage
import Testing

/// The production host the sample app's routes name (`https://app.example.com/`, and
/// `https://app.example.com/docs/` for the local-only `docs` package).
let appHost = "app.example.com"

/// A gateway started on `127.0.0.1`, port chosen by the system, serving until `stop()`.
@available(macOS 14, iOS 17, tvOS 17, *)
final class RunningGateway: Sendable {
    let port: Int
    let lines: Lines
    private let task: Task<Void, any Error>

    /// The log lines, shared with the gateway's log closure.
    final class Lines: Sendable {
        let all = Mutex<[String]>([])
    }

    private init(port: Int, lines: Lines, task: Task<Void, any Error>) {
        self.port = port
        self.lines = lines
        self.task = task
    }

    /// Starts `loader`'s gateway, forwarding with `forwarder`, watching page health with `health`.
    static func start(
        loader: ResourceLoader, forwarder: Forwarder = Forwarder(network: .offline, exchange: nil),
        health: PageHealthTracker? = nil, firstUse: FirstUse? = nil, answersOnEventLoop: Bool = true
    ) async throws -> RunningGateway {
        let lines = Lines()
        var gateway = Gateway(
            loader: loader, port: 0, forwarder: forwarder, log: { line in lines.all.withLock { $0.append(line) } })
        gateway.answersOnEventLoop = answersOnEventLoop
        gateway.health = health
        gateway.firstUse = firstUse
        let (ports, listening) = AsyncStream<Int>.makeStream()
        let configured = gateway
        let task = detachedOnOwnThreads {
            defer { listening.finish() }
            try await configured.run { _, port in listening.yield(port) }
        }
        var next = ports.makeAsyncIterator()
        guard let port = await next.next() else {
            _ = await task.result
            throw TestSupportError("the gateway did not start: \(String(describing: await task.result))")
        }
        return RunningGateway(port: port, lines: lines, task: task)
    }

    /// Stops serving and waits for the server to end.
    func stop() async {
        task.cancel()
        _ = await task.result
    }

    /// The log lines so far.
    var log: [String] { lines.all.withLock { $0 } }

    /// Sends one request to the gateway (`Host` as given, else the gateway's own address) and
    /// reads the whole answer.
    func send(
        _ method: HTTPMethod = .GET, _ target: String, host: String? = appHost, headers: [(String, String)] = [],
        body: Data? = nil, client: HTTPClient = .shared
    ) async throws -> Reply {
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)\(target)")
        request.method = method
        if let host { request.headers.add(name: "Host", value: host) }
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body { request.body = .bytes(ByteBuffer(bytes: body)) }
        let response = try await client.execute(request, timeout: .seconds(120))
        let bytes = try await response.body.collect(upTo: 64 << 20)
        return Reply(status: Int(response.status.code), headers: response.headers, body: Data(buffer: bytes))
    }
}

/// An answer of the gateway.
struct Reply: CustomStringConvertible {
    let status: Int
    let headers: HTTPHeaders
    let body: Data

    /// The value of a header field (the first, names in any case).
    func header(_ name: String) -> String? { headers.first(name: name) }

    var text: String { String(decoding: body, as: UTF8.self) }

    var description: String {
        "\(status) \(headers.map { "\($0.name): \($0.value)" }.joined(separator: "; ")) [\(body.count) bytes]"
    }
}

/// A sandbox with the sample app 1.0.0 active (routes `https://app.example.com/`,
/// local-then-network, `/api/` bypassed) and, with `docs`, the `docs` package 1.0.0
/// (`https://app.example.com/docs/`, local only).
func makeSandbox(docs: Bool = false) throws -> ResolveEnv {
    let env = try ResolveEnv()
    try env.publish("1.0.0")
    try env.install("1.0.0")
    if docs {
        try env.publish("1.0.0", id: "docs")
        try env.install("1.0.0", id: "docs")
    }
    return env
}

/// The quoted SHA-256 the resolver gives a file as its ETag.
func etag(_ data: Data) -> String { "\"\(SHA256Digest.of(data).hex)\"" }

/// One test's sandbox and the gateway over it.
@available(macOS 14, iOS 17, tvOS 17, *)
struct World {
    let env: ResolveEnv
    let gateway: RunningGateway
    /// Records missing files of an active version in the store (reports at once: interval 0).
    let reporter: StoreFailureReporter
    /// Records page-health verdicts in the store, when the gateway watches page health.
    let recorder: StoreHealthRecorder?

    /// The sandbox's state as it is on disk.
    func state() throws -> SandboxState { try SandboxReader(root: env.root).state() }

    /// The bytes of a file of the sample app's installed `version`.
    func installed(_ path: String, version: String = "1.0.0", id: String = "sample-app") throws -> Data {
        try Data(contentsOf: env.tree(id, version).appendingPathComponent(path))
    }
}

/// Runs `body` with a gateway over a fresh sandbox (`docs`: with the docs package; `prepare` may
/// change it first; offline unless
/// `forwarder` says otherwise; page health watched with `health`; package hits answered on the
/// event loop unless `answersOnEventLoop` is false), then stops the gateway and removes the sandbox.
@available(macOS 14, iOS 17, tvOS 17, *)
func withGateway(
    _ prepare: (ResolveEnv) throws -> Void = { _ in }, docs: Bool = false,
    forwarder: Forwarder = Forwarder(network: .offline, exchange: nil), health: PageHealthSettings? = nil,
    answersOnEventLoop: Bool = true, _ body: (World) async throws -> Void
) async throws {
    let env = try makeSandbox(docs: docs)
    defer { env.cleanup() }
    try prepare(env)
    let reporter = StoreFailureReporter(root: env.root, interval: 0)
    let loader = ResourceLoader(resolver: try Resolver(root: env.root), reporter: reporter)
    let recorder = health.map { _ in StoreHealthRecorder(root: env.root) { _ in } }
    var tracker: PageHealthTracker?
    if let health, let recorder { tracker = PageHealthTracker(settings: health, recorder: recorder) }
    let gateway = try await RunningGateway.start(
        loader: loader, forwarder: forwarder, health: tracker, answersOnEventLoop: answersOnEventLoop)
    do {
        try await onOwnThreads {
            try await body(World(env: env, gateway: gateway, reporter: reporter, recorder: recorder))
        }
    } catch {
        await gateway.stop()
        throw error
    }
    await gateway.stop()
}

/// Installs 2.0.0 of the sample app over a confirmed 1.0.0: 2.0.0 active and pending, 1.0.0 its fallback.
func pendingUpdate(_ env: ResolveEnv) throws {
    try env.withSandbox { _ = try $0.confirm(id: try packageID("sample-app")) }
    try env.publish("2.0.0")
    try env.install("2.0.0")
}
