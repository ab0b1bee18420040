import Foundation
import LarderCore
import LarderResolve
import Synchronization

/// The page health of one web view, in plain calls: the WebKit glue forwards its navigation
/// delegate's and script-message handler's events here, and this decides which activation each
/// page watches and what the events mean for it (`PageHealthTracker`, on the tracker's clock).
///
/// A navigation to a URL the sandbox serves from an active version begins a watched page; its
/// `didFinish` is the load event, `didFail` a load failure, and the page-health script's
/// messages (`larderHealth` handler) ready signals and script errors. A terminated content
/// process is not a failure by itself (the view reloads the page, `WebViewRecovery`): the page
/// is dropped undecided, and only the `terminationLimit`-th termination of pages of one
/// activation before any of them is ready fails it, naming the last reason. A page the sandbox
/// does not serve (or serves from a pinned older version, or a fallback) is not watched.
public final class WebViewHealth: Sendable {
    /// The monitors, their clock and where verdicts go.
    public let tracker: PageHealthTracker
    /// Resolves a page's URL (with the web view's session, when it has one).
    public let loader: ResourceLoader
    /// The web view's pinned versions, if any.
    public let pins: SessionPins?
    /// Terminations before ready that fail an activation (at least 1; 3 by default).
    public let terminationLimit: Int
    /// What the page-health script of this view's main frame puts in each message (`pageScript`),
    /// 128 random bits in hex: a message from any other frame, package or origin lacks it.
    public let secret: String = (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
    private let state = Mutex(State())

    /// The page-health script to add to this view's main frame only (WebKit: `forMainFrameOnly`,
    /// WebKitGTK: `WEBKIT_USER_CONTENT_INJECT_TOP_FRAME`): it carries `secret`.
    public var pageScript: String { PageHealthScript.source(secret: secret) }

    struct State {
        /// The watched page: its token and activation.
        var page: (token: String, activation: ActivationRef)?
        /// Terminations before ready, per activation (cleared when one of its pages is ready).
        var terminations: [ActivationRef: Int] = [:]
    }

    /// Health for a web view loading through `loader` (with `pins`), reporting to `tracker`;
    /// `terminationLimit` terminations before ready fail an activation.
    public init(tracker: PageHealthTracker, loader: ResourceLoader, pins: SessionPins? = nil, terminationLimit: Int = 3)
    {
        self.tracker = tracker
        self.loader = loader
        self.pins = pins
        self.terminationLimit = max(1, terminationLimit)
    }

    /// The activation a page at `url` comes from: the active version of the package that serves it.
    public func activation(for url: String) -> ActivationRef? {
        let (snapshot, table) =
            pins?.current?.table()
            ?? {
                let s = loader.resolver.snapshot()
                return (s, s.table)
            }()
        guard case .local(let file) = table.resolve(url),
            let ref = snapshot.versions[file.package]?.activationRef(file.package), ref.version == file.version
        else { return nil }
        return ref
    }

    /// A main-frame navigation to `url` committed: a new page is watched (the previous one, if
    /// undecided, keeps its own deadline). Returns whether this page is watched.
    @discardableResult
    public func navigationStarted(url: String) -> Bool {
        let ref = activation(for: url)
        let token = ref.flatMap { tracker.begin($0) }
        state.withLock { $0.page = token.flatMap { t in ref.map { (t, $0) } } }
        return token != nil
    }

    /// The main document finished loading (`didFinish`).
    public func navigationFinished() { send(.documentLoaded) }

    /// The committed main document failed to load (`didFail`).
    public func navigationFailed(_ reason: String) { send(.loadFailed(reason: reason)) }

    /// A navigation failed before it committed (`didFailProvisionalNavigation`): the page it
    /// was for — named by the error's failing URL — is watched and fails at once; the page shown
    /// before is not blamed.
    public func provisionalNavigationFailed(_ error: any Error) {
        let info = (error as NSError).userInfo
        guard let url = (info[NSURLErrorFailingURLErrorKey] as? URL)?.absoluteString else { return }
        provisionalNavigationFailed(url: url, reason: error.localizedDescription)
    }

    /// A navigation to `url` failed before it committed, for `reason` (WebKitGTK's `load-failed`
    /// before `WEBKIT_LOAD_COMMITTED`): that page is watched and fails at once.
    public func provisionalNavigationFailed(url: String, reason: String) {
        guard let token = activation(for: url).flatMap({ tracker.begin($0) }) else { return }
        tracker.signal(.loadFailed(reason: reason), page: token)
    }

    /// The web content process terminated for `reason`. Before the watched page is ready, the
    /// page is dropped undecided (it will be loaded again), unless this is its activation's
    /// `terminationLimit`-th such termination: then it fails, naming the count and the reason.
    /// Returns whether this termination failed the page.
    @discardableResult
    public func processTerminated(_ reason: TerminationReason) -> Bool {
        let action = state.withLock { s -> (token: String, fail: String?)? in
            guard let page = s.page else { return nil }
            s.page = nil
            let count = (s.terminations[page.activation] ?? 0) + 1
            guard count >= terminationLimit else {
                s.terminations[page.activation] = count
                return (page.token, nil)
            }
            s.terminations[page.activation] = nil
            let text =
                count == 1
                ? "\(reason) before the page was ready"
                : "terminated \(count) times before the page was ready (the last time it \(reason))"
            return (page.token, text)
        }
        guard let action else { return false }
        guard let reason = action.fail else {
            tracker.forget(page: action.token)
            return false
        }
        return tracker.signal(.processTerminated(reason: reason), page: action.token)
    }

    /// Terminations before ready counted against `activation` so far.
    public func terminations(of activation: ActivationRef) -> Int {
        state.withLock { $0.terminations[activation] ?? 0 }
    }

    /// A message from the page-health script (a `WKScriptMessage`'s body: a dictionary);
    /// `mainFrame`: the engine says it comes from the main frame (WebKit's `frameInfo.isMainFrame`).
    /// Returns why it was refused, if it was.
    @discardableResult
    public func message(_ body: Any, mainFrame: Bool = true) -> PageSignalError? {
        guard JSONSerialization.isValidJSONObject(body), let data = try? JSONSerialization.data(withJSONObject: body)
        else { return PageSignalError("the message is not a JSON object") }
        return message(json: data, mainFrame: mainFrame)
    }

    /// A message from the page-health script as JSON text (WebKitGTK's `JSCValue` as JSON).
    /// Only the main frame's script, which knows `secret`, can confirm or fail a release: a
    /// message from a subframe, or without the secret, is refused. Returns why, if it was.
    @discardableResult
    public func message(json data: Data, mainFrame: Bool = true) -> PageSignalError? {
        guard mainFrame else { return PageSignalError("the message is not from the main frame") }
        let fields = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
        guard let given = fields?["secret"] as? String, Self.equal(given, secret) else {
            return PageSignalError("the message does not carry this view's secret (not its main frame's script)")
        }
        switch PageSignal.decode(data) {
        case .success(let signal):
            send(signal)
            return nil
        case .failure(let why):
            return why
        }
    }

    /// Compares two secrets in time independent of where they differ.
    static func equal(_ a: String, _ b: String) -> Bool {
        let (x, y) = (Array(a.utf8), Array(b.utf8))
        guard x.count == y.count else { return false }
        return zip(x, y).reduce(0) { $0 | ($1.0 ^ $1.1) } == 0
    }

    private func send(_ signal: PageSignal) {
        guard
            let page = state.withLock({ s -> (token: String, activation: ActivationRef)? in
                if signal == .ready, let p = s.page { s.terminations[p.activation] = nil }
                return s.page
            })
        else { return }
        tracker.signal(signal, page: page.token)
    }
}
