import Foundation
import LarderCore
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// A fault-injecting HTTP origin on loopback, started by a test: the Swift counterpart of
/// `scripts/integration/fault-origin.py`, in process, for the transport's and the gateway's
/// suites.
///
/// It serves the files under a directory on `127.0.0.1` (port chosen by the system) and, when it
/// can, on a second loopback address with the same port (`127.0.0.2`), so that a redirect "to
/// another host" goes somewhere real and the log shows whether a client followed it. Healthy
/// serving: GET and HEAD; an ETag on every file (the quoted first 40 hex digits of its SHA-256);
/// If-None-Match answered 304; one byte range (`bytes=A-B`, `bytes=A-`, `bytes=-N`) answered 206
/// with Content-Range, If-Range honoured (a validator that does not match gets the whole file
/// with 200), an unsatisfiable range answered 416. Any other method is echoed: 201 with a body
/// naming the method, path and request body. Every response carries `X-Origin: fault-origin`.
///
/// Faults are injected per path prefix (`inject`); the first rule whose prefix the request's
/// path (without its query) starts with, and that has requests left, applies. Responses are
/// written as raw bytes, so a fault can send what no well-behaved HTTP encoder would (a length
/// that lies, a body that ends with the connection, a reset). Every request is logged on arrival
/// (`requests`), with the fault it got.
public final class FaultOrigin: Sendable {
    /// What a rule does to the requests it applies to.
    public enum Fault: Sendable, Equatable, CustomStringConvertible {
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

        /// A short name for logs and failure messages.
        public var description: String {
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
    public struct Request: Sendable, Equatable, CustomStringConvertible {
        /// The local address it arrived on (`127.0.0.1`, or the other host).
        public var host: String
        /// The method.
        public var method: String
        /// The request target as sent (path and query).
        public var path: String
        /// The header fields, names lowercased (repeated fields joined with ", ").
        public var headers: [String: String]
        /// The request body.
        public var body: Data
        /// The status answered.
        public var status: Int
        /// The fault applied, if any.
        public var fault: Fault?
        /// Body bytes written to the connection.
        public var sent: Int
        /// The Content-Length declared, when one was.
        public var declared: Int?
        /// When the request arrived.
        public var arrived: ContinuousClock.Instant

        /// The Range header.
        public var range: String? { headers["range"] }
        /// The If-Range header.
        public var ifRange: String? { headers["if-range"] }
        /// The If-None-Match header.
        public var ifNoneMatch: String? { headers["if-none-match"] }

        /// `METHOD path [Range] -> status (fault)`.
        public var description: String {
            "\(method) \(path)\(range.map { " [\($0)]" } ?? "") -> \(status)\(fault.map { " (\($0))" } ?? "")"
        }
    }

    /// A rule as injected, with how many requests it hit so far.
    public struct Rule: Sendable, Equatable {
        /// The path prefix it applies to.
        public var pathPrefix: String
        /// The fault.
        public var fault: Fault
        /// Requests it still applies to; nil: every one.
        public var left: Int?
        /// Whether only requests with a Range header use it.
        public var onlyRange: Bool
        /// Requests it was applied to.
        public var applied: Int
    }

    /// The port both addresses listen on.
    public let port: Int
    /// The main address.
    public let host: String
    /// The second address, when it could be bound on the same port.
    public let otherHost: String?
    /// `https` when the origin speaks TLS, else `http`.
    public let scheme: String
    private let root: URL
    private let state = Locked(State())
    private let servers: [NIOAsyncChannel<NIOAsyncChannel<HTTPServerRequestPart, Never>, Never>]
    private let running = Locked<Task<Void, Never>?>(nil)
    /// The open connections, closed by `stop()` (a stalled answer must not outlive the test).
    private let open = Locked<[ObjectIdentifier: any NIOCore.Channel]>([:])

    private struct State {
        var rules: [Rule] = []
        var log: [Request] = []
        var etags: [String: String] = [:]
    }

    /// A certificate and its private key, PEM files, for a TLS origin.
    public struct TLSFiles: Sendable {
        /// The certificate chain (PEM).
        public var certificate: String
        /// The private key (PEM).
        public var privateKey: String
        /// Files at these paths.
        public init(certificate: String, privateKey: String) {
            self.certificate = certificate
            self.privateKey = privateKey
        }
    }

    private init(
        root: URL, host: String, otherHost: String?, port: Int, scheme: String,
        servers: [NIOAsyncChannel<NIOAsyncChannel<HTTPServerRequestPart, Never>, Never>]
    ) {
        self.root = root
        self.host = host
        self.otherHost = otherHost
        self.port = port
        self.scheme = scheme
        self.servers = servers
    }

    /// Starts serving `root` on `127.0.0.1` and, when it can take the same port there, on
    /// `otherHost`; over TLS with `tls`. Stop it with `stop()`.
    public static func start(
        serving root: URL, otherHost: String? = "127.0.0.2", tls: TLSFiles? = nil
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
        let host = "127.0.0.1"
        var servers = [try await bind(host, port: 0, tls: context)]
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
            servers: servers)
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
        let task: Task<Void, Never>
        if #available(macOS 15, iOS 18, tvOS 18, watchOS 11, *) {
            task = Task(executorPreference: OwnThreads.shared, operation: work)
        } else {
            task = Task(operation: work)
        }
        running.withLock { $0 = task }
    }

    /// Stops listening and ends every connection (a stalled or dripping answer included).
    public func stop() async {
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
    public var base: String { "\(scheme)://\(host):\(port)" }

    /// The URL of `path` (which starts with `/`) on the main address.
    public func url(_ path: String) -> URL {
        // The origin's own address and a path the test wrote: always a URL.
        URL(string: base + path) ?? URL(fileURLWithPath: "/")
    }

    /// Adds a rule: `fault` for the next `count` requests (nil: every one) whose path starts with
    /// `pathPrefix`; `onlyRange` (by default true for `ignoreRange` and `badContentRange`) lets
    /// requests without a Range header through without using the rule up.
    public func inject(_ fault: Fault, at pathPrefix: String, count: Int? = 1, onlyRange: Bool? = nil) {
        let rule = Rule(
            pathPrefix: pathPrefix, fault: fault, left: count, onlyRange: onlyRange ?? fault.rangeOnlyByDefault,
            applied: 0)
        state.withLock { $0.rules.append(rule) }
    }

    /// The rules, with how many requests each hit.
    public var rules: [Rule] { state.withLock { $0.rules } }

    /// Removes every rule (the origin heals).
    public func heal() { state.withLock { $0.rules = [] } }

    /// Every request so far, in the order they arrived.
    public var requests: [Request] { state.withLock { $0.log } }

    /// The requests whose path starts with `prefix`.
    public func requests(under prefix: String) -> [Request] { requests.filter { $0.path.hasPrefix(prefix) } }

    /// The ETag the origin gives the file at `path` (relative to the root).
    public func etag(of path: String) throws -> String {
        Self.etag(of: try Data(contentsOf: root.appendingPathComponent(path)))
    }

    static func etag(of data: Data) -> String { "\"\(SHA256Digest.of(data).hex.prefix(40))\"" }

    // MARK: serving

    private typealias Connection = NIOAsyncChannel<HTTPServerRequestPart, Never>

    private func serve(_ connection: Connection) async {
        let channel = connection.channel
        let local = channel.localAddress?.ipAddress ?? "?"
        open.withLock { $0[ObjectIdentifier(channel)] = channel }
        defer { _ = open.withLock { $0.removeValue(forKey: ObjectIdentifier(channel)) } }
        try? await connection.executeThenClose { inbound in
            var head: HTTPRequestHead?
            var body = Data()
            for try await part in inbound {
                switch part {
                case .head(let h):
                    head = h
                    body = Data()
                case .body(let b):
                    body.append(contentsOf: b.readableBytesView)
                case .end:
                    guard let h = head else { continue }
                    head = nil
                    let keepOpen = try await respond(to: h, body: body, local: local, writer: Writer(channel: channel))
                    if !keepOpen || !h.isKeepAlive { return }
                }
            }
        }
    }

    /// Writes raw bytes straight to the connection (no HTTP encoder), each write awaited until
    /// the kernel has it: what a fault says was sent before a close was sent.
    private struct Writer {
        let channel: any NIOCore.Channel

        func head(_ status: Int, _ fields: [(String, String)]) async throws {
            var text = "HTTP/1.1 \(status) \(HTTPResponseStatus(statusCode: status).reasonPhrase)\r\n"
            for (k, v) in fields + [("X-Origin", "fault-origin")] { text += "\(k): \(v)\r\n" }
            text += "\r\n"
            try await channel.writeAndFlush(ByteBuffer(string: text))
        }

        func body<C: Collection<UInt8>>(_ bytes: C) async throws {
            guard !bytes.isEmpty else { return }
            try await channel.writeAndFlush(ByteBuffer(bytes: bytes))
        }

        /// Ends the connection now: a TCP reset when `reset`, else an orderly close.
        func end(reset: Bool) async {
            if reset, let options = channel as? SocketOptionProvider {
                try? await options.setSoLinger(linger(l_onoff: 1, l_linger: 0)).get()
            }
            try? await channel.close()
        }

        /// Waits up to `seconds`, or until the client closes the connection.
        func wait(_ seconds: Double) async {
            let until = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
            while ContinuousClock.now < until, channel.isActive {
                do { try await Task.sleep(for: .milliseconds(20)) } catch { return }
            }
        }
    }

    private func pick(_ path: String, hasRange: Bool) -> Fault? {
        state.withLock { s in
            for i in s.rules.indices {
                let r = s.rules[i]
                guard path.hasPrefix(r.pathPrefix), r.left.map({ $0 > 0 }) ?? true, !r.onlyRange || hasRange else {
                    continue
                }
                if let left = r.left { s.rules[i].left = left - 1 }
                s.rules[i].applied += 1
                return r.fault
            }
            return nil
        }
    }

    private func log(_ r: Request) -> Int {
        state.withLock {
            $0.log.append(r)
            return $0.log.count - 1
        }
    }

    private func update(_ index: Int, sent: Int) { state.withLock { $0.log[index].sent = sent } }

    /// One request as the origin reads it, and how to log its answer.
    private struct Asked {
        let entry: Request
        let fields: [String: String]
        let path: String
        let local: String
        var target: String { entry.path }
        var isHead: Bool { entry.method == "HEAD" }
    }

    /// Logs the answer to `asked`; returns its index in the log.
    private func answer(_ asked: Asked, _ status: Int, fault: Fault?, declared: Int?) -> Int {
        var entry = asked.entry
        entry.status = status
        entry.fault = fault
        entry.declared = declared
        return log(entry)
    }

    /// Answers one request; false when the connection must end.
    private func respond(to head: HTTPRequestHead, body: Data, local: String, writer: Writer) async throws -> Bool {
        var fields: [String: String] = [:]
        for (name, value) in head.headers {
            let key = name.lowercased()
            fields[key] = fields[key].map { $0 + ", " + value } ?? value
        }
        let method = head.method.rawValue
        let target = head.uri
        let asked = Asked(
            entry: Request(
                host: local, method: method, path: target, headers: fields, body: body, status: 0, fault: nil,
                sent: 0, declared: nil, arrived: .now),
            fields: fields, path: String(target.prefix { $0 != "?" }), local: local)
        if method != "GET" && method != "HEAD" {
            let echo = Data("\(method) \(target) body=".utf8) + body
            let id = answer(asked, 201, fault: nil, declared: echo.count)
            try await writer.head(201, [("Content-Type", "text/plain"), ("Content-Length", "\(echo.count)")])
            try await writer.body(echo)
            update(id, sent: echo.count)
            return true
        }
        let fault = pick(asked.path, hasRange: fields["range"] != nil)
        if try await answerInjected(asked, fault: fault, writer: writer) { return true }
        return try await answerFile(asked, fault: fault, writer: writer)
    }

    /// Answers an injected status or redirect; false when the fault is of another kind.
    private func answerInjected(_ asked: Asked, fault: Fault?, writer: Writer) async throws -> Bool {
        let (local, target, path) = (asked.local, asked.target, asked.path)
        switch fault {
        case .status(let code, let retryAfter):
            let text = Data("fault-origin: injected \(code)\n".utf8)
            let id = answer(asked, code, fault: fault, declared: text.count)
            var h = [("Content-Type", "text/plain"), ("Content-Length", "\(text.count)")]
            if let retryAfter { h.append(("Retry-After", retryAfter)) }
            try await writer.head(code, h)
            if !asked.isHead {
                try await writer.body(text)
                update(id, sent: text.count)
            }
            return true
        case .redirect, .redirectLoop, .redirectToOtherHost, .redirectToHTTP, .redirectSettingCookies:
            let location: String
            switch fault {
            case .redirectLoop: location = "\(scheme)://\(local):\(port)\(target)"
            case .redirectToOtherHost: location = "\(scheme)://\(otherHost ?? "127.0.0.2"):\(port)\(target)"
            case .redirectToHTTP: location = "http://\(local):\(port)\(target)"
            default:
                let n = state.withLock { s in s.rules.first { $0.fault == fault && path.hasPrefix($0.pathPrefix) } }
                location = "\(scheme)://\(local):\(port)\(path)?redirected=\(n?.applied ?? 1)"
            }
            let text = Data("moved\n".utf8)
            _ = answer(asked, 302, fault: fault, declared: text.count)
            var fields = [("Location", location), ("Content-Type", "text/plain"), ("Content-Length", "\(text.count)")]
            if case .redirectSettingCookies(let cookies) = fault { fields += cookies.map { ("Set-Cookie", $0) } }
            try await writer.head(302, fields)
            if !asked.isHead { try await writer.body(text) }
            return true
        default:
            return false
        }
    }

    /// Answers with the file the path names (404 without one), honouring If-None-Match, Range
    /// and If-Range, shaped by `fault`.
    private func answerFile(_ asked: Asked, fault: Fault?, writer: Writer) async throws -> Bool {
        let fields = asked.fields
        guard let file = resolve(asked.path), let data = try? Data(contentsOf: file) else {
            let text = Data("not found\n".utf8)
            let id = answer(asked, 404, fault: fault, declared: text.count)
            try await writer.head(404, [("Content-Type", "text/plain"), ("Content-Length", "\(text.count)")])
            if !asked.isHead {
                try await writer.body(text)
                update(id, sent: text.count)
            }
            return true
        }
        let tag = state.withLock { s in
            if let t = s.etags[file.path] { return t }
            let t = Self.etag(of: data)
            s.etags[file.path] = t
            return t
        }
        let size = data.count

        if fault == nil, let inm = fields["if-none-match"],
            inm.trimmingCharacters(in: .whitespaces) == "*"
                || inm.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }).contains(tag)
        {
            _ = answer(asked, 304, fault: nil, declared: nil)
            try await writer.head(304, [("ETag", tag), ("Cache-Control", "no-cache")])
            return true
        }

        var range = Self.parseRange(fields["range"], size: size)
        if range != nil, let ifRange = fields["if-range"], ifRange.trimmingCharacters(in: .whitespaces) != tag {
            range = nil  // the validator changed: the whole file
        }
        if fault == .ignoreRange { range = nil }
        if case .unsatisfiable = range {
            _ = answer(asked, 416, fault: fault, declared: 0)
            try await writer.head(416, [("Content-Range", "bytes */\(size)"), ("Content-Length", "0")])
            return true
        }
        let shaped = Self.shape(data, range: range, fault: fault)
        var h: [(String, String)] = [("Content-Type", Self.mime(asked.path))]
        if let declared = shaped.declared { h.append(("Content-Length", "\(declared)")) }
        h += [("ETag", tag), ("Accept-Ranges", "bytes"), ("Cache-Control", "no-cache")]
        if shaped.status == 206 {
            var total = size
            if case .badContentRange(_, let t?) = fault { total = t }
            h.append(
                ("Content-Range", "bytes \(shaped.start)-\(shaped.start + max(shaped.bytes.count, 1) - 1)/\(total)"))
        }
        let closes = Self.closes(fault)
        if closes { h.append(("Connection", "close")) }
        let id = answer(asked, shaped.status, fault: fault, declared: shaped.declared)
        try await writer.head(shaped.status, h)
        if asked.isHead { return !closes }
        return try await send(shaped.bytes, fault: fault, closes: closes, log: id, writer: writer)
    }

    /// Whether an answer shaped by `fault` ends its connection.
    private static func closes(_ fault: Fault?) -> Bool {
        switch fault {
        case .truncate, .lengthMore, .lengthLess, .stall, .drip: true
        case .extra(_, let isDeclared): !isDeclared
        default: false
        }
    }

    /// The status, first byte, body and declared length of a file's answer: its range, and the
    /// body and length faults.
    private static func shape(_ data: Data, range: ByteRange?, fault: Fault?) -> (
        status: Int, start: Int, bytes: Data, declared: Int?
    ) {
        let size = data.count
        var status = 200
        var start = 0
        var end = size - 1
        if case .bytes(let a, let b) = range {
            status = 206
            (start, end) = (a, b)
            if case .badContentRange(let shift, _) = fault {
                start = start + shift < size ? start + shift : 0
                end = max(end, start)
            }
        }
        var bytes = size == 0 ? Data() : data.subdata(in: start..<(end + 1))
        if case .extra(let n, _) = fault { bytes += Self.junk(n) }
        if case .flip(let at) = fault, !bytes.isEmpty {
            var off = at ?? bytes.count / 2
            if off < 0 { off += bytes.count }
            off = min(max(off, 0), bytes.count - 1)
            bytes[bytes.startIndex + off] ^= 0xFF
        }
        var declared: Int? = bytes.count
        switch fault {
        case .lengthMore(let by): declared = bytes.count + by
        case .lengthLess(let by): declared = max(0, bytes.count - by)
        case .extra(_, let isDeclared) where !isDeclared: declared = nil
        default: break
        }
        return (status, start, bytes, declared)
    }

    /// Sends a body as `fault` says (cut, stalled, dripped or whole); false when the connection
    /// must end.
    private func send(_ bytes: Data, fault: Fault?, closes: Bool, log id: Int, writer: Writer) async throws -> Bool {
        switch fault {
        case .truncate(let after, let reset):
            let n = min(after ?? bytes.count / 2, bytes.count)
            try await writer.body(bytes.prefix(n))
            update(id, sent: n)
            await writer.end(reset: reset)
            return false
        case .stall(let after, let seconds):
            let n = min(after, bytes.count)
            try await writer.body(bytes.prefix(n))
            update(id, sent: n)
            await writer.wait(seconds)
            await writer.end(reset: false)
            return false
        case .drip(let piece, let every):
            var sent = 0
            while sent < bytes.count, !Task.isCancelled {
                let n = min(max(1, piece), bytes.count - sent)
                do { try await writer.body(bytes[(bytes.startIndex + sent)..<(bytes.startIndex + sent + n)]) } catch {
                    break
                }
                sent += n
                update(id, sent: sent)
                if sent < bytes.count { try? await Task.sleep(for: every) }
            }
            await writer.end(reset: false)
            return false
        default:
            try await writer.body(bytes)
            update(id, sent: bytes.count)
            if closes { await writer.end(reset: false) }
            return !closes
        }
    }

    /// The file under the root for a URL path, or nil (no traversal, no directories).
    private func resolve(_ path: String) -> URL? {
        guard let decoded = path.removingPercentEncoding, !decoded.contains("\0") else { return nil }
        let parts = decoded.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
        guard !parts.isEmpty, !parts.contains(where: { $0.isEmpty || $0 == "." || $0 == ".." }) else { return nil }
        let file = parts.reduce(root) { $0.appendingPathComponent(String($1)) }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: file.path, isDirectory: &isDirectory), !isDirectory.boolValue
        else { return nil }
        return file
    }

    enum ByteRange: Equatable {
        case bytes(Int, Int)
        case unsatisfiable
    }

    /// One byte range (start, end inclusive); nil when absent or malformed.
    static func parseRange(_ header: String?, size: Int) -> ByteRange? {
        guard let header else { return nil }
        let text = header.replacingOccurrences(of: " ", with: "")
        guard text.hasPrefix("bytes=") else { return nil }
        let spec = text.dropFirst(6)
        let sides = spec.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard sides.count == 2, !(sides[0].isEmpty && sides[1].isEmpty) else { return nil }
        if size == 0 { return .unsatisfiable }
        if sides[0].isEmpty {
            guard let n = Int(sides[1]) else { return nil }
            return n == 0 ? .unsatisfiable : .bytes(max(0, size - n), size - 1)
        }
        guard let start = Int(sides[0]) else { return nil }
        let end = sides[1].isEmpty ? size - 1 : Int(sides[1])
        guard let end else { return nil }
        if start >= size || end < start { return .unsatisfiable }
        return .bytes(start, min(end, size - 1))
    }

    static func junk(_ n: Int) -> Data { Data((0..<n).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }) }

    static func mime(_ path: String) -> String {
        switch (path as NSString).pathExtension.lowercased() {
        case "json", "sig": "application/json"
        case "html": "text/html"
        case "txt": "text/plain"
        case "zip": "application/zip"
        default: "application/octet-stream"
        }
    }
}

/// A self-signed certificate for `127.0.0.1` made with `openssl`, for a TLS origin: its files
/// in `directory`, the certificate also the trust root a client is given.
public func makeLoopbackCertificate(in directory: URL) throws -> FaultOrigin.TLSFiles {
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
