import Foundation
import LarderArchive
import LarderCore
import LarderFetch
import LarderFileSystem
import LarderPublish
import LarderStore
import LarderSync
import LarderTestSupport
import Synchronization
import SystemPackage
import Testing

/// A collector that answers each POST with the next status of its script (the last repeats), and
/// keeps what it was sent.
final class ScriptedCollector: NetworkExchange, Sendable {
    let sent = Mutex<[ForwardRequest]>([])
    let statuses: Mutex<[Int]>

    init(_ statuses: [Int]) { self.statuses = Mutex(statuses) }

    func send(_ request: ForwardRequest, maxBytes: Int) async throws -> ForwardResponse {
        sent.withLock { $0.append(request) }
        let status = statuses.withLock { s in s.count > 1 ? s.removeFirst() : s[0] }
        if status == 0 { throw FetchError.connection(url: request.url, detail: "refused") }
        return ForwardResponse(status: status, headers: [], body: .bytes(Data("{}".utf8)))
    }

    /// The batches posted, inflated.
    func batches() throws -> [TelemetryBatch] {
        try sent.withLock { $0 }.map { r in
            let json = try Gzip.decompress(r.body ?? Data(), limit: 1 << 20)
            return try TelemetryBatch.accept(json, now: Date())
        }
    }
}

@Suite("Release telemetry on the device")
struct TelemetrySyncTests {
    static let endpoint = "https://collect.example.com/v1/events"

    func env(telemetry: Bool?, endpoint: String? = Self.endpoint) throws -> SyncEnv {
        let env = try SyncEnv()
        try env.repository.publish("1.0.0", at: env.clock) { r in
            r.telemetry = endpoint.map { .set(TelemetrySettings(endpoint: $0)) }
        }
        _ = try SyncConfig.initialise(
            root: env.root, repository: env.repo.absoluteString, keys: [env.key.publicKey], channel: "stable",
            appVersion: SemanticVersion(2, 0, 0), allowInsecureHTTP: false, telemetry: telemetry)
        return env
    }

    func spooled(_ env: SyncEnv) -> [TelemetryEvent] { TelemetrySpool(root: env.root).spooledEvents() }

    func sender(_ env: SyncEnv, _ collector: ScriptedCollector, at now: Date) -> Syncer {
        var setup = SyncSetup(
            engine: HTTPStack(
                name: "scripted", engine: { _ throws(FetchError) in throw .unsupportedScheme("x") },
                exchange: { _ in collector }))
        setup.clock = { now }
        return Syncer(root: env.root, setup: setup)
    }

    @Test func offByDefaultAndWithoutACollector() async throws {
        let off = try env(telemetry: nil)
        defer { off.cleanup() }
        _ = try await off.sync()
        #expect(!AtomicFile.exists(off.root.joined("telemetry")))
        let noCollector = try env(telemetry: true, endpoint: nil)
        defer { noCollector.cleanup() }
        _ = try await noCollector.sync()
        #expect(
            spooled(noCollector).isEmpty && TelemetrySpool(root: noCollector.root).status(now: Date()).endpoint == nil)
    }

    @Test func aSyncRecordsActivationsAndAdoptionOnceAnHour() async throws {
        let env = try env(telemetry: true)
        defer { env.cleanup() }
        _ = try await env.sync()
        var events = spooled(env)
        #expect(events.map(\.kind) == ["activated", "checked"], "\(events)")
        #expect(events[0].version == "1.0.0" && events[0].from == nil && (events[0].bytes ?? 0) > 0)
        // The same hour: no second `checked`.
        try env.publish("1.1.0")
        _ = try await env.sync()
        events = spooled(env)
        #expect(events.filter { $0.kind == "checked" }.count == 1)
        let update = try #require(events.last)
        #expect(update.kind == "activated" && update.version == "1.1.0" && update.from == "1.0.0")
        // A manual rollback, recorded by the store.
        let sandbox = try Sandbox.open(env.root)
        _ = try sandbox.rollback(id: PackageID("sample-app")!, to: nil)
        sandbox.close()
        let back = try #require(spooled(env).last)
        #expect(
            back.kind == "rolled-back" && back.reason == "manual" && back.from == "1.1.0" && back.version == "1.0.0")
    }

    @Test func aBrokenDownloadIsReportedWithItsCode() async throws {
        let env = try env(telemetry: true)
        defer { env.cleanup() }
        _ = try await env.sync()
        try env.publish("1.1.0")
        try env.flipBundleByte("sample-app", "1.1.0")
        // Objects are intact, so remove them to force the bundle.
        try? FileManager.default.removeItem(at: env.repo.appendingPathComponent("objects"))
        _ = try await env.sync()
        let failed = spooled(env).filter { $0.kind == "download-failed" || $0.kind == "install-failed" }
        #expect(!failed.isEmpty, "\(spooled(env))")
        #expect(
            failed.allSatisfy { $0.version == "1.1.0" && $0.from == "1.0.0" && ReasonCode(rawValue: $0.reason) != nil })
    }

    @Test func batchesAreSentRetriedWithTheSameIdAndDroppedWhenRefused() async throws {
        let env = try env(telemetry: true)
        defer { env.cleanup() }
        _ = try await env.sync()
        let now = Date()
        // Unreachable, then 503: the same batch each time, and a back-off between.
        let collector = ScriptedCollector([0, 503, 202])
        var r = await sender(env, collector, at: now).sendTelemetry()
        #expect(r.deferred != nil && r.sent == 0)
        r = await sender(env, collector, at: now.addingTimeInterval(10)).sendTelemetry()
        #expect(r.skipped?.contains("backing off") == true && collector.sent.withLock { $0.count } == 1)
        r = await sender(env, collector, at: now.addingTimeInterval(10)).sendTelemetry(force: true)
        #expect(r.deferred?.contains("503") == true)
        r = await sender(env, collector, at: now.addingTimeInterval(3600)).sendTelemetry()
        #expect(r.sent == 1 && r.events == 2)
        let ids = collector.sent.withLock { $0 }.map { $0.headers.first { $0.0 == "Idempotency-Key" }?.1 }
        #expect(ids.count == 3 && Set(ids).count == 1)
        let batches = try collector.batches()
        #expect(batches.allSatisfy { $0 == batches[0] } && batches[0].app == "2.0.0")
        #expect(TelemetrySpool(root: env.root).status(now: now).pendingEvents == 0)
        // A refused batch is dropped, and counted in the next one.
        try env.publish("1.1.0")
        _ = try await env.sync()
        let refusing = ScriptedCollector([400])
        r = await sender(env, refusing, at: now.addingTimeInterval(3600)).sendTelemetry()
        #expect(r.refused == 1 && TelemetrySpool(root: env.root).status(now: now).dropped == 1)
        let sandbox = try Sandbox.open(env.root)
        _ = try sandbox.rollback(id: PackageID("sample-app")!, to: nil)
        sandbox.close()
        let taking = ScriptedCollector([202])
        r = await sender(env, taking, at: now.addingTimeInterval(3600)).sendTelemetry()
        let carried = try taking.batches().first?.dropped
        #expect(r.sent == 1 && carried == 1)
        #expect(TelemetrySpool(root: env.root).status(now: now).dropped == 0)
    }

    @Test func anIndexThatDropsTheCollectorStopsTheRecording() async throws {
        let env = try env(telemetry: true)
        defer { env.cleanup() }
        _ = try await env.sync()
        try env.repository.publish("1.1.0", at: env.clock) { $0.telemetry = .remove }
        _ = try await env.sync()
        let s = TelemetrySpool(root: env.root).status(now: Date())
        #expect(s.endpoint == nil && spooled(env).map(\.kind) == ["activated", "checked"])
    }

    @Test func revocationsCrashLoopsNoSpaceOnDemandAndEvictionAreReported() async throws {
        let env = try env(telemetry: true)
        defer { env.cleanup() }
        _ = try await env.sync()
        // Revoked by the repository: the sync rolls back.
        try env.publish("1.1.0")
        _ = try await env.sync()
        _ = try Publisher(key: env.key).revoke(id: "sample-app", version: "1.1.0", repository: FilePath(env.repo.path))
        _ = try await env.sync()
        var last = try #require(spooled(env).last { $0.kind == "rolled-back" })
        #expect(last.reason == "revoked" && last.from == "1.1.0" && last.version == "1.0.0")
        // Launched again and again without a confirmation: a crash loop.
        try env.publish("1.2.0")
        _ = try await env.sync()
        let sandbox = try Sandbox.open(env.root)
        for _ in 0..<4 { _ = try sandbox.beginLaunch() }
        sandbox.close()
        last = try #require(spooled(env).last { $0.kind == "rolled-back" })
        #expect(last.reason == "crash-loop" && last.from == "1.2.0", "\(last)")
        // No room for the next release.
        try env.publish("1.3.0")
        var setup = SyncSetup(engine: .tested)
        setup.availableSpace = { _ in 10 }
        _ = try await Syncer(root: env.root, setup: setup).sync()
        let full = try #require(spooled(env).last { $0.kind == "no-space" })
        #expect(full.version == "1.3.0" && full.reason == "no-space")
        // On-demand packages fetched at first use, then one evicted to keep within a budget.
        for id in ["mini-a", "mini-b"] {
            try env.repository.publish("1.0.0", id: id, at: env.clock) { $0.install = InstallPolicy(mode: .onDemand) }
        }
        func fetch(_ id: String) async throws {
            var request = SyncRequest()
            request.fetching = [PackageID(id)!]
            request.packages = request.fetching
            _ = try await Syncer(root: env.root, setup: SyncSetup(engine: .tested)).sync(request)
        }
        try await fetch("mini-a")
        let size = try #require(env.state().packages["mini-a"]?.versions.reduce(0) { $0 + $1.size })
        let eager = try #require(env.state().packages["sample-app"]?.versions.reduce(0) { $0 + $1.size })
        _ = try SyncConfig.initialise(
            root: env.root, repository: env.repo.absoluteString, keys: [env.key.publicKey], channel: "stable",
            appVersion: SemanticVersion(2, 0, 0), allowInsecureHTTP: false, diskBudget: eager + size + size / 2)
        try await fetch("mini-b")
        let events = spooled(env)
        #expect(events.contains { $0.kind == "on-demand" && $0.package == "mini-a" && $0.reason == "fetched" })
        #expect(
            events.contains { $0.kind == "evicted" && $0.package == "mini-a" && $0.reason == "budget" }, "\(events)")
        #expect(TelemetrySpool(root: env.root).isOn, "a re-init without --telemetry keeps it on")
    }
}
