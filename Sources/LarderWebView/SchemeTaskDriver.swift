import Foundation
import HTTPTypes
import LarderCore
import LarderResolve
import Synchronization

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
    private let active = Mutex<Set<ObjectIdentifier>>([])

    /// A driver over `loader` (with `pins`), forwarding with `forwarder`, calling tasks on `delivery`.
    public init(
        loader: ResourceLoader, pins: SessionPins? = nil,
        forwarder: Forwarder = .offline, delivery: DeliveryQueue = .main,
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
            case .failure(let failure) where failure.refused:
                let (status, bytes) = respond(task, request.url, 403, "refused: \(failure.why)\n")
                return (status, bytes, ", refused: \(failure.url): \(failure.why)")
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
