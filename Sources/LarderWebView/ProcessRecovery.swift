import Foundation
import LarderCore
import LarderResolve
import Synchronization

/// Why a web view's content process ended (WebKit: `webViewWebContentProcessDidTerminate` on
/// Apple platforms, which gives no reason; WebKitGTK's `web-process-terminated` signal).
public enum TerminationReason: Sendable, Equatable, CustomStringConvertible {
    /// It crashed (or was killed by a signal: WebKitGTK reports a SIGKILL as a crash).
    case crashed
    /// The engine killed it for using more memory than its limit.
    case memoryLimit
    /// The app asked for it (`terminateWebProcess`), or the system reclaimed it while the app
    /// was in the background (Apple: a blank page found on return to the foreground).
    case killed
    /// The engine did not say.
    case unknown

    /// `crashed`, `exceeded its memory limit`, `was killed`, `terminated`.
    public var description: String {
        switch self {
        case .crashed: "crashed"
        case .memoryLimit: "exceeded its memory limit"
        case .killed: "was killed"
        case .unknown: "terminated"
        }
    }
}

/// How a web view recovers from a dead content process.
public struct RecoveryPolicy: Sendable, Equatable {
    /// The first reload's delay, in seconds; each further termination in a row doubles it.
    public var firstDelay: TimeInterval
    /// The longest delay between reloads.
    public var maxDelay: TimeInterval
    /// A page that stayed up this long since its load ended its streak: the next termination
    /// counts as the first again.
    public var stableAfter: TimeInterval
    /// Reloads in a row after which the view stops reloading (and says so).
    public var maxReloads: Int

    /// Reloads after 0.25 s, doubling to 30 s, at most 8 in a row; a page up for 10 s resets the
    /// streak.
    public static let standard = RecoveryPolicy(firstDelay: 0.25, maxDelay: 30, stableAfter: 10, maxReloads: 8)

    /// Creates a policy (counts at least 1, delays at least 0).
    public init(firstDelay: TimeInterval, maxDelay: TimeInterval, stableAfter: TimeInterval, maxReloads: Int) {
        self.firstDelay = max(0, firstDelay)
        self.maxDelay = max(self.firstDelay, maxDelay)
        self.stableAfter = max(0, stableAfter)
        self.maxReloads = max(1, maxReloads)
    }
}

/// What to do after the content process died.
public enum RecoveryAction: Sendable, Equatable, CustomStringConvertible {
    /// Load `url` again after `delay` seconds.
    case reload(url: String, delay: TimeInterval)
    /// Stop trying; `reason` says why, for a person (the app shows its own error page).
    case giveUp(reason: String)

    /// The URL to load again and after how long, for `reload` (nil for `giveUp`, or a URL that is
    /// not one).
    public var reload: (url: URL, delay: TimeInterval)? {
        guard case .reload(let url, let delay) = self, let u = URL(string: url) else { return nil }
        return (u, delay)
    }

    /// `reload URL in N s`, or `give up: …`.
    public var description: String {
        switch self {
        case .reload(let url, let delay): "reloading \(url) in \(String(format: "%.2f", delay)) s"
        case .giveUp(let reason): "not reloading: \(reason)"
        }
    }
}

/// A web view's recovery from a dead content process, in plain calls: engine glue forwards its
/// load events, page-health messages and termination signal here (they go on to `health`), and
/// does what the returned action says.
///
/// The page the view was showing is loaded again, after a delay that doubles with each
/// termination in a row (so a page that kills its process as it loads cannot loop), until
/// `maxReloads` in a row. A page that stays up `stableAfter` seconds after loading, or signals
/// ready, ends the streak. The release is judged by `WebViewHealth`, which this tells about
/// each termination: one termination is not a release failure.
public final class WebViewRecovery: Sendable {
    /// The policy.
    public let policy: RecoveryPolicy
    /// Told about every termination (nil: no page health).
    public let health: WebViewHealth?
    let clock: @Sendable () -> TimeInterval
    private let state = Mutex(State())

    struct State {
        var streak = 0
        var lastURL: String?
        var loadedAt: TimeInterval?
    }

    /// Recovery by `policy`, telling `health`; `clock` in seconds on a monotonic clock.
    public init(
        policy: RecoveryPolicy = .standard, health: WebViewHealth? = nil,
        clock: @escaping @Sendable () -> TimeInterval = { ProcessInfo.processInfo.systemUptime }
    ) {
        self.policy = policy
        self.health = health
        self.clock = clock
    }

    /// A main-frame navigation to `url` committed: the page to come back to (and, for `health`,
    /// a new page to watch).
    public func navigationCommitted(url: String) {
        health?.navigationStarted(url: url)
        guard !url.isEmpty else { return }
        state.withLock { $0.lastURL = url }
    }

    /// A main-frame navigation to `url` committed (an engine's `URL`).
    public func navigationCommitted(_ url: URL?) { navigationCommitted(url: url?.absoluteString ?? "") }

    /// The script a web view adds to every frame at document start: the `document.cookie`
    /// bridge (`CookieBridge.pageScript`). Page health's goes to the main frame only
    /// (`WebViewHealth.pageScript`).
    public static let pageScripts = CookieBridge.pageScript

    /// The name of the page-health script's message handler.
    public static let messageHandler = PageHealthScript.messageHandler

    /// The page finished loading (its load event, for `health` too).
    public func pageLoaded() {
        health?.navigationFinished()
        state.withLock { $0.loadedAt = clock() }
    }

    /// The page signalled ready: the streak ends.
    public func pageReady() { state.withLock { $0.streak = 0 } }

    /// A message from the page-health script (a `WKScriptMessage`'s body), for `health`; a ready
    /// signal `health` accepts also ends the streak. `mainFrame`: the engine says it comes from
    /// the main frame. Returns why it was refused, if it was.
    @discardableResult
    public func message(_ body: Any, mainFrame: Bool = true) -> PageSignalError? {
        guard JSONSerialization.isValidJSONObject(body), let data = try? JSONSerialization.data(withJSONObject: body)
        else { return PageSignalError("the message is not a JSON object") }
        return message(json: data, mainFrame: mainFrame)
    }

    /// A message from the page-health script as JSON text (WebKitGTK's `JSCValue` as JSON).
    @discardableResult
    public func message(json data: Data, mainFrame: Bool = true) -> PageSignalError? {
        guard let health else { return PageSignalError("this view does not watch page health") }
        let refused = health.message(json: data, mainFrame: mainFrame)
        if refused == nil, case .success(.ready) = PageSignal.decode(data) { pageReady() }
        return refused
    }

    /// The page to come back to: the last one committed (or reloaded).
    public var lastURL: String? { state.withLock { $0.lastURL } }

    /// Reloads in a row so far.
    public var streak: Int { state.withLock { $0.streak } }

    /// The content process terminated for `reason` while the view showed `url` (an engine's `URL`).
    public func processTerminated(_ reason: TerminationReason, url: URL?) -> RecoveryAction {
        processTerminated(reason, url: url?.absoluteString)
    }

    /// The content process terminated for `reason` while the view showed `url` (nil: the last
    /// committed page). Returns what to do; `health` hears of it first.
    public func processTerminated(_ reason: TerminationReason, url: String? = nil) -> RecoveryAction {
        health?.processTerminated(reason)
        let now = clock()
        return state.withLock { s -> RecoveryAction in
            if let loaded = s.loadedAt, now - loaded >= policy.stableAfter { s.streak = 0 }
            s.loadedAt = nil
            guard let target = url.flatMap({ $0.isEmpty ? nil : $0 }) ?? s.lastURL else {
                return .giveUp(reason: "the web content process \(reason) before any page was shown")
            }
            s.lastURL = target
            guard s.streak < policy.maxReloads else {
                return .giveUp(
                    reason: "the web content process \(reason); \(s.streak) reloads in a row did not keep it up")
            }
            let delay = min(policy.maxDelay, policy.firstDelay * pow(2, Double(s.streak)))
            s.streak += 1
            return .reload(url: target, delay: delay)
        }
    }
}
