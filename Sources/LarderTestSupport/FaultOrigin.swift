import Foundation
import LarderCore
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import Synchronization

/// A fault-injecting HTTP origin on loopback, started by a test: in process for the transport's,
/// the sync's and the gateway's suites, and as a process (`larder-fault-origin`, driven through
/// its control endpoint) for `scripts/integration/faults.py`.
///
/// It serves the files under a directory on `127.0.0.1` (port chosen by the system) and, when it
/// can, on a second loopback address with the same port (`127.0.0.2`), so that a redirect "to
/// another host" goes somewhere real and the log shows whether a client followed it. Healthy
/// serving: GET and HEAD; an ETag on every file (the quoted first 40 hex digits of its SHA-256);
/// If-None-Match answered 304; one byte range (`bytes=A-B`, `bytes=A-`, `bytes=-N`) answered 206
/// with Content-Range, If-Range honoured (a validator that does not match gets the whole file
/// with 200), an unsatisfiable range answered 416. Any other method is echoed: 201 with a body
/// naming the method, path and request body. Every response carries `X-Origin: fault-origin`. A
/// path `/lanes/NAME/REST` is served as `/REST` (a lane per test case: its rules touch no other),
/// and with a `control` handler, the paths starting with `/__` go to it, unlogged and unfaulted.
///
/// Faults are injected per path prefix (`inject`); the first rule whose prefix the request's
/// path (without its query) starts with, and that has requests left, applies. Responses are
/// written as raw bytes, so a fault can send what no well-behaved HTTP encoder would (a length
/// that lies, a body that ends with the connection, a reset). Every request is logged on arrival
/// (`requests`), with the fault it got.
package final class FaultOrigin: Sendable {
    /// What a rule does to the requests it applies to.
    package enum Fault: Sendable, Equatable, CustomStringConvertible {
        /// Answers `code` with a short body; `retryAfter` adds a Retry-After header.
        case status(Int, retryAfter: String? = nil)
        /// The real Content-Length, then the first `after` bytes of the body (half when nil),
        /// then the connection ends: closed, or reset (TCP RST) when `reset`.
        case truncate(after: Int? = nil, reset: Bool = false)
        /// Declares `by` bytes more than it sends, sends the body, closes.
        case lengthMore(by: Int = 100)
        /// Declares `by` bytes less than the body, sends the whole body, closes.
        case lengthLess(by: Int = 100)
        /// A Range request gets 200 and the whole body (by default only Range requests use it up).
        case ignoreRange
        /// A Range request gets 206 starting `shift` bytes after the requested offset (0 when
        /// that is past the end), honestly labelled; `total` replaces the size after the slash.
        /// By default only Range requests use it up.
        case badContentRange(shift: Int = 7, total: Int? = nil)
        /// The byte at `at` of what is sent (the middle when nil; negative: from the end) is inverted.
        case flip(at: Int? = nil)
        /// The head, then `bytes` bytes every `every` until done or the client goes away.
        case drip(bytes: Int, every: Duration)
        /// The head and the first `after` bytes, then nothing for `seconds` (or until the client
        /// goes away), then the connection closes.
        case stall(after: Int = 0, seconds: Double)
        /// 302 to the very same URL.
        case redirectLoop
        /// 302 to the same path on the other loopback address (same port).
        case redirectToOtherHost
        /// 302 to the same path on the same host with `?redirected=N` (healthy).
        case redirect
        /// 302 to the same host, port and path over plain `http://` (from a TLS origin: a downgrade).
        case redirectToHTTP
        /// 302 to the same path with `?redirected=N`, setting each cookie in a `Set-Cookie` field
        /// of its own (a login flow's answer).
        case redirectSettingCookies([String])
        /// The file followed by `count` bytes of junk: with a Content-Length that counts them, or
        /// (`declared: false`) with none, the body ending with the connection.
        case extra(Int, declared: Bool = true)
        /// The file at the same path under `directory` instead of the root, served healthily (a
        /// document replayed or substituted).
        case serveFrom(URL)

        /// A short name for logs and failure messages.
        package var description: String {
            switch self {
            case .status(let code, _): "status-\(code)"
            case .truncate(_, let reset): reset ? "reset" : "truncate"
            case .lengthMore: "length-more"
            case .lengthLess: "length-less"
            case .ignoreRange: "range-ignore"
            case .badContentRange: "bad-content-range"
            case .flip: "flip"
            case .drip: "drip"
            case .stall: "stall"
            case .redirectSettingCookies: "redirect-cookies"
            case .redirectLoop: "redirect-loop"
            case .redirectToOtherHost: "redirect-host"
            case .redirect: "redirect"
            case .redirectToHTTP: "redirect-http"
            case .extra: "extra"
            case .serveFrom: "serve-from"
            }
        }

        var rangeOnlyByDefault: Bool {
            switch self {
            case .ignoreRange, .badContentRange: true
            default: false
            }
        }
    }

    /// One request as the origin saw it (logged on arrival; `sent` is filled in as the body goes out).
    package struct Request: Sendable, Equatable, CustomStringConvertible {
        /// The local address it arrived on (`127.0.0.1`, or the other host).
        package var host: String
        /// The method.
        package var method: String
        /// The request target as sent (path and query).
        package var path: String
        /// The header fields, names lowercased (repeated fields joined with ", ").
        package var headers: [String: String]
        /// The request body.
        package var body: Data
        /// The status answered.
        package var status: Int
        /// The fault applied, if any.
        package var fault: Fault?
        /// Body bytes written to the connection.
        package var sent: Int
        /// The Content-Length declared, when one was.
        package var declared: Int?
        /// When the request arrived.
        package var arrived: ContinuousClock.Instant

        /// The Range header.
        package var range: String? { headers["range"] }
        /// The If-Range header.
        package var ifRange: String? { headers["if-range"] }
        /// The If-None-Match header.
        package var ifNoneMatch: String? { headers["if-none-match"] }

        /// `METHOD path [Range] -> status (fault)`.
        package var description: String {
            "\(method) \(path)\(range.map { " [\($0)]" } ?? "") -> \(status)\(fault.map { " (\($0))" } ?? "")"
        }
    }

    /// A rule as injected, with how many requests it hit so far.
    package struct Rule: Sendable, Equatable {
        /// Its number, in the order rules were injected (from 1).
        package var id: Int
        /// The path prefix it applies to.
        package var pathPrefix: String
        /// Whether it applies to that path only, not to the paths it is a prefix of.
        package var exact: Bool
        /// The fault.
        package var fault: Fault
        /// Requests it still applies to; nil: every one.
        package var left: Int?
        /// Whether only requests with a Range header use it.
        package var onlyRange: Bool
        /// Requests it was applied to.
        package var applied: Int
    }

    /// The port both addresses listen on.
    package let port: Int
    /// The main address.
    package let host: String
    /// The second address, when it could be bound on the same port.
    package let otherHost: String?
    /// `https` when the origin speaks TLS, else `http`.
    package let scheme: String
    let root: URL
    let state = Mutex(State())
    private let servers: [NIOAsyncChannel<NIOAsyncChannel<HTTPServerRequestPart, Never>, Never>]
    let running = Mutex<Task<Void, Never>?>(nil)
    /// The open connections, closed by `stop()` (a stalled answer must not outlive the test).
    let open = Mutex<[ObjectIdentifier: any NIOCore.Channel]>([:])
    let control: Control?

    /// Answers a control request (a path starting with `/__`): a status and a JSON body, or nil
    /// to serve the path like any other.
    package typealias Control = @Sendable (Request) async -> (status: Int, body: Data)?

    struct State {
        var rules: [Rule] = []
        /// The requests, each with its number (an answer still being sent updates its entry by
        /// number, so a reset that drops entries drops its updates too).
        var log: [(id: Int, request: Request)] = []
        var lastID = 0
        var lastRule = 0
        var etags: [String: String] = [:]
    }

    /// A certificate and its private key, PEM files, for a TLS origin.
    package struct TLSFiles: Sendable {
        /// The certificate chain (PEM).
        package var certificate: String
        /// The private key (PEM).
        package var privateKey: String
        /// Files at these paths.
        package init(certificate: String, privateKey: String) {
            self.certificate = certificate
            self.privateKey = privateKey
        }
    }

    private init(
        root: URL, host: String, otherHost: String?, port: Int, scheme: String,
        servers: [NIOAsyncChannel<NIOAsyncChannel<HTTPServerRequestPart, Never>, Never>], control: Control?
    ) {
        self.control = control
        self.root = root
        self.host = host
        self.otherHost = otherHost
        self.port = port
        self.scheme = scheme
        self.servers = servers
    }

    /// Starts serving `root` on `host` (port `port`, 0: chosen by the system) and, when it can
    /// take the same port there, on `otherHost`; over TLS with `tls`; `/__` paths answered by
    /// `control` when given. Stop it with `stop()`.
    package static func start(
        serving root: URL, host: String = "127.0.0.1", port: Int = 0, otherHost: String? = "127.0.0.2",
        tls: TLSFiles? = nil, control: Control? = nil
    ) async throws -> FaultOrigin {
        let context: NIOSSLContext?
        if let tls {
            let chain = try NIOSSLCertificate.fromPEMFile(tls.certificate).map {
                NIOSSLCertificateSource.certificate($0)
            }
            let key = try NIOSSLPrivateKey(file: tls.privateKey, format: .pem)
            context = try NIOSSLContext(
                configuration: .makeServerConfiguration(certificateChain: chain, privateKey: .privateKey(key)))
        } else {
            context = nil
        }
        var servers = [try await bind(host, port: port, tls: context)]
        let port = servers[0].channel.localAddress?.port ?? 0
        var other: String?
        if let otherHost {
            // The other address on the same port; none when it cannot be had (the redirect is
            // refused before any connection anyway, so the tests of it still hold).
            if let second = try? await bind(otherHost, port: port, tls: context) {
                servers.append(second)
                other = otherHost
            }
        }
        let origin = FaultOrigin(
            root: root, host: host, otherHost: other, port: port, scheme: tls == nil ? "http" : "https",
            servers: servers, control: control)
        origin.run()
        return origin
    }

    private static func bind(
        _ host: String, port: Int, tls: NIOSSLContext?
    ) async throws -> NIOAsyncChannel<NIOAsyncChannel<HTTPServerRequestPart, Never>, Never> {
        try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 64)
            .bind(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let tls { try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tls)) }
                    try channel.pipeline.syncOperations.addHandler(
                        ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .dropBytes)))
                    return try NIOAsyncChannel<HTTPServerRequestPart, Never>(wrappingChannelSynchronously: channel)
                }
            }
    }

    private func run() {
        let servers = self.servers
        // The answers are timed against the clients' timeouts: on threads of the tests' own.
        let work: @Sendable () async -> Void = {
            await withTaskGroup(of: Void.self) { group in
                for server in servers {
                    group.addTask {
                        try? await server.executeThenClose { inbound in
                            try await withThrowingTaskGroup(of: Void.self) { connections in
                                for try await connection in inbound {
                                    connections.addTask { await self.serve(connection) }
                                }
                            }
                        }
                    }
                }
            }
        }
        let task = Task(executorPreference: OwnThreads.shared, operation: work)
        running.withLock { $0 = task }
    }

    /// Stops listening and ends every connection (a stalled or dripping answer included).
    package func stop() async {
        let task = running.withLock { t in
            defer { t = nil }
            return t
        }
        task?.cancel()
        for server in servers { try? await server.channel.close() }
        for channel in open.withLock({ Array($0.values) }) { try? await channel.close() }
        await task?.value
    }

    /// The base URL of the origin on its main address (`http://127.0.0.1:PORT`).
    package var base: String { "\(scheme)://\(host):\(port)" }

    /// The URL of `path` (which starts with `/`) on the main address.
    package func url(_ path: String) -> URL {
        // The origin's own address and a path the test wrote: always a URL.
        URL(string: base + path) ?? URL(fileURLWithPath: "/")
    }

    /// Adds a rule: `fault` for the next `count` requests (nil: every one) whose path starts with
    /// `pathPrefix`; `onlyRange` (by default true for `ignoreRange` and `badContentRange`) lets
    /// requests without a Range header through without using the rule up; `exact` applies it to
    /// `pathPrefix` itself only. Returns the rule's id.
    @discardableResult
    package func inject(
        _ fault: Fault, at pathPrefix: String, count: Int? = 1, onlyRange: Bool? = nil, exact: Bool = false
    ) -> Int {
        state.withLock { s in
            s.lastRule += 1
            s.rules.append(
                Rule(
                    id: s.lastRule, pathPrefix: pathPrefix, exact: exact, fault: fault, left: count,
                    onlyRange: onlyRange ?? fault.rangeOnlyByDefault, applied: 0))
            return s.lastRule
        }
    }

    /// Removes the rules whose prefix starts with `prefix` and the log entries whose path does
    /// (an answer under it still being sent, a drip the client abandoned, is not logged either).
    package func reset(under prefix: String) {
        state.withLock { s in
            s.rules.removeAll { $0.pathPrefix.hasPrefix(prefix) }
            s.log.removeAll { $0.request.path.hasPrefix(prefix) }
        }
    }

    /// The rules, with how many requests each hit.
    package var rules: [Rule] { state.withLock { $0.rules } }

    /// Removes every rule (the origin heals).
    package func heal() { state.withLock { $0.rules = [] } }

    /// Every request so far, in the order they arrived.
    package var requests: [Request] { state.withLock { $0.log.map(\.request) } }

    /// The requests whose path starts with `prefix`.
    package func requests(under prefix: String) -> [Request] { requests.filter { $0.path.hasPrefix(prefix) } }

    /// The ETag the origin gives the file at `path` (relative to the root).
    package func etag(of path: String) throws -> String {
        Self.etag(of: try Data(contentsOf: root.appendingPathComponent(path)))
    }

    static func etag(of data: Data) -> String { "\"\(SHA256Digest.of(data).hex.prefix(40))\"" }
}

/// A self-signed certificate for `127.0.0.1` made with `openssl`, for a TLS origin: its files
/// in `directory`, the certificate also the trust root a client is given.
package func makeLoopbackCertificate(in directory: URL) throws -> FaultOrigin.TLSFiles {
    let cert = directory.appendingPathComponent("origin-cert.pem").path
    let key = directory.appendingPathComponent("origin-key.pem").path
    try runTool(
        "openssl",
        [
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key,
            "-out", cert, "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
        ])
    return FaultOrigin.TLSFiles(certificate: cert, privateKey: key)
}
