// Everything carried over URLSession (Apple platforms; on Linux only in a build for a
// side-by-side measurement): the transfer engine and the passthrough exchange. The only file of
// this target that asks which platform it is built for.
import Foundation
import LarderCore
import LarderFetch
import LarderFileSystem
import SystemPackage

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
#if canImport(Glibc)
    import Glibc
#endif

/// The engine on Apple platforms: URLSession, one session per request, its delegate on a
/// bounded serial queue.
package struct URLSessionEngine: HTTPEngine {
    let options: HTTPOptions

    package func run(_ request: TransferRequest, handler: ResponseHandler) async -> HTTPTransport.Outcome {
        var urlRequest = URLRequest(url: request.url)
        for (k, v) in request.headers { urlRequest.setValue(v, forHTTPHeaderField: k) }
        return await withCheckedContinuation { continuation in
            let delegate = RequestDelegate(request: urlRequest, handler: handler) {
                continuation.resume(returning: $0)
            }
            let config = URLSessionConfiguration.ephemeral
            config.httpAdditionalHeaders = ["User-Agent": "larder/\(larderVersion)"]
            config.requestCachePolicy = .reloadIgnoringLocalCacheData
            config.urlCache = nil
            config.timeoutIntervalForRequest = options.stallTimeout
            config.timeoutIntervalForResource = options.deadline
            config.httpMaximumConnectionsPerHost = options.connectionsPerHost
            let queue = BoundedDelegateQueue()
            let session = URLSession(configuration: config, delegate: delegate, delegateQueue: queue)
            delegate.start(session)
        }
    }
}

/// A request's serial delegate queue with backpressure. FoundationNetworking hands every received
/// chunk (16 KiB at most) to the delegate queue with `addOperation` from its network queue and
/// never waits, so while writing and hashing are slower than the network the chunks piled up here
/// without bound (2,500–4,400 chunks, 40–70 MiB, on loopback). `addOperation` now blocks its
/// caller while `limit` operations are pending: curl stops reading the socket and TCP flow control
/// holds the sender. `close()`, when the request is finished, ends the blocking for good; it must
/// come before any call into URLSession that waits for the network queue (`cancel()` does).
/// Eight chunks (128 KiB) are enough to keep a loopback transfer at full speed (320 MiB in about
/// 1 s either way) and hold about 2 MiB less at peak than 64 did.
final class BoundedDelegateQueue: OperationQueue, @unchecked Sendable {
    // @unchecked: OperationQueue is an open class, whose subclass the compiler cannot check; this
    // one's own state is `pending`, a `Waitable`.
    static let limit = 8
    /// Operations added and not yet run, and whether `close()` has ended the blocking.
    private let pending = Waitable((count: 0, closed: false))

    override init() {
        super.init()
        maxConcurrentOperationCount = 1
    }

    override func addOperation(_ block: @escaping @Sendable () -> Void) {
        pending.wait { p -> Bool? in
            guard p.count < Self.limit || p.closed else { return nil }
            p.count += 1
            return true
        }
        super.addOperation {
            block()
            self.pending.update { $0.count -= 1 }
        }
    }

    func close() {
        pending.update { $0.closed = true }
    }
}

#if canImport(Glibc)
    /// glibc's `malloc_trim`, looked up at run time: Swift's Glibc module leaves out <malloc.h>.
    private let mallocTrim = dlsym(nil, "malloc_trim").map {
        unsafeBitCast($0, to: (@convention(c) (Int) -> Int32).self)
    }
#endif

/// Carries one request for URLSession: the handler checks the answer and takes the body; this
/// applies the redirect policy, runs the floor timer, and trims the heap after large transfers.
final class RequestDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    // @unchecked: every callback runs on the session's serial delegate queue.
    private let request: URLRequest
    private let handler: ResponseHandler
    private let completion: (HTTPTransport.Outcome) -> Void
    private var finished = false
    private var redirects = 0
    private var trimmedAt: Int64 = 0
    /// Bytes received between two heap trims in a long transfer.
    static let trimInterval: Int64 = 32 << 20
    private var task: URLSessionDataTask?
    private var session: URLSession?
    private var timer: DispatchSourceTimer?

    init(request: URLRequest, handler: ResponseHandler, completion: @escaping (HTTPTransport.Outcome) -> Void) {
        self.request = request
        self.handler = handler
        self.completion = completion
    }

    var url: String { handler.url }
    var options: HTTPOptions { handler.options }

    func start(_ session: URLSession) {
        self.session = session
        let t = session.dataTask(with: request)
        task = t
        let timer = DispatchSource.makeTimerSource(queue: DispatchQueue.global())
        timer.schedule(deadline: .now() + 1, repeating: 1)
        // The handler holds the delegate until `finish` cancels and drops the timer.
        let me = self
        timer.setEventHandler {
            session.delegateQueue.addOperation { me.checkPace() }
        }
        timer.resume()
        self.timer = timer
        t.resume()
    }

    private func checkPace() {
        guard !finished else { return }
        if let failure = handler.checkPace() { end(failure) }
    }

    /// Ends the request with a failure the handler or the policy decided.
    private func end(_ outcome: HTTPTransport.Outcome, cancel: Bool = true) {
        guard !finished else { return }
        finish(outcome)
        if cancel { task?.cancel() }
    }

    private func finish(_ outcome: HTTPTransport.Outcome) {
        guard !finished else { return }
        finished = true
        (session?.delegateQueue as? BoundedDelegateQueue)?.close()
        timer?.cancel()
        timer = nil
        session?.finishTasksAndInvalidate()
        #if canImport(Glibc)
            // FoundationNetworking allocates and frees small objects for every chunk (a new
            // timeout timer each time), which leaves the heap holding freed pages that glibc does
            // not return by itself (5–15 MiB after 320–640 MiB): hand them back once a large
            // transfer is over, before extraction needs memory of its own.
            if handler.received >= 4 << 20 { _ = mallocTrim?(0) }
        #endif
        completion(outcome)
    }

    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest: URLRequest, completionHandler: @escaping (URLRequest?) -> Void
    ) {
        redirects += 1
        if let from = request.url, let to = newRequest.url,
            let refusal = ResponseHandler.refusal(of: redirects, from: from, to: to, options: options)
        {
            // Answer URLSession first and do not cancel: FoundationNetworking traps when a
            // redirect callback arrives for a cancelled task. The refused redirect's own response
            // then completes the task, and `finished` makes us ignore it.
            completionHandler(nil)
            end(.failed(refusal, retryable: false), cancel: false)
        } else {
            var next = newRequest
            for (k, v) in request.allHTTPHeaderFields ?? [:] { next.setValue(v, forHTTPHeaderField: k) }
            completionHandler(next)
        }
    }

    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
        completionHandler: @escaping (URLSession.ResponseDisposition) -> Void
    ) {
        guard !finished else {
            completionHandler(.cancel)
            return
        }
        guard let http = response as? HTTPURLResponse else {
            end(.failed(.connection(url: url, detail: "not an HTTP response"), retryable: true))
            completionHandler(.cancel)
            return
        }
        var fields: [(String, String)] = []
        for (k, v) in http.allHeaderFields {
            if let key = k as? String, let value = v as? String { fields.append((key, value)) }
        }
        if let failure = handler.head(status: http.statusCode, headers: fields) {
            end(failure)
            completionHandler(.cancel)
            return
        }
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        guard !finished else { return }
        #if canImport(Glibc)
            // The same every 32 MiB of a long transfer, since the extraction that follows the
            // download runs meanwhile: a 320 MiB bundle over loopback peaked at 55.4 MiB without
            // it, 52.6 MiB with it (means of 4 runs; 50.5 and 50.4 MiB at 160 MiB).
            if handler.received - trimmedAt >= Self.trimInterval {
                trimmedAt = handler.received
                _ = mallocTrim?(0)
            }
        #endif
        if let failure = data.withUnsafeBytes({ handler.chunk($0) }) { end(failure) }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: Error?) {
        guard !finished else { return }
        if let e = error {
            finish(
                .failed(.connection(url: url, detail: Self.describe(e, deadline: handler.deadline)), retryable: true))
        } else {
            finish(handler.outcome)
        }
    }
}

extension RequestDelegate {
    /// An error of URLSession in the words the other engine uses for the same event: its
    /// timeout is the stall timeout (`timeoutIntervalForRequest`: no byte for that long) unless
    /// the transfer's deadline has passed.
    static func describe(_ error: any Error, deadline: ContinuousClock.Instant) -> String {
        guard let e = error as? URLError else { return error.localizedDescription }
        switch e.code {
        case .timedOut where ContinuousClock.now < deadline: return ResponseHandler.stalled
        case .timedOut: return "connection abandoned at the transfer's deadline"
        case .networkConnectionLost: return "connection closed by the server before the response ended"
        default: return e.localizedDescription
        }
    }
}

/// Passthrough forwarding over URLSession, one session per request with no cookie jar (the
/// caller's cookies pass through as fields; the answer's `Set-Cookie` fields come back to it),
/// no redirect followed, and a `Content-Encoding` decoded (the field and the length are then
/// dropped). The body is pulled through a bounded mailbox: the delegate waits while 256 KiB are
/// unread, and its bounded queue then holds the network back.
package struct URLSessionExchange: NetworkExchange {
    /// Seconds a forwarded request may take to its response head.
    package var timeout: TimeInterval

    /// An exchange whose requests time out after `timeout` seconds.
    package init(timeout: TimeInterval) { self.timeout = timeout }

    /// Sends `request` (a redirect comes back as it is; several `Set-Cookie` fields, which
    /// Foundation joins, come back apart).
    package func send(_ request: ForwardRequest, maxBytes: Int) async throws -> ForwardResponse {
        guard let url = URL(string: request.url) else { throw URLError(.badURL) }
        var r = URLRequest(url: url, timeoutInterval: timeout)
        r.httpMethod = request.method.rawValue
        for (name, value) in request.headers where name.lowercased() != "accept-encoding" {
            r.addValue(value, forHTTPHeaderField: name)
        }
        r.httpBody = request.body
        let config = URLSessionConfiguration.ephemeral
        config.httpCookieStorage = nil
        config.httpShouldSetCookies = false
        config.urlCache = nil
        config.timeoutIntervalForRequest = timeout
        let mailbox = Mailbox(limit: maxBytes)
        let delegate = ExchangeDelegate(mailbox)
        let session = URLSession(configuration: config, delegate: delegate, delegateQueue: BoundedDelegateQueue())
        let http: HTTPURLResponse = try await withCheckedThrowingContinuation { head in
            delegate.head = head
            session.dataTask(with: r).resume()
        }
        session.finishTasksAndInvalidate()
        var headers: [(String, String)] = []
        let decoded = http.value(forHTTPHeaderField: "Content-Encoding") != nil
        for (k, v) in http.allHeaderFields {
            guard let name = k as? String, let value = v as? String else { continue }
            if decoded, ["content-encoding", "content-length"].contains(name.lowercased()) { continue }
            if name.lowercased() == "set-cookie" {
                headers += SetCookieFields.split(joined: value).map { (name, $0) }
            } else {
                headers.append((name, value))
            }
        }
        return ForwardResponse(
            status: http.statusCode, headers: headers, body: ForwardBody { try await mailbox.next() })
    }

    /// The body between URLSession's delegate (which puts, and waits while `bound` bytes are
    /// unread) and the reader (which takes, and waits for the next chunk without a thread).
    final class Mailbox: Sendable {
        let limit: Int
        static let bound = 256 << 10
        private let box = Waitable(Box())

        private struct Box {
            var chunks: [Data] = []
            var buffered = 0
            var total = 0
            var end: (any Error)??
            var waiter: CheckedContinuation<Data?, any Error>?
        }

        init(limit: Int) { self.limit = limit }

        /// A chunk from the network (delegate queue): handed to a waiting reader, else kept;
        /// waits while `bound` bytes are unread.
        func put(_ data: Data) {
            enum Put {
                case tooLarge, kept
                case handed(CheckedContinuation<Data?, any Error>)
            }
            let limit = self.limit
            let put: Put = box.update { s in
                s.total += data.count
                if s.total > limit { return .tooLarge }
                if let w = s.waiter {
                    s.waiter = nil
                    return .handed(w)
                }
                s.chunks.append(data)
                s.buffered += data.count
                return .kept
            }
            switch put {
            case .tooLarge:
                finish(ForwardTooLarge(limit: limit))
            case .handed(let w):
                w.resume(returning: data)
            case .kept:
                // A reader that stops reading for a minute has let the body go: end it rather than
                // hold the delegate queue (and the session) for ever.
                let room = box.wait(
                    until: { s in s.buffered < Self.bound || s.end != nil ? true : nil }, deadline: .now() + 60)
                if room == nil { finish(URLError(.timedOut)) }
            }
        }

        /// The end of the body (nil) or its failure.
        func finish(_ error: (any Error)?) {
            let w = box.update { s in
                if s.end == nil { s.end = .some(error) }
                defer { s.waiter = nil }
                return s.waiter
            }
            guard let w else { return }
            if let error { w.resume(throwing: error) } else { w.resume(returning: nil) }
        }

        /// The next chunk, or nil at the end.
        func next() async throws -> Data? {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Data?, any Error>) in
                enum Next {
                    case chunk(Data)
                    case end((any Error)?)
                    case waiting
                }
                // A chunk taken makes room: the delegate waiting in `put` is woken.
                let next: Next = box.update { s in
                    if !s.chunks.isEmpty {
                        let d = s.chunks.removeFirst()
                        s.buffered -= d.count
                        return .chunk(d)
                    }
                    if let end = s.end { return .end(end) }
                    s.waiter = c
                    return .waiting
                }
                switch next {
                case .chunk(let d): c.resume(returning: d)
                case .end(let e?): c.resume(throwing: e)
                case .end(nil): c.resume(returning: nil)
                case .waiting: break
                }
            }
        }
    }

    /// URLSession's calls for one forwarded request.
    final class ExchangeDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {
        // @unchecked: every callback runs on the session's serial delegate queue; `head` is set
        // before the task starts.
        let mailbox: Mailbox
        var head: CheckedContinuation<HTTPURLResponse, any Error>?

        init(_ mailbox: Mailbox) { self.mailbox = mailbox }

        func urlSession(
            _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
            newRequest: URLRequest, completionHandler: @escaping (URLRequest?) -> Void
        ) { completionHandler(nil) }

        func urlSession(
            _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
            completionHandler: @escaping (URLSession.ResponseDisposition) -> Void
        ) {
            guard let http = response as? HTTPURLResponse else {
                head?.resume(throwing: URLError(.badServerResponse))
                head = nil
                return completionHandler(.cancel)
            }
            head?.resume(returning: http)
            head = nil
            completionHandler(.allow)
        }

        func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
            mailbox.put(data)
        }

        func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
            if let head {
                // No answer came (or a redirect refused before any: its response is the answer).
                if let r = task.response as? HTTPURLResponse, error == nil {
                    head.resume(returning: r)
                } else {
                    head.resume(throwing: error ?? URLError(.badServerResponse))
                }
                self.head = nil
            }
            mailbox.finish(error)
        }
    }
}

extension HTTPStack {
    /// URLSession: transfers by `URLSessionEngine`, passthrough by `URLSessionExchange`.
    package static let urlSession = HTTPStack(
        name: "URLSession",
        engine: { options throws(FetchError) in URLSessionEngine(options: options) },
        exchange: { timeout in URLSessionExchange(timeout: timeout) })
}
