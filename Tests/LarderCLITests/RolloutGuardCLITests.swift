import Foundation
import LarderCollect
import LarderCore
import LarderTestSupport
import Testing

/// `larder rollout guard` end to end: a real SQLite store the collector's code wrote, the CLI
/// deciding from it, and the holds it publishes in the repository (manifests §20).
@Suite("Rollout guard over SQLite")
struct RolloutGuardCLITests {
    /// Stores `count` installs' batches: each activated `version`, `failing` of them rolled back
    /// off it for page health.
    func store(_ path: String, installs count: Int, failing: Int, version: String = "1.1.0") async throws {
        let store = try await TelemetryStore.open(.sqlite(path: path), logger: .init(label: "test"))
        let now = Date()
        func event(_ kind: TelemetryKind, _ v: String, _ reason: String, from: String? = nil) -> TelemetryEvent {
            TelemetryEvent(
                kind, package: PackageID("sample-app")!, version: SemanticVersion(v)!, channel: .default,
                reason: reason, from: from.flatMap { SemanticVersion($0) }, count: 1, at: now)
        }
        do {
            for i in 0..<count {
                var events = [event(.activated, version, "delta", from: "1.0.0")]
                if i < failing { events.append(event(.rolledBack, "1.0.0", "health", from: version)) }
                _ = try await store.insert(
                    TelemetryBatch(
                        batch: TelemetryBatch.randomID(), install: TelemetryBatch.randomID(), app: "1.0.0",
                        dropped: 0, events: events), received: now)
            }
        } catch {
            await store.runner.close()
            throw error
        }
        await store.runner.close()
    }

    @Test("a failing release is paused (exit 3) with its figures; a rerun changes nothing; proven health resumes it")
    func guardPausesAndResumes() async throws {
        let dir = try TemporaryDirectory("guard")
        defer { dir.remove() }
        let ws = try Workspace(dir.url)
        try ws.packOK(sampleApp, version: "1.0.0")
        try ws.packOK(sampleApp, version: "1.1.0")
        let db = dir.url.appendingPathComponent("events.db").path
        try await store(db, installs: 100, failing: 10)
        let args = [
            "rollout", "guard", "--database", "sqlite:\(db)", "--repo", ws.repo.path, "--key", ws.key.path,
            "--max-failure-rate", "2%", "--window", "60m", "--min-devices", "20", "--json",
        ]
        let first = try larder(args)
        #expect(first.status == 3, "\(first)")
        let out = try JSONSerialization.jsonObject(with: first.stdoutData) as? [String: Any]
        let decision = try #require((out?["decisions"] as? [[String: Any]])?.first)
        #expect(decision["action"] as? String == "pause" && decision["devices"] as? Int == 100)
        #expect(decision["failures"] as? Int == 10 && ((decision["lower"] as? Double) ?? 0) > 0.02, "\(decision)")
        let paused = try ws.loadIndex()
        #expect(paused.holds?.map(\.state) == [.paused] && paused.holds?.first?.by == "guard")
        #expect(paused.holds?.first?.reason?.contains("10 of 100 devices failed") == true)
        // A rerun: still paused, nothing published.
        let again = try larder(args)
        #expect(again.status == 0, "\(again)")
        #expect(try ws.loadIndex().serial == paused.serial)
        // 2,000 more devices on it without a failure: the upper bound falls under 2 %, the guard resumes.
        try await store(db, installs: 2000, failing: 0)
        let healthy = try larder(args)
        #expect(healthy.status == 0 && healthy.stdout.contains("\"resume\""), "\(healthy)")
        #expect(try ws.loadIndex().holds == nil)
        let status = try larder(["rollout", "status", "--repo", ws.repo.path])
        #expect(status.stdout.contains("sample-app 1.1.0 (stable): signed 100%; no hold; share now 100%"), "\(status)")
        // A key the repository does not trust cannot write a hold.
        let stranger = dir.url.appendingPathComponent("stranger")
        _ = try larder(["keygen", "--out", stranger.path])
        let refused = try larder([
            "rollout", "pause", "--repo", ws.repo.path, "--id", "sample-app", "--key", stranger.path + ".key",
        ])
        #expect(refused.status == 1 && refused.stderr.contains("index-untrusted"), "\(refused)")
    }
}
