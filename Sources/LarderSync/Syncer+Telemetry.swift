import Foundation
import LarderArchive
import LarderCore
import LarderFetch
import LarderStore
import SystemPackage

/// What one telemetry send did (`larder telemetry flush`, and after each sync).
public struct TelemetrySendReport: Sendable, Codable, Equatable {
    /// Batches the collector took (or had already).
    public var sent = 0
    /// Batches it refused for good (their events are dropped and counted).
    public var refused = 0
    /// Events in the batches taken.
    public var events = 0
    /// Why sending stopped early (a network failure, 429 or 5xx), when it did.
    public var deferred: String?
    /// Why nothing was sent: telemetry off, no collector, not in the sample, back-off, or nothing to send.
    public var skipped: String?
}

extension Syncer {
    /// Failure codes of a transfer: `download-failed`; any other failure is `install-failed`.
    static let downloadCodes: Set<ReasonCode> = [
        "http-status", "connection", "too-large", "truncated", "hash-mismatch", "bad-range", "too-slow", "redirect",
        "insecure-http", "unsupported-scheme",
    ]

    /// The events a finished sync reports (format §19): activations, failures, and which version
    /// each held package runs (`checked`, at most once an hour).
    func reportTelemetry(_ report: SyncReport, releases: [PackageID: Release]) {
        let spool = TelemetrySpool(root: root, logger: setup.logger)
        let now = setup.clock()
        spool.record(now: now) { ctx in
            // Read only when the device reports: an up-to-date sync reads no state otherwise.
            let state = try? SandboxReader(root: root).state()
            var events: [TelemetryEvent] = []
            for r in report.packages {
                guard let id = PackageID(r.id), let to = r.to.flatMap(SemanticVersion.init) else { continue }
                let from = r.from.flatMap(SemanticVersion.init)
                let channel = releases[id]?.entry.channel ?? ctx.channel
                let onDemand = releases[id]?.entry.install?.mode == .onDemand && r.action == .install
                func event(_ kind: TelemetryKind, _ reason: String, bytes: Int64? = nil) -> TelemetryEvent {
                    TelemetryEvent(
                        kind, package: id, version: to, channel: channel, reason: reason,
                        from: kind.hasFrom ? from : nil, bytes: bytes, at: now)
                }
                switch (r.outcome, r.action) {
                case (.done, .install), (.done, .update):
                    if onDemand { events.append(event(.onDemand, "fetched", bytes: r.bytesFetched)) }
                    events.append(event(.activated, r.method?.rawValue ?? "bundle", bytes: r.bytesFetched))
                case (.failed, _):
                    let code = r.code ?? "io"
                    if code == "no-space" {
                        events.append(event(.noSpace, "no-space", bytes: r.bundleBytes))
                    } else if onDemand {
                        events.append(event(.onDemand, code.rawValue))
                    } else {
                        events.append(
                            event(Self.downloadCodes.contains(code) ? .downloadFailed : .installFailed, code.rawValue))
                    }
                default: break
                }
            }
            for (key, pkg) in (state?.packages ?? [:]).sorted(by: { $0.key < $1.key }) {
                guard let id = PackageID(key), let v = pkg.active else { continue }
                events.append(
                    TelemetryEvent(.checked, package: id, version: v, channel: ctx.channel, reason: "current", at: now))
            }
            return events
        }
    }

    /// Sends what the telemetry spool holds to the collector the accepted index names: the
    /// outbox, then the spool, at most `maxBatches` batches, each allowed 10 s; stops at the first
    /// failure and backs off. `force` ignores the back-off. Never throws: telemetry never fails
    /// anything.
    public func sendTelemetry(force: Bool = false, maxBatches: Int = 8) async -> TelemetrySendReport {
        let spool = TelemetrySpool(root: root, logger: setup.logger)
        var report = TelemetrySendReport()
        let allowHTTP = (try? SyncConfig.load(root: root))?.allowInsecureHTTP ?? false
        for _ in 0..<maxBatches {
            let now = setup.clock()
            guard let (outbox, collector) = spool.nextBatch(now: now, force: force) else {
                if report.sent + report.refused == 0 {
                    let s = spool.status(now: now)
                    report.skipped =
                        !s.on
                        ? "telemetry is off"
                        : s.endpoint == nil
                            ? "the index names no collector"
                            : s.sampled == false
                                ? "this install is not in the sample"
                                : s.pendingEvents == 0
                                    ? "nothing to send" : "backing off after \(s.failures) failure(s)"
                }
                return report
            }
            let result = await post(outbox.batch, to: collector.endpoint, allowHTTP: allowHTTP)
            spool.settle(outbox, result.0, now: setup.clock())
            switch result.0 {
            case .taken:
                report.sent += 1
                report.events += outbox.batch.events.count
            case .refused:
                report.refused += 1
                setup.logger.notice("telemetry batch refused by the collector: \(result.1)")
            case .retry:
                report.deferred = result.1
                return report
            }
        }
        return report
    }

    /// Posts one batch; how it ended, and what the collector or network said.
    func post(_ batch: TelemetryBatch, to endpoint: String, allowHTTP: Bool) async -> (
        TelemetrySpool.SendResult, String
    ) {
        guard let url = URL(string: endpoint), let host = url.host else { return (.refused, "bad endpoint") }
        if url.scheme?.lowercased() == "http", !allowHTTP, !["127.0.0.1", "localhost", "::1", "[::1]"].contains(host) {
            return (.refused, "plain http is allowed only to loopback, or with --allow-http")
        }
        let body: Data
        do { body = try Gzip.compress(try ManifestCoding.encode(batch, compact: true)) } catch {
            return (.refused, "cannot encode the batch: \(error)")
        }
        let request = ForwardRequest(
            method: .post, url: endpoint,
            headers: [
                ("Content-Type", "application/json"), ("Content-Encoding", "gzip"), ("Idempotency-Key", batch.batch),
                ("User-Agent", "larder/\(larderVersion)"),
            ],
            body: body)
        do {
            let response = try await setup.engine.makeExchange(timeout: 10).send(request, maxBytes: 64 << 10)
            var answer = Data()
            for try await chunk in response.body where answer.count < 4096 { answer.append(chunk) }
            let text = String(decoding: answer.prefix(300), as: UTF8.self)
            switch response.status {
            case 200..<300: return (.taken, "")
            case 400, 413, 415, 422: return (.refused, "\(response.status) \(text)")
            default: return (.retry, "the collector answered \(response.status) \(text)")
            }
        } catch {
            return (.retry, "\(error)")
        }
    }
}
