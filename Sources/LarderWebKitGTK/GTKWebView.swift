import CWebKitGTK
import Foundation
import Larder

/// A WebKitGTK web view that loads a sandbox's packages: its custom schemes served by a
/// `SchemeTaskDriver`, page health over the `larderHealth` script message handler
/// (`WebViewHealth`), and recovery from a dead web process (`WebViewRecovery`). Create and use
/// it on GLib's main loop, after `gtk_init`.
public final class GTKWebView: @unchecked Sendable {
    // @unchecked: every call comes on GLib's main loop (GTK's thread).
    /// What the view is made of.
    public struct Configuration: Sendable {
        /// The sandbox's resource loader.
        public var loader: ResourceLoader
        /// What goes to the network.
        public var forwarder: Forwarder
        /// Custom schemes the view serves (`larder` and the app's own).
        public var schemes: [String]
        /// Page health (nil: pages are not watched).
        public var tracker: PageHealthTracker?
        /// Terminations before ready that fail an activation.
        public var terminationLimit: Int
        /// Reloading after a dead web process.
        public var recovery: RecoveryPolicy
        /// The web process's memory limit in MB (0: WebKit's default).
        public var memoryLimitMB: UInt32
        /// Bridge cookies across the proxy (`CookieBridge` over the session's cookie manager).
        public var bridgeCookies: Bool
        /// Where the network session keeps cookies and its cache; nil: in memory only (ephemeral).
        public var dataDirectory: String?
        /// Follow forwarded redirects in the driver (WebKitGTK does not follow a scheme handler's 3xx).
        public var followRedirects = true
        /// Hears one line per request, load and process event.
        public var log: @Sendable (String) -> Void

        /// Creates one.
        public init(
            loader: ResourceLoader, forwarder: Forwarder = .offline,
            schemes: [String] = ["larder"], tracker: PageHealthTracker? = nil, terminationLimit: Int = 3,
            recovery: RecoveryPolicy = .standard, memoryLimitMB: UInt32 = 0, bridgeCookies: Bool = true,
            dataDirectory: String? = nil, log: @escaping @Sendable (String) -> Void
        ) {
            self.bridgeCookies = bridgeCookies
            self.dataDirectory = dataDirectory
            self.loader = loader
            self.forwarder = forwarder
            self.schemes = schemes
            self.tracker = tracker
            self.terminationLimit = terminationLimit
            self.recovery = recovery
            self.memoryLimitMB = memoryLimitMB
            self.log = log
        }
    }

    /// The configuration.
    public let configuration: Configuration
    /// The `WebKitWebView`.
    public let view: UnsafeMutablePointer<WebKitWebView>
    /// Page health, when watched.
    public let health: WebViewHealth?
    /// Recovery from a dead web process.
    public let recovery: WebViewRecovery
    /// Answers the custom schemes.
    public let handler: GTKSchemeHandler
    /// The cookie bridge, unless turned off.
    public let cookies: CookieBridge?
    /// The `WebKitNetworkSession` (its cookies and cache).
    let session: OpaquePointer?
    /// Called on the main loop after each page's load event.
    public var onLoaded: ((String) -> Void)?
    let context: OpaquePointer

    /// A view with `configuration`; throws when the sandbox's versions cannot be pinned.
    public init(_ configuration: Configuration) throws(StoreError) {
        self.configuration = configuration
        let pins = try SessionPins(resolver: configuration.loader.resolver)
        let session =
            configuration.dataDirectory.map {
                webkit_network_session_new("\($0)/data", "\($0)/cache")
            } ?? webkit_network_session_new_ephemeral()
        self.session = session
        let jar = configuration.dataDirectory.map { "\($0)/data/cookies.sqlite" }
        let log = configuration.log
        let bridge =
            configuration.bridgeCookies
            ? session.map { CookieBridge(store: GTKCookieStore(session: $0, persistentFile: jar), log: log) } : nil
        cookies = bridge
        handler = GTKSchemeHandler(
            driver: SchemeTaskDriver(
                loader: configuration.loader, pins: pins, forwarder: configuration.forwarder,
                delivery: DeliveryQueue(label: "larder.webkitgtk.tasks"), cookies: bridge,
                followsRedirects: configuration.followRedirects, log: configuration.log))
        health = configuration.tracker.map {
            WebViewHealth(
                tracker: $0, loader: configuration.loader, pins: pins, terminationLimit: configuration.terminationLimit)
        }
        recovery = WebViewRecovery(policy: configuration.recovery, health: health)
        context = larder_web_context_new(configuration.memoryLimitMB, configuration.memoryLimitMB > 0 ? 1 : 0)
        let manager = webkit_user_content_manager_new()
        guard let view = larder_web_view_new(context, manager, session) else {
            fatalError("WebKitGTK made no web view")
        }
        self.view = view
        handler.register(schemes: configuration.schemes, in: context)
        if bridge != nil {
            let script = webkit_user_script_new(
                CookieBridge.pageScript, WEBKIT_USER_CONTENT_INJECT_ALL_FRAMES,
                WEBKIT_USER_SCRIPT_INJECT_AT_DOCUMENT_START, nil, nil)
            webkit_user_content_manager_add_script(manager, script)
            webkit_user_script_unref(script)
        }
        if let health {
            let script = webkit_user_script_new(
                health.pageScript, WEBKIT_USER_CONTENT_INJECT_TOP_FRAME,
                WEBKIT_USER_SCRIPT_INJECT_AT_DOCUMENT_START, nil, nil)
            webkit_user_content_manager_add_script(manager, script)
            webkit_user_script_unref(script)
            webkit_user_content_manager_register_script_message_handler(manager, PageHealthScript.messageHandler, nil)
            if let manager { connectMessages(manager) }
        }
        g_object_unref(UnsafeMutableRawPointer(manager))
        connectLoads()
        if let tracker = configuration.tracker {
            GLibMain.every(0.2) {
                tracker.tick()
                return true
            }
        }
    }

    /// The view as a GTK widget, to put in a window.
    public var widget: UnsafeMutablePointer<GtkWidget> { larder_as_widget(view) }

    /// Shows the view in a window of its own, `width` × `height`.
    public func presentInWindow(width: Int32, height: Int32) {
        let window = larder_as_window(gtk_window_new())
        gtk_window_set_default_size(window, width, height)
        gtk_window_set_child(window, widget)
        gtk_window_present(window)
    }

    /// Loads `url`.
    public func load(_ url: String) { webkit_web_view_load_uri(view, url) }

    /// The URL shown.
    public var url: String? { webkit_web_view_get_uri(view).map { String(cString: $0) } }

    /// Kills the web process (as the system would), for tests and the program's `--kill-after`.
    public func terminateWebProcess() { webkit_web_view_terminate_web_process(view) }

    private func connectMessages(_ manager: OpaquePointer) {
        typealias Handler = (OpaquePointer?) -> Void
        let received: @convention(c) (OpaquePointer?, OpaquePointer?, gpointer?) -> Void = { _, value, data in
            SignalBox<Handler>.from(data)?(value)
        }
        SignalBox<Handler>.connect(
            UnsafeMutableRawPointer(manager), "script-message-received::\(PageHealthScript.messageHandler)",
            unsafeBitCast(received, to: GCallback.self)
        ) { [weak self] value in
            guard let self, let value, let json = takeString(jsc_value_to_json(value, 0)) else { return }
            if let why = recovery.message(json: Data(json.utf8)) { configuration.log("health message refused: \(why)") }
        }
    }

    private func connectLoads() {
        typealias LoadChanged = (WebKitLoadEvent) -> Void
        let changed: @convention(c) (OpaquePointer?, WebKitLoadEvent, gpointer?) -> Void = { _, event, data in
            SignalBox<LoadChanged>.from(data)?(event)
        }
        SignalBox<LoadChanged>.connect(
            UnsafeMutableRawPointer(view), "load-changed", unsafeBitCast(changed, to: GCallback.self)
        ) { [weak self] event in self?.loadChanged(event) }

        typealias LoadFailed = (WebKitLoadEvent, String, String) -> Void
        let failed:
            @convention(c) (
                OpaquePointer?, WebKitLoadEvent, UnsafePointer<CChar>?, UnsafeMutablePointer<GError>?, gpointer?
            ) -> gboolean = {
                _, event, uri, error, data in
                let message = error.flatMap { $0.pointee.message.map { String(cString: $0) } } ?? "failed"
                SignalBox<LoadFailed>.from(data)?(event, uri.map { String(cString: $0) } ?? "", message)
                return 0
            }
        SignalBox<LoadFailed>.connect(
            UnsafeMutableRawPointer(view), "load-failed", unsafeBitCast(failed, to: GCallback.self)
        ) { [weak self] event, uri, message in
            guard let self else { return }
            configuration.log("load failed \(uri): \(message)")
            if event == WEBKIT_LOAD_COMMITTED || event == WEBKIT_LOAD_FINISHED {
                health?.navigationFailed(message)
            } else {
                health?.provisionalNavigationFailed(url: uri, reason: message)
            }
        }

        typealias Terminated = (WebKitWebProcessTerminationReason) -> Void
        let terminated: @convention(c) (OpaquePointer?, WebKitWebProcessTerminationReason, gpointer?) -> Void = {
            _, reason, data in SignalBox<Terminated>.from(data)?(reason)
        }
        SignalBox<Terminated>.connect(
            UnsafeMutableRawPointer(view), "web-process-terminated", unsafeBitCast(terminated, to: GCallback.self)
        ) { [weak self] reason in self?.processTerminated(reason) }
    }

    private func loadChanged(_ event: WebKitLoadEvent) {
        let url = self.url ?? ""
        switch event {
        case WEBKIT_LOAD_COMMITTED:
            configuration.log("load committed \(url)")
            recovery.navigationCommitted(url: url)
        case WEBKIT_LOAD_FINISHED:
            configuration.log("load finished \(url)")
            recovery.pageLoaded()
            onLoaded?(url)
        default:
            break
        }
    }

    private func processTerminated(_ code: WebKitWebProcessTerminationReason) {
        let reason: TerminationReason =
            switch code {
            case WEBKIT_WEB_PROCESS_CRASHED: .crashed
            case WEBKIT_WEB_PROCESS_EXCEEDED_MEMORY_LIMIT: .memoryLimit
            case WEBKIT_WEB_PROCESS_TERMINATED_BY_API: .killed
            default: .unknown
            }
        let action = recovery.processTerminated(reason, url: url)
        configuration.log("web process \(reason): \(action)")
        if case .reload(let url, let delay) = action {
            let view = MainLoopBound(view)
            GLibMain.after(delay) { webkit_web_view_load_uri(view.value, url) }
        }
    }

    /// Lets `file:` pages load other `file:` URLs as one origin (module scripts, fetches): the
    /// same files outside a package, as a baseline for timing the scheme handler.
    public func allowFileAccess() {
        let settings = webkit_web_view_get_settings(view)
        webkit_settings_set_allow_file_access_from_file_urls(settings, 1)
        webkit_settings_set_allow_universal_access_from_file_urls(settings, 1)
    }

    /// Runs `script` in the page and hands its result (as a string) to `done`, on the main loop.
    public func evaluate(_ script: String, _ done: @escaping (String?) -> Void) {
        let box = Unmanaged.passRetained(SignalBox(done)).toOpaque()
        webkit_web_view_evaluate_javascript(
            view, script, -1, nil, nil, nil,
            { source, result, data in
                guard let data else { return }
                let done = Unmanaged<SignalBox<(String?) -> Void>>.fromOpaque(data).takeRetainedValue().handler
                let value = webkit_web_view_evaluate_javascript_finish(
                    UnsafeMutableRawPointer(source)?.assumingMemoryBound(to: WebKitWebView.self), result, nil)
                done(value.flatMap { takeString(jsc_value_to_string($0)) })
                if let value { g_object_unref(UnsafeMutableRawPointer(value)) }
            }, box)
    }

    /// Saves what the view shows as a PNG at `path`, then calls `done` with whether it could.
    public func snapshot(to path: String, _ done: @escaping (Bool) -> Void) {
        let box = Unmanaged.passRetained(SignalBox((path, done))).toOpaque()
        webkit_web_view_get_snapshot(
            view, WEBKIT_SNAPSHOT_REGION_VISIBLE, WEBKIT_SNAPSHOT_OPTIONS_NONE, nil,
            { source, result, data in
                guard let data else { return }
                let (path, done) = Unmanaged<SignalBox<(String, (Bool) -> Void)>>.fromOpaque(data)
                    .takeRetainedValue().handler
                guard
                    let texture = webkit_web_view_get_snapshot_finish(
                        UnsafeMutableRawPointer(source)?.assumingMemoryBound(to: WebKitWebView.self), result, nil)
                else {
                    return done(false)
                }
                done(gdk_texture_save_to_png(texture, path) != 0)
                g_object_unref(UnsafeMutableRawPointer(texture))
            }, box)
    }
}
