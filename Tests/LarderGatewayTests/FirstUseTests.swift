import AsyncHTTPClient
import Foundation
import LarderCore
import LarderFetch
import LarderGateway
import LarderPublish
import LarderResolve
import LarderStore
import LarderSync
import LarderTestSupport
import Synchronization
import SystemPackage
import Testing

@Suite("Gateway: on-demand packages installed at first use")
struct FirstUseTests {
    /// A sandbox synced against a repository with the sample app (eager) and `od` (on demand,
    /// routes `https://od.example.com/`, `policy`), which the sync skipped.
    /// With `sharded`, the index keeps `od` in a shard: the device knows it from the catalog only.
    func world(policy: PolicyMode = .localThenNetwork, sharded: Bool = false) async throws -> ResolveEnv {
        let env = try ResolveEnv()
        try env.publish("1.0.0")
        try env.repository.publish(
            "1.0.0", id: "od",
            configure: { r in
                r.routes = ["https://od.example.com/"]
                r.policy = Policy(mode: policy)
                r.install = InstallPolicy(mode: .onDemand)
            }, publisher: { $0.indexLayout = sharded ? .sharded : nil })
        _ = try SyncConfig.initialise(
            root: env.root, repository: env.repo.absoluteString, keys: [env.key.publicKey], channel: "stable",
            appVersion: SemanticVersion(1, 0, 0), allowInsecureHTTP: false)
        let r = try await Syncer(root: env.root, setup: SyncSetup(engine: .tested)).sync()
        // Skipped; of a sharded index, not even read (its shard was not fetched).
        #expect(r.packages.first { $0.id == "od" }?.outcome == (sharded ? nil : .skipped), "\(r)")
        return env
    }

    /// `larder fetch ID` in process: a sync of that package.
    static func fetch(_ root: FilePath) -> FirstUse.Install {
        { id in
            let o = SyncSetup(engine: .tested)
            var oRequest = SyncRequest()
            oRequest.packages = [id]
            oRequest.fetching = [id]
            let report = try? await Syncer(root: root, setup: o).sync(oRequest)
            return report?.packages.first { $0.id == id.rawValue && $0.outcome == .done } == nil ? "not done" : nil
        }
    }

    @Test(
        "requests for an on-demand package wait for one install and are answered from it; the next is local",
        arguments: [false, true])
    @available(macOS 14, iOS 17, tvOS 17, *)
    func installedOnce(sharded: Bool) async throws {
        let env = try await world(sharded: sharded)
        defer { env.cleanup() }
        if sharded {
            // Before first use the device has read the catalog, not od's shard.
            let cached = try FileManager.default.contentsOfDirectory(
                atPath: SandboxLayout(root: env.root).indexShards.string)
            #expect(cached.count == 1 && cached[0].hasPrefix("catalog-"), "\(cached)")
        }
        let resolver = try Resolver(root: env.root)
        let installs = Mutex<[String]>([])
        // A deadline no loaded machine reaches (the deadline has its own test), and the install on
        // threads of its own: in a whole `swift test`, other suites keep the shared pool busy.
        let fetch = Self.fetch(env.root)
        let firstUse = FirstUse(
            resolver: resolver, deadline: .seconds(300),
            onInstall: { id, outcome in installs.withLock { $0.append("\(id) \(outcome)") } },
            install: { id in
                do { return try await detachedOnOwnThreads { await fetch(id) }.value } catch {
                    return "the install task failed: \(error)"
                }
            })
        let gateway = try await RunningGateway.start(
            loader: ResourceLoader(resolver: resolver), firstUse: firstUse)
        // A client that waits as long as the first-use deadline: the shared one gives up reading
        // after 90 s, which an install on a loaded machine has taken (a clean run's failure).
        let patient = HTTPClient(
            eventLoopGroup: HTTPClient.defaultEventLoopGroup,
            configuration: HTTPClient.Configuration(timeout: .init(connect: .seconds(10), read: .seconds(300))))
        do {
            try await onOwnThreads {
                let replies = try await withThrowingTaskGroup(of: Reply.self) { group in
                    for path in ["/index.html", "/css/app.css", "/js/app.js", "/data/catalog.json"] {
                        group.addTask { try await gateway.send(.GET, path, host: "od.example.com", client: patient) }
                    }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                #expect(replies.map(\.status) == [200, 200, 200, 200], "\(replies) \(gateway.log)")
                #expect(installs.withLock { $0 }.count == 1, "\(installs.withLock { $0 })")
                #expect(installs.withLock { $0 }.first?.hasPrefix("od installed in") == true)
                // Each request waited for that install, unless it reached the gateway after the
                // install had ended (a loaded machine): then it was served as a local file.
                let waited = gateway.log.filter { $0.contains("first use of od: installed") }.count
                let local = gateway.log.filter {
                    $0.hasPrefix("GET https://od.example.com/") && $0.contains(" 200 od@1.0.0 ")
                }
                #expect(waited >= 1 && local.count == 4, "\(gateway.log)")
                // The second open is local: no wait, no install.
                let again = try await gateway.send(.GET, "/od/index.html", host: nil)
                #expect(again.status == 200 && installs.withLock { $0 }.count == 1)
                #expect(try SandboxReader(root: env.root).state().packages["od"]?.active?.description == "1.0.0")
            }
        } catch {
            await gateway.stop()
            try? await patient.shutdown()
            throw error
        }
        await gateway.stop()
        try? await patient.shutdown()
    }

    @Test(
        "past the deadline a request is answered by the package's policy, never left hanging",
        arguments: [(PolicyMode.localOnly, 503), (.localThenNetwork, 502)])
    @available(macOS 14, iOS 17, tvOS 17, *)
    func deadline(_ policy: PolicyMode, _ status: Int) async throws {
        let env = try await world(policy: policy)
        defer { env.cleanup() }
        let resolver = try Resolver(root: env.root)
        // A fault: an install that does not end until the test lets it (a stalled network).
        let (release, released) = AsyncStream<Void>.makeStream()
        let ended = Mutex(false)
        let firstUse = FirstUse(resolver: resolver, deadline: .milliseconds(300)) { _ in
            for await _ in release {}
            ended.withLock { $0 = true }
            return "stalled"
        }
        // Offline forwarder: "the network" answers 502 here.
        let gateway = try await RunningGateway.start(loader: ResourceLoader(resolver: resolver), firstUse: firstUse)
        do {
            try await onOwnThreads {
                let reply = try await gateway.send(.GET, "/index.html", host: "od.example.com")
                // Answered while the install still hangs: the request did not wait for it.
                #expect(!ended.withLock { $0 }, "the request waited for the install")
                #expect(reply.status == status, "\(reply) \(gateway.log)")
                #expect(gateway.log.contains { $0.contains("first use of od: not installed within") }, "\(gateway.log)")
            }
            released.finish()
        } catch {
            released.finish()
            await gateway.stop()
            throw error
        }
        await gateway.stop()
    }
}
