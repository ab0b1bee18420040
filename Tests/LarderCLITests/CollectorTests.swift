import Foundation
import LarderArchive
import LarderCollect
import LarderCore
import LarderTestSupport
import Testing

/// The collector's checks, idempotency, rate limit and report, over a real SQLite file.
@Suite("Telemetry collector over SQLite")
struct CollectorTests {
    let now = Date(timeIntervalSince1970: 1_796_403_600)  // 2026-12-04T17:00:00Z

    func withStore(_ body: (TelemetryStore) async throws -> Void) async throws {
        let dir = try TemporaryDirectory("collect")
        defer { dir.remove() }
        let store = try await TelemetryStore.open(
            .sqlite(path: dir.url.appendingPathComponent("events.db").path), logger: .init(label: "test"))
        do { try await body(store) } catch {
            await store.runner.close()
            throw error
        }
        await store.runner.close()
    }

    func event(
        _ kind: TelemetryKind, _ version: String, reason: String, from: String? = nil, count: Int = 1,
        hoursAgo: Double = 1
    ) -> TelemetryEvent {
        TelemetryEvent(
            kind, package: PackageID("shop")!, version: SemanticVersion(version)!, channel: .default, reason: reason,
            from: from.flatMap { SemanticVersion($0) }, count: count, at: now.addingTimeInterval(-hoursAgo * 3600))
    }

    func body(
        _ events: [TelemetryEvent], install: String = TelemetryBatch.randomID(),
        batch: String = TelemetryBatch.randomID()
    )
        throws -> Data
    {
        try Gzip.compress(
            try ManifestCoding.encode(
                TelemetryBatch(batch: batch, install: install, app: "1.0.0", dropped: 0, events: events)))
    }

    @Test func batchesAreStoredOnceAndHostileOnesRefused() async throws {
        try await withStore { store in
            var collector = Collector(store: store)
            collector.clock = { now }
            collector.batchesPerHour = 3
            let install = TelemetryBatch.randomID()
            let good = try body([event(.activated, "1.1.0", reason: "bundle")], install: install)
            #expect(await collector.take(good, gzip: true).status == .accepted)
            let replay = await collector.take(good, gzip: true)
            #expect(replay.status == .ok && replay.body.contains("replay"))
            #expect(try await store.counts() == (1, 1))
            // Each refused with its code; nothing stored.
            let cases: [(Data, Bool, String)] = [
                (Data("not gzip".utf8), true, "bad-gzip"),
                (try body([event(.activated, "1.1.0", reason: "teleported")]), true, "bad-reason"),
                (Data(#"{"schemaVersion":1,"batch":"x"}"#.utf8), false, "bad-json"),
                (try Gzip.compress(Data(repeating: 0x20, count: 2 << 20)), true, "too-large"),
                (Data(repeating: 0x41, count: TelemetryBatch.maxCompressedBytes + 1), false, "too-large"),
            ]
            for (data, gzip, code) in cases {
                let a = await collector.take(data, gzip: gzip)
                #expect(a.status == .badRequest || a.status == .contentTooLarge)
                #expect(a.body.contains("\"error\":\"\(code)\""), "\(a.body)")
            }
            #expect(try await store.counts() == (1, 1))
            // Three posts an hour from one install (the replay counts), then 429; another install is not held back.
            for _ in 0..<1 {
                #expect(
                    await collector.take(
                        try body([event(.checked, "1.1.0", reason: "current")], install: install), gzip: true
                    ).status == .accepted)
            }
            #expect(
                await collector.take(
                    try body([event(.checked, "1.1.0", reason: "current")], install: install), gzip: true
                ).status == .tooManyRequests)
            #expect(
                await collector.take(try body([event(.checked, "1.1.0", reason: "current")]), gzip: true).status
                    == .accepted)
        }
    }

    @Test func theReportCountsDevicesWithWilsonIntervals() async throws {
        try await withStore { store in
            // 10 devices on 1.0.0 two hours ago; 8 then take 1.1.0, 2 of which fail page health and roll
            // back; 1 cannot download it; page errors counted.
            var installs: [String] = []
            for i in 0..<10 {
                let id = TelemetryBatch.randomID()
                installs.append(id)
                var events = [event(.checked, "1.0.0", reason: "current", hoursAgo: 2)]
                if i < 8 { events.append(event(.activated, "1.1.0", reason: "delta", from: "1.0.0")) }
                if i < 2 {
                    events += [
                        event(.healthFailed, "1.1.0", reason: "script-error"),
                        event(.pageError, "1.1.0", reason: "script-error", count: 5),
                        event(.rolledBack, "1.0.0", reason: "health", from: "1.1.0"),
                    ]
                }
                if i == 9 { events.append(event(.downloadFailed, "1.1.0", reason: "hash-mismatch", from: "1.0.0")) }
                #expect(
                    try await store.insert(
                        TelemetryBatch(
                            batch: TelemetryBatch.randomID(), install: id, app: "1.0.0", dropped: i == 0 ? 4 : 0,
                            events: events), received: now))
            }
            let report = try await store.report(since: now.addingTimeInterval(-86_400), until: now)
            #expect(report.batches == 10 && report.dropped == 4)
            let v11 = try #require(report.versions.first { $0.version == "1.1.0" })
            #expect(v11.attempts == 9 && v11.devices == 9)
            #expect(v11.failureRate.count == 3 && v11.failureRate.of == 9)
            #expect(v11.rollbackRate.count == 2 && v11.pageErrors == 10)
            #expect(abs((v11.failureRate.lower ?? 0) - Proportion(3, of: 9).lower!) < 1e-9)
            #expect(v11.byReason.contains(ReasonCount(kind: "rolled-back", reason: "health", devices: 2)))
            #expect(v11.byReason.contains(ReasonCount(kind: "download-failed", reason: "hash-mismatch", devices: 1)))
            let v10 = try #require(report.versions.first { $0.version == "1.0.0" })
            #expect(v10.adoption.first?.devices == 10 && v10.adoption.first?.share == 1)
            // From the hour of the update on: 8 took 1.1.0, 2 rolled back off it, so 6 of the 10 run it.
            #expect(v11.adoption.last?.devices == 6 && v11.current == 0.6)
            #expect(v10.adoption.last?.devices == 4 && v11.adoption.count == 3 && v11.adoption.first?.devices == 0)
            let gate = try FailCondition.parseList("failure-rate>20%,rollback-rate-lower>50%")
            #expect(gate[0].holds(v11) && !gate[1].holds(v11))
            // Only one package, and an empty window.
            #expect(try await store.report(since: now, until: now, package: "other").versions.isEmpty)
            let page = ReportPage.render(report)
            #expect(page.contains("<polyline class=\"version\" data-version=\"1.1.0\""))
            #expect(page.contains("data-devices=\"2\"") && page.contains("1.1.0 rolled-back health"))
        }
    }
}
