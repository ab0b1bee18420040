import Foundation
import LarderCore
import LarderFileSystem
import LarderStore
import LarderTestSupport
import SystemPackage
import Testing

@testable import LarderSync

/// Each phase of a sync on its own: the release values the plan phase makes, what the fetch phase
/// asks for, how the stage phase places (or refuses) a release, and how the activate phase
/// treats a dependency group with a failed member.
@Suite("Sync phases")
struct PhaseTests {
    /// A sandbox following a repository with `app` (which depends on `lib`) and `other`.
    func threePackages() throws -> SyncEnv {
        let env = try SyncEnv()
        try env.publish("1.0.0", id: "lib")
        try env.publish("1.0.0", id: "app", deps: ["lib@^1.0.0"])
        try env.publish("1.0.0", id: "other")
        try env.initialise()
        return env
    }

    func prepared(_ env: SyncEnv, packages: [String] = [], record: Bool = false) async throws -> Syncer.Prepared {
        var o = SyncSetup(engine: .tested)
        var oRequest = SyncRequest()
        let now = env.clock
        o.clock = { now }
        oRequest.packages = packages.compactMap { PackageID($0) }
        var syncer = Syncer(root: env.root, setup: o)
        syncer.request = oRequest
        return try await syncer.prepare(record: record)
    }

    @Test("the plan phase makes one release per install, with its entry, list, action and encoding")
    func planMakesReleases() async throws {
        let env = try threePackages()
        defer { env.cleanup() }
        let p = try await prepared(env)
        defer { p.scope.sandbox.close() }
        #expect(Set(p.releases.keys.map(\.rawValue)) == ["app", "lib", "other"])
        for (id, r) in p.releases {
            #expect(r.entry.id == id)
            #expect(r.list?.id == id)
            #expect(r.action?.kind == .install)
            #expect(r.action?.cost != nil)
            #expect(r.failure == nil)
            #expect((r.metadataBytes ?? 0) > 0)
            // In the clear every object is named by the list.
            #expect(r.list?.files.allSatisfy { r.encoding.names($0) } == true)
        }
    }

    @Test("the plan phase widens named packages to what they depend on, and no further")
    func planFilters() async throws {
        let env = try threePackages()
        defer { env.cleanup() }
        let p = try await prepared(env, packages: ["app"])
        defer { p.scope.sandbox.close() }
        #expect(Set(p.plan.actions.map(\.id.rawValue)) == ["app", "lib"])
        #expect(p.releases[PackageID("other")!] == nil)
    }

    @Test("a release whose list does not match its signed digest carries the failure, and gets no action")
    func planListFailure() async throws {
        let env = try threePackages()
        defer { env.cleanup() }
        // Damage `other`'s list (and its gzipped copy) in the repository.
        for name in ["files.json", "files.json.gz"] {
            let u = env.repo.appendingPathComponent("packages/other/1.0.0/\(name)")
            guard var d = try? Data(contentsOf: u) else { continue }
            d[d.count / 2] ^= 0x01
            try d.write(to: u)
        }
        let p = try await prepared(env)
        defer { p.scope.sandbox.close() }
        let other = try #require(p.releases[PackageID("other")!])
        #expect(other.list == nil)
        #expect(other.failure?.code == "file-list-mismatch")
        #expect(other.action == nil)
        #expect(p.releases[PackageID("app")!]?.action?.kind == .install)
    }

    @Test("the fetch phase asks for each missing content once, however many releases share it")
    func fetchSourcesOnce() throws {
        let digest = { (s: String) in SHA256Digest.of(Data(s.utf8)) }
        let id = PackageID("a")!
        let v = SemanticVersion(1, 0, 0)
        let path = { (s: String) in try #require(RelativePath(s)) }
        let shared = FileEntry(path: try path("shared.js"), size: 6, sha256: digest("shared"))
        let held = FileEntry(path: try path("held.css"), size: 4, sha256: digest("held"))
        let own = FileEntry(path: try path("own.html"), size: 3, sha256: digest("own"))
        let first = FileList(id: id, version: v, files: [shared, held, own])
        let copy = FileEntry(path: try path("copy.js"), size: 6, sha256: shared.sha256)
        let second = FileList(id: id, version: v, files: [shared, copy])
        let local = [held.sha256: FilePath("/held")]
        var seen: Set<SHA256Digest> = []
        let a = FetchPhase.sources(first, .objects, delta: nil, local: local, seen: &seen)
        let b = FetchPhase.sources(second, .objects, delta: nil, local: local, seen: &seen)
        #expect(Set(a.objects.map(\.path.string)) == ["shared.js", "own.html"])
        #expect(b.objects.isEmpty)
        #expect(a.patched == 0 && b.patched == 0)
    }

    @Test("the fetch phase plans a bundle job for a release by bundle, and object jobs for one by objects")
    func fetchJobs() async throws {
        let env = try threePackages()
        defer { env.cleanup() }
        let p = try await prepared(env, record: true)
        defer { p.scope.sandbox.close() }
        var releases = p.plan.changes.compactMap { p.releases[$0.id] }
        releases[0].action?.cost?.method = .bundle
        for i in releases.indices.dropFirst() { releases[i].action?.cost?.method = .objects }
        let jobs = FetchPhase(scope: p.scope, local: p.local).jobs(releases)
        let bundles = jobs.filter { if case .bundle = $0.blob { true } else { false } }
        #expect(bundles.map(\.id) == [releases[0].id])
        // Each content the releases by objects need is asked for once (the sample apps share most).
        let objects = jobs.compactMap { job -> SHA256Digest? in if case .object(let d) = job.blob { d } else { nil } }
        let needed = Set(releases.dropFirst().flatMap { $0.list?.files.map(\.sha256) ?? [] })
        #expect(objects.count == needed.count)
        #expect(Set(objects) == needed)
        for job in bundles {
            if case .bundle(let area) = job.blob { area?.discard() }
        }
    }

    @Test("the stage phase keeps a download's failure and places nothing of that release")
    func stageKeepsDownloadFailure() async throws {
        let env = try threePackages()
        defer { env.cleanup() }
        let p = try await prepared(env, record: true)
        defer { p.scope.sandbox.close() }
        var releases = p.plan.changes.compactMap { p.releases[$0.id] }
        releases[0].download.error = .fileListMismatch("injected")
        StagePhase(sandbox: p.scope.sandbox, local: p.local).run(&releases, contents: FetchPhase.Contents())
        #expect(releases[0].failure == .fileListMismatch("injected"))
        #expect(releases[0].placement == nil)
        // The others went by objects or bundle and nothing was downloaded: they fail to place.
        for r in releases.dropFirst() { #expect(r.placement == nil && r.failure != nil) }
    }

    @Test("the activate phase activates a group whole or not at all")
    func activateGroup() async throws {
        let env = try threePackages()
        defer { env.cleanup() }
        let p = try await prepared(env, record: true)
        defer { p.scope.sandbox.close() }
        var releases = p.plan.changes.compactMap { p.releases[$0.id] }
        // Pretend every release was placed but `lib`, which failed; `app` shares its group.
        let lib = try #require(releases.firstIndex { $0.id.rawValue == "lib" })
        let app = try #require(releases.firstIndex { $0.id.rawValue == "app" })
        for i in releases.indices { releases[i].action?.group = [] }
        let group = [releases[app].id, releases[lib].id]
        releases[app].action?.group = group
        releases[lib].action?.group = group
        for i in releases.indices where i != lib {
            releases[i].placement = Release.Placement(bytes: 0, seconds: 0, method: .local)
        }
        releases[lib].failure = .fileListMismatch("injected")
        // `other` is alone: it is activated only if placed, so drop it from the batch.
        releases.removeAll { $0.id.rawValue == "other" }
        ActivatePhase(sandbox: p.scope.sandbox).run(&releases)
        let appAfter = try #require(releases.first { $0.id.rawValue == "app" })
        #expect(appAfter.failure == .dependencyGroup(member: PackageID("lib")!))
        #expect(p.scope.sandbox.state[PackageID("app")!].active == nil)
    }

    @Test("a dry run plans what a sync would do and applies, records and downloads nothing")
    func dryRun() async throws {
        let env = try threePackages()
        defer { env.cleanup() }
        let syncer = Syncer(root: env.root, setup: SyncSetup(engine: .tested))
        let dry = try await syncer.sync(SyncRequest(packages: [PackageID("app")!], dryRun: true))
        #expect(dry.packages.isEmpty)
        #expect(Set(dry.plan?.actions.map(\.id.rawValue) ?? []) == ["app", "lib"])
        #expect(dry.plan?.actions.allSatisfy { $0.kind == .install } == true)
        #expect(try env.state().packages.isEmpty)
        #expect(try env.state().index == nil)
        // The same request, applied.
        let real = try await syncer.sync(SyncRequest(packages: [PackageID("app")!]))
        #expect(real.plan == nil && real.packages.count == 2 && !real.hasFailures)
        #expect(try env.active("app") == "1.0.0" && env.active("other") == nil)
    }
}
