// larder-webview (scripts/webview): opens a URL of a sandbox in a WebKitGTK view, for developers
// and for tests. One line per request, load, health verdict and web-process event, as
// `larder serve` prints them.
import ArgumentParser
import Foundation
import Larder
import LarderWebKitGTK
import Synchronization

struct WebView: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "webview",
        abstract: "Open a URL of a sandbox in a WebKitGTK view (under Xvfb when there is no display).",
        discussion: """
            The view serves larder: (and each --scheme) from the sandbox through Larder's scheme \
            handler; what no package serves is forwarded to the network (--upstream-scheme), or \
            fails with --offline. Prints one line per request (method, URL, status, outcome, \
            bytes, time), per load event, per page-health verdict and per web-process event \
            (a terminated web process is reloaded with back-off). After each page's load event \
            once no request has been in flight for --settle seconds, --dump-cookies prints the cookies the store holds for a URL, \
            --dump-dom prints the DOM between "dom begin" and "dom end" lines and --screenshot \
            saves what the view shows. Exits --stay seconds after the \
            first page settles; exit 1 when no page settles within --timeout seconds.
            """)

    @Option(help: ArgumentHelp("The sandbox directory.", valueName: "DIR")) var root: String
    @Flag(help: "Watch page health: ready confirms, failure rolls back.") var pageHealth = false
    @Option(help: ArgumentHelp("Seconds a page has to call larder.ready() after loading.", valueName: "S"))
    var readyDeadline: Double = 30
    @Option(help: ArgumentHelp("Uncaught script errors that fail a page before it is ready.", valueName: "N"))
    var maxScriptErrors = 3
    @Option(help: ArgumentHelp("Web-process terminations before ready that fail a release.", valueName: "N"))
    var maxTerminations = 3
    @Option(help: ArgumentHelp("The web process's memory limit in MB (0: WebKit's default).", valueName: "MB"))
    var memoryLimit: UInt32 = 0
    @Option(help: ArgumentHelp("Scheme of forwarded requests: https or http.", valueName: "SCHEME"))
    var upstreamScheme = "https"
    @Flag(help: "Fail what no package serves instead of forwarding it.") var offline = false
    @Option(name: .customLong("scheme"), help: ArgumentHelp("Another custom scheme (repeatable).", valueName: "SCHEME"))
    var schemes: [String] = []
    @Flag(help: "Do not bridge cookies across the proxy.") var noCookieBridge = false
    @Flag(help: "Hand forwarded redirects to WebKit as they come instead of following them.")
    var relayRedirects = false
    @Option(help: ArgumentHelp("Keep cookies and cache in DIR (default: in memory only).", valueName: "DIR"))
    var dataDir: String?
    @Flag(help: "Print the DOM after each page settles.") var dumpDom = false
    @Option(
        help: ArgumentHelp(
            "After each page settles, print the cookies the store holds for URL (repeatable).", valueName: "URL"))
    var dumpCookies: [String] = []
    @Option(help: ArgumentHelp("Save a PNG of the view after each page settles.", valueName: "FILE.png"))
    var screenshot: String?
    @Option(
        help: ArgumentHelp(
            "Seconds with no request in flight after a page's load event before it counts as settled.",
            valueName: "S"))
    var settle: Double = 1
    @Option(help: ArgumentHelp("Seconds to keep running after the first page settles.", valueName: "S"))
    var stay: Double = 0
    @Option(help: ArgumentHelp("Seconds to wait for a first page before giving up.", valueName: "S"))
    var timeout: Double = 60
    @Flag(
        help: """
            After each page settles, print its Navigation and Paint Timing on one line: timing {"load": ms to \
            the load event, "paint": ms to first contentful paint or null, "resources": n}. It waits for the \
            page's load event (up to 10 s, else load is 0) and then for its first contentful paint (up to 2 s, \
            else null): a page can settle before its load event fires.
            """)
    var timing = false
    @Option(
        help: ArgumentHelp("Open the URL this many times in the same view (later loads use its cache).", valueName: "N")
    )
    var loads = 1
    @Flag(help: "Let file: pages load other file: URLs (to time the same files outside a package).")
    var allowFileAccess = false
    @Argument(help: "The URL to open (larder://<package>/<path>, or a routed custom scheme).") var url: String

    func validate() throws {
        guard ["http", "https"].contains(upstreamScheme) else {
            throw ValidationError("--upstream-scheme must be http or https, got \(upstreamScheme)")
        }
        guard (1...100).contains(loads) else {
            throw ValidationError("--loads must be between 1 and 100, got \(loads)")
        }
        guard (0.1...600).contains(readyDeadline) else {
            throw ValidationError("--ready-deadline must be between 0.1 and 600 seconds, got \(readyDeadline)")
        }
    }

    func run() throws {
        let log: @Sendable (String) -> Void = { say($0) }
        let root = FilePath(root)
        let resolver: Resolver
        do { resolver = try Resolver(root: root, schemes: Set(schemes)) } catch {
            throw failure("the sandbox cannot be read: \(error)")
        }
        let loader = ResourceLoader(resolver: resolver, reporter: StoreFailureReporter(root: root))
        var tracker: PageHealthTracker?
        let shown = Shown()
        if pageHealth {
            let recorder = StoreHealthRecorder(root: root) { result in
                switch result {
                case .success(let outcome):
                    log("\(outcome)")
                    // As an app does: the page of a version rolled back is loaded again (from the
                    // version now active).
                    if case .rolledBack = outcome.effect { shown.reload(log) }
                case .failure(let error): log("health: could not be recorded: \(error)")
                }
            }
            tracker = PageHealthTracker(
                settings: PageHealthSettings(readyDeadline: readyDeadline, maxScriptErrors: maxScriptErrors),
                recorder: recorder)
        }
        guard GLibMain.initializeGTK() else { throw failure("GTK cannot open a display (run it under xvfb-run)") }
        var configuration = GTKWebView.Configuration(
            loader: loader,
            forwarder: Forwarder(
                network: offline ? .offline : .forward(scheme: upstreamScheme),
                exchange: HTTPStack.platform.makeExchange()),
            schemes: ["larder"] + schemes, tracker: tracker, terminationLimit: maxTerminations,
            memoryLimitMB: memoryLimit, bridgeCookies: !noCookieBridge, dataDirectory: dataDir, log: log)
        configuration.followRedirects = !relayRedirects
        let view: GTKWebView
        do { view = try GTKWebView(configuration) } catch {
            throw failure("the sandbox cannot be read: \(error)")
        }
        if allowFileAccess { view.allowFileAccess() }
        view.presentInWindow(width: 1024, height: 768)
        shown.view = view

        let session = Session(self, view)
        view.onLoaded = { session.loaded($0) }
        GLibMain.after(timeout) { session.timedOut() }
        view.load(url)
        GLibMain.runLoop()
        if session.status != 0 { throw ExitCode(session.status) }
    }

    func failure(_ message: String) -> ExitCode {
        FileHandle.standardError.write(Data("larder-webview: \(message)\n".utf8))
        return ExitCode(1)
    }
}

/// The view, for a verdict's outcome to reload it (set once on the main loop, read there).
final class Shown: Sendable {
    private let shown = Mutex<GTKWebView?>(nil)

    /// The view a reload loads into.
    var view: GTKWebView? {
        get { shown.withLock { $0 } }
        set { shown.withLock { $0 = newValue } }
    }

    func reload(_ log: @escaping @Sendable (String) -> Void) {
        GLibMain.async { [self] in
            guard let view, let url = view.recovery.lastURL else { return }
            log("reloading \(url) after the rollback")
            view.load(url)
        }
    }
}

/// What happens after each load (on the main loop): settle, DOM, screenshot, the end.
final class Session: @unchecked Sendable {
    // @unchecked: used on the main loop only.
    let options: WebView
    let view: GTKWebView
    var settled = false
    var status: Int32 = 0
    var loads = 0
    /// Since when no request of the view has been in flight (the current load's).
    var idleSince: Date?

    init(_ options: WebView, _ view: GTKWebView) {
        self.options = options
        self.view = view
    }

    func loaded(_ url: String) {
        loads += 1
        let load = loads
        // Settled: no request of the view in flight for `settle` seconds after the load event (a
        // page's scripts go on fetching after it), checked every 100 ms.
        idleSince = nil
        GLibMain.every(0.1) { [self] in
            // A later load (a reload after a dead web process) settles on its own.
            guard load == loads else { return false }
            guard view.handler.driver.activeTasks == 0 else {
                idleSince = nil
                return true
            }
            let since = idleSince ?? Date()
            idleSince = since
            guard Date().timeIntervalSince(since) >= options.settle else { return true }
            report(url) { [self] in
                // The same URL again, as many times as asked (from the view's cache).
                if load < options.loads {
                    settled = true
                    view.load(options.url)
                    return
                }
                guard load == options.loads || !settled else { return }
                settled = true
                GLibMain.after(options.stay) { GLibMain.quit() }
            }
            return false
        }
    }

    func report(_ url: String, then: @escaping () -> Void) {
        guard options.timing else { return reportRest(url, then: then) }
        timePage(since: Date(), loadSeen: nil) { [self] in reportRest(url, then: then) }
    }

    /// Reads the page's timing every 50 ms until its load event has fired and its first
    /// contentful paint is recorded (or `PageTiming.paintWait` after the load event: a page may
    /// paint nothing), at most `PageTiming.loadWait` in all; then prints it.
    func timePage(since started: Date, loadSeen: Date?, then: @escaping () -> Void) {
        view.evaluate(PageTiming.script) { [self] json in
            let (load, paint) = PageTiming.read(json)
            let seen = load > 0 ? (loadSeen ?? Date()) : nil
            let done =
                seen.map { paint != nil || Date().timeIntervalSince($0) >= PageTiming.paintWait }
                ?? (Date().timeIntervalSince(started) >= PageTiming.loadWait)
            guard done else {
                let next = MainLoopBound { self.timePage(since: started, loadSeen: seen, then: then) }
                return GLibMain.after(0.05) { next.value() }
            }
            say("timing \(json ?? "null")")
            then()
        }
    }

    func reportRest(_ url: String, then: @escaping () -> Void) {
        let shot = { [self] in
            guard let path = options.screenshot else { return then() }
            view.snapshot(to: path) { ok in
                say(ok ? "screenshot \(path)" : "screenshot failed: \(path)")
                then()
            }
        }
        let dom = { [self] in
            guard options.dumpDom else { return shot() }
            view.evaluate("document.documentElement.outerHTML") { html in
                say("dom begin \(url)\n\(html ?? "(no DOM)")\ndom end")
                shot()
            }
        }
        guard let store = view.cookies?.store, !options.dumpCookies.isEmpty else { return dom() }
        let (urls, next) = (options.dumpCookies, MainLoopBound(dom))
        Task {
            for u in urls {
                for cookie in await store.cookies(for: URL(string: u) ?? URL(fileURLWithPath: "/")) {
                    say("cookie \(u): \(cookie)")
                }
            }
            GLibMain.async { next.value() }
        }
    }

    func timedOut() {
        guard !settled else { return }
        FileHandle.standardError.write(Data("larder-webview: no page settled within \(options.timeout) s\n".utf8))
        status = 1
        GLibMain.quit()
    }
}

/// The page's own timing, from navigation start: its load event, first contentful paint, and
/// how many resources it loaded (Navigation Timing, Paint Timing, Resource Timing).
enum PageTiming {
    static let script = """
        JSON.stringify({load: performance.getEntriesByType('navigation')[0]?.loadEventStart ?? null, \
        paint: performance.getEntriesByType('paint').find(e => e.name === 'first-contentful-paint')?.startTime ?? null, \
        resources: performance.getEntriesByType('resource').length})
        """
    /// How long to wait for the load event, and then for the first contentful paint.
    static let loadWait: TimeInterval = 10
    static let paintWait: TimeInterval = 2

    /// The load event's time (0 when it has not fired) and the paint's (nil when none yet) in `json`.
    static func read(_ json: String?) -> (load: Double, paint: Double?) {
        guard let data = json?.data(using: .utf8),
            let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
        else { return (0, nil) }
        return ((object["load"] as? NSNumber)?.doubleValue ?? 0, (object["paint"] as? NSNumber)?.doubleValue)
    }
}

/// One line on stdout, written at once (the output is read by tests as it comes).
func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }

WebView.main()
