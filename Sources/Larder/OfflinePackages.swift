import Foundation
import LarderCore
import LarderFetch
import LarderResolve
import LarderStore
import LarderSync
import LarderWebView
import Synchronization
import SystemPackage

/// Everything an app does with Larder, from one object created once at launch.
///
/// `start()` counts the launch (a pending version unconfirmed too many launches rolls back),
/// syncs in the background at once and then every `syncInterval` — each time asking
/// `allowSync` first, where the app can veto (on cellular, on low battery) — and watches page
/// health: `webView()` hands out, per web view, a scheme-task driver pinned to the versions its
/// page loaded with and that page's health, so the page's `larder.ready()` confirms its version
/// and a failed page rolls a pending version back. `events()` publishes what happens, for UI
/// and logging.
public final class OfflinePackages: Sendable {
    /// What the app decides once.
    public struct Configuration: Sendable {
        /// The sandbox directory (created when missing).
        public var root: FilePath
        /// The repository: `https://…/`, or `file://…` for a repository on disk.
        public var repository: String
        /// The trusted publisher public keys (`PublisherKeys.loadPublicKey`, or decoded from the app's resources).
        public var trustedKeys: [PublicKey]
        /// The release channel.
        public var channel = Channel.default
        /// This app's version, compared with a release's `minClientVersion`.
        public var appVersion = SemanticVersion(1, 0, 0)
        /// Seconds between background syncs (the first is at `start()`); nil syncs at start only.
        public var syncInterval: TimeInterval? = 30 * 60
        /// Asked before each background sync; false skips that one (the app's veto: cellular, …).
        public var allowSync: @Sendable () async -> Bool = { true }
        /// The page-health deadline and script-error limit.
        public var pageHealth = PageHealthSettings.standard
        /// Custom schemes routed like `larder:` (each needs the app's scheme handler too).
        public var schemes: Set<String> = []
        /// What a request no package serves does: go to the network (https), or fail.
        public var network = NetworkMode.forward(scheme: "https")
        /// What every sync of this app uses: the HTTP engine (the platform's, `HTTPStack.platform`)
        /// and its policy, retention, lock timeout, recipient keys.
        public var sync = SyncSetup(engine: .platform)
        /// The most bytes the sandbox's packages may hold: after each sync, on-demand packages
        /// are evicted, least recently used first (never eager ones, nor one an open page
        /// pins). Nil: no budget.
        public var diskBudget: Int64?
        /// Whether a web view's request for an on-demand package the device does not hold
        /// installs it first (one install however many requests wait), then answers from it.
        public var installOnFirstUse = true
        /// How long such a request waits before it is answered as the package's policy says
        /// (the network, or 503 for a local-only package).
        public var firstUseDeadline: Duration = .seconds(10)
        /// Whether this app reports what happens to each release (off by default): events are
        /// recorded and sent, after each sync, only when this is on AND the signed index names a
        /// collector that samples this install (docs/privacy.md lists every field). Turning it
        /// off deletes the spool and the install id.
        public var telemetry = false

        /// A configuration with the defaults for everything but where and whom to trust.
        public init(root: FilePath, repository: String, trustedKeys: [PublicKey]) {
            self.root = root
            self.repository = repository
            self.trustedKeys = trustedKeys
        }
    }

    /// What happened, for UI and logging.
    public enum Event: Sendable, CustomStringConvertible {
        /// The launch was counted; rollbacks among the outcomes are in `rolledBackTo`.
        case launched([HealthOutcome])
        /// A sync began.
        case syncStarted
        /// The app's `allowSync` vetoed a background sync.
        case syncSkipped
        /// A sync finished (per-package failures inside).
        case synced(SyncReport)
        /// A sync could do nothing.
        case syncFailed(SyncError)
        /// A page's health verdict and what the store did with it.
        case pageHealth(PageHealthOutcome)
        /// Something could not be recorded (the store's error).
        case storeFailed(StoreError)
        /// An on-demand package was installed at its first use (or could not be), and how long it took.
        case firstUse(PackageID, FirstUse.Outcome)

        /// One line for a log.
        public var description: String {
            switch self {
            case .launched(let outcomes):
                "launch counted: \(outcomes.map { "\($0.id)@\($0.active ?? "-") \($0.health)" }.joined(separator: ", "))"
            case .syncStarted: "sync started"
            case .syncSkipped: "sync skipped (vetoed by the app)"
            case .synced(let r) where r.packages.isEmpty: "synced serial \(r.serial): nothing to do"
            case .synced(let r):
                "synced serial \(r.serial): " + r.packages.map { "\($0.id) \($0.outcome)" }.joined(separator: ", ")
            case .syncFailed(let e): "sync failed: \(e)"
            case .pageHealth(let o): "\(o)"
            case .storeFailed(let e): "store: \(e)"
            case .firstUse(let id, let outcome): "first use of \(id): \(outcome)"
            }
        }
    }

    /// The configuration.
    public let configuration: Configuration
    /// Resolves URLs for every web view (no lock, no system call).
    public let resolver: Resolver
    /// The resource loader every front-end shares; missing files are reported to the store.
    public let loader: ResourceLoader
    /// Passthrough forwarding (over the sync options' HTTP engine, the platform's by default).
    public let forwarder: Forwarder
    /// The page-health monitors of every web view (and of a gateway given it).
    public let pageHealth: PageHealthTracker
    /// Installs on-demand packages at their first use in a web view (or a gateway given it);
    /// nil when `installOnFirstUse` is off.
    public let firstUse: FirstUse?
    private let hub = EventHub()
    /// What this object's syncs and health writes hand its resolver (see `ServingHandoff`).
    private let handoff = ServingHandoff()
    private let tasks = Mutex<[Task<Void, Never>]>([])
    private let syncing = Mutex(false)

    /// Prepares the sandbox at `configuration.root` for the repository: the first time, writes
    /// its config (as `larder init`); afterwards keeps it — the trusted keys may have been rotated
    /// by a verified index since — unless the repository or channel changed.
    public init(_ configuration: Configuration) throws {
        self.configuration = configuration
        let c = configuration
        let existing = try? SyncConfig.load(root: c.root)
        let wanted = c.repository.hasSuffix("/") ? c.repository : c.repository + "/"
        if existing?.repository != wanted || existing?.channel != c.channel || existing?.appVersion != c.appVersion
            || existing?.diskBudget != c.diskBudget || (existing?.telemetry ?? false) != c.telemetry
        {
            _ = try SyncConfig.initialise(
                root: c.root, repository: c.repository, keys: c.trustedKeys, channel: c.channel,
                appVersion: c.appVersion, allowInsecureHTTP: false, diskBudget: c.diskBudget, telemetry: c.telemetry)
            if !c.telemetry { try? TelemetrySpool(root: c.root).turnOff() }
        }
        resolver = try Resolver(root: c.root, schemes: c.schemes, handoff: handoff)
        loader = ResourceLoader(resolver: resolver, reporter: StoreFailureReporter(root: c.root, handoff: handoff))
        forwarder = Forwarder(network: c.network, exchange: c.sync.engine.makeExchange())
        let hub = self.hub
        pageHealth = PageHealthTracker(
            settings: c.pageHealth,
            recorder: StoreHealthRecorder(root: c.root, handoff: handoff) { result in
                switch result {
                case .success(let o): hub.publish(.pageHealth(o))
                case .failure(let e): hub.publish(.storeFailed(e))
                }
            })
        if c.installOnFirstUse {
            let (root, handoff) = (c.root, self.handoff)
            var setup = c.sync
            setup.handoff = handoff
            firstUse = FirstUse(
                resolver: resolver, deadline: c.firstUseDeadline,
                onInstall: { id, outcome in hub.publish(.firstUse(id, outcome)) },
                install: Syncer.installer(root: root, setup: setup))
        } else {
            firstUse = nil
        }
    }

    /// A new subscription to the events from now on (each subscriber gets every event).
    public func events() -> AsyncStream<Event> { hub.subscribe() }

    /// Counts the launch, then syncs in the background now and every `syncInterval`, and runs
    /// the page-health clock. Call once, after subscribing to `events()`.
    public func start() {
        countLaunch()
        let interval = configuration.syncInterval
        let allow = configuration.allowSync
        let sync = Task { [self] in
            while !Task.isCancelled {
                if await allow() { _ = await syncNow() } else { hub.publish(.syncSkipped) }
                guard let interval else { return }
                try? await Task.sleep(for: .seconds(interval))
            }
        }
        let tracker = pageHealth
        let clock = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(200))
                tracker.tick()
            }
        }
        tasks.withLock { $0 += [sync, clock] }
    }

    /// Stops the background sync and the page-health clock, and ends every event stream.
    public func stop() {
        let running = tasks.withLock { t in
            defer { t = [] }
            return t
        }
        for t in running { t.cancel() }
        hub.finish()
    }

    /// Syncs now (no veto asked); nil when a sync of this object is already running.
    @discardableResult
    public func syncNow() async -> SyncReport? { await syncNow(preload: nil) }

    private func syncNow(preload: NetworkKind?) async -> SyncReport? {
        let idle = syncing.withLock { busy in
            defer { busy = true }
            return !busy
        }
        guard idle else { return nil }
        defer { syncing.withLock { $0 = false } }
        hub.publish(.syncStarted)
        do {
            var setup = configuration.sync
            setup.handoff = handoff
            let syncer = Syncer(root: configuration.root, setup: setup)
            let report = try await syncer.sync(SyncRequest(preload: preload))
            hub.publish(.synced(report))
            // Sent after the sync, in its own task: telemetry never delays or fails a sync.
            if configuration.telemetry { Task.detached { _ = await syncer.sendTelemetry() } }
            return report
        } catch {
            hub.publish(.syncFailed(error))
            return nil
        }
    }

    /// Preloads now: a sync that also installs the on-demand packages whose hint allows `network`
    /// (`preload: always`, or `unmetered` on an unmetered network), asking `allowSync` first as
    /// for a background sync; nil when the app vetoed it or a sync of this object is running.
    @discardableResult
    public func preload(on network: NetworkKind) async -> SyncReport? {
        guard await configuration.allowSync() else {
            hub.publish(.syncSkipped)
            return nil
        }
        return await syncNow(preload: network)
    }

    /// Sends the telemetry the spool holds now, ignoring the back-off (what `larder telemetry
    /// flush` does); syncs send it on their own.
    @discardableResult
    public func flushTelemetry() async -> TelemetrySendReport {
        var setup = configuration.sync
        setup.handoff = handoff
        return await Syncer(root: configuration.root, setup: setup).sendTelemetry(force: true)
    }

    /// Whether telemetry is on, where it goes, and what waits to be sent (`larder telemetry status`).
    public var telemetryStatus: TelemetryStatus { TelemetrySpool(root: configuration.root).status(now: Date()) }

    /// What one web view needs: a scheme-task driver over the sandbox, pinned (when `pinning`
    /// is not empty: those packages; nil: every active package) to the versions its page loaded
    /// with and renewed at each navigation, and that web view's page health. With `cookies` (the
    /// engine's store: `WebKitCookies(webView.configuration.websiteDataStore.httpCookieStore)`),
    /// cookies cross the proxy (`CookieBridge`), their `Domain` attributes checked against
    /// `suffixes` (an app on Apple platforms bundles `public_suffix_list.dat` and passes
    /// `PublicSuffixList(contentsOf:)`; manifests §17).
    public func webView(
        pinning ids: [String]? = nil, cookies: (any CookieStore)? = nil, suffixes: PublicSuffixList = .system
    ) throws(StoreError) -> WebViewPackages {
        let pins = ids == [] ? nil : try SessionPins(resolver: resolver, ids: ids)
        return WebViewPackages(
            driver: SchemeTaskDriver(
                loader: loader, pins: pins, forwarder: forwarder,
                cookies: cookies.map { CookieBridge(store: $0, suffixes: suffixes) }, firstUse: firstUse),
            health: WebViewHealth(tracker: pageHealth, loader: loader, pins: pins), pins: pins)
    }

    private func countLaunch() {
        do throws(StoreError) {
            var options = Sandbox.Options()
            options.lockTimeout = configuration.sync.lockTimeout
            options.handoff = handoff
            let sandbox = try Sandbox.open(configuration.root, options: options)
            defer { sandbox.close() }
            hub.publish(.launched(try sandbox.beginLaunch()))
        } catch {
            hub.publish(.storeFailed(error))
        }
    }
}

/// One web view's share of `OfflinePackages`: register `driver` as its scheme handler
/// and give `health` its navigation and script-message events (WebKit: `WebViewGlue(driver:health:
/// configuration:)`), and `release()` when the web view goes away.
public final class WebViewPackages: Sendable {
    /// Answers the web view's scheme tasks.
    public let driver: SchemeTaskDriver
    /// The web view's page health.
    public let health: WebViewHealth
    /// The pinned versions, if any.
    public let pins: SessionPins?

    init(driver: SchemeTaskDriver, health: WebViewHealth, pins: SessionPins?) {
        self.driver = driver
        self.health = health
        self.pins = pins
    }

    /// Gives the pinned versions back to gc.
    public func release() { pins?.release() }
}

/// Broadcasts events to every subscriber.
final class EventHub: Sendable {
    private let subscribers = Mutex<[UUID: AsyncStream<OfflinePackages.Event>.Continuation]>([:])
    private let finished = Mutex(false)

    func subscribe() -> AsyncStream<OfflinePackages.Event> {
        let (stream, continuation) = AsyncStream<OfflinePackages.Event>.makeStream(
            bufferingPolicy: .bufferingNewest(256))
        let id = UUID()
        if finished.withLock({ $0 }) {
            continuation.finish()
            return stream
        }
        subscribers.withLock { $0[id] = continuation }
        continuation.onTermination = { [weak self] _ in _ = self?.subscribers.withLock { $0.removeValue(forKey: id) } }
        return stream
    }

    func publish(_ event: OfflinePackages.Event) {
        for c in subscribers.withLock({ Array($0.values) }) { c.yield(event) }
    }

    func finish() {
        finished.withLock { $0 = true }
        let all = subscribers.withLock { s in
            defer { s = [:] }
            return Array(s.values)
        }
        for c in all { c.finish() }
    }
}
