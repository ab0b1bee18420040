import Foundation
import HTTPTypes
import LarderCore
import LarderResolve

/// A request as a scheme task carries it (WebKit's `URLRequest`, in plain values).
public struct SchemeRequest: Sendable {
    /// The HTTP method.
    public var method: HTTPRequest.Method
    /// The URL as the page asked for it.
    public var url: String
    /// Header fields in order.
    public var headers: [(String, String)]
    /// The request body, if any.
    public var body: Data?
    /// Whether it loads a main frame's document (WebKit: `mainDocumentURL == url`): the web
    /// view's pins are renewed before it is answered.
    public var isNavigation: Bool
    /// The URL of the top-level document the request is made for, as the engine says (WebKit's
    /// `mainDocumentURL`; WebKitGTK: the view's URI), when known: the site the cookie bridge and
    /// SameSite judge the request by.
    public var mainDocumentURL: String?

    /// Creates one.
    public init(
        method: HTTPRequest.Method = .get, url: String, headers: [(String, String)] = [], body: Data? = nil,
        isNavigation: Bool = false, mainDocumentURL: String? = nil
    ) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.isNavigation = isNavigation
        self.mainDocumentURL = mainDocumentURL
    }

    /// A request as an engine hands it over (`URLRequest`'s parts: a method name, nil for GET;
    /// the URL; the fields; the body; the main document's URL, equal to `url` for a navigation).
    /// Nil when the method is not an HTTP method token (fetch and XMLHttpRequest send only tokens).
    public init?(methodName: String?, url: URL?, fields: [String: String]?, body: Data?, mainDocumentURL: URL?) {
        guard let method = HTTPRequest.Method(methodName ?? "GET") else { return nil }
        self.init(
            method: method, url: url?.absoluteString ?? "", headers: (fields ?? [:]).map { ($0.key, $0.value) },
            body: body, isNavigation: url != nil && mainDocumentURL == url,
            mainDocumentURL: mainDocumentURL?.absoluteString)
    }

    /// A request as an engine hands it over (`URLRequest`, made `EngineRequest` by the glue).
    /// Nil when its method is not an HTTP method token.
    public init?(_ r: some EngineRequest) {
        self.init(
            methodName: r.httpMethod, url: r.url, fields: r.allHTTPHeaderFields, body: r.httpBody,
            mainDocumentURL: r.mainDocumentURL)
    }

    /// The value of a header field (case-insensitive name).
    public func header(_ name: String) -> String? {
        headers.first { $0.0.lowercased() == name.lowercased() }?.1
    }
}

/// The parts of an engine's request the driver reads: `URLRequest`'s, which WebKit's glue
/// declares it has (`extension URLRequest: EngineRequest {}`).
public protocol EngineRequest {
    /// The method name; nil for GET.
    var httpMethod: String? { get }
    /// The URL.
    var url: URL? { get }
    /// The header fields.
    var allHTTPHeaderFields: [String: String]? { get }
    /// The body, if any.
    var httpBody: Data? { get }
    /// The main document's URL (equal to `url` for a navigation).
    var mainDocumentURL: URL? { get }
}

/// A response head for a scheme task.
public struct SchemeResponseHead: Sendable, Equatable {
    /// The HTTP status.
    public var status: Int
    /// Header fields in order.
    public var headers: [String: String]
    /// The URL the response answers.
    public var url: String

    /// Creates one.
    public init(status: Int, headers: [String: String], url: String) {
        self.status = status
        self.headers = headers
        self.url = url
    }
}

/// Why a scheme task failed.
public struct SchemeTaskError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What kind of failure, for mapping to the platform's error codes.
    public enum Kind: Sendable, Equatable {
        /// Not a URL.
        case badURL
        /// Nothing local serves it and it cannot go to the network (offline, no route, a loop).
        case noLocalCopy
        /// The network did not answer, or failed mid-way.
        case network
        /// A local file could not be read to its end.
        case unreadable
    }

    /// The kind.
    public let kind: Kind
    /// What went wrong, for a person.
    public let message: String

    /// Creates one.
    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    /// The message.
    public var description: String { message }

    /// As a `URLError` for the engine (the message as its description).
    public var urlError: URLError {
        let code: URLError.Code =
            switch kind {
            case .badURL: .badURL
            case .noLocalCopy: .fileDoesNotExist
            case .network: .cannotConnectToHost
            case .unreadable: .cannotDecodeRawData
            }
        return URLError(code, userInfo: [NSLocalizedDescriptionKey: message])
    }
}

/// What the driver calls on a task: `WKURLSchemeTask`'s calls, as a protocol the WebKit glue
/// implements over the real task and tests implement with a fake.
public protocol SchemeTask: AnyObject, Sendable {
    /// What identifies the task between `start` and `stop` (a wrapper returns its WebKit task's).
    var taskIdentity: ObjectIdentifier { get }
    /// The request the task carries.
    var schemeRequest: SchemeRequest { get }
    /// The response head (once, first).
    func didReceive(_ head: SchemeResponseHead)
    /// A chunk of the body.
    func didReceive(_ data: Data)
    /// The end of the body.
    func didFinish()
    /// The task failed (instead of `didFinish`).
    func didFail(_ error: SchemeTaskError)
}

extension SchemeTask {
    /// The object's own identity.
    public var taskIdentity: ObjectIdentifier { ObjectIdentifier(self) }
}

/// Where a driver's calls to tasks run, one at a time, together with `stop`: WebKit's main
/// thread (`.main`), or a serial queue of one's own (tests, other hosts). Running on it already,
/// a call runs inline.
public final class DeliveryQueue: Sendable {
    private let queue: DispatchQueue?
    private let key = DispatchSpecificKey<UInt8>()

    /// The main thread (WebKit calls `start` and `stop` there, and wants its task called there).
    public static let main = DeliveryQueue(queue: nil)

    /// A serial queue named `label`.
    public convenience init(label: String) {
        self.init(queue: DispatchQueue(label: label))
    }

    private init(queue: DispatchQueue?) {
        self.queue = queue
        queue?.setSpecific(key: key, value: 1)
    }

    /// Runs `body` on the queue and waits for it.
    public func sync<T>(_ body: () -> T) -> T {
        guard let queue else { return Thread.isMainThread ? body() : DispatchQueue.main.sync(execute: body) }
        return DispatchQueue.getSpecific(key: key) == 1 ? body() : queue.sync(execute: body)
    }
}

/// Drives scheme tasks over the resource loader: everything a `WKURLSchemeHandler` does but the
/// WebKit types. A task is answered from the sandbox (head, body in chunks read on a background
/// queue, end), or — when the loader passes it through — by the network through the same
/// `Forwarder` as the gateway (method, header fields, body, status and streamed answer), so a
/// `local-then-network` route behaves the same in a web view and through `larder serve`. After
/// `stop`, no call reaches the task: each call runs on the delivery queue only while the task is
/// still active, and `stop` runs there too.
public final class SchemeTaskDriver: Sendable {
    /// Answers from the sandbox.
    public let loader: ResourceLoader
    /// The pinned versions of the web view this driver serves, renewed at each navigation; nil
    /// follows the sandbox as it changes.
    public let pins: SessionPins?
    /// What goes to the network, and how.
    public let forwarder: Forwarder
    /// Where task calls run.
    public let delivery: DeliveryQueue
    /// Whether a forwarded 3xx is followed here (the default: WebKit does not follow a scheme
    /// handler's redirect) or handed to the engine as it came.
    public let followsRedirects: Bool
    /// Cookies across the proxy (nil: forwarded requests carry only what the engine put in them,
    /// and answers' `Set-Cookie` fields are dropped).
    public let cookies: CookieBridge?
    /// Hears one line per task when it ends, as `larder serve` prints them: method, URL, status,
    /// outcome (package@version, fallback, passthrough and why), bytes, time.
    public let log: (@Sendable (String) -> Void)?
    /// Installs an on-demand package the first time one of its URLs is requested; nil: such a
    /// request is answered as any URL no package serves.
    public let firstUse: FirstUse?
    private let work = DispatchQueue(label: "larder.scheme-tasks", qos: .userInitiated, attributes: .concurrent)
    private let active = Locked<Set<ObjectIdentifier>>([])

    /// A driver over `loader` (with `pins`), forwarding with `forwarder`, calling tasks on `delivery`.
    public init(
        loader: ResourceLoader, pins: SessionPins? = nil,
        forwarder: Forwarder = Forwarder(network: .offline, exchange: nil), delivery: DeliveryQueue = .main,
        cookies: CookieBridge? = nil, followsRedirects: Bool = true, log: (@Sendable (String) -> Void)? = nil,
        firstUse: FirstUse? = nil
    ) {
        self.firstUse = firstUse
        self.cookies = cookies
        self.followsRedirects = followsRedirects
        self.loader = loader
        self.pins = pins
        self.forwarder = forwarder
        self.delivery = delivery
        self.log = log
    }

    /// Starts answering `task`: returns at once; the answer is delivered on the delivery queue.
    public func start(_ task: any SchemeTask) {
        let request = task.schemeRequest
        delivery.sync { _ = active.withLock { $0.insert(task.taskIdentity) } }
        let started = Date()
        if let cookies, Self.isCookiePath(request.url) {
            Task {
                let (status, bytes, outcome) = await answerCookies(request, cookies, to: task)
                note(request, status, outcome, bytes, started)
            }
            return
        }
        work.async { [self] in
            // A failed renewal (a package gone since) keeps the previous pins.
            if request.isNavigation { try? pins?.renew() }
            answer(task, request, started: started, firstUse: firstUse)
        }
    }

    /// Answers `task` from the sandbox, or — for an on-demand package not installed yet, when
    /// `firstUse` is given — installs it first (the request waits at most its deadline, then is
    /// answered as the package's policy says), or from the network.
    private func answer(_ task: any SchemeTask, _ request: SchemeRequest, started: Date, firstUse: FirstUse?) {
        let session = pins?.current
        let load = LoadRequest(
            method: request.method, url: request.url, range: request.header("Range"),
            ifNoneMatch: request.header("If-None-Match"), origin: request.header("Origin"))
        let result = loader.load(load, session: session)
        if let firstUse, Self.unserved(result), let (id, policy) = firstUse.package(for: request.url) {
            Task {
                let outcome = await firstUse.ensure(id)
                self.log?("\(request.method) \(request.url) - first use of \(id): \(outcome)")
                if case .installed = outcome {
                    try? self.pins?.renew()
                    self.work.async { self.answer(task, request, started: started, firstUse: nil) }
                } else if policy.mode == .localOnly {
                    self.work.async {
                        let r = FirstUse.unavailable(id, outcome)
                        let (bytes, end) = self.relay(r, to: task, url: request.url)
                        self.note(request, r.status, "\(r.outcome)\(end)", bytes, started)
                    }
                } else {
                    let (status, bytes, end) = await self.pass(
                        request, reason: "\(id) is on demand and \(outcome)", session: session, to: task)
                    self.note(request, status, "passthrough (\(id) not installed)\(end)", bytes, started)
                }
            }
            return
        }
        switch result {
        case .response(let r):
            let (bytes, end) = relay(r, to: task, url: request.url)
            note(request, r.status, "\(r.outcome)\(end)", bytes, started)
        case .passthrough(let reason):
            Task {
                let (status, bytes, end) = await self.pass(request, reason: reason, session: session, to: task)
                self.note(request, status, "passthrough (\(reason))\(end)", bytes, started)
            }
        }
    }

    /// Whether no package served the request: passed through, or a 404 of no package.
    static func unserved(_ result: LoadResult) -> Bool {
        switch result {
        case .passthrough: true
        case .response(let r): r.status == 404
        }
    }

    /// Stops delivering to `task` (WebKit calls it on the main thread). After it returns, no
    /// call reaches the task.
    public func stop(_ task: any SchemeTask) { stop(id: task.taskIdentity) }

    /// Stops delivering to the task whose `taskIdentity` is `id`.
    public func stop(id: ObjectIdentifier) {
        delivery.sync { _ = active.withLock { $0.remove(id) } }
    }

    /// Tasks started and neither stopped nor ended.
    public var activeTasks: Int { active.withLock { $0.count } }

    /// One line to `log`: `GET URL 200 outcome 123B 4ms`.
    func note(_ request: SchemeRequest, _ status: Int?, _ outcome: String, _ bytes: Int, _ started: Date) {
        guard let log else { return }
        let ms = Int(Date().timeIntervalSince(started) * 1000)
        log("\(request.method) \(request.url) \(status.map { "\($0)" } ?? "-") \(outcome) \(bytes)B \(ms)ms")
    }

    /// Streams a loader response: head, chunks, end; stops reading when the task is stopped.
    /// Returns the body bytes delivered and how the task ended, when not by finishing (for the log).
    func relay(_ r: LoadResponse, to task: any SchemeTask, url: String) -> (Int, String) {
        defer { r.close() }
        let headers = Dictionary(r.headers, uniquingKeysWith: { a, _ in a })
        var bytes = 0
        guard
            deliver(
                task, last: false, { $0.didReceive(SchemeResponseHead(status: r.status, headers: headers, url: url)) })
        else { return (0, ", stopped") }
        do {
            while let chunk = try r.nextChunk() {
                guard deliver(task, last: false, { $0.didReceive(chunk) }) else { return (bytes, ", stopped") }
                bytes += chunk.count
            }
            deliver(task, last: true) { $0.didFinish() }
            return (bytes, "")
        } catch {
            deliver(task, last: true) { $0.didFail(SchemeTaskError(.unreadable, "\(error)")) }
            return (bytes, ", failed: \(error)")
        }
    }

    /// Sends a passed-through request to the network through the forwarder and relays the answer.
    /// Returns the status relayed, the body bytes and how the task ended when not by finishing.
    func pass(
        _ request: SchemeRequest, reason: String, session: ResolverSession?, to task: any SchemeTask
    ) async -> (Int?, Int, String) {
        let table = session?.table().1 ?? loader.resolver.snapshot().table
        let marked = request.header(Forwarder.loopMarker) != nil
        let page = request.mainDocumentURL ?? request.header("Origin")
        switch forwarder.target(for: request.url, reason: reason, table: table, marked: marked, page: page) {
        case .refused(403, let why):
            let (status, bytes) = respond(task, request.url, 403, "refused: \(why)\n")
            return (status, bytes, ", refused: \(why)")
        case .refused(_, let why):
            deliver(task, last: true) { $0.didFail(SchemeTaskError(.noLocalCopy, why)) }
            return (nil, 0, ", refused: \(why)")
        case .url(let first):
            switch await exchange(request, to: first) {
            case .failure(let failure):
                deliver(task, last: true) { $0.didFail(SchemeTaskError(.network, "\(failure.url): \(failure.why)")) }
                return (nil, 0, ", failed: \(failure.url): \(failure.why)")
            case .success(let (answer, to, redirects)):
                let headers = Dictionary(answer.headers, uniquingKeysWith: { a, b in "\(a), \(b)" })
                let head = SchemeResponseHead(status: answer.status, headers: headers, url: request.url)
                var bytes = 0
                guard deliver(task, last: false, { $0.didReceive(head) }) else {
                    return (answer.status, 0, ", stopped")
                }
                do {
                    for try await chunk in answer.body {
                        guard deliver(task, last: false, { $0.didReceive(chunk) }) else {
                            return (answer.status, bytes, ", stopped")
                        }
                        bytes += chunk.count
                    }
                    deliver(task, last: true) { $0.didFinish() }
                    return (answer.status, bytes, redirects == 0 ? "" : ", after \(redirects) redirect(s) to \(to)")
                } catch {
                    deliver(task, last: true) { $0.didFail(SchemeTaskError(.network, "\(to): \(error)")) }
                    return (answer.status, bytes, ", failed: \(to): \(error)")
                }
            }
        }
    }

    /// Runs `call` on the delivery queue unless the task was stopped; false when it was. The
    /// last call of a task (end or failure) also retires it.
    @discardableResult
    func deliver(_ task: any SchemeTask, last: Bool, _ call: (any SchemeTask) -> Void) -> Bool {
        delivery.sync {
            let id = task.taskIdentity
            let live = active.withLock { set in
                guard set.contains(id) else { return false }
                if last { set.remove(id) }
                return true
            }
            guard live else { return false }
            call(task)
            return true
        }
    }
}
