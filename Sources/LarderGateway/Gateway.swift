import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import LarderCore
import LarderResolve
import Logging
import NIOCore
import Synchronization

/// `larder serve`: an HTTP gateway on loopback over the resource loader.
///
/// A request is routed by its Host header and path, as the browser asked for it: a browser
/// started with `--host-resolver-rules="MAP app.example.com 127.0.0.1:PORT"` loads
/// `https://app.example.com/` routes (and `http://` ones) from the package. A request to the
/// gateway's own address (`127.0.0.1:PORT`, `localhost:PORT`) takes the `larder://` form
/// `/<id>/<path>` (one origin for every package); `http://<id>.localhost:PORT/<path>` is that form
/// on an origin of the package's own (browsers resolve `*.localhost` to loopback). What no package serves is forwarded to the network, or answered 502 when
/// offline. One log line per request names the outcome: package@version, fallback, passthrough.
@available(macOS 14, iOS 17, tvOS 17, *)
public struct Gateway: Sendable {
    /// Resolves and serves each request; what it passes through, the gateway forwards or refuses.
    public let loader: ResourceLoader
    /// The address to listen on (`127.0.0.1` by default); a Host of `host:port` means the gateway itself.
    public let host: String
    /// The port to listen on; 0 lets the system choose (`run` reports the bound one).
    public let port: Int
    /// Whether an unserved request is forwarded to the network or answered 502, and how
    /// (shared with the WebKit scheme-task driver).
    public let forwarder: Forwarder
    /// Called once per request with its log line.
    public let log: @Sendable (String) -> Void
    /// Watches the health of the pages it serves (`serve --page-health`); nil serves pages as
    /// they are. With it, a main document (a navigation, `Sec-Fetch-Dest: document`) of an
    /// active version gets the page-health script first in its `<head>`, the gateway answers
    /// the script's reserved paths on the page's own origin (`/.larder/health.js`, and POST
    /// `/.larder/health?page=<token>`), and the tracker's verdicts confirm or roll back.
    public var health: PageHealthTracker?
    /// The largest main document the page-health script is put into (larger ones are served as
    /// they are, unwatched).
    public var maxInjectedDocumentBytes = 8 << 20
    /// Installs an on-demand package the first time one of its URLs is requested (`serve`
    /// unless `--offline`); nil: such a request is answered as any URL no package serves.
    public var firstUse: FirstUse?
    /// Whether the requests a package answers are answered on the connection's event loop
    /// (`PackageHits`), the rest by a task; false answers every request by a task through
    /// Hummingbird, as before (kept for `scripts/bench`'s side-by-side row).
    public var answersOnEventLoop = true

    /// A gateway for `loader` on `host:port`, passing through with `forwarder`; `log` receives
    /// one line per request.
    public init(
        loader: ResourceLoader, host: String = "127.0.0.1", port: Int, forwarder: Forwarder,
        log: @escaping @Sendable (String) -> Void
    ) {
        self.loader = loader
        self.host = host
        self.port = port
        self.forwarder = forwarder
        self.log = log
    }

    /// Serves until cancelled (SIGINT/SIGTERM end it gracefully); `onListening` gets the bound
    /// address (the port is chosen by the system when 0 was asked for).
    public func run(onListening: @escaping @Sendable (String, Int) async -> Void) async throws {
        let bound = BoundPort()
        let dates = DateField()
        let eventLoop = answersOnEventLoop
        let app = Application(
            responder: CallbackResponder<BasicRequestContext> { request, _ in
                await self.respond(request, ownPort: bound.port ?? port)
            },
            server: HTTPServerBuilder { responder in
                let http1 = HTTP1Channel(responder: responder)
                guard eventLoop else { return http1 }
                return GatewayChannel(inner: http1, gateway: self, bound: bound, dates: dates)
            },
            configuration: ApplicationConfiguration(address: .hostname(host, port: port), serverName: "larder"),
            onServerRunning: { channel in
                let p = channel.localAddress?.port ?? port
                bound.set(p)
                await onListening(host, p)
            },
            logger: Logger(label: "larder.gateway", factory: { _ in SwiftLogNoOpLogHandler() }))
        guard let tracker = health else { return try await app.runService() }
        // The pages' deadlines run on the tracker's clock, looked at every 200 ms.
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                while !Task.isCancelled {
                    try await Task.sleep(for: .milliseconds(200))
                    tracker.tick()
                }
            }
            group.addTask { try await app.runService() }
            _ = try await group.next()
            group.cancelAll()
        }
    }

    /// The URL a request asks for: the `larder://` form for requests to the gateway itself,
    /// else `https://` and `http://` candidates built from the Host header.
    static func candidates(authority: String, target: String, gatewayHost: String, ownPort: Int) -> [String] {
        let path = target.hasPrefix("/") ? target : "/" + target
        if let id = packageHost(authority, ownPort: ownPort) {
            // `<id>.localhost:PORT/<path>` → `larder://<id>/<path>`: an origin per package.
            return ["larder://\(id)\(path)"]
        }
        if authority.isEmpty || isSelf(authority, ownPort: ownPort, host: gatewayHost) {
            // `/<id>/<path>` → `larder://<id>/<path>`.
            return ["larder:/" + path]
        }
        return ["https://\(authority)\(path)", "http://\(authority)\(path)"]
    }

    func respond(_ request: Request, ownPort: Int, afterInstall: Bool = false) async -> Response {
        let started = Date()
        let method = request.method
        let target = request.head.path ?? "/"
        let authority = request.head.authority ?? request.headers[named: "Host"] ?? ""
        if target.hasPrefix("/.larder/") {
            var r = request
            return await reserved(&r, target: target, authority: authority, started: started)
        }
        let urls = Self.candidates(authority: authority, target: target, gatewayHost: host, ownPort: ownPort)
        // A watched page's main document is always answered whole (its script tag is new each time).
        let watched = health != nil && method == .get && Self.isNavigation(request.headers)
        let passReason: String
        switch lookUp(
            method, urls, range: watched ? nil : request.headers[.range],
            ifNoneMatch: watched ? nil : request.headers[.ifNoneMatch], origin: request.headers[named: "Origin"],
            afterInstall: afterInstall)
        {
        case .served(let url, let r):
            if watched, let injected = watch(r) {
                log(line(method, url, r.status, "\(r.outcome) page-health", "\(injected.readableBytes)", started))
                return Self.document(r, injected)
            }
            log(line(method, url, r.status, "\(r.outcome)", r.header("Content-Length"), started))
            return Self.response(r, head: method == .head)
        case .notServed(let reason):
            passReason = reason
        }
        let url = urls[0]
        // An on-demand package not installed here routes it: install it (once, however many
        // requests wait), then answer from it — or, past the deadline, as its policy says.
        if let firstUse, !afterInstall, let (id, policy) = urls.lazy.compactMap({ firstUse.package(for: $0) }).first {
            let outcome = await firstUse.ensure(id)
            log(line(method, url, 0, "first use of \(id): \(outcome)", nil, started))
            if case .installed = outcome { return await respond(request, ownPort: ownPort, afterInstall: true) }
            if policy.mode == .localOnly {
                log(line(method, url, 503, "not served: \(id) is on demand and \(outcome)", nil, started))
                return Self.text(503, "larder gateway: \(id) is on demand and \(outcome)\n")
            }
        }
        let marked =
            request.headers[named: Forwarder.loopMarker] != nil || Self.isSelf(authority, ownPort: ownPort, host: host)
        let page = Self.page(
            origin: request.headers[named: "Origin"], referer: request.headers[named: "Referer"], ownPort: ownPort,
            host: host)
        let table = loader.resolver.snapshot().table
        switch forwarder.target(for: url, reason: passReason, table: table, marked: marked, page: page) {
        case .refused(let status, let why):
            log(line(method, url, status, "passthrough (\(why))", nil, started))
            return Self.text(status, "larder gateway: \(why)\n")
        case .url(let to):
            var r = request
            return await forward(&r, to: to, reason: passReason, started: started)
        }
    }

    /// What the packages answer for a request's candidate URLs.
    enum Lookup {
        /// The first candidate a package answers, with the loader's response.
        case served(url: String, LoadResponse)
        /// None does: why, to pass the request through with (or, for an on-demand package not
        /// installed yet, "not installed yet").
        case notServed(reason: String)
    }

    /// Asks the loader for each candidate URL in turn (with the request's Range, If-None-Match
    /// and Origin: a file is readable across origins only as its package's `corsOrigins` says)
    /// until a package answers. Before `afterInstall`, a 404 for a URL an
    /// on-demand package routes does not count as an answer: that is first use.
    func lookUp(
        _ method: HTTPRequest.Method, _ urls: [String], range: String?, ifNoneMatch: String?, origin: String?,
        afterInstall: Bool
    ) -> Lookup {
        var passReason = ""
        for url in urls {
            let req = LoadRequest(
                method: method, url: url, range: range, ifNoneMatch: ifNoneMatch, origin: origin)
            switch loader.load(req) {
            case .response(let r) where r.status == 404 && !afterInstall && firstUse?.package(for: url) != nil:
                r.close()
                passReason = passReason.isEmpty ? "not installed yet" : passReason
            case .response(let r):
                return .served(url: url, r)
            case .passthrough(let reason):
                // The reason of a candidate whose origin a package routes (a bypassed path, a
                // missing file) says more than "no package routes" for the other scheme's URL.
                if passReason.isEmpty
                    || (passReason.hasPrefix(RouteTable.unrouted) && !reason.hasPrefix(RouteTable.unrouted))
                {
                    passReason = reason
                }
            }
        }
        return .notServed(reason: passReason)
    }

    /// Whether a request is a top-level navigation: `Sec-Fetch-Dest: document`, or — from a client
    /// that sends no fetch metadata — one that accepts `text/html`.
    static func isNavigation(_ headers: HTTPFields) -> Bool {
        isNavigation(fetchDest: headers[named: "Sec-Fetch-Dest"], accept: headers[.accept])
    }

    /// Whether a request with these `Sec-Fetch-Dest` and `Accept` values is a navigation.
    static func isNavigation(fetchDest: String?, accept: String?) -> Bool {
        if let dest = fetchDest { return dest.lowercased() == "document" }
        return accept?.lowercased().contains("text/html") == true
    }

    /// Whether a Host header names this gateway itself (its address, or a package's own
    /// `<id>.localhost` origin on its port).
    static func isSelf(_ authority: String, ownPort: Int, host: String) -> Bool {
        let a = authority.lowercased()
        return ["\(host):\(ownPort)", "localhost:\(ownPort)", "127.0.0.1:\(ownPort)", "[::1]:\(ownPort)"].contains(a)
            || packageHost(a, ownPort: ownPort) != nil
    }

    /// The page a request comes from, in the form the route table reads: its `Referer` when it
    /// is of the request's `Origin` (or there is no `Origin`: a path says more than an origin),
    /// else the `Origin`; the gateway's own forms mapped to `larder://` (`larderForm`).
    static func page(origin: String?, referer: String?, ownPort: Int, host: String) -> String? {
        let sameOrigin =
            origin == nil || referer.flatMap { WebOrigin(url: $0) } == origin.flatMap { WebOrigin(url: $0) }
        guard let url = (sameOrigin ? referer : nil) ?? origin else { return nil }
        return larderForm(url, ownPort: ownPort, host: host)
    }

    /// `url` with the gateway's own forms written as the `larder://` URLs they stand for:
    /// `http://<id>.localhost:PORT/x` and `http://127.0.0.1:PORT/<id>/x` are `larder://<id>/x`
    /// (an `Origin` of the first, `larder://<id>`); any other URL as it is.
    static func larderForm(_ url: String, ownPort: Int, host: String) -> String {
        guard let u = URL(string: url), let h = u.host, let port = u.port else { return url }
        let authority = "\(h):\(port)"
        let path = u.path.isEmpty ? "" : u.path
        if let id = packageHost(authority, ownPort: ownPort) { return "larder://\(id)\(path)" }
        if isSelf(authority, ownPort: ownPort, host: host), path.count > 1 { return "larder:/\(path)" }
        return url
    }

    /// The package id of a Host header `<id>.localhost:PORT` on the gateway's port (browsers
    /// resolve every `*.localhost` name to loopback): each package's `larder:` form on an origin of
    /// its own. Nil for any other authority.
    package static func packageHost(_ authority: String, ownPort: Int) -> String? {
        let a = authority.lowercased()
        let suffix = ".localhost:\(ownPort)"
        guard a.hasSuffix(suffix) else { return nil }
        let id = String(a.dropLast(suffix.count))
        // No dot: `shop.app.localhost` would be a subdomain of `app.localhost`, not its own site.
        guard !id.contains(".") else { return nil }
        return PackageID(id).map { _ in id }
    }

    /// Relays a request to the network through the forwarder: method, header fields and body as
    /// received; the answer's status, header fields and body streamed back as they arrive.
    func forward(_ request: inout Request, to url: String, reason: String, started: Date) async -> Response {
        let method = request.method
        var body: Data?
        if method != .get && method != .head {
            do {
                body = Data(buffer: try await request.collectBody(upTo: forwarder.maxBytes))
            } catch {
                log(line(method, url, 413, "passthrough refused: the body is larger than the limit", nil, started))
                return Self.text(
                    413, "larder gateway: a forwarded request body is at most \(forwarder.maxBytes) bytes\n")
            }
        }
        let fields = request.headers.map { ($0.name.rawName, $0.value) }
        let outgoing = forwarder.request(method: method, url: url, headers: fields, body: body)
        switch await forwarder.send(outgoing) {
        case .failure(let why):
            log(line(method, url, 502, "passthrough failed: \(why)", nil, started))
            return Self.text(502, "larder gateway: the network did not answer \(url): \(why)\n")
        case .success(let answer):
            var headers = HTTPFields()
            for (k, v) in answer.headers {
                guard let name = HTTPField.Name(k) else { continue }
                headers.append(HTTPField(name: name, value: v))
            }
            let length = answer.headers.first { $0.0.lowercased() == "content-length" }.flatMap { Int($0.1) }
            log(line(method, url, answer.status, "passthrough (\(reason))", length.map { "\($0)" }, started))
            let stream = answer.body
            let responseBody = ResponseBody(contentLength: method == .head ? nil : length) { writer in
                for try await chunk in stream { try await writer.write(ByteBuffer(bytes: chunk)) }
                try await writer.finish(nil)
            }
            return Response(status: HTTPResponse.Status(code: answer.status), headers: headers, body: responseBody)
        }
    }

    /// A loader response as a Hummingbird response, its body streamed chunk by chunk.
    static func response(_ r: LoadResponse, head: Bool) -> Response {
        var headers = HTTPFields()
        for (k, v) in r.headers { if let name = HTTPField.Name(k) { headers[name] = v } }
        if let name = HTTPField.Name("X-Larder-Outcome") { headers[name] = "\(r.outcome)" }
        let status = HTTPResponse.Status(code: r.status)
        if head || r.status == 304 || r.status == 405 || r.status == 416 {
            r.close()
            return Response(status: status, headers: headers, body: ResponseBody())
        }
        let length = Int(r.header("Content-Length") ?? "")
        let body = ResponseBody(contentLength: length) { writer in
            defer { r.close() }
            while let chunk = try r.nextChunk() {
                try await writer.write(ByteBuffer(bytes: chunk))
            }
            try await writer.finish(nil)
        }
        return Response(status: status, headers: headers, body: body)
    }

    static func text(_ status: Int, _ message: String) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "text/plain; charset=utf-8"
        headers[.cacheControl] = "no-store"
        return Response(
            status: HTTPResponse.Status(code: status), headers: headers,
            body: ResponseBody(byteBuffer: ByteBuffer(string: message)))
    }

    func line(
        _ method: HTTPRequest.Method, _ url: String, _ status: Int, _ outcome: String, _ length: String?,
        _ started: Date
    ) -> String {
        let ms = Int(Date().timeIntervalSince(started) * 1000)
        return "\(method) \(url) \(status) \(outcome) \(length.map { "\($0)B" } ?? "-") \(ms)ms"
    }
}

extension HTTPFields {
    /// The value of the field `name`, several fields joined with commas as `self[name]` does.
    ///
    /// `nil` when there is none. For names without a usable HTTPTypes constant (custom ones, Host).
    subscript(named name: String) -> String? {
        HTTPField.Name(name).flatMap { self[$0] }
    }
}

/// The port the server bound, once known.
final class BoundPort: Sendable {
    private let value = Mutex<Int?>(nil)
    var port: Int? { value.withLock { $0 } }
    func set(_ p: Int) { value.withLock { $0 = p } }
}
