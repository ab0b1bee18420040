import Foundation
import LarderCore
import LarderFileSystem
import LarderResolve
import LarderStore
import LarderSync
import LarderTestSupport
import SystemPackage
import Testing

/// A resolver open while this process syncs: its next snapshot takes the state and index the
/// sync wrote from memory and rebuilds only the packages the sync changed (`ServingHandoff`),
/// and answers as the files on disk say.
@Suite("Serving handoff: a sync and a resolver in one process")
struct ServingHandoffTests {
    /// Packs `version` of `id`, routed at `https://<route>.example/`.
    func publish(_ env: SyncEnv, _ id: String, _ version: String, route: String? = nil) throws {
        try env.repository.publish(
            version, id: id, edit: SampleRepository.setCatalogVersion("\(id) \(version)"), at: env.clock
        ) {
            $0.routes = ["https://\(route ?? id).example/"]
        }
    }

    /// The catalogue a URL serves, read from the file the resolver names.
    func catalog(_ resolver: Resolver, _ url: String) -> String? {
        guard case .local(let f) = resolver.resolve(url),
            let data = try? AtomicFile.read(resolver.filePath(f))
        else { return nil }
        return String(decoding: data, as: UTF8.self)
    }

    @Test("after an in-process sync the resolver reads one list, takes the rest from memory, and agrees with the disk")
    func rebuildAfterAnInProcessSync() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        for id in ["alpha", "beta", "gamma"] { try publish(env, id, "1.0.0") }
        try env.initialise()
        _ = try await env.sync()
        let layout = SandboxLayout(root: env.root)
        let resolver = try Resolver(root: env.root)
        let before = resolver.snapshot()
        #expect(before.listsRead == 3)
        #expect(catalog(resolver, "https://beta.example/data/catalog.json")?.contains("beta 1.0.0") == true)
        let indexBefore = FileIdentity(layout.acceptedIndex)

        // One package updated: its list is read, the others' parts are kept.
        try publish(env, "beta", "1.0.1")
        #expect(try await env.sync().hasFailures == false)
        let disk = try SandboxReader(root: env.root).servingState()
        #expect(ServingHandoff.shared.state(layout)?.packages == disk.packages)
        let changed = try #require(ServingHandoff.shared.changes(layout, from: before.generation, to: disk.generation))
        #expect(changed == ["beta"])
        #expect(
            ServingHandoff.shared.settingsChanges(
                layout, from: indexBefore, to: FileIdentity(layout.acceptedIndex), channel: "stable") == [])
        let after = resolver.snapshot()
        #expect(after.generation == disk.generation && after.listsRead == 1)
        #expect(catalog(resolver, "https://beta.example/data/catalog.json")?.contains("beta 1.0.1") == true)
        #expect(catalog(resolver, "https://alpha.example/data/catalog.json")?.contains("alpha 1.0.0") == true)
        // The serving form kept in memory is what decoding state.json gives.
        let full = try env.state()
        #expect(ServingState(full).packages == disk.packages && ServingState(full).generation == disk.generation)

        // A package that moves to another route: the table is built again, and agrees.
        let indexMiddle = FileIdentity(layout.acceptedIndex)
        try publish(env, "gamma", "1.1.0", route: "gamma-moved")
        #expect(try await env.sync().hasFailures == false)
        #expect(
            ServingHandoff.shared.settingsChanges(
                layout, from: indexMiddle, to: FileIdentity(layout.acceptedIndex), channel: "stable") == ["gamma"])
        #expect(catalog(resolver, "https://gamma-moved.example/data/catalog.json")?.contains("gamma 1.1.0") == true)
        #expect(catalog(resolver, "https://gamma.example/data/catalog.json") == nil)
        let cold = try Resolver(root: env.root)
        for url in [
            "https://alpha.example/data/catalog.json", "https://beta.example/data/catalog.json",
            "https://gamma.example/data/catalog.json", "https://gamma-moved.example/data/catalog.json",
            "https://gamma-moved.example/", "larder://beta/index.html",
        ] {
            #expect(resolver.resolve(url) == cold.resolve(url), "\(url)")
        }
    }

    @Test("a state another process wrote is read from its file, not taken from memory")
    func anotherWriterIsReadFromDisk() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try publish(env, "alpha", "1.0.0")
        try env.initialise()
        _ = try await env.sync()
        let layout = SandboxLayout(root: env.root)
        let resolver = try Resolver(root: env.root)
        try publish(env, "alpha", "1.0.1")
        _ = try await env.sync()
        #expect(catalog(resolver, "https://alpha.example/data/catalog.json")?.contains("alpha 1.0.1") == true)
        #expect(ServingHandoff.shared.state(layout) != nil)

        // Another process rolls alpha back to 1.0.0 (still on disk as the fallback): a new
        // state.json and generation word that this process did not write.
        var state = try env.state()
        let pkg = try #require(state.packages["alpha"])
        #expect(pkg.fallback == SemanticVersion("1.0.0"))
        state.packages["alpha"]?.active = pkg.fallback
        state.generation += 1
        try AtomicFile.write(ManifestCoding.encode(state), to: layout.state)
        #expect(ServingHandoff.shared.state(layout) == nil)
        var word = state.generation.littleEndian
        try withUnsafeBytes(of: &word) { try Data($0).write(to: URL(fileURLWithPath: layout.generation.string)) }
        #expect(catalog(resolver, "https://alpha.example/data/catalog.json")?.contains("alpha 1.0.0") == true)
        #expect(resolver.snapshot().generation == state.generation)

        // A generation word that does not name the state written is not trusted either.
        _ = try await env.sync()
        let written = try #require(ServingHandoff.shared.state(layout))
        var other = (written.generation + 7).littleEndian
        try withUnsafeBytes(of: &other) { try Data($0).write(to: URL(fileURLWithPath: layout.generation.string)) }
        #expect(ServingHandoff.shared.state(layout) == nil)
    }

    @Test("a device that changes channel gets its settings at the next state write, the index being the same file")
    func channelChangeRereadsSettings() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try publish(env, "alpha", "1.0.0")
        try env.repository.publish(
            "1.1.0", id: "alpha", edit: SampleRepository.setCatalogVersion("alpha 1.1.0"), at: env.clock
        ) {
            $0.routes = ["https://alpha-beta.example/"]
            $0.channel = "beta"
        }
        try env.initialise()
        _ = try await env.sync()
        let resolver = try Resolver(root: env.root)
        #expect(catalog(resolver, "https://alpha.example/data/catalog.json")?.contains("alpha 1.0.0") == true)
        #expect(catalog(resolver, "https://alpha-beta.example/data/catalog.json") == nil)
        _ = try SyncConfig.initialise(
            root: env.root, repository: env.repo.absoluteString, keys: [env.key.publicKey], channel: "beta",
            appVersion: SemanticVersion(1, 0, 0), allowInsecureHTTP: false)
        let sandbox = try Sandbox.open(env.root)
        _ = try sandbox.confirm(id: "alpha")
        sandbox.close()
        #expect(catalog(resolver, "https://alpha-beta.example/data/catalog.json")?.contains("alpha 1.0.0") == true)
        #expect(catalog(resolver, "https://alpha.example/data/catalog.json") == nil)
    }

    @Test("the packages changed between two generations are known only without a gap")
    func changesNeedAnUnbrokenJournal() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try publish(env, "alpha", "1.0.0")
        try publish(env, "beta", "1.0.0")
        try env.initialise()
        let layout = SandboxLayout(root: env.root)
        let resolver = try Resolver(root: env.root)
        _ = try await env.sync()
        let first = try env.state().generation
        try publish(env, "alpha", "1.0.1")
        _ = try await env.sync()
        let second = try env.state().generation
        try publish(env, "beta", "1.0.1")
        _ = try await env.sync()
        let third = try env.state().generation
        let handoff = ServingHandoff.shared
        #expect(handoff.changes(layout, from: third, to: third) == [])
        #expect(handoff.changes(layout, from: third, to: second) == nil)
        #expect(handoff.changes(layout, from: first, to: second) == ["alpha"])
        #expect(handoff.changes(layout, from: second, to: third) == ["beta"])
        #expect(handoff.changes(layout, from: first, to: third) == ["alpha", "beta"])
        #expect(handoff.changes(layout, from: third, to: third + 1) == nil)
        // The resolver, last built before the first sync, compares every package.
        #expect(resolver.snapshot().listsRead == 2)
        #expect(catalog(resolver, "https://beta.example/data/catalog.json")?.contains("beta 1.0.1") == true)
    }
}
