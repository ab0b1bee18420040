import Foundation
import HTTPTypes
import Hummingbird
import LarderArchive
import LarderCore
import Logging
import NIOCore
import Synchronization

/// The telemetry collector (`larder collect`): devices post batches to `POST /v1/events`; each is
/// checked whole (format §19), replays are ignored, and each install may send `batchesPerHour`.
/// `/report` (HTML) and `/report.json` answer the report of the last `?since=` (24h by default).
/// It reads no client address and logs none, and stores only what the batch holds.
package struct Collector: Sendable {
    /// Where the data goes.
    package let store: TelemetryStore
    /// Batches one install may post in an hour (a 429 past it).
    package var batchesPerHour = 120
    /// The clock (tests move it).
    package var clock: @Sendable () -> Date = { Date() }
    let limiter = RateLimiter()

    /// A collector over `store`.
    package init(store: TelemetryStore) { self.store = store }

    /// What a post did: the status and the JSON answer.
    package struct Answer: Sendable, Equatable {
        package var status: HTTPResponse.Status
        package var body: String
    }

    /// Takes one posted body (`gzip`: it is `Content-Encoding: gzip`).
    package func take(_ raw: Data, gzip: Bool) async -> Answer {
        func refuse(_ r: BatchRefusal, _ status: HTTPResponse.Status = .badRequest) -> Answer {
            Answer(status: status, body: Self.json(["error": r.code.rawValue, "detail": r.detail]))
        }
        guard raw.count <= TelemetryBatch.maxCompressedBytes else {
            return refuse(
                BatchRefusal("too-large", "the body is more than \(TelemetryBatch.maxCompressedBytes) bytes"),
                .contentTooLarge)
        }
        var body = raw
        if gzip {
            do { body = try Gzip.decompress(raw, limit: TelemetryBatch.maxBytes) } catch GzipError.tooLarge {
                return refuse(
                    BatchRefusal("too-large", "the batch inflates to more than \(TelemetryBatch.maxBytes) bytes"),
                    .contentTooLarge)
            } catch {
                return refuse(BatchRefusal("bad-gzip", "the body is not gzip: \(error)"))
            }
        }
        let now = clock()
        let batch: TelemetryBatch
        do { batch = try TelemetryBatch.accept(body, now: now) } catch { return refuse(error) }
        guard limiter.admit(batch.install, hour: TelemetryEvent.hour(of: now), limit: batchesPerHour) else {
            return Answer(
                status: .tooManyRequests,
                body: Self.json([
                    "error": "rate-limited",
                    "detail": "more than \(batchesPerHour) batches this hour from this install",
                ]))
        }
        do {
            let stored = try await store.insert(batch, received: now)
            return stored
                ? Answer(status: .accepted, body: Self.json(["stored": "\(batch.events.count)"]))
                : Answer(status: .ok, body: Self.json(["stored": "0", "detail": "a replay of batch \(batch.batch)"]))
        } catch {
            return Answer(status: .serviceUnavailable, body: Self.json(["error": "store", "detail": "\(error)"]))
        }
    }

    static func json(_ fields: [String: String]) -> String {
        (try? String(decoding: ManifestCoding.encode(fields, compact: true), as: UTF8.self)) ?? "{}"
    }

    /// Serves on `host:port` until cancelled; `onListening` gets the bound port.
    package func run(host: String, port: Int, onListening: @escaping @Sendable (String, Int) async -> Void) async throws
    {
        let router = Router()
        router.post("/v1/events") { request, _ -> Response in
            let gzip = request.headers[.contentEncoding]?.lowercased() == "gzip"
            let raw: ByteBuffer
            do { raw = try await request.body.collect(upTo: TelemetryBatch.maxCompressedBytes) } catch {
                let a = Answer(
                    status: .contentTooLarge,
                    body: Self.json([
                        "error": "too-large",
                        "detail": "the body is more than \(TelemetryBatch.maxCompressedBytes) bytes",
                    ]))
                return Self.response(a.status, a.body, type: "application/json")
            }
            let a = await take(Data(buffer: raw), gzip: gzip)
            return Self.response(a.status, a.body, type: "application/json")
        }
        router.get("/report") { request, _ -> Response in
            guard let (since, package) = window(request.uri.queryParameters) else {
                return Self.response(
                    .badRequest, "since: expected a duration such as 24h, 90m or 7d", type: "text/plain")
            }
            let report = try await store.report(since: since, until: clock(), package: package)
            return Self.response(.ok, ReportPage.render(report), type: "text/html; charset=utf-8")
        }
        router.get("/report.json") { request, _ -> Response in
            guard let (since, package) = window(request.uri.queryParameters) else {
                return Self.response(
                    .badRequest, "since: expected a duration such as 24h, 90m or 7d", type: "text/plain")
            }
            let report = try await store.report(since: since, until: clock(), package: package)
            return Self.response(
                .ok, String(decoding: try ManifestCoding.encode(report), as: UTF8.self), type: "application/json")
        }
        let app = Application(
            router: router,
            configuration: ApplicationConfiguration(address: .hostname(host, port: port), serverName: "larder-collect"),
            onServerRunning: { channel in await onListening(host, channel.localAddress?.port ?? port) },
            logger: Logger(label: "larder.collect", factory: { _ in SwiftLogNoOpLogHandler() }))
        try await app.runService()
    }

    func window(_ query: Hummingbird.Parameters) -> (Date, String?)? {
        let since = query.get("since").map { String($0) } ?? "24h"
        guard let seconds = Duration.parse(since) else { return nil }
        return (clock().addingTimeInterval(-seconds), query.get("package").map { String($0) })
    }

    static func response(_ status: HTTPResponse.Status, _ body: String, type: String) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = type
        headers[.cacheControl] = "no-store"
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: body)))
    }
}

extension Duration {
    /// Seconds in `90m`, `24h`, `7d` or `3600s`; nil for anything else.
    package static func parse(_ text: String) -> TimeInterval? {
        guard let unit = text.last, let n = Double(String(text.dropLast())), n > 0, n.isFinite else { return nil }
        switch unit {
        case "s": return n
        case "m": return n * 60
        case "h": return n * 3600
        case "d": return n * 86_400
        default: return nil
        }
    }
}

/// Batches per install in the current hour; forgets the previous hours.
final class RateLimiter: Sendable {
    private let counts = Mutex<(hour: Date, perInstall: [String: Int])>((Date.distantPast, [:]))

    func admit(_ install: String, hour: Date, limit: Int) -> Bool {
        counts.withLock { c in
            if c.hour != hour { c = (hour, [:]) }
            let n = c.perInstall[install, default: 0]
            guard n < limit else { return false }
            c.perInstall[install] = n + 1
            return true
        }
    }
}
