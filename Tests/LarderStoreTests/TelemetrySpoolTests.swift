import Foundation
import LarderCore
import LarderFileSystem
import LarderStore
import SystemPackage
import Testing

@Suite("Telemetry spool")
struct TelemetrySpoolTests {
    let now = Date(timeIntervalSince1970: 1_796_403_600)

    /// A sandbox root whose config turns telemetry on (or not) and whose accepted index named `collector`.
    func root(
        on: Bool = true, collector: TelemetrySettings? = TelemetrySettings(endpoint: "https://c.example/v1/events")
    )
        throws -> (TempDir, TelemetrySpool)
    {
        let t = try TempDir("telemetry")
        let root = FilePath(t.path)
        _ = try SyncConfig.initialise(
            root: root, repository: "https://repo.example/", keys: [PrivateKey().publicKey], channel: "beta",
            appVersion: SemanticVersion(3, 1, 0), allowInsecureHTTP: false, telemetry: on)
        let spool = TelemetrySpool(root: root)
        spool.setCollector(collector)
        return (t, spool)
    }

    func event(_ i: Int, hour: Int = 0) -> (TelemetrySpool.Context) -> [TelemetryEvent] {
        { ctx in
            [
                TelemetryEvent(
                    .downloadFailed, package: PackageID("p\(i)")!, version: SemanticVersion(1, 0, UInt64(i)),
                    channel: ctx.channel, reason: "connection", at: now.addingTimeInterval(Double(hour) * 3600))
            ]
        }
    }

    @Test func nothingIsRecordedUnlessBothSwitchesAgree() throws {
        let (off, offSpool) = try root(on: false)
        defer { off.cleanup() }
        offSpool.record(now: now, event(1))
        #expect(offSpool.status(now: now).pendingEvents == 0 && !AtomicFile.exists(offSpool.directory))
        let (none, noneSpool) = try root(collector: nil)
        defer { none.cleanup() }
        noneSpool.record(now: now, event(1))
        #expect(noneSpool.status(now: now).pendingEvents == 0)
        let (out, outSpool) = try root(collector: TelemetrySettings(endpoint: "https://c.example/", sample: 1e-12))
        defer { out.cleanup() }
        outSpool.record(now: now, event(1))
        #expect(outSpool.status(now: now).pendingEvents == 0 && outSpool.status(now: now).sampled == false)
        let (on, onSpool) = try root()
        defer { on.cleanup() }
        onSpool.record(now: now, event(1))
        onSpool.record(now: now, event(1))
        let s = onSpool.status(now: now)
        #expect(s.on && s.sampled == true && s.pendingEvents == 1, "merged: one event of count 2")
        let (batch, _) = try #require(onSpool.nextBatch(now: now))
        #expect(batch.batch.events.first?.count == 2 && batch.batch.events.first?.channel == "beta")
        #expect(batch.batch.app == "3.1.0")
    }

    @Test func theSpoolStaysWithinItsBoundAndCountsWhatItDrops() throws {
        let (t, spool) = try root()
        defer { t.cleanup() }
        // Distinct events, each call's in another hour: no merging, so the spool must drop the oldest.
        for call in 0..<40 {
            spool.record(now: now) { ctx in (0..<100).flatMap { i in event(call * 100 + i, hour: -call)(ctx) } }
        }
        let s = spool.status(now: now)
        #expect(s.spoolBytes <= TelemetrySpool.maxBytes && s.spoolBytes > TelemetrySpool.maxBytes / 2)
        #expect(s.dropped > 0 && s.dropped + s.pendingEvents == 4000, "\(s)")
        // The batch carries the drops; taken, they are no longer counted.
        let (outbox, _) = try #require(spool.nextBatch(now: now))
        #expect(outbox.batch.dropped == s.dropped && outbox.batch.events.count <= TelemetryBatch.maxEvents)
        spool.settle(outbox, .taken, now: now)
        #expect(spool.status(now: now).dropped == 0)
    }

    @Test func anInterruptedSendResumesWithTheSameBatchAndNoDuplicate() throws {
        let (t, spool) = try root()
        defer { t.cleanup() }
        spool.record(now: now, event(1))
        spool.record(now: now, event(2, hour: 1))
        let (first, _) = try #require(spool.nextBatch(now: now))
        // A crash after the outbox was written but before the spool files it took were removed:
        // put one back as it was.
        let again = TelemetryEvent(
            .downloadFailed, package: PackageID("p1")!, version: SemanticVersion(1, 0, 1), channel: "beta",
            reason: "connection", at: now)
        try AtomicFile.write(
            try ManifestCoding.encode([again], compact: true),
            to: spool.directory.joined("spool").joined(String(format: "%016llu-1.json", first.through)))
        let (second, _) = try #require(spool.nextBatch(now: now))
        #expect(second == first && spool.status(now: now).pendingEvents == first.batch.events.count)
        spool.settle(second, .taken, now: now)
        #expect(spool.nextBatch(now: now) == nil && spool.status(now: now).pendingEvents == 0)
    }

    @Test func backOffDoublesUpToSixHours() throws {
        #expect(TelemetrySpool.backOff(failures: 1) == 60 && TelemetrySpool.backOff(failures: 3) == 240)
        #expect(TelemetrySpool.backOff(failures: 40) == 6 * 3600)
        let (t, spool) = try root()
        defer { t.cleanup() }
        spool.record(now: now, event(1))
        let (o, _) = try #require(spool.nextBatch(now: now))
        spool.settle(o, .retry, now: now)
        spool.settle(o, .retry, now: now)
        #expect(spool.nextBatch(now: now.addingTimeInterval(119)) == nil)
        #expect(spool.nextBatch(now: now.addingTimeInterval(119), force: true)?.0 == o)
        #expect(spool.nextBatch(now: now.addingTimeInterval(121))?.0 == o)
    }

    @Test func theInstallIdIsRenewedAfterThirtyDaysAndOffDeletesEverything() throws {
        let (t, spool) = try root()
        defer { t.cleanup() }
        let a = try #require(spool.context(now: now)?.install)
        #expect(spool.context(now: now.addingTimeInterval(29 * 86_400))?.install == a)
        let b = try #require(spool.context(now: now.addingTimeInterval(31 * 86_400))?.install)
        #expect(a != b)
        spool.record(now: now, event(1))
        _ = try SyncConfig.load(root: FilePath(t.path)).withTelemetry(false, root: FilePath(t.path))
        #expect(!AtomicFile.exists(spool.directory) && !spool.isOn)
        spool.record(now: now, event(1))
        #expect(!AtomicFile.exists(spool.directory))
    }
}
