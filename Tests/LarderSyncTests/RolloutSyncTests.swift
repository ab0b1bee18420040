import Foundation
import LarderCore
import LarderFileSystem
import LarderPublish
import LarderStore
import LarderSync
import LarderTestSupport
import SystemPackage
import Testing

/// Guarded rollouts on a device (manifests §20): a schedule followed by the clock, holds a rollout
/// key publishes, and what a device refuses from one.
@Suite("Sync: rollout schedules and holds")
struct RolloutSyncTests {
    static let minute: TimeInterval = 60

    func publisher(_ env: SyncEnv, _ key: PrivateKey? = nil, index: PrivateKey? = nil) -> Publisher {
        let now = env.clock
        var p = Publisher(key: key ?? env.key, now: { now })
        p.indexKeys = index.map { [$0] } ?? []
        return p
    }

    func index(_ env: SyncEnv) throws -> RepositoryIndex {
        try ManifestCoding.decode(
            RepositoryIndex.self, from: Data(contentsOf: env.repo.appendingPathComponent("index.json")), document: "i")
    }

    /// Why the device's plan skips the sample app now (nil when it does not).
    func skip(_ env: SyncEnv) async throws -> SkipReason? {
        var o = SyncSetup(engine: .tested)
        let now = env.clock
        o.clock = { now }
        let (plan, _) = try await Syncer(root: env.root, setup: o, transport: nil).plan()
        return plan.actions.first { $0.id.rawValue == "sample-app" }?.skip
    }

    func change(_ action: RolloutAction, version: String? = nil) -> RolloutChange {
        RolloutChange(id: "sample-app", version: version, action: action)
    }

    @Test("a schedule is followed by the clock with no new index; the no-change record lasts until the next step")
    func scheduleByClock() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try env.publish("1.0.0")
        try env.initialise()
        _ = try await env.sync()
        try env.repository.publish("2.0.0", at: env.clock) {
            $0.rolloutSteps = [0, 100]
            $0.rolloutEvery = 3600
            $0.deltaBases = 0
        }
        let start = env.clock
        _ = try await env.sync()
        #expect(try await skip(env) == .notInRollout)
        #expect(try env.active() == "1.0.0")
        env.clock = start.addingTimeInterval(30 * Self.minute)
        #expect(try await env.sync().upToDate)
        // The next step: the record no longer stands, the plan is made again, the device takes it.
        env.clock = start.addingTimeInterval(60 * Self.minute)
        let taken = try await env.sync()
        #expect(!taken.upToDate && taken.packages.first?.action == .update, "\(taken)")
        #expect(try env.active() == "2.0.0")
    }

    @Test("pause holds back devices not on it and keeps those on it; resume lets them take it; halt sends them back")
    func holdsOnADevice() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        let repo = FilePath(env.repo.path)
        try env.publish("1.0.0")
        try env.initialise()
        _ = try await env.sync()
        try env.publish("2.0.0")
        let paused = try publisher(env).rollout(change(.pause), repository: repo)
        #expect(paused.changed && paused.release.share == 0 && paused.release.state == .paused)
        // A second pause changes nothing and publishes nothing.
        let serial = try index(env).serial
        #expect(try publisher(env).rollout(change(.pause), repository: repo).changed == false)
        #expect(try index(env).serial == serial)
        _ = try await env.sync()
        #expect(try await skip(env) == .notInRollout)
        #expect(try env.active() == "1.0.0")
        _ = try publisher(env).rollout(change(.resume), repository: repo)
        _ = try await env.sync()
        #expect(try env.active() == "2.0.0")
        // Paused again: the device on 2.0.0 keeps it.
        _ = try publisher(env).rollout(change(.pause), repository: repo)
        _ = try await env.sync()
        #expect(try env.active() == "2.0.0")
        // Halted: it goes back, and does not take 2.0.0 again after a resume (it rolled back off it).
        _ = try publisher(env).rollout(change(.halt), repository: repo)
        let back = try await env.sync()
        #expect(back.packages.first?.action == .rollback, "\(back.packages)")
        #expect(try env.active() == "1.0.0")
        // The rollout key cannot raise: advance above the ceiling is refused, nothing published.
        _ = try publisher(env).rollout(change(.resume), repository: repo)
        _ = try publisher(env).rollout(change(.start(percent: 40, steps: nil, every: nil)), repository: repo)
        let before = try index(env).serial
        do {
            _ = try publisher(env).rollout(change(.advance(percent: 60)), repository: repo)
            Issue.record("a cap above the signed 40 % was published")
        } catch { #expect(error.code == "rollout-raise") }
        #expect(try index(env).serial == before)
        // A hold names the current release only.
        do {
            _ = try publisher(env).rollout(change(.pause, version: "1.0.0"), repository: repo)
            Issue.record("a hold on a version the channel does not publish was written")
        } catch { #expect(error.code == "unknown-release") }
    }

    /// A delegated repository: the sample app owned by team `web`, a rollout team `guard` over
    /// every package, the index under an online key.
    func delegated(_ env: SyncEnv, web: PrivateKey, guardKey: PrivateKey, online: PrivateKey) throws {
        let repo = FilePath(env.repo.path)
        let root = publisher(env, index: online)
        _ = try root.delegateAdd(
            TeamRequest(name: "web", publicKeys: [web.publicKey], patterns: [PackagePattern("sample-*")!]),
            repository: repo)
        _ = try root.delegateAdd(
            TeamRequest(
                name: "guard", role: .rollout, publicKeys: [guardKey.publicKey], patterns: [PackagePattern("*")!]),
            repository: repo)
        _ = try publisher(env, web, index: env.key).claim(repository: repo)
        _ = try root.delegateRole(.index, keys: [online.publicKey], threshold: 1, repository: repo)
    }

    @Test(
        "a delegated rollout team pauses; an index that drops its holds, or a rollout part that raises a release, is refused"
    )
    func delegatedHolds() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        let repo = FilePath(env.repo.path)
        let (web, guardKey, online) = (PrivateKey(), PrivateKey(), PrivateKey())
        try env.publish("1.0.0")
        try env.initialise()
        _ = try await env.sync()
        try delegated(env, web: web, guardKey: guardKey, online: online)
        try env.repository.publish("2.0.0", at: env.clock) {
            $0.deltaBases = 0
        } publisher: {
            $0 = self.publisher(env, web, index: online)
        }
        // The release key cannot pause: it is no rollout team's.
        do {
            _ = try publisher(env, web, index: online).rollout(change(.pause), repository: repo)
            Issue.record("a release key wrote a hold")
        } catch { #expect(error.code == "delegation") }
        let paused = try publisher(env, guardKey, index: online).rollout(change(.pause), repository: repo)
        #expect(paused.part?.team == "guard" && paused.part?.composed == true && paused.release.share == 0)
        _ = try await env.sync()
        #expect(try await skip(env) == .notInRollout)
        #expect(try env.active() == "1.0.0")

        // The index key drops the pause (a forged composition): refused, nothing changes.
        var forged = try index(env)
        forged.holds = nil
        forged.serial += 1
        try resign(env, forged, with: online)
        do {
            _ = try await env.sync()
            Issue.record("an index without its rollout part's holds was accepted")
        } catch { #expect(error.code == "delegation-part-mismatch") }
        #expect(try env.active() == "1.0.0")

        // The guard's key signs a part that would raise the release: refused on the device.
        _ = try publisher(env, web, index: online).rollout(
            change(.start(percent: 10, steps: nil, every: nil)), repository: repo)
        try forgeRaise(env, guardKey: guardKey, online: online)
        do {
            _ = try await env.sync()
            Issue.record("a cap above the signed 10 % was accepted")
        } catch { #expect(error.code == "rollout-raise") }
        #expect(try env.active() == "1.0.0")
    }

    /// Signs `index` with `key` as the online index key and writes the pair.
    func resign(_ env: SyncEnv, _ index: RepositoryIndex, with key: PrivateKey) throws {
        let bytes = try ManifestCoding.encode(index)
        var sig = try IndexSignature.sign(bytes, with: [key])
        let old = try ManifestCoding.decode(
            SignatureFile.self, from: Data(contentsOf: env.repo.appendingPathComponent("index.json.sig")), document: "s"
        )
        sig.root = old.root
        sig.index = IndexName(of: bytes)
        let copy = env.repo.appendingPathComponent(RepositoryLayout.indexCopyPath(SHA256Digest.of(bytes)))
        try FileManager.default.createDirectory(at: copy.deletingLastPathComponent(), withIntermediateDirectories: true)
        try bytes.write(to: copy)
        try bytes.write(to: env.repo.appendingPathComponent("index.json"))
        try ManifestCoding.encode(sig).write(to: env.repo.appendingPathComponent("index.json.sig"))
    }

    /// The guard's next part, validly signed by its key, capping the release at 50 % (above the
    /// 10 % signed), and an index composed with it by the online key.
    func forgeRaise(_ env: SyncEnv, guardKey: PrivateKey, online: PrivateKey) throws {
        var index = try index(env)
        let row = try #require(index.delegations?.parts.first { $0.team == "guard" })
        let hold = RolloutHold(
            id: PackageID("sample-app")!, channel: .default, version: SemanticVersion("2.0.0")!, state: .capped,
            percent: 50, since: env.clock, by: "guard")
        let part = TeamPart(team: "guard", serial: row.serial + 1, packages: [], holds: [hold])
        let bytes = try ManifestCoding.encode(part)
        let rel = TeamPart.path(team: "guard", serial: part.serial)
        try bytes.write(to: env.repo.appendingPathComponent(rel))
        let signatures = try IndexSignature.sign(bytes, with: [guardKey])
        try ManifestCoding.encode(signatures).write(to: env.repo.appendingPathComponent(rel + ".sig"))
        index.delegations?.parts.removeAll { $0.team == "guard" }
        index.delegations?.parts.append(
            PartRow(team: "guard", serial: part.serial, bytes: bytes, signatures: signatures.signatures))
        index.delegations?.parts.sort { $0.team < $1.team }
        index.holds = [hold]
        index.serial += 1
        try resign(env, index, with: online)
    }
}
