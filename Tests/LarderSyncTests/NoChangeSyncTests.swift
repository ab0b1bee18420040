import Foundation
import LarderCore
import LarderFetch
import LarderFileSystem
import LarderPublish
import LarderStore
import LarderSync
import LarderTestSupport
import SystemPackage
import Testing

/// A sync that finds the index the last sync applied in full, with nothing changed since, makes
/// its one request and stops: it reads no state, index or file list, whatever their size.
@Suite("Sync: the no-change sync")
struct NoChangeSyncTests {
    /// Runs a sync with every open under `paths` failing (and counted); returns the report and
    /// the counts.
    func syncCountingOpens(_ env: SyncEnv, under paths: [FilePath]) async throws -> (SyncReport, [Int]) {
        let probe = Fault.fail(kind: .open, nth: 1, times: 1_000, errno: .noSuchFileOrDirectory)
        let scopes = paths.map { FaultInjector.install([probe], under: $0) }
        defer { for s in scopes { s.remove() } }
        let report = try await env.sync()
        return (report, scopes.map { $0.hits.first ?? 0 })
    }

    @Test("after a sync that left nothing to do, the next reads neither state, index nor lists")
    func upToDateReadsNothing() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try env.publish("1.0.0")
        try env.initialise()
        let first = try await env.sync()
        #expect(!first.upToDate && !first.hasFailures)
        let layout = SandboxLayout(root: env.root)
        let watched = [layout.state, layout.acceptedIndex, layout.acceptedSignature, layout.lists, layout.packages]
        let (again, opens) = try await syncCountingOpens(env, under: watched)
        #expect(again.upToDate && again.packages.isEmpty && !again.indexChanged && again.serial == 1, "\(again)")
        #expect(opens == [0, 0, 0, 0, 0], "\(opens)")
        // The answer is the same for every later no-change sync.
        let third = try await env.sync()
        #expect(third.upToDate)
    }

    @Test("the check reads the repository's signature file, not its index; a new release is still seen")
    func fileRepositoryComparesTheSignature() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try env.publish("1.0.0")
        try env.initialise()
        _ = try await env.sync()
        let index = FilePath(env.repo.appendingPathComponent(RepositoryLayout.indexName).path)
        let signature = FilePath(env.repo.appendingPathComponent(RepositoryLayout.signatureName).path)
        let (again, opens) = try await syncCountingOpens(env, under: [index])
        #expect(again.upToDate, "\(again)")
        #expect(opens == [0], "the index was opened \(opens) time(s)")
        // An index changed under its old signature is never read, so never applied: up to date.
        let original = try AtomicFile.read(index)
        try AtomicFile.write(original + Data(" ".utf8), to: index)
        #expect(try await env.sync().upToDate)
        try AtomicFile.write(original, to: index)
        // A release (a new index and its new signature) is seen and installed.
        try env.publish("2.0.0")
        let update = try await env.sync()
        #expect(!update.upToDate && update.packages.map(\.to) == ["2.0.0"], "\(update)")
        #expect(try await env.sync().upToDate)
        // Without a signature file there is nothing to check against: the sync fails, naming it.
        try SystemCalls.unlink(signature)
        do {
            _ = try await env.sync()
            Issue.record("a repository without index.json.sig must fail the sync")
        } catch {
            #expect(error.description.contains("index.json.sig"), "\(error)")
        }
    }

    @Test("a state write since, another channel, or a new index each make the sync plan again")
    func changesInvalidate() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try env.publish("1.0.0")
        try env.initialise()
        _ = try await env.sync()
        // A confirmation changes the state: the next sync plans (and finds nothing to do).
        do {
            let sandbox = try Sandbox.open(env.root)
            defer { sandbox.close() }
            _ = try sandbox.confirm(id: try packageID("sample-app"))
        }
        let afterConfirm = try await env.sync()
        #expect(!afterConfirm.upToDate && afterConfirm.packages.map(\.outcome) == [.skipped], "\(afterConfirm)")
        #expect(try await env.sync().upToDate)
        // Another app version is another input.
        var config = try SyncConfig.load(root: env.root)
        config.appVersion = SemanticVersion(2, 0, 0)
        try AtomicFile.write(try ManifestCoding.encode(config), to: SandboxLayout(root: env.root).config)
        #expect(try await !env.sync().upToDate)
        #expect(try await env.sync().upToDate)
        // A new index is fetched once and applied.
        try env.publish("1.1.0")
        let recording = RecordingTransport()
        let update = try await env.sync(transport: recording)
        #expect(!update.upToDate && update.indexChanged && update.packages.first?.outcome == .done)
        let indexRequests = recording.calls.filter {
            if case .document(let url, _) = $0 { url.hasSuffix("/index.json") } else { false }
        }
        #expect(indexRequests.count == 1, "\(recording.calls)")
        #expect(try env.active() == "1.1.0")
    }

    @Test("a sync with a failure leaves no record, and an expired index still fails the sync")
    func failuresAndExpiry() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try env.publish("1.0.0", ttl: 3600)
        try env.initialise()
        _ = try await env.sync()
        #expect(try await env.sync().upToDate)
        // A failing file-list download (the gzipped list, then the list) fails the update: no
        // record, so the next sync retries.
        try env.publish("1.1.0", ttl: 3600)
        let failing = FailingTransport(
            failing: [
                "packages/sample-app/1.1.0/files.json.gz": .status(url: "files.json.gz", code: 503),
                "packages/sample-app/1.1.0/files.json": .status(url: "files.json", code: 503),
            ],
            forwardingTo: FileTransport())
        let failed = try await env.sync(transport: failing)
        #expect(failed.hasFailures && !AtomicFile.exists(SandboxLayout(root: env.root).lastSync))
        let retried = try await env.sync()
        #expect(!retried.upToDate && !retried.hasFailures)
        #expect(try env.active() == "1.1.0")
        #expect(try await env.sync().upToDate)
        // Past the index's expiry the record does not stand in for the trust rules.
        env.clock = Date(timeIntervalSinceNow: 7200)
        await #expect(throws: SyncError.self) { try await env.sync() }
    }
}

/// `last-sync.json` is a cache, never trusted: a damaged or forged one costs a full sync.
@Suite("Sync: a damaged no-change record")
struct DamagedSyncRecordTests {
    @Test("garbage, or a record of another index: a full sync, and a new release is still installed")
    func damagedRecordMeansFullSync() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try env.publish("1.0.0")
        try env.initialise()
        _ = try await env.sync()
        let path = SandboxLayout(root: env.root).lastSync
        let good = try AtomicFile.read(path)
        // Not JSON at all.
        try AtomicFile.write(Data("\u{1B}[2J not json".utf8), to: path)
        let afterGarbage = try await env.sync()
        #expect(!afterGarbage.upToDate && afterGarbage.packages.map(\.outcome) == [.skipped])
        // A record that claims another index: a new release must still be found and installed.
        try env.publish("1.1.0")
        var doc = try #require(try JSONSerialization.jsonObject(with: good) as? [String: Any])
        doc["index"] = String(repeating: "0", count: 64)
        try AtomicFile.write(try JSONSerialization.data(withJSONObject: doc), to: path)
        let update = try await env.sync()
        #expect(!update.upToDate && update.packages.first?.outcome == .done, "\(update)")
        #expect(try env.active() == "1.1.0")
    }
}
