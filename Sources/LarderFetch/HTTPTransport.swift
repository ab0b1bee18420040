import Foundation
import LarderCore
import LarderFileSystem
import Synchronization
import SystemPackage

/// Tuning of HTTP transfers.
public struct HTTPOptions: Sendable {
    /// Attempts per request (the first included) on connection errors, 5xx and 429.
    public var attempts = 5
    /// First backoff delay; doubled each retry, with ±50 % jitter.
    public var backoff: Double = 0.5
    /// Longest wait honoured from Retry-After or backoff.
    public var maxDelay: Double = 30
    /// Whole-transfer deadline, seconds.
    public var deadline: Double = 600
    /// Seconds without a byte before a transfer is abandoned.
    public var stallTimeout: Double = 20
    /// Minimum average rate (bytes/s) over `floorWindow` seconds.
    public var minimumRate: Double = 2048
    /// Seconds over which the average rate is measured against `minimumRate`.
    public var floorWindow: Double = 15
    /// Plain http to hosts other than loopback.
    public var allowInsecureHTTP = false
    /// Redirects followed per request (same host, no https → http downgrade).
    public var maxRedirects = 5
    /// PEM files of certificate authorities trusted for https in addition to the system's (a
    /// private CA of a test or an enterprise server). Read by the NIO engine (Linux); on Apple
    /// platforms URLSession trusts what the device trusts (install the CA as a profile).
    public var caFiles: [String] = []
    /// Connections at once to one host over HTTP/1.1 (HTTP/2 multiplexes over one).
    public var connectionsPerHost = 4

    /// The defaults.
    public init() {}
}

/// HTTP(S) over an `HTTPEngine` (AsyncHTTPClient on Linux, URLSession on Apple platforms):
/// conditional GET, our own Range/If-Range resume into `.part` files, retries with exponential
/// backoff and jitter (honouring Retry-After), a deadline and a minimum-throughput floor, SHA-256
/// while streaming, a hard stop at the declared size, and a redirect policy: at most
/// `maxRedirects`, same host only, never from https to http. One transport is one client: its
/// requests share connections (keep-alive, TLS sessions, HTTP/2 where the server offers it).
package final class HTTPTransport: Transport, Sendable {
    let options: HTTPOptions
    let engine: any HTTPEngine

    /// Creates a transport over `stack`'s engine (the platform's: `HTTPStack.platform`, in
    /// LarderSync); fails when a CA file cannot be read.
    package init(options: HTTPOptions = HTTPOptions(), stack: HTTPStack) throws(FetchError) {
        self.options = options
        self.engine = try stack.makeEngine(options)
    }

    /// A download larger than this is a bulk transfer (`TransferRequest.bulk`).
    static let bulkBytes: Int64 = 1 << 20

    static func isLoopback(_ host: String?) -> Bool {
        guard let h = host?.lowercased() else { return false }
        return h == "localhost" || h == "::1" || h == "[::1]" || h.hasPrefix("127.")
    }

    func checkScheme(_ url: URL) throws(FetchError) {
        switch url.scheme?.lowercased() {
        case "https": return
        case "http":
            if !options.allowInsecureHTTP && !Self.isLoopback(url.host) { throw .insecure(url: url.absoluteString) }
        case let s: throw .unsupportedScheme(s ?? "")
        }
    }

    /// GETs a document whole (with If-None-Match for `etag`), retrying 429, 5xx and lost connections.
    package func document(_ url: URL, etag: String?, maxBytes: Int) async throws(FetchError) -> FetchedDocument {
        try checkScheme(url)
        let deadline = transferDeadline()
        var attempt = 0
        while true {
            attempt += 1
            var request = TransferRequest(url: url)
            if let e = etag { request.headers["If-None-Match"] = e }
            let outcome = await run(request, sink: .memory(limit: Int64(maxBytes)), deadline: deadline)
            switch outcome {
            case .done(let status, let headers, let body):
                if status == 304 {
                    return FetchedDocument(data: Data(), etag: headers["etag"] ?? etag, notModified: true)
                }
                if status == 200 { return FetchedDocument(data: body, etag: headers["etag"], notModified: false) }
                await sleep(try retryAfter(status: status, headers: headers, url: url, attempt: attempt))
            case .failed(let error, let retryable):
                await sleep(try retryAfter(error, retryable: retryable, attempt: attempt))
            }
        }
    }

    /// GETs into `part`, resuming with Range and If-Range and retrying within `deadline`, then verifies it.
    package func download(
        _ url: URL, to part: FilePath, expecting: Expectation, progress: ProgressHandler?, watch: GrowingPart?
    ) async throws(FetchError) {
        try checkScheme(url)
        let file = PartFileBox(try PartFile(part, url: url.absoluteString, expecting: expecting, watch: watch))
        defer { file.part.withLock { $0.close() } }
        let etagPath = FilePath(part.string + ".etag")
        var attempt = 0
        let deadline = transferDeadline()
        while true {
            attempt += 1
            if ContinuousClock.now >= deadline {
                throw ResponseHandler.pastDeadline(url: url.absoluteString, options: options)
            }
            if let size = expecting.size, file.part.withLock({ $0.have }) == size {
                do {
                    try file.part.withLock { part throws(FetchError) in try part.finish() }
                } catch let e {
                    try? SystemCalls.unlink(etagPath)
                    if file.part.withLock({ $0.shouldRefetch(after: e) }) { continue }
                    throw e
                }
                try? SystemCalls.unlink(etagPath)
                return
            }
            let request = resumeRequest(url, file: file, etagPath: etagPath, expecting: expecting)
            let outcome = await run(
                request, sink: .file(file, progress: progress, etagPath: etagPath), deadline: deadline)
            switch outcome {
            case .done(let status, let headers, _):
                if status == 200 || status == 206 {
                    do {
                        try file.part.withLock { part throws(FetchError) in try part.finish() }
                        try? SystemCalls.unlink(etagPath)
                        return
                    } catch let e {
                        // Short: resume from where it stopped. Wrong bytes: start over.
                        if case .truncated = e, attempt < options.attempts {
                            await sleep(backoff(attempt))
                            continue
                        }
                        if case .hashMismatch = e { try? SystemCalls.unlink(etagPath) }
                        if file.part.withLock({ $0.shouldRefetch(after: e) }) { continue }
                        throw e
                    }
                }
                if status == 416 {
                    file.part.withLock { $0.reset() }
                    if attempt < options.attempts { continue }
                }
                await sleep(try retryAfter(status: status, headers: headers, url: url, attempt: attempt))
            case .failed(let error, let retryable):
                await sleep(try retryAfter(error, retryable: retryable, attempt: attempt))
            }
        }
    }

    /// The next attempt's request: from the byte `file` holds up to (Range), with the validator
    /// of the answer those bytes came from (If-Range), so a changed file is sent whole.
    private func resumeRequest(
        _ url: URL, file: PartFileBox, etagPath: FilePath, expecting: Expectation
    ) -> TransferRequest {
        var request = TransferRequest(url: url)
        request.bulk = (expecting.size ?? expecting.limit) > Self.bulkBytes
        let have = file.part.withLock { $0.have }
        guard have > 0 else { return request }
        request.headers["Range"] = "bytes=\(have)-"
        if let bytes = try? AtomicFile.read(etagPath, limit: 4096), let tag = String(data: bytes, encoding: .utf8) {
            request.headers["If-Range"] = tag
        }
        return request
    }

    // MARK: retries

    /// After a response that is neither success nor 304: the wait before the next attempt, or
    /// the status error when it must not be retried (other 4xx, or attempts used up).
    func retryAfter(status: Int, headers: [String: String], url: URL, attempt: Int) throws(FetchError) -> Double {
        guard let delay = retryDelay(status: status, headers: headers, attempt: attempt) else {
            throw .status(url: url.absoluteString, code: status)
        }
        return delay
    }

    /// After a failed attempt: the backoff before the next one, or the error when it is not
    /// retryable or the attempts are used up.
    func retryAfter(_ error: FetchError, retryable: Bool, attempt: Int) throws(FetchError) -> Double {
        guard retryable, attempt < options.attempts else { throw error }
        return backoff(attempt)
    }

    func backoff(_ attempt: Int) -> Double {
        let base = options.backoff * pow(2, Double(attempt - 1))
        return min(options.maxDelay, base * Double.random(in: 0.5...1.5))
    }

    /// The wait before retrying a response, or nil when it must not be retried.
    func retryDelay(status: Int, headers: [String: String], attempt: Int) -> Double? {
        guard attempt < options.attempts, status == 429 || (500...599).contains(status) else { return nil }
        if let ra = headers["retry-after"], let seconds = Double(ra.trimmingCharacters(in: .whitespaces)) {
            return min(options.maxDelay, max(0, seconds))
        }
        return backoff(attempt)
    }

    func sleep(_ seconds: Double) async {
        try? await Task.sleep(nanoseconds: UInt64(seconds * 1e9))
    }

    // MARK: one request

    enum Sink {
        case memory(limit: Int64)
        case file(PartFileBox, progress: ProgressHandler?, etagPath: FilePath)
    }

    /// How one request ended: an answer (its body, when the sink keeps none), or a failure.
    package enum Outcome {
        /// The final response.
        case done(status: Int, headers: [String: String], body: Data)
        /// No usable response; `retryable` lets the transport try again.
        case failed(FetchError, retryable: Bool)
    }

    /// When a transfer starting now must be complete (`options.deadline`).
    func transferDeadline() -> ContinuousClock.Instant { .now + .seconds(min(options.deadline, 1e7)) }

    /// One attempt of a transfer that must be complete by `deadline`.
    func run(_ request: TransferRequest, sink: Sink, deadline: ContinuousClock.Instant) async -> Outcome {
        await engine.run(
            request,
            handler: ResponseHandler(url: request.url.absoluteString, sink: sink, options: options, deadline: deadline))
    }
}
