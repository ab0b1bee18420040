import Foundation
import LarderCore
import Testing

@Suite("Differ")
struct DifferTests {
    static let d = SHA256Digest.of(Data("x".utf8))

    static func v(_ s: String) -> SemanticVersion { SemanticVersion(s)! }
    static func id(_ s: String) -> PackageID { PackageID(s)! }

    static func entry(
        _ i: String, _ version: String, channel: String = "stable", rollout: Int = 100, min: String? = nil,
        revoked: [String] = [], deps: [(String, String)] = [], bundleSize: Int64 = 100_000
    ) -> PackageEntry {
        PackageEntry(
            id: id(i), version: v(version),
            bundle: BlobRef(path: "packages/\(i)/\(version)/bundle.zip", size: bundleSize, sha256: d),
            files: BlobRef(path: "packages/\(i)/\(version)/files.json", size: 10, sha256: d),
            minClientVersion: min.map(v), channel: Channel(rawValue: channel),
            rollout: Rollout(percent: rollout, salt: "s"),
            revoked: revoked.map(v), dependencies: deps.map { Dependency(id: id($0.0), range: VersionRange($0.1)!) })
    }

    static func list(_ i: String, _ version: String, files: [(String, Int64, String)]) -> FileList {
        FileList(
            id: id(i), version: v(version),
            files: files.map {
                FileEntry(path: RelativePath($0.0)!, size: $0.1, sha256: SHA256Digest.of(Data($0.2.utf8)))
            })
    }

    static func state(_ pkgs: [String: (active: String?, fallback: String?, onDisk: [String], failed: [String])])
        -> SandboxState
    {
        var s = SandboxState()
        for (k, p) in pkgs {
            var ps = PackageState()
            ps.active = p.active.map(v)
            ps.fallback = p.fallback.map(v)
            ps.versions = p.onDisk.map {
                InstalledVersion(version: v($0), fileCount: 1, size: 1, installedAt: Date(timeIntervalSince1970: 0))
            }
            ps.failed = p.failed.map {
                FailedVersion(version: v($0), reason: "test", at: Date(timeIntervalSince1970: 0))
            }
            s.packages[k] = ps
        }
        return s
    }

    static let ctx = ClientContext(appVersion: v("3.0.0"), deviceID: "device-1")
    static let appList = list("app", "2.0.0", files: [("index.html", 1000, "a"), ("app.js", 50_000, "b")])

    func only(_ plan: Plan, _ i: String) throws -> PlanAction {
        try #require(plan.actions.first { $0.id == Self.id(i) })
    }

    @Test func firstInstallAndUnchanged() throws {
        let idx = RepositoryIndex(serial: 1, expires: .distantFuture, packages: [Self.entry("app", "2.0.0")])
        let p = Differ.plan(
            index: idx, state: SandboxState(), context: Self.ctx, fileLists: [Self.id("app"): Self.appList])
        let a = try only(p, "app")
        #expect(a.kind == .install && a.to == Self.v("2.0.0"))
        let same = Differ.plan(index: idx, state: Self.state(["app": ("2.0.0", nil, ["2.0.0"], [])]), context: Self.ctx)
        #expect(try only(same, "app").skip == .unchanged)
    }

    @Test func updateChoosesObjectsOrBundle() throws {
        let idx = RepositoryIndex(serial: 1, expires: .distantFuture, packages: [Self.entry("app", "2.0.0")])
        let st = Self.state(["app": ("1.0.0", nil, ["1.0.0"], [])])
        // app.js (50 KB) is already local: only index.html is fetched, as an object.
        let local: Set = [SHA256Digest.of(Data("b".utf8))]
        let a = try only(
            Differ.plan(
                index: idx, state: st, context: Self.ctx, fileLists: [Self.id("app"): Self.appList],
                localContents: local), "app")
        #expect(a.kind == .update && a.from == Self.v("1.0.0"))
        #expect(
            a.cost
                == FetchCost(
                    method: .objects, bytes: 1000, requests: 1, reused: 1, bundleBytes: 100_000,
                    alternatives: [
                        FetchAlternative(method: .objects, bytes: 1000, requests: 1),
                        FetchAlternative(method: .bundle, bytes: 100_000, requests: 1),
                    ]))
        // Nothing local: 51 KB in 2 requests vs a 100 KB bundle → objects still; many small
        // files tip it to the bundle.
        let many = Self.list("app", "2.0.0", files: (0..<200).map { ("f\($0).js", 500, "c\($0)") })
        let b = try only(
            Differ.plan(index: idx, state: st, context: Self.ctx, fileLists: [Self.id("app"): many]), "app")
        #expect(b.cost?.method == .bundle && b.cost?.requests == 1)
        // Everything local: nothing to fetch.
        let all: Set = [SHA256Digest.of(Data("a".utf8)), SHA256Digest.of(Data("b".utf8))]
        let c = try only(
            Differ.plan(
                index: idx, state: st, context: Self.ctx, fileLists: [Self.id("app"): Self.appList], localContents: all),
            "app")
        #expect(c.cost?.method == .local && c.cost?.bytes == 0)
    }

    @Test(arguments: [
        ("client-too-old", Self.entry("app", "2.0.0", min: "4.0.0")),
        ("revoked", Self.entry("app", "2.0.0", revoked: ["2.0.0"])),
        ("older-than-active", Self.entry("app", "0.9.0")),
        ("file-list-needed", Self.entry("app", "2.1.0")),
    ])
    func skips(_ expected: String, _ e: PackageEntry) throws {
        let idx = RepositoryIndex(serial: 1, expires: .distantFuture, packages: [e])
        let st = Self.state(["app": ("1.0.0", nil, ["1.0.0"], [])])
        let a = try only(
            Differ.plan(index: idx, state: st, context: Self.ctx, fileLists: [Self.id("app"): Self.appList]), "app")
        #expect(a.kind == .skip)
        #expect(a.skip?.rawValue == expected, "\(a)")
    }

    @Test func previouslyFailedAndChannels() throws {
        let idx = RepositoryIndex(
            serial: 1, expires: .distantFuture,
            packages: [
                Self.entry("app", "2.0.0"), Self.entry("beta-only", "1.0.0-beta.1", channel: "beta"),
            ])
        let st = Self.state(["app": ("1.0.0", nil, ["1.0.0", "2.0.0"], ["2.0.0"])])
        let p = Differ.plan(index: idx, state: st, context: Self.ctx, fileLists: [Self.id("app"): Self.appList])
        #expect(try only(p, "app").skip == .previouslyFailed)
        #expect(try only(p, "beta-only").skip == .otherChannel)
        var beta = Self.ctx
        beta.channel = "beta"
        let bl = Self.list("beta-only", "1.0.0-beta.1", files: [("index.html", 10, "z")])
        let q = Differ.plan(index: idx, state: SandboxState(), context: beta, fileLists: [Self.id("beta-only"): bl])
        #expect(try only(q, "beta-only").kind == .install)
        #expect(q.actions.first { $0.id == Self.id("app") }?.skip == .otherChannel)
    }

    @Test func revokedActiveRollsBack() throws {
        let idx = RepositoryIndex(
            serial: 2, expires: .distantFuture, packages: [Self.entry("app", "2.0.0", revoked: ["2.0.0"])])
        let st = Self.state(["app": ("2.0.0", "1.0.0", ["1.0.0", "2.0.0"], [])])
        let a = try only(Differ.plan(index: idx, state: st, context: Self.ctx), "app")
        #expect(a.kind == .rollback && a.from == Self.v("2.0.0") && a.to == Self.v("1.0.0"))
    }

    @Test func removedFromIndex() throws {
        let idx = RepositoryIndex(serial: 2, expires: .distantFuture, packages: [])
        let a = try only(
            Differ.plan(index: idx, state: Self.state(["old": ("1.0.0", nil, ["1.0.0"], [])]), context: Self.ctx), "old"
        )
        #expect(a.kind == .remove)
    }

    @Test func dependencyGroupsAndOrder() throws {
        let idx = RepositoryIndex(
            serial: 1, expires: .distantFuture,
            packages: [
                Self.entry("app", "2.0.0", deps: [("ui", "^2.0.0")]), Self.entry("ui", "2.0.0"),
            ])
        let uiList = Self.list("ui", "2.0.0", files: [("ui.js", 10, "u")])
        let p = Differ.plan(
            index: idx, state: SandboxState(), context: Self.ctx,
            fileLists: [Self.id("app"): Self.appList, Self.id("ui"): uiList])
        #expect(p.changes.map(\.id.rawValue) == ["ui", "app"], "dependencies first")
        #expect(try only(p, "app").group == [Self.id("app"), Self.id("ui")])
        // ui not in this device's rollout → app cannot go either.
        let idx2 = RepositoryIndex(
            serial: 1, expires: .distantFuture,
            packages: [
                Self.entry("app", "2.0.0", deps: [("ui", "^2.0.0")]), Self.entry("ui", "2.0.0", rollout: 0),
            ])
        let q = Differ.plan(
            index: idx2, state: SandboxState(), context: Self.ctx,
            fileLists: [Self.id("app"): Self.appList, Self.id("ui"): uiList])
        #expect(try only(q, "ui").skip == .notInRollout)
        #expect(try only(q, "app").skip == .dependencyUnavailable)
        // Satisfied by what is already active.
        let r = Differ.plan(
            index: idx2, state: Self.state(["ui": ("2.1.0", nil, ["2.1.0"], [])]), context: Self.ctx,
            fileLists: [Self.id("app"): Self.appList])
        #expect(try only(r, "app").kind == .install)
    }

    /// Over many device ids, the share in a rollout is within a tolerance of its percent, and a
    /// device's bucket is stable for a release and differs across releases.
    @Test(arguments: [1, 10, 25, 50, 90])
    func rolloutSpread(_ percent: Int) {
        let r = Rollout(percent: percent, salt: "app@2.0.0")
        let n = 20_000
        let inside = (0..<n).filter {
            r.includes(deviceID: "device-\($0)", id: Self.id("app"), version: Self.v("2.0.0"))
        }.count
        let share = Double(inside) / Double(n) * 100
        #expect(abs(share - Double(percent)) < 1.5, "\(share)% for \(percent)%")
    }

    @Test func bucketsAreStableAndPerRelease() {
        let a = Rollout.bucket(deviceID: "dev", id: Self.id("app"), version: Self.v("2.0.0"), salt: "s")
        #expect(a == Rollout.bucket(deviceID: "dev", id: Self.id("app"), version: Self.v("2.0.0"), salt: "s"))
        let others = (0..<50).map {
            Rollout.bucket(deviceID: "dev", id: Self.id("app"), version: Self.v("2.0.\($0 + 1)"), salt: "s")
        }
        #expect(Set(others).count > 20, "buckets should move between releases")
        #expect(
            Rollout(percent: 0, salt: "").includes(deviceID: "x", id: Self.id("app"), version: Self.v("1.0.0")) == false
        )
        #expect(Rollout(percent: 100, salt: "").includes(deviceID: "x", id: Self.id("app"), version: Self.v("1.0.0")))
    }
}

@Suite("Differ: on-demand packages")
struct OnDemandPlanTests {
    typealias D = DifferTests

    static func onDemand(
        _ i: String, _ version: String = "1.0.0", preload: InstallPolicy.Preload = .never, priority: Int = 0,
        deps: [(String, String)] = []
    ) -> PackageEntry {
        var e = D.entry(i, version, deps: deps)
        e.install = InstallPolicy(mode: .onDemand, preload: preload, priority: priority)
        return e
    }

    static func kinds(_ p: Plan) -> [String: String] {
        Dictionary(
            p.actions.map { ($0.id.rawValue, $0.skip?.rawValue ?? $0.kind.rawValue) }, uniquingKeysWith: { a, _ in a })
    }

    @Test("a sync skips an on-demand package the device does not hold (no file list asked for), installs eager ones")
    func skipsUnheld() {
        let idx = RepositoryIndex(
            serial: 1, expires: .distantFuture, packages: [D.entry("shell", "1.0.0"), Self.onDemand("mini")])
        let p = Differ.plan(index: idx, state: SandboxState(), context: D.ctx)
        #expect(Self.kinds(p) == ["shell": "file-list-needed", "mini": "on-demand"])
        #expect(p.actions.first { $0.id.rawValue == "mini" }?.reason.contains("larder fetch mini") == true)
    }

    @Test("held on-demand packages are updated; asked-for ones installed with what they depend on")
    func heldAndWanted() {
        let idx = RepositoryIndex(
            serial: 1, expires: .distantFuture,
            packages: [
                Self.onDemand("held", "2.0.0"), Self.onDemand("asked", deps: [("lib", "^1.0.0")]), Self.onDemand("lib"),
                Self.onDemand("other"),
            ])
        let st = D.state(["held": ("1.0.0", nil, ["1.0.0"], [])])
        var ctx = D.ctx
        ctx.wanted = [D.id("asked")]
        let p = Differ.plan(index: idx, state: st, context: ctx)
        #expect(
            Self.kinds(p) == [
                "held": "file-list-needed", "asked": "file-list-needed", "lib": "file-list-needed",
                "other": "on-demand",
            ])
    }

    @Test("an eager package pulls in the on-demand package it depends on")
    func eagerDependency() {
        let idx = RepositoryIndex(
            serial: 1, expires: .distantFuture,
            packages: [D.entry("shell", "1.0.0", deps: [("ui", "^1.0.0")]), Self.onDemand("ui")])
        let p = Differ.plan(index: idx, state: SandboxState(), context: D.ctx)
        #expect(Self.kinds(p) == ["shell": "file-list-needed", "ui": "file-list-needed"])
    }

    @Test(
        "a preload takes what each hint allows on the network",
        arguments: [
            (NetworkKind?.none, ["never": "on-demand", "wifi": "on-demand", "any": "on-demand"]),
            (.metered, ["never": "on-demand", "wifi": "on-demand", "any": "file-list-needed"]),
            (.unmetered, ["never": "on-demand", "wifi": "file-list-needed", "any": "file-list-needed"]),
        ] as [(NetworkKind?, [String: String])])
    func preload(_ network: NetworkKind?, _ want: [String: String]) {
        let idx = RepositoryIndex(
            serial: 1, expires: .distantFuture,
            packages: [
                Self.onDemand("never"), Self.onDemand("wifi", preload: .unmetered),
                Self.onDemand("any", preload: .always),
            ])
        var ctx = D.ctx
        ctx.preload = network
        #expect(Self.kinds(Differ.plan(index: idx, state: SandboxState(), context: ctx)) == want)
    }

    @Test("installs are ordered by priority, then id")
    func priority() {
        let list = { (i: String) in D.list(i, "1.0.0", files: [("index.html", 10, i)]) }
        var low = D.entry("a-low", "1.0.0")
        low.install = InstallPolicy(mode: .eager, priority: -5)
        var high = D.entry("z-high", "1.0.0")
        high.install = InstallPolicy(mode: .eager, priority: 10)
        let idx = RepositoryIndex(
            serial: 1, expires: .distantFuture, packages: [low, D.entry("m-zero", "1.0.0"), high])
        let p = Differ.plan(
            index: idx, state: SandboxState(), context: D.ctx,
            fileLists: [D.id("a-low"): list("a-low"), D.id("m-zero"): list("m-zero"), D.id("z-high"): list("z-high")])
        #expect(p.actions.map(\.id.rawValue) == ["z-high", "m-zero", "a-low"])
    }

    @Test("the install policy is written only when it says something, and read back")
    func coding() throws {
        let plain = D.entry("app", "1.0.0")
        let data = try ManifestCoding.encode(plain)
        #expect(!String(decoding: data, as: UTF8.self).contains("install"))
        let od = Self.onDemand("app", preload: .unmetered, priority: 3)
        let back = try JSONDecoder().decode(PackageEntry.self, from: ManifestCoding.encode(od))
        #expect(back.install == InstallPolicy(mode: .onDemand, preload: .unmetered, priority: 3) && back.isOnDemand)
        let bare = try JSONDecoder().decode(InstallPolicy.self, from: Data(#"{"mode":"on-demand"}"#.utf8))
        #expect(bare == InstallPolicy(mode: .onDemand, preload: .never, priority: 0))
    }
}
