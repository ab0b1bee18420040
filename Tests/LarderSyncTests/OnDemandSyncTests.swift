import Foundation
import LarderCore
import LarderFetch
import LarderFileSystem
import LarderPublish
import LarderResolve
import LarderStore
import LarderSync
import LarderTestSupport
import SystemPackage
import Testing

@Suite("Sync: on-demand packages")
struct OnDemandSyncTests {
    func publish(_ env: SyncEnv, _ id: String, _ version: String, _ install: InstallPolicy? = nil) throws {
        try env.repository.publish(
            version, id: id, edit: SampleRepository.setCatalogVersion(version), at: env.clock
        ) { $0.install = install }
    }

    func sync(_ env: SyncEnv, fetching: [String] = [], preload: NetworkKind? = nil, transport: (any Transport)? = nil)
        async throws -> SyncReport
    {
        var o = SyncSetup(engine: .tested)
        var oRequest = SyncRequest()
        let now = env.clock
        o.clock = { now }
        oRequest.fetching = fetching.map { PackageID($0)! }
        oRequest.packages = preload == nil ? oRequest.fetching : []
        oRequest.preload = preload
        return try await Syncer(root: env.root, setup: o, transport: transport).sync(oRequest)
    }

    static let onDemand = InstallPolicy(mode: .onDemand)

    @Test("a sync never downloads an on-demand package it does not hold; fetch installs it; later syncs update it")
    func lifecycle() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try publish(env, "shell", "1.0.0")
        try publish(env, "mini", "1.0.0", Self.onDemand)
        try env.initialise()
        let recording = RecordingTransport()
        let first = try await sync(env, transport: recording)
        #expect(first.packages.first { $0.id == "shell" }?.outcome == .done, "\(first)")
        let skipped = try #require(first.packages.first { $0.id == "mini" })
        #expect(skipped.outcome == .skipped && skipped.reason.contains("on demand"), "\(skipped)")
        let urls = recording.calls.map {
            switch $0 {
            case .document(let u, _): u
            case .download(let u): u
            }
        }
        #expect(!urls.contains { $0.contains("/mini/") }, "nothing of mini is fetched: \(urls)")
        #expect(try env.active("mini") == nil)

        // `larder fetch mini`: only it is synced, and installed.
        let fetched = try await sync(env, fetching: ["mini"])
        #expect(fetched.packages.map(\.id) == ["mini"] && fetched.packages.first?.outcome == .done, "\(fetched)")
        #expect(try env.active("mini") == "1.0.0")

        // Held now: a plain sync updates it.
        try publish(env, "mini", "1.1.0", Self.onDemand)
        let update = try await sync(env)
        #expect(update.packages.first { $0.id == "mini" }?.action == .update, "\(update)")
        #expect(try env.active("mini") == "1.1.0")
    }

    @Test("a preload on an unmetered network takes the packages whose hint allows it, and no others")
    func preload() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try publish(env, "wifi", "1.0.0", InstallPolicy(mode: .onDemand, preload: .unmetered))
        try publish(env, "never", "1.0.0", Self.onDemand)
        try env.initialise()
        _ = try await sync(env, preload: .metered)
        #expect(try env.active("wifi") == nil)
        _ = try await sync(env, preload: .unmetered)
        #expect(try env.active("wifi") == "1.0.0" && env.active("never") == nil)
    }
}

@Suite("Sync: free space before a download")
struct FreeSpaceTests {
    @Test("too little room: the package is refused with the figures, nothing is downloaded or written")
    func refused() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try env.publish("1.0.0")
        try env.initialise()
        var o = SyncSetup(engine: .tested)
        let now = env.clock
        o.clock = { now }
        o.availableSpace = { _ in 20_000 }
        let recording = RecordingTransport()
        let r = try await Syncer(root: env.root, setup: o, transport: recording).sync()
        let p = try #require(r.packages.first)
        #expect(p.outcome == .failed && p.code == "no-space", "\(r)")
        #expect(p.reason.contains("to download") && p.reason.contains("are free on"), "\(p.reason)")
        let downloads = recording.calls.compactMap { if case .download(let u) = $0 { u } else { nil } }
        #expect(downloads.isEmpty, "\(downloads)")
        #expect(try env.active() == nil)
        let packages = SandboxLayout(root: env.root).root.appending("packages")
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: packages.string)) ?? []).isEmpty)

        // With room (and the default reserve of twice the download), the same sync installs it.
        o.availableSpace = { _ in 10 << 20 }
        let again = try await Syncer(root: env.root, setup: o).sync()
        #expect(again.packages.first?.outcome == .done, "\(again)")
        #expect(try env.active() == "1.0.0")
    }

    @Test("the reserve is a multiple of what the sync fetches and writes")
    func reserve() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try env.publish("1.0.0")
        try env.initialise()
        var o = SyncSetup(engine: .tested)
        let now = env.clock
        o.clock = { now }
        // The need: what the plan downloads and the distinct contents it writes; the reserve twice that.
        let (plan, _) = try await Syncer(root: env.root, setup: o).plan()
        let download = try #require(plan.actions.first { $0.kind == .install }?.cost?.bytes)
        let list = try ManifestCoding.decode(
            FileList.self, from: AtomicFile.read(env.repository.fileList("sample-app", "1.0.0")), document: "list")
        let write = Dictionary(list.files.map { ($0.sha256, $0.size) }, uniquingKeysWith: { a, _ in a }).values
            .reduce(0, +)
        let need = download + write
        o.availableSpace = { _ in 3 * need - 1 }
        let short = try await Syncer(root: env.root, setup: o).sync()
        #expect(short.packages.first?.code == "no-space", "\(short)")
        o.availableSpace = { _ in 3 * need }
        let fits = try await Syncer(root: env.root, setup: o).sync()
        #expect(fits.packages.first?.outcome == .done, "\(fits)")
    }
}

@Suite("Sync: the disk budget")
struct DiskBudgetTests {
    /// Points `env`'s sandbox at its repository with a disk budget.
    func initialise(_ env: SyncEnv, budget: Int64) throws {
        _ = try SyncConfig.initialise(
            root: env.root, repository: env.repo.absoluteString, keys: [env.key.publicKey], channel: "stable",
            appVersion: SemanticVersion(1, 0, 0), allowInsecureHTTP: false, diskBudget: budget)
    }

    func fetch(_ env: SyncEnv, _ ids: String...) async throws -> SyncReport {
        var o = SyncSetup(engine: .tested)
        var oRequest = SyncRequest()
        let now = env.clock
        o.clock = { now }
        oRequest.fetching = ids.map { PackageID($0)! }
        oRequest.packages = oRequest.fetching
        return try await Syncer(root: env.root, setup: o).sync(oRequest)
    }

    func size(_ env: SyncEnv, _ id: String) throws -> Int64 {
        try #require(env.state().packages[id]?.versions.reduce(0) { $0 + $1.size })
    }

    @Test("opening on-demand packages in turn evicts the least recently used, never the one just fetched")
    func leastRecentlyUsed() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        for id in ["a", "b", "c"] {
            try env.repository.publish(
                "1.0.0", id: id, edit: SampleRepository.setCatalogVersion(id), at: env.clock
            ) { $0.install = InstallPolicy(mode: .onDemand) }
        }
        try env.initialise()
        _ = try await fetch(env, "a")
        let one = try size(env, "a")
        // A budget for two of them.
        try initialise(env, budget: one * 2 + one / 2)
        _ = try await fetch(env, "b")
        // "a" was used after "b": "b" is the least recently used when "c" comes.
        let usage = UsageRecorder(root: env.root)
        usage.note(PackageID("b")!, at: Date(timeIntervalSince1970: 1_000_000))
        usage.note(PackageID("a")!, at: Date(timeIntervalSince1970: 2_000_000))
        let r = try await fetch(env, "c")
        #expect(r.packages.first?.outcome == .done, "\(r)")
        #expect(r.budget?.evicted == ["b"], "\(String(describing: r.budget))")
        #expect(try env.state().packages.keys.sorted() == ["a", "c"])
        #expect(
            !FileManager.default.fileExists(
                atPath: SandboxLayout(root: env.root).packages.appending("b").string + "/1.0.0"))
        #expect((r.budget?.after ?? .max) <= (r.budget?.budget ?? 0))
        // Fetching "b" again evicts "a": its recorded use (1970) is older than "c"'s installation.
        let again = try await fetch(env, "b")
        #expect(again.budget?.evicted == ["a"], "\(String(describing: again.budget))")
    }

    @Test("eager packages and pinned ones are never evicted; the report says what is over")
    func neverEvicted() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try env.repository.publish(
            "1.0.0", id: "shell", edit: SampleRepository.setCatalogVersion("shell"), at: env.clock)
        try env.repository.publish(
            "1.0.0", id: "open", edit: SampleRepository.setCatalogVersion("open"), at: env.clock
        ) { $0.install = InstallPolicy(mode: .onDemand) }
        try env.repository.publish(
            "1.0.0", id: "next", edit: SampleRepository.setCatalogVersion("next"), at: env.clock
        ) { $0.install = InstallPolicy(mode: .onDemand) }
        try initialise(env, budget: 1)
        _ = try await fetch(env, "open")
        // A page holds "open" (a session's pin).
        let lease = try SandboxReader(root: env.root).pin(id: try packageID("open"))
        defer { lease.release() }
        let o = SyncSetup(engine: .tested)
        var oRequest = SyncRequest()
        oRequest.fetching = [PackageID("next")!]
        let r = try await Syncer(root: env.root, setup: o).sync(oRequest)
        #expect(r.packages.allSatisfy { $0.outcome == .done || $0.outcome == .skipped }, "\(r)")
        #expect(r.budget?.evicted == [] && r.budget?.keptPinned == ["open"], "\(String(describing: r.budget))")
        #expect(try env.state().packages.keys.sorted() == ["next", "open", "shell"])
        // Unpinned, both on-demand packages go (the budget of 1 byte cannot be met: "shell" is eager).
        lease.release()
        let s = try Sandbox.open(env.root)
        defer { s.close() }
        let report = try s.enforceBudget(1, onDemand: s.onDemandPackages())
        #expect(report.evicted.sorted() == ["next", "open"] && report.after > 0, "\(report)")
        #expect(try SandboxReader(root: env.root).state().packages.keys.sorted() == ["shell"])
    }

    @Test("serving a package's file records its use: one touch of usage/<id> a minute, not one per request")
    func usageRecorded() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try env.publish("1.0.0")
        try env.initialise()
        _ = try await env.sync()
        let layout = SandboxLayout(root: env.root)
        let id = PackageID("sample-app")!
        #expect(UsageRecorder.lastUse(layout, id) == nil)
        let loader = ResourceLoader(resolver: try Resolver(root: env.root))
        let before = Date()
        _ = loader.load(LoadRequest(url: "larder://sample-app/index.html"))
        let first = try #require(UsageRecorder.lastUse(layout, id))
        #expect(abs(first.timeIntervalSince(before)) < 5)
        // A second request within the minute writes nothing: the time stays.
        try SystemCalls.setTimes(
            layout.usage(id), accessed: FileTime(seconds: 1000), modified: FileTime(seconds: 1000))
        _ = loader.load(LoadRequest(url: "larder://sample-app/css/app.css"))
        #expect(UsageRecorder.lastUse(layout, id) == Date(timeIntervalSince1970: 1000))
    }
}

@Suite("Sync: a sharded index")
struct ShardedIndexSyncTests {
    /// Packs `count` on-demand packages `mini-<i>` (each with its own route) and an eager `shell`
    /// in one batch, under a sharded index.
    static func publishMany(_ env: SyncEnv, count: Int, shellDepends: [String] = [], preload: Set<Int> = [])
        throws
    {
        var requests: [PackRequest] = []
        let src = try env.repository.source("mini", "1.0.0")
        for i in 0..<count {
            var r = PackRequest(
                source: FilePath(src.path), repository: env.repository.path, id: "mini-\(i)", version: "1.0.0")
            r.deltaBases = 0
            r.routes = ["https://m.example/\(i)/"]
            r.install = InstallPolicy(mode: .onDemand, preload: preload.contains(i) ? .unmetered : .never)
            requests.append(r)
        }
        var shell = PackRequest(
            source: FilePath(src.path), repository: env.repository.path, id: "shell", version: "1.0.0")
        shell.deltaBases = 0
        shell.dependencies = shellDepends
        requests.append(shell)
        var publisher = Publisher(key: env.key, now: { env.clock })
        publisher.indexLayout = .sharded
        _ = try publisher.pack(batch: requests)
    }

    /// mini-3 1.1.0, packed into the sharded index (its layout kept).
    static func publishMini3Update(_ env: SyncEnv) throws {
        var r = PackRequest(
            source: FilePath(try env.repository.source("mini", "1.0.0").path), repository: env.repository.path,
            id: "mini-3", version: "1.1.0")
        r.deltaBases = 0
        r.routes = ["https://m.example/3/"]
        r.install = InstallPolicy(mode: .onDemand)
        _ = try Publisher(key: env.key, now: { env.clock }).pack(r)
    }

    static func paths(_ recording: RecordingTransport) -> [String] {
        recording.calls.map {
            switch $0 {
            case .document(let u, _): u
            case .download(let u): u
            }
        }
    }

    static func sync(_ env: SyncEnv, fetching: [String] = [], transport: (any Transport)? = nil) async throws
        -> SyncReport
    {
        var o = SyncSetup(engine: .tested)
        var oRequest = SyncRequest()
        let now = env.clock
        o.clock = { now }
        oRequest.fetching = fetching.map { PackageID($0)! }
        oRequest.packages = oRequest.fetching
        return try await Syncer(root: env.root, setup: o, transport: transport).sync(oRequest)
    }

    @Test("a device reads the catalog and the shards of what it holds, and no others")
    func readsWhatItHolds() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try Self.publishMany(env, count: 40)
        try env.initialise()
        let layout = SandboxLayout(root: env.root)

        // The first sync: the signature, the index and the catalog; no shard, nothing of a mini.
        let first = RecordingTransport()
        _ = try await Self.sync(env, transport: first)
        let firstShards = Self.paths(first).filter { $0.contains("/shards/") }
        #expect(firstShards.count == 1, "only the catalog: \(Self.paths(first))")
        #expect(!Self.paths(first).contains { $0.contains("/mini-") })
        #expect(try env.active("shell") == "1.0.0" && env.active("mini-3") == nil)

        // `fetch mini-3`: its shard (one of four), then it.
        let fetch = RecordingTransport()
        let fetched = try await Self.sync(env, fetching: ["mini-3"], transport: fetch)
        #expect(fetched.packages.map(\.id) == ["mini-3"] && fetched.packages.first?.outcome == .done, "\(fetched)")
        let shardFetches = Self.paths(fetch).filter { $0.contains("/shards/") }
        #expect(shardFetches.count == 1, "\(shardFetches)")
        #expect(!Self.paths(fetch).contains { $0.contains("/mini-") && !$0.contains("/mini-3/") })
        // Served with its own settings: the resolver's view of the index has its route.
        let served = try #require(layout.servingIndex()?.packages.first { $0.id.rawValue == "mini-3" })
        #expect(served.routes == ["https://m.example/3/"] && served.onDemand)

        // Its update: the new shard only (the catalog is the same file).
        try Self.publishMini3Update(env)
        let update = RecordingTransport()
        let updated = try await Self.sync(env, transport: update)
        #expect(updated.packages.first { $0.id == "mini-3" }?.action == .update, "\(updated)")
        #expect(try env.active("mini-3") == "1.1.0")
        let updateShards = Self.paths(update).filter { $0.contains("/shards/") }
        #expect(updateShards.count == 1, "\(updateShards)")
        // The cache holds the shard of what is held and the catalog, no more.
        let cached = try FileManager.default.contentsOfDirectory(atPath: layout.indexShards.string)
        #expect(cached.count == 2 && cached.contains { $0.hasPrefix("catalog-") }, "\(cached)")
    }

    @Test("a preload picks from the catalog's hints and reads only the shards of what it takes")
    func preload() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try Self.publishMany(env, count: 40, preload: [2, 30])
        try env.initialise()
        _ = try await Self.sync(env)
        var o = SyncSetup(engine: .tested)
        var oRequest = SyncRequest()
        let now = env.clock
        o.clock = { now }
        oRequest.preload = .unmetered
        let recording = RecordingTransport()
        _ = try await Syncer(root: env.root, setup: o, transport: recording).sync(oRequest)
        #expect(try env.active("mini-2") == "1.0.0" && env.active("mini-30") == "1.0.0")
        #expect(try env.active("mini-3") == nil)
        let shards = Self.paths(recording).filter { $0.contains("/shards/") }
        let buckets = Set(["mini-2", "mini-30"].map { IndexShards.bucket(of: PackageID($0)!, count: 4) })
        #expect(shards.count == buckets.count, "\(shards)")
    }

    @Test("an eager package's on-demand dependency is read from its shard and installed with it")
    func dependency() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try Self.publishMany(env, count: 20, shellDepends: ["mini-5@^1.0.0"])
        try env.initialise()
        _ = try await Self.sync(env)
        #expect(try env.active("shell") == "1.0.0" && env.active("mini-5") == "1.0.0")
        #expect(try env.active("mini-6") == nil)
    }

    @Test("a shard that is not the one the index names stops the sync with index-shard; nothing is recorded")
    func tamperedShard() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try Self.publishMany(env, count: 40)
        try env.initialise()
        _ = try await Self.sync(env, fetching: ["mini-3"])
        let serial = try env.state().index?.serial

        // A new index whose shards are damaged on the server.
        try Self.publishMini3Update(env)
        let shards = env.repo.appendingPathComponent("shards")
        let walker = FileManager.default.enumerator(atPath: shards.path)
        while let name = walker?.nextObject() as? String {
            guard name.hasSuffix(".json") else { continue }
            let u = shards.appendingPathComponent(name)
            var d = try Data(contentsOf: u)
            d[d.count / 2] ^= 1
            try d.write(to: u)
        }
        do {
            _ = try await Self.sync(env)
            Issue.record("a damaged shard was accepted")
        } catch let error as SyncError {
            #expect(error.code == "index-shard", "\(error)")
        }
        #expect(try env.state().index?.serial == serial)
        #expect(try env.active("mini-3") == "1.0.0")
    }
}
