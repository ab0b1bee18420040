import Foundation
import LarderCore
import LarderFileSystem
import Synchronization
import SystemPackage

/// What one request does with the server's answer, whatever engine carries it: checks the
/// status line and headers (Content-Range continuing the part file, Content-Length within the
/// cap), streams the body into memory or the part file within its limits, and measures the
/// throughput floor and the transfer's deadline. An engine calls `head` once per response and
/// `chunk` for every piece of body, from one task or queue at a time, and `checkPace` every
/// second (and at `deadline`) from anywhere; a non-nil answer ends the request with that outcome.
package final class ResponseHandler: Sendable {
    package let url: String
    let sink: HTTPTransport.Sink
    package let options: HTTPOptions
    /// What the answer has brought so far (written by `head` and `chunk`, one request at a time).
    private let answer = Mutex(Answer())
    /// The floor's current window: when it began and the bytes received since.
    private let window = Mutex((start: ContinuousClock.now, bytes: Int64(0)))

    private struct Answer {
        var status = 0
        var headers: [String: String] = [:]
        var body = Data()
        /// Body bytes received so far.
        var received: Int64 = 0
        var succeeded: Bool { status == 200 || status == 206 }
    }

    /// Body bytes received so far.
    package var received: Int64 { answer.withLock { $0.received } }
    /// When the whole transfer (every attempt of it) must be complete: `options.deadline` after
    /// the transport began it.
    package let deadline: ContinuousClock.Instant

    init(url: String, sink: HTTPTransport.Sink, options: HTTPOptions, deadline: ContinuousClock.Instant) {
        self.url = url
        self.sink = sink
        self.options = options
        self.deadline = deadline
    }

    /// The failure of a transfer not complete at its deadline.
    package static func pastDeadline(url: String, options: HTTPOptions) -> FetchError {
        .tooSlow(url: url, detail: "not complete after the \(Int(options.deadline)) s deadline")
    }

    /// How every engine words a connection on which no byte came within `options.stallTimeout`.
    package static let stalled = "connection stalled: no byte within the stall timeout"

    /// The complete answer, once the body has ended.
    package var outcome: HTTPTransport.Outcome {
        answer.withLock { .done(status: $0.status, headers: $0.headers, body: $0.body) }
    }

    /// The status and headers (names in any case) of the final response. Nil to go on reading
    /// the body; else the failure that ends the request.
    package func head(status: Int, headers fields: [(String, String)]) -> HTTPTransport.Outcome? {
        var headers: [String: String] = [:]
        for (k, v) in fields {
            let key = k.lowercased()
            // Repeated fields join as RFC 9110 §5.3 allows (none we read is a list, but stay exact).
            if let old = headers[key] { headers[key] = old + ", " + v } else { headers[key] = v }
        }
        let succeeded = answer.withLock { [headers] answer in
            answer.status = status
            answer.headers = headers
            return answer.succeeded
        }
        let length = headers["content-length"].flatMap { Int64($0) }
        switch sink {
        case .file(let box, _, let etagPath) where succeeded:
            let failure = box.part.withLock { part in
                Self.check(status: status, headers, length, &part, url: url)
            }
            if let failure { return failure }
            // The validator for a later If-Range; not durable: a lost or torn one costs a full
            // download (the server answers 200), never wrong bytes.
            if let tag = headers["etag"] { try? SystemCalls.writeFile(Data(tag.utf8), to: etagPath) }
        case .memory(let limit) where status == 200:
            if let length, length > limit { return .failed(.tooLarge(url: url, limit: limit), retryable: false) }
        default:
            break
        }
        return nil
    }

    /// Whether a successful answer (`status`, `headers`, Content-Length `length`) continues `part`:
    /// nil when it does; else the failure (and `part` reset when its bytes cannot be continued).
    private static func check(
        status: Int, _ headers: [String: String], _ length: Int64?, _ part: inout PartFile, url: String
    ) -> HTTPTransport.Outcome? {
        if status == 200 && part.have > 0 {
            // The server ignored our Range (or the If-Range validator changed): start over.
            part.reset()
        }
        if status == 206 {
            guard let range = headers["content-range"], let (start, total) = Self.parseContentRange(range),
                start == part.have
            else {
                let detail =
                    "Content-Range \(quoted(headers["content-range"] ?? "")) does not continue at byte \(part.have)"
                part.reset()
                return .failed(.badRange(url: url, detail: detail), retryable: false)
            }
            if let want = part.total, let total, total != want {
                part.reset()
                return .failed(
                    .badRange(url: url, detail: "Content-Range total \(total), expected \(want)"), retryable: false)
            }
        }
        let cap = (part.expecting.size ?? part.expecting.limit) - part.have
        if let length, length > cap {
            return .failed(.tooLarge(url: url, limit: part.expecting.size ?? part.expecting.limit), retryable: false)
        }
        return nil
    }

    /// A piece of the body. Nil to go on; else the failure that ends the request.
    package func chunk(_ bytes: UnsafeRawBufferPointer) -> HTTPTransport.Outcome? {
        window.withLock { $0.bytes += Int64(bytes.count) }
        switch sink {
        case .memory(let limit):
            return answer.withLock { answer in
                answer.received += Int64(bytes.count)
                if answer.succeeded, Int64(answer.body.count + bytes.count) > limit {
                    return .failed(.tooLarge(url: url, limit: limit), retryable: false)
                }
                // An error page is kept only in part: it is never read.
                if answer.body.count < 64 << 10 || answer.succeeded { answer.body.append(contentsOf: bytes) }
                return nil
            }
        case .file(let box, let progress, _):
            let succeeded = answer.withLock { answer in
                answer.received += Int64(bytes.count)
                return answer.succeeded
            }
            guard succeeded else { return nil }
            do throws(FetchError) {
                try box.part.withLock { part throws(FetchError) in try part.append(bytes) }
                progress?(Int64(bytes.count))
            } catch {
                return .failed(error, retryable: false)
            }
            return nil
        }
    }

    /// The transfer's pace, checked every second: a failure when the deadline has passed, or when
    /// the average rate over the last `floorWindow` seconds is below `minimumRate`; else nil (and
    /// a new window starts when one is complete).
    package func checkPace() -> HTTPTransport.Outcome? {
        if ContinuousClock.now >= deadline {
            return .failed(Self.pastDeadline(url: url, options: options), retryable: false)
        }
        let floorWindow = options.floorWindow
        let (elapsed, bytes) = window.withLock { window in
            let elapsed = Self.seconds(ContinuousClock.now - window.start)
            defer { if elapsed >= floorWindow { window = (.now, 0) } }
            return (elapsed, window.bytes)
        }
        guard elapsed >= options.floorWindow else { return nil }
        let rate = Double(bytes) / elapsed
        guard rate < options.minimumRate else { return nil }
        let detail = "\(Int(rate)) bytes/s over \(Int(elapsed)) s, below the \(Int(options.minimumRate)) bytes/s floor"
        return .failed(.tooSlow(url: url, detail: detail), retryable: true)
    }

    package static func seconds(_ d: Duration) -> Double {
        Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }

    /// Why a redirect from `from` to `to`, the `count`th of the request, is refused; nil when it
    /// may be followed: at most `maxRedirects`, to the same host, never from https to http.
    package static func refusal(of count: Int, from: URL, to: URL, options: HTTPOptions) -> FetchError? {
        let url = from.absoluteString
        if count > options.maxRedirects {
            return .redirect(url: url, detail: "more than \(options.maxRedirects) redirects (a loop?)")
        }
        if to.host?.lowercased() != from.host?.lowercased() {
            return .redirect(url: url, detail: "redirect to another host (\(to.host ?? "?")) refused")
        }
        if from.scheme?.lowercased() == "https" && to.scheme?.lowercased() != "https" {
            return .redirect(url: url, detail: "redirect from https to \(to.scheme ?? "?") refused")
        }
        return nil
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
}
