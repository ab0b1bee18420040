import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
#if canImport(Glibc)
    import Glibc
#endif

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
    // @unchecked: `pending` and `closed` are guarded by `condition`.
    static let limit = 8
    private let condition = NSCondition()
    private var pending = 0
    private var closed = false

    override init() {
        super.init()
        maxConcurrentOperationCount = 1
    }

    override func addOperation(_ block: @escaping @Sendable () -> Void) {
        condition.lock()
        while pending >= Self.limit && !closed { condition.wait() }
        pending += 1
        condition.unlock()
        super.addOperation {
            block()
            self.condition.lock()
            self.pending -= 1
            self.condition.signal()
            self.condition.unlock()
        }
    }

    func close() {
        condition.lock()
        closed = true
        condition.broadcast()
        condition.unlock()
    }
}

#if canImport(Glibc)
    /// glibc's `malloc_trim`, looked up at run time: Swift's Glibc module leaves out <malloc.h>.
    private let mallocTrim = dlsym(nil, "malloc_trim").map {
        unsafeBitCast($0, to: (@convention(c) (Int) -> Int32).self)
    }
#endif

/// A reference to a part file shared with a request's delegate (which runs on its own queue,
/// one request at a time).
final class PartFileBox: @unchecked Sendable {
    // @unchecked: used by one request's delegate queue at a time, and by the caller only
    // between requests.
    var part: PartFile
    init(_ part: PartFile) { self.part = part }
}

/// Streams one request's body into memory or a part file, enforcing the size limits, the
/// redirect policy and the throughput floor.
final class RequestDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    // @unchecked: every callback runs on the session's serial delegate queue.
    private let request: URLRequest
    private let sink: HTTPTransport.Sink
    private let options: HTTPOptions
    private let completion: (HTTPTransport.Outcome) -> Void
    private var status = 0
    private var headers: [String: String] = [:]
    private var body = Data()
    private var failure: FetchError?
    private var finished = false
    private var redirects = 0
    private var windowStart = Date()
    private var windowBytes: Int64 = 0
    private var received: Int64 = 0
    private var trimmedAt: Int64 = 0
    /// Bytes received between two heap trims in a long transfer.
    static let trimInterval: Int64 = 32 << 20
    private var task: URLSessionDataTask?
    private var session: URLSession?
    private var timer: DispatchSourceTimer?

    init(
        request: URLRequest, sink: HTTPTransport.Sink, options: HTTPOptions,
        completion: @escaping (HTTPTransport.Outcome) -> Void
    ) {
        self.request = request
        self.sink = sink
        self.options = options
        self.completion = completion
    }

    var url: String { request.url?.absoluteString ?? "?" }

    func start(_ session: URLSession) {
        self.session = session
        let t = session.dataTask(with: request)
        task = t
        let timer = DispatchSource.makeTimerSource(queue: DispatchQueue.global())
        timer.schedule(deadline: .now() + 1, repeating: 1)
        // The handler holds the delegate until `finish` cancels and drops the timer.
        let me = self
        timer.setEventHandler {
            session.delegateQueue.addOperation { me.checkFloor() }
        }
        timer.resume()
        self.timer = timer
        t.resume()
    }

    private func checkFloor() {
        guard !finished else { return }
        let elapsed = Date().timeIntervalSince(windowStart)
        if elapsed >= options.floorWindow {
            let rate = Double(windowBytes) / elapsed
            if rate < options.minimumRate {
                fail(
                    .tooSlow(
                        url: url,
                        detail:
                            "\(Int(rate)) bytes/s over \(Int(elapsed)) s, below the \(Int(options.minimumRate)) bytes/s floor"
                    ), retryable: true)
                return
            }
            windowStart = Date()
            windowBytes = 0
        }
    }

    private func fail(_ error: FetchError, retryable: Bool, cancel: Bool = true) {
        guard !finished else { return }
        failure = error
        finish(.failed(error, retryable: retryable))
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
            if received >= 4 << 20 { _ = mallocTrim?(0) }
        #endif
        completion(outcome)
    }

    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest: URLRequest, completionHandler: @escaping (URLRequest?) -> Void
    ) {
        redirects += 1
        let from = request.url
        let to = newRequest.url
        if redirects > options.maxRedirects {
            // Answer URLSession first and do not cancel: FoundationNetworking traps when a
            // redirect callback arrives for a cancelled task. The refused redirect's own response
            // then completes the task, and `finished` makes us ignore it.
            completionHandler(nil)
            fail(
                .redirect(url: url, detail: "more than \(options.maxRedirects) redirects (a loop?)"), retryable: false,
                cancel: false)
        } else if to?.host?.lowercased() != from?.host?.lowercased() {
            // Answer URLSession first and do not cancel: FoundationNetworking traps when a
            // redirect callback arrives for a cancelled task. The refused redirect's own response
            // then completes the task, and `finished` makes us ignore it.
            completionHandler(nil)
            fail(
                .redirect(url: url, detail: "redirect to another host (\(to?.host ?? "?")) refused"), retryable: false,
                cancel: false)
        } else if from?.scheme == "https" && to?.scheme != "https" {
            // Answer URLSession first and do not cancel: FoundationNetworking traps when a
            // redirect callback arrives for a cancelled task. The refused redirect's own response
            // then completes the task, and `finished` makes us ignore it.
            completionHandler(nil)
            fail(
                .redirect(url: url, detail: "redirect from https to \(to?.scheme ?? "?") refused"), retryable: false,
                cancel: false)
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
            fail(.connection(url: url, detail: "not an HTTP response"), retryable: true)
            completionHandler(.cancel)
            return
        }
        status = http.statusCode
        for (k, v) in http.allHeaderFields {
            if let key = k as? String, let value = v as? String { headers[key.lowercased()] = value }
        }
        if case .file(let box, _, let etagPath) = sink, status == 200 || status == 206 {
            if status == 200 && box.part.have > 0 {
                // The server ignored our Range (or the If-Range validator changed): start over.
                box.part.reset()
            }
            if status == 206 {
                guard let range = headers["content-range"], let (start, total) = Self.parseContentRange(range),
                    start == box.part.have
                else {
                    let detail =
                        "Content-Range \"\(headers["content-range"] ?? "")\" does not continue at byte \(box.part.have)"
                    box.part.reset()
                    fail(.badRange(url: url, detail: detail), retryable: false)
                    completionHandler(.cancel)
                    return
                }
                if let want = box.part.total, let total, total != want {
                    box.part.reset()
                    fail(
                        .badRange(url: url, detail: "Content-Range total \(total), expected \(want)"), retryable: false)
                    completionHandler(.cancel)
                    return
                }
            }
            let cap = (box.part.expecting.size ?? box.part.expecting.limit) - box.part.have
            if let length = headers["content-length"].flatMap({ Int64($0) }), length > cap {
                fail(.tooLarge(url: url, limit: box.part.expecting.size ?? box.part.expecting.limit), retryable: false)
                completionHandler(.cancel)
                return
            }
            // The validator for a later If-Range; not durable: a lost or torn one costs a full
            // download (the server answers 200), never wrong bytes.
            if let tag = headers["etag"] { try? SystemCalls.writeFile(Data(tag.utf8), to: etagPath) }
        }
        if case .memory(let limit) = sink, let length = headers["content-length"].flatMap({ Int64($0) }),
            length > limit, status == 200
        {
            fail(.tooLarge(url: url, limit: limit), retryable: false)
            completionHandler(.cancel)
            return
        }
        completionHandler(.allow)
    }

    /// `bytes START-END/TOTAL` → (START, TOTAL or nil for `*`).
    static func parseContentRange(_ text: String) -> (Int64, Int64?)? {
        let t = text.trimmingCharacters(in: .whitespaces)
        guard t.hasPrefix("bytes ") else { return nil }
        let rest = t.dropFirst(6)
        let parts = rest.split(separator: "/", maxSplits: 1)
        guard parts.count == 2 else { return nil }
        let range = parts[0].split(separator: "-")
        guard range.count == 2, let start = Int64(range[0]), let end = Int64(range[1]), end >= start else { return nil }
        let total = parts[1] == "*" ? nil : Int64(parts[1])
        if let t = total, end >= t { return nil }
        return (start, total)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        guard !finished else { return }
        windowBytes += Int64(data.count)
        received += Int64(data.count)
        #if canImport(Glibc)
            // The same every 32 MiB of a long transfer, since the extraction that follows the
            // download runs meanwhile: a 320 MiB bundle over loopback peaked at 55.4 MiB without
            // it, 52.6 MiB with it (means of 4 runs; 50.5 and 50.4 MiB at 160 MiB).
            if received - trimmedAt >= Self.trimInterval {
                trimmedAt = received
                _ = mallocTrim?(0)
            }
        #endif
        let success = status == 200 || status == 206
        switch sink {
        case .memory(let limit):
            if success, Int64(body.count + data.count) > limit {
                fail(.tooLarge(url: url, limit: limit), retryable: false)
                return
            }
            if body.count < 64 << 10 || success { body.append(data) }
        case .file(let box, let progress, _):
            guard success else { return }
            do {
                try box.part.append(data)
                progress?(Int64(data.count))
            } catch {
                fail(error, retryable: false)
            }
        }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: Error?) {
        guard !finished else { return }
        if let e = error {
            finish(.failed(.connection(url: url, detail: e.localizedDescription), retryable: true))
        } else {
            finish(.done(status: status, headers: headers, body: body))
        }
    }
}
