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
    /// The handoff the app would share between its resolver and its syncs (one per test).
    let handoff = ServingHandoff()

    /// The sandbox opened as the app's writers open it: telling the handoff of each write.
    func openSandbox(_ env: SyncEnv) throws -> Sandbox {
        var options = Sandbox.Options()
        options.handoff = handoff
        return try Sandbox.open(env.root, options: options)
    }
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
        _ = try await env.sync(handoff: handoff)
        let layout = SandboxLayout(root: env.root)
        let resolver = try Resolver(root: env.root, handoff: handoff)
        let before = resolver.snapshot()
        #expect(before.listsRead == 3)
        #expect(catalog(resolver, "https://beta.example/data/catalog.json")?.contains("beta 1.0.0") == true)
        let indexBefore = FileIdentity(layout.acceptedIndex)
        let stateBefore = FileIdentity(layout.state)

        // One package updated: its list is read, the others' parts are kept.
        try publish(env, "beta", "1.0.1")
        #expect(try await env.sync(handoff: handoff).hasFailures == false)
        let disk = try SandboxReader(root: env.root).servingState()
        #expect(handoff.state(layout)?.state.packages == disk.packages)
        let changed = try #require(
            handoff.changes(layout, from: stateBefore, to: FileIdentity(layout.state)))
        #expect(changed == ["beta"])
        #expect(
            handoff.settingsChanges(
                layout, from: indexBefore, to: FileIdentity(layout.acceptedIndex), channel: "stable") == [])
        let after = resolver.snapshot()
        #expect(after.generation == disk.generation && after.listsRead == 1 && after.compared == 1)
        // The settings kept are what decoding the index file gives.
        let index = try ManifestCoding.decode(
            ServingIndex.self, from: AtomicFile.read(layout.acceptedIndex), document: "index")
        #expect(
            handoff.settings(layout, identity: FileIdentity(layout.acceptedIndex), channel: "stable")
                == ServingSettings.byID(index.packages, channel: "stable"))
        #expect(catalog(resolver, "https://beta.example/data/catalog.json")?.contains("beta 1.0.1") == true)
        #expect(catalog(resolver, "https://alpha.example/data/catalog.json")?.contains("alpha 1.0.0") == true)
        // The serving form kept in memory is what decoding state.json gives.
        let full = try env.state()
        #expect(ServingState(full).packages == disk.packages && ServingState(full).generation == disk.generation)

        // A package that moves to another route: the table is built again, and agrees.
        let indexMiddle = FileIdentity(layout.acceptedIndex)
        try publish(env, "gamma", "1.1.0", route: "gamma-moved")
        #expect(try await env.sync(handoff: handoff).hasFailures == false)
        #expect(
            handoff.settingsChanges(
                layout, from: indexMiddle, to: FileIdentity(layout.acceptedIndex), channel: "stable") == ["gamma"])
        #expect(catalog(resolver, "https://gamma-moved.example/data/catalog.json")?.contains("gamma 1.1.0") == true)
        #expect(catalog(resolver, "https://gamma.example/data/catalog.json") == nil)
        // A resolver on another spelling of the root reads the files (nothing is kept for it).
        let link = env.dir.appendingPathComponent("sandbox-link")
        try FileManager.default.createSymbolicLink(atPath: link.path, withDestinationPath: env.root.string)
        let cold = try Resolver(root: FilePath(link.path), handoff: handoff)
        #expect(handoff.state(SandboxLayout(root: FilePath(link.path))) == nil)
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
        _ = try await env.sync(handoff: handoff)
        let layout = SandboxLayout(root: env.root)
        let resolver = try Resolver(root: env.root, handoff: handoff)
        try publish(env, "alpha", "1.0.1")
        _ = try await env.sync(handoff: handoff)
        #expect(catalog(resolver, "https://alpha.example/data/catalog.json")?.contains("alpha 1.0.1") == true)
        #expect(handoff.state(layout) != nil)

        // Another process rolls alpha back to 1.0.0 (still on disk as the fallback): a new
        // state.json and generation word that this process did not write.
        var state = try env.state()
        let pkg = try #require(state.packages["alpha"])
        #expect(pkg.fallback == SemanticVersion("1.0.0"))
        state.packages["alpha"]?.active = pkg.fallback
        state.generation += 1
        try AtomicFile.write(ManifestCoding.encode(state), to: layout.state)
        #expect(handoff.state(layout) == nil)
        var word = state.generation.littleEndian
        try withUnsafeBytes(of: &word) { try Data($0).write(to: URL(fileURLWithPath: layout.generation.string)) }
        #expect(catalog(resolver, "https://alpha.example/data/catalog.json")?.contains("alpha 1.0.0") == true)
        #expect(resolver.snapshot().generation == state.generation)

        // A generation word that does not name the state written is not trusted either.
        _ = try await env.sync(handoff: handoff)
        let written = try #require(handoff.state(layout))
        var other = (written.state.generation + 7).littleEndian
        try withUnsafeBytes(of: &other) { try Data($0).write(to: URL(fileURLWithPath: layout.generation.string)) }
        #expect(handoff.state(layout) == nil)
        withExtendedLifetime(resolver) {}
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
        _ = try await env.sync(handoff: handoff)
        let resolver = try Resolver(root: env.root, handoff: handoff)
        #expect(catalog(resolver, "https://alpha.example/data/catalog.json")?.contains("alpha 1.0.0") == true)
        #expect(catalog(resolver, "https://alpha-beta.example/data/catalog.json") == nil)
        _ = try SyncConfig.initialise(
            root: env.root, repository: env.repo.absoluteString, keys: [env.key.publicKey], channel: "beta",
            appVersion: SemanticVersion(1, 0, 0), allowInsecureHTTP: false)
        let sandbox = try openSandbox(env)
        _ = try sandbox.confirm(id: try packageID("alpha"))
        sandbox.close()
        #expect(catalog(resolver, "https://alpha-beta.example/data/catalog.json")?.contains("alpha 1.0.0") == true)
        #expect(catalog(resolver, "https://alpha.example/data/catalog.json") == nil)
    }

    @Test("the changes between two state files are known only through an unbroken chain of writes here")
    func changesNeedAnUnbrokenChain() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try publish(env, "alpha", "1.0.0")
        try publish(env, "beta", "1.0.0")
        try env.initialise()
        let layout = SandboxLayout(root: env.root)
        let resolver = try Resolver(root: env.root, handoff: handoff)
        _ = try await env.sync(handoff: handoff)
        let first = FileIdentity(layout.state)
        try publish(env, "alpha", "1.0.1")
        _ = try await env.sync(handoff: handoff)
        let second = FileIdentity(layout.state)
        _ = resolver.snapshot()
        try publish(env, "beta", "1.0.1")
        _ = try await env.sync(handoff: handoff)
        let third = FileIdentity(layout.state)
        #expect(handoff.changes(layout, from: third, to: third) == [])
        #expect(handoff.changes(layout, from: third, to: second) == nil)
        #expect(handoff.changes(layout, from: first, to: second) == ["alpha"])
        #expect(handoff.changes(layout, from: second, to: third) == ["beta"])
        #expect(handoff.changes(layout, from: first, to: third) == ["alpha", "beta"])
        #expect(handoff.changes(layout, from: nil, to: third) == nil)
        // The resolver last built at `second` looks at beta alone.
        #expect(resolver.snapshot().compared == 1)
        #expect(catalog(resolver, "https://beta.example/data/catalog.json")?.contains("beta 1.0.1") == true)

        // Another process writes a state (a confirmation of alpha); a second resolver reads it
        // from the file, and the next write here is compared with that file. The first
        // resolver, built from `third`, has no chain to the new state: it compares every package.
        var state = try env.state()
        state.packages["alpha"]?.health = .confirmed
        state.generation += 1
        try AtomicFile.write(ManifestCoding.encode(state), to: layout.state)
        var word = state.generation.littleEndian
        try withUnsafeBytes(of: &word) { try Data($0).write(to: URL(fileURLWithPath: layout.generation.string)) }
        let other = FileIdentity(layout.state)
        let fromFile = try Resolver(root: env.root, handoff: handoff)
        try publish(env, "alpha", "1.0.2")
        _ = try await env.sync(handoff: handoff)
        let fifth = FileIdentity(layout.state)
        #expect(handoff.changes(layout, from: other, to: fifth) == ["alpha"])
        #expect(handoff.changes(layout, from: third, to: fifth) == nil)
        #expect(resolver.snapshot().compared == 2)
        #expect(fromFile.snapshot().compared == 1)
        for r in [resolver, fromFile] {
            #expect(catalog(r, "https://alpha.example/data/catalog.json")?.contains("alpha 1.0.2") == true)
        }

        // Only the last writes are kept.
        let sandbox = try openSandbox(env)
        for _ in 0..<(ServingHandoff.journalLength + 6) { _ = try sandbox.confirm(id: try packageID("beta")) }
        sandbox.close()
        #expect(handoff.changes(layout, from: fifth, to: FileIdentity(layout.state)) == nil)
        #expect(resolver.snapshot().compared == 2)
        withExtendedLifetime(fromFile) {}
    }
}
