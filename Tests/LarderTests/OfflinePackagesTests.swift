import Foundation
import Larder
import LarderTestSupport
import Synchronization
import Testing

/// `OfflinePackages`, the one object an app creates at launch, through its public API only: the
/// life cycle the README's quick start shows — launch, sync from a `file://` repository, resolve,
/// page health confirming or rolling back, background syncs and the app's veto.
@Suite("OfflinePackages: an app's life cycle", .hangGuard)
struct OfflinePackagesTests {
    @Test(
        "launch on an empty sandbox: the launch is counted, v1 synced at once, its URLs resolve, its page confirms it")
    func quickStart() async throws {
        let world = try AppWorld()
        defer { world.cleanup() }
        try world.publish("1.0.0")
        let packages = try OfflinePackages(world.configuration())
        let log = EventLog(packages)
        packages.start()
        #expect(await log.wait { reports($0).count == 1 }, "\(log.all)")
        #expect(log.all.map(kind).prefix(3) == ["launched", "syncStarted", "synced"], "\(log.all)")
        if case .launched(let outcomes) = log.all.first { #expect(outcomes.isEmpty) }
        let report = try #require(reports(log.all).first)
        #expect(report.packages.map(\.action) == [.install] && report.packages.map(\.outcome) == [.done], "\(report)")

        #expect(localVersion(packages, "https://app.example.com/") == "1.0.0")
        #expect(localVersion(packages, "larder://sample-app/data/catalog.json") == "1.0.0")
        guard
            case .response(let page) = packages.loader.load(
                LoadRequest(url: "https://app.example.com/data/catalog.json"))
        else {
            Issue.record("the catalogue is not served from the package")
            return
        }
        #expect(page.status == 200 && page.outcome.description == "sample-app@1.0.0")
        #expect(try world.package()?.health == .pending)

        // A web view's scheme handler is answered from the package.
        let view = try packages.webView()
        let task = RecordingTask(SchemeRequest(url: "larder://sample-app/", isNavigation: true))
        view.driver.start(task)
        let answer = try #require(await task.result())
        #expect(answer.finished && answer.head?.status == 200, "\(String(describing: answer.head))")
        #expect(
            answer.body
                == (try Data(
                    contentsOf: world.repository.source("sample-app", "1.0.0").appendingPathComponent("index.html"))))

        // The page's larder.ready() confirms the version it was loaded from.
        #expect(view.health.navigationStarted(url: "larder://sample-app/"))
        view.health.navigationFinished()
        #expect(view.health.message(["event": "ready", "secret": view.health.secret]) == nil)
        #expect(await log.wait { !verdicts($0).isEmpty }, "\(log.all)")
        let verdict = try #require(verdicts(log.all).first)
        #expect(verdict.verdict == .healthy && verdict.effect == .confirmed, "\(verdict)")
        #expect(verdict.activation.version.description == "1.0.0")
        #expect(try world.package()?.health == .confirmed)
        view.release()

        // stop() ends the background work and every event stream.
        packages.stop()
        await log.waitForEnd()
        #expect(log.hasEnded)
        var late = packages.events().makeAsyncIterator()
        #expect(await late.next() == nil, "a subscription after stop() ends at once")
    }

    @Test("background syncs ask the app first: vetoed ones are skipped, the next allowed one installs the update")
    func vetoThenBackgroundSync() async throws {
        let world = try AppWorld()
        defer { world.cleanup() }
        try world.publish("1.0.0")
        let veto = Mutex(true)
        var config = world.configuration()
        config.syncInterval = 0.02
        config.allowSync = { !veto.withLock { $0 } }
        let packages = try OfflinePackages(config)
        defer { packages.stop() }
        #expect(await packages.syncNow() != nil, "syncNow does not ask the veto")
        #expect(localVersion(packages, "https://app.example.com/") == "1.0.0")
        try world.publish("2.0.0")

        let log = EventLog(packages)
        packages.start()
        #expect(await log.wait { $0.filter { kind($0) == "syncSkipped" }.count >= 3 }, "\(log.all)")
        #expect(!log.all.contains { kind($0) == "syncStarted" }, "\(log.all)")
        #expect(localVersion(packages, "https://app.example.com/") == "1.0.0", "a vetoed sync installs nothing")

        veto.withLock { $0 = false }
        #expect(await log.wait { reports($0).contains { !$0.packages.isEmpty } }, "\(log.all)")
        let update = try #require(reports(log.all).first { !$0.packages.isEmpty })
        #expect(update.packages.first?.action == .update && update.packages.first?.outcome == .done, "\(update)")
        #expect(localVersion(packages, "https://app.example.com/") == "2.0.0")
        // Later background syncs find nothing to do.
        #expect(await log.wait { reports($0).count >= 2 }, "\(log.all)")
        #expect(reports(log.all).dropFirst().allSatisfy { $0.packages.isEmpty })
    }

    @Test("a failing page of a pending update rolls it back; a web view keeps the version it loaded until it navigates")
    func failedPageRollsBack() async throws {
        let world = try AppWorld()
        defer { world.cleanup() }
        try world.publish("1.0.0")
        var config = world.configuration()
        config.pageHealth = PageHealthSettings(readyDeadline: 30, maxScriptErrors: 2)
        let packages = try OfflinePackages(config)
        defer { packages.stop() }
        let log = EventLog(packages)
        _ = await packages.syncNow()
        let first = try packages.webView()
        #expect(first.health.navigationStarted(url: "larder://sample-app/"))
        first.health.message(["event": "ready", "secret": first.health.secret])
        #expect(await log.wait { !verdicts($0).isEmpty })

        try world.publish("2.0.0")
        let pinned = try packages.webView()
        _ = await packages.syncNow()
        #expect(try world.package()?.active?.description == "2.0.0")
        // The web view opened before the update still loads 1.0.0 (what its scheme handler
        // serves: the loader with its pins); a navigation renews them; a new one gets 2.0.0.
        #expect(served(packages, pinned) == "sample-app@1.0.0")
        #expect(served(packages, nil) == "sample-app@2.0.0")
        try pinned.pins?.renew()
        #expect(served(packages, pinned) == "sample-app@2.0.0")
        let view = try packages.webView()
        #expect(view.health.activation(for: "larder://sample-app/")?.version.description == "2.0.0")

        // The new version's page fails: two uncaught errors.
        #expect(view.health.navigationStarted(url: "larder://sample-app/"))
        let error: [String: Any] = [
            "event": "error", "message": "TypeError: x is undefined", "source": "app.js", "line": 3,
            "secret": view.health.secret,
        ]
        view.health.message(error)
        view.health.message(error)
        #expect(await log.wait { verdicts($0).count == 2 }, "\(log.all)")
        let all = verdicts(log.all)
        try #require(all.count == 2, "\(log.all)")
        let failed = all[1]
        #expect(failed.effect == .rolledBack(to: "1.0.0"), "\(failed)")
        if case .failed(let reason) = failed.verdict {
            #expect(reason.contains("TypeError: x is undefined"), "\(reason)")
        } else {
            Issue.record("expected a failed verdict: \(failed)")
        }
        #expect(localVersion(packages, "https://app.example.com/") == "1.0.0")
        let pkg = try #require(try world.package())
        #expect(pkg.active?.description == "1.0.0" && pkg.hasFailed(SemanticVersion(2, 0, 0)))
        // The failed version is not installed again by the next sync.
        let again = try #require(await packages.syncNow())
        #expect(!again.packages.contains { $0.outcome == .done }, "\(again)")
        #expect(localVersion(packages, "https://app.example.com/") == "1.0.0")
        for v in [first, pinned, view] { v.release() }
    }

    @Test("an update never confirmed is rolled back by a launch once its unconfirmed launches are used up")
    func unconfirmedLaunches() async throws {
        let world = try AppWorld()
        defer { world.cleanup() }
        try world.publish("1.0.0")
        var config = world.configuration()
        config.allowSync = { false }
        do {
            let packages = try OfflinePackages(config)
            _ = await packages.syncNow()
            try world.publish("2.0.0")
            _ = await packages.syncNow()
            packages.stop()
        }
        #expect(try world.package()?.active?.description == "2.0.0")
        var launches: [[HealthOutcome]] = []
        for _ in 0..<4 {
            let packages = try OfflinePackages(config)
            let log = EventLog(packages)
            packages.start()
            #expect(await log.wait { $0.contains { kind($0) == "launched" } })
            if case .launched(let outcomes) = log.all.first { launches.append(outcomes) }
            packages.stop()
        }
        try #require(launches.count == 4)
        for outcomes in launches.prefix(3) {
            #expect(
                outcomes.map(\.active) == ["2.0.0"] && outcomes.allSatisfy { $0.rolledBackTo == nil }, "\(outcomes)")
        }
        #expect(launches[3].first?.rolledBackTo == "1.0.0" && launches[3].first?.rolledBackFrom == "2.0.0")
        #expect(try world.package()?.active?.description == "1.0.0")
    }

    @Test(
        "a repository signed by a key the app does not trust: the sync fails with a signature error, nothing installed")
    func untrustedRepository() async throws {
        let world = try AppWorld()
        defer { world.cleanup() }
        try world.publish("1.0.0")
        let packages = try OfflinePackages(world.configuration(trusting: PrivateKey().publicKey))
        defer { packages.stop() }
        let log = EventLog(packages)
        #expect(await packages.syncNow() == nil)
        #expect(await log.wait { $0.contains { kind($0) == "syncFailed" } }, "\(log.all)")
        let failure = log.all.compactMap { if case .syncFailed(let e) = $0 { e } else { nil } }.first
        #expect(failure?.code == "signature", "\(String(describing: failure))")
        #expect(localVersion(packages, "https://app.example.com/") == nil)
        #expect(try world.package() == nil)
    }

    @Test("a second launch keeps the sandbox's config; another repository rewrites it")
    func configuration() async throws {
        let world = try AppWorld()
        defer { world.cleanup() }
        try world.publish("1.0.0")
        let first = try OfflinePackages(world.configuration())
        _ = await first.syncNow()
        first.stop()
        let written = try SyncConfig.load(root: world.root)
        #expect(written.repository == world.repository.url.absoluteString)

        // Relaunching with the same settings leaves the config file as it is.
        let before = try Data(contentsOf: URL(fileURLWithPath: world.root.appending("config.json").string))
        let second = try OfflinePackages(world.configuration())
        second.stop()
        #expect(try Data(contentsOf: URL(fileURLWithPath: world.root.appending("config.json").string)) == before)

        var moved = world.configuration()
        moved.repository = "file:///elsewhere/repo"
        let third = try OfflinePackages(moved)
        third.stop()
        #expect(try SyncConfig.load(root: world.root).repository == "file:///elsewhere/repo/")
    }

    /// Where the catalogue a web view's page asks for comes from (`package@version`).
    func served(_ packages: OfflinePackages, _ view: WebViewPackages?) -> String? {
        let request = LoadRequest(url: "larder://sample-app/data/catalog.json")
        guard case .response(let r) = packages.loader.load(request, session: view?.pins?.current) else { return nil }
        return r.outcome.description
    }

    @Test("a web view's first request for an on-demand package installs it once and is answered from it")
    func firstUseInWebView() async throws {
        let world = try AppWorld()
        defer { world.cleanup() }
        try world.publish("1.0.0")
        try world.repository.publish(
            "1.0.0", id: "mini",
            configure: {
                $0.routes = ["https://mini.example.com/"]
                $0.install = InstallPolicy(mode: .onDemand)
            })
        var config = world.configuration()
        // A deadline no loaded machine reaches: in a whole `swift test` the install can queue.
        config.firstUseDeadline = .seconds(300)
        let packages = try OfflinePackages(config)
        defer { packages.stop() }
        let log = EventLog(packages)
        let synced = try #require(await packages.syncNow())
        #expect(synced.packages.first { $0.id == "mini" }?.outcome == .skipped, "\(synced)")
        let view = try packages.webView()
        let tasks = ["https://mini.example.com/", "https://mini.example.com/css/app.css", "larder://mini/js/app.js"].map
        {
            RecordingTask(SchemeRequest(url: $0, isNavigation: $0.hasSuffix(".com/")))
        }
        for t in tasks { view.driver.start(t) }
        for t in tasks {
            let answer = try #require(await t.result())
            #expect(answer.finished && answer.head?.status == 200, "\(String(describing: answer.head))")
        }
        #expect(await log.wait { $0.contains { kind($0) == "firstUse" } }, "\(log.all)")
        let installs = log.all.compactMap { if case .firstUse(let id, let o) = $0 { "\(id) \(o)" } else { nil } }
        #expect(installs.count == 1 && installs.first?.hasPrefix("mini installed in") == true, "\(installs)")
        #expect(localVersion(packages, "https://mini.example.com/") == "1.0.0")
    }
}
