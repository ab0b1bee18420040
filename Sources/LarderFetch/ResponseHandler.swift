import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

/// What one request does with the server's answer, whatever engine carries it: checks the
/// status line and headers (Content-Range continuing the part file, Content-Length within the
/// cap), streams the body into memory or the part file within its limits, and measures the
/// throughput floor and the transfer's deadline. An engine calls `head` once per response and
/// `chunk` for every piece of body, from one task or queue at a time, and `checkPace` every
/// second (and at `deadline`) from anywhere; a non-nil answer ends the request with that outcome.
package final class ResponseHandler: @unchecked Sendable {
    // @unchecked: `head` and `chunk` are called by one request at a time (its engine's serial
    // queue or task); what `checkPace` shares with them is behind `window`.
    package let url: String
    let sink: HTTPTransport.Sink
    package let options: HTTPOptions
    private(set) var status = 0
    private(set) var headers: [String: String] = [:]
    private(set) var body = Data()
    /// The floor's current window: when it began and the bytes received since.
    private let window = Locked((start: ContinuousClock.now, bytes: Int64(0)))
    /// Body bytes received so far.
    package private(set) var received: Int64 = 0
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
    package var outcome: HTTPTransport.Outcome { .done(status: status, headers: headers, body: body) }

    private var succeeded: Bool { status == 200 || status == 206 }

    /// The status and headers (names in any case) of the final response. Nil to go on reading
    /// the body; else the failure that ends the request.
    package func head(status: Int, headers fields: [(String, String)]) -> HTTPTransport.Outcome? {
        self.status = status
        headers = [:]
        for (k, v) in fields {
            let key = k.lowercased()
            // Repeated fields join as RFC 9110 §5.3 allows (none we read is a list, but stay exact).
            if let old = headers[key] { headers[key] = old + ", " + v } else { headers[key] = v }
        }
        let length = headers["content-length"].flatMap { Int64($0) }
        switch sink {
        case .file(let box, _, let etagPath) where succeeded:
            if status == 200 && box.part.have > 0 {
                // The server ignored our Range (or the If-Range validator changed): start over.
                box.part.reset()
            }
            if status == 206 {
                guard let range = headers["content-range"], let (start, total) = Self.parseContentRange(range),
                    start == box.part.have
                else {
                    let detail =
                        "Content-Range \(quoted(headers["content-range"] ?? "")) does not continue at byte \(box.part.have)"
                    box.part.reset()
                    return .failed(.badRange(url: url, detail: detail), retryable: false)
                }
                if let want = box.part.total, let total, total != want {
                    box.part.reset()
                    return .failed(
                        .badRange(url: url, detail: "Content-Range total \(total), expected \(want)"), retryable: false)
                }
            }
            let cap = (box.part.expecting.size ?? box.part.expecting.limit) - box.part.have
            if let length, length > cap {
                return .failed(
                    .tooLarge(url: url, limit: box.part.expecting.size ?? box.part.expecting.limit), retryable: false)
            }
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

    /// A piece of the body. Nil to go on; else the failure that ends the request.
    package func chunk(_ bytes: UnsafeRawBufferPointer) -> HTTPTransport.Outcome? {
        window.withLock { $0.bytes += Int64(bytes.count) }
        received += Int64(bytes.count)
        switch sink {
        case .memory(let limit):
            if succeeded, Int64(body.count + bytes.count) > limit {
                return .failed(.tooLarge(url: url, limit: limit), retryable: false)
            }
            // An error page is kept only in part: it is never read.
            if body.count < 64 << 10 || succeeded { body.append(contentsOf: bytes) }
        case .file(let box, let progress, _):
            guard succeeded else { return nil }
            do {
                try box.part.append(bytes)
                progress?(Int64(bytes.count))
            } catch {
                return .failed(error, retryable: false)
            }
        }
        return nil
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
