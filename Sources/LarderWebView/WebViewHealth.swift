import Foundation
import LarderCore
import LarderResolve

/// The page health of one web view, in plain calls: the WebKit glue forwards its navigation
/// delegate's and script-message handler's events here, and this decides which activation each
/// page watches and what the events mean for it (`PageHealthTracker`, on the tracker's clock).
///
/// A navigation to a URL the sandbox serves from an active version begins a watched page; its
/// `didFinish` is the load event, `didFail` a load failure, a terminated content process a
/// failure, and the page-health script's messages (`larderHealth` handler) ready signals and
/// script errors. A page the sandbox does not serve (or serves from a pinned older version, or a
/// fallback) is not watched.
public final class WebViewHealth: Sendable {
    /// The monitors, their clock and where verdicts go.
    public let tracker: PageHealthTracker
    /// Resolves a page's URL (with the web view's session, when it has one).
    public let loader: ResourceLoader
    /// The web view's pinned versions, if any.
    public let pins: SessionPins?
    private let page = Locked<String?>(nil)

    /// Health for a web view loading through `loader` (with `pins`), reporting to `tracker`.
    public init(tracker: PageHealthTracker, loader: ResourceLoader, pins: SessionPins? = nil) {
        self.tracker = tracker
        self.loader = loader
        self.pins = pins
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
        let token = activation(for: url).flatMap { tracker.begin($0) }
        page.withLock { $0 = token }
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
        guard let url = (info[NSURLErrorFailingURLErrorKey] as? URL)?.absoluteString,
            let token = activation(for: url).flatMap({ tracker.begin($0) })
        else { return }
        tracker.signal(.loadFailed(reason: "\(error.localizedDescription)"), page: token)
    }

    /// The web content process terminated.
    public func processTerminated() { send(.processTerminated) }

    /// A message from the page-health script (a `WKScriptMessage`'s body: a dictionary).
    /// Returns why it was refused, if it was.
    @discardableResult
    public func message(_ body: Any) -> PageSignalError? {
        guard JSONSerialization.isValidJSONObject(body), let data = try? JSONSerialization.data(withJSONObject: body)
        else { return PageSignalError("the message is not a JSON object") }
        switch PageSignal.decode(data) {
        case .success(let signal):
            send(signal)
            return nil
        case .failure(let why):
            return why
        }
    }

    private func send(_ signal: PageSignal) {
        guard let token = page.withLock({ $0 }) else { return }
        tracker.signal(signal, page: token)
    }
}
