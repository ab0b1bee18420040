// WebKit's glue (Apple platforms; elsewhere empty): WebKit's calls forwarded to LarderWebView,
// where the platform-neutral logic lives and is tested (driver, health, recovery, cookies).
#if canImport(WebKit)
    import LarderWebView
    @preconcurrency import WebKit

    extension URLRequest: EngineRequest {}

    extension HTTPCookie: EngineCookie {
        /// `sameSitePolicy` (`lax`, `strict`) as text.
        public var sameSiteName: String? { sameSitePolicy?.rawValue }
    }

    /// One web view's scheme handler (`larder` and routed schemes), navigation delegate and
    /// page-health message handler.
    public final class WebViewGlue: NSObject, WKURLSchemeHandler, WKNavigationDelegate, WKScriptMessageHandler {
        /// Answers scheme tasks.
        public let driver: SchemeTaskDriver
        /// Brings the page back when its content process dies, and judges it.
        let recovery: WebViewRecovery

        /// Glue over `driver` and `health`, adding the page-health and `document.cookie` scripts
        /// to `configuration`.
        public init(driver: SchemeTaskDriver, health: WebViewHealth, configuration: WKWebViewConfiguration) {
            self.driver = driver
            self.recovery = WebViewRecovery(health: health)
            super.init()
            let scripts = configuration.userContentController
            scripts.addUserScript(
                WKUserScript(source: health.pageScript, injectionTime: .atDocumentStart, forMainFrameOnly: true))
            scripts.addUserScript(
                WKUserScript(
                    source: WebViewRecovery.pageScripts, injectionTime: .atDocumentStart, forMainFrameOnly: false))
            scripts.add(self, name: WebViewRecovery.messageHandler)
        }

        /// Starts a task (a method that is not an HTTP token fails at once).
        public func webView(_ webView: WKWebView, start task: any WKURLSchemeTask) {
            guard let request = SchemeRequest(task.request) else {
                task.didFailWithError(URLError(.badURL))
                return
            }
            driver.start(WebKitTask(task, request))
        }

        /// Stops a task: no call reaches it afterwards.
        public func webView(_ webView: WKWebView, stop task: any WKURLSchemeTask) {
            driver.stop(id: ObjectIdentifier(task))
        }

        /// A navigation committed: its page is watched, and is the one to come back to.
        public func webView(_ webView: WKWebView, didCommit navigation: WKNavigation!) {
            recovery.navigationCommitted(webView.url)
        }

        /// The page's load event.
        public func webView(_ webView: WKWebView, didFinish navigation: WKNavigation!) {
            recovery.pageLoaded()
        }

        /// A navigation failed before it committed: that page fails.
        public func webView(
            _ webView: WKWebView, didFailProvisionalNavigation navigation: WKNavigation!, withError error: any Error
        ) {
            recovery.health?.provisionalNavigationFailed(error)
        }

        /// The content process died: the page comes back (with back-off); WebKit gives no reason.
        public func webViewWebContentProcessDidTerminate(_ webView: WKWebView) {
            recover(webView, reason: .unknown)
        }

        /// Call on return to the foreground: a blank title means the system reclaimed the process.
        public func checkOnForeground(_ webView: WKWebView) {
            if (webView.title ?? "").isEmpty { recover(webView, reason: .killed) }
        }

        /// Reloads the page recovery names, after the delay it asks for.
        func recover(_ webView: WKWebView, reason: TerminationReason) {
            guard let reload = recovery.processTerminated(reason, url: webView.url).reload else { return }
            let (url, delay) = reload
            DispatchQueue.main.asyncAfter(deadline: .now() + delay) { [weak webView] in
                _ = webView?.load(URLRequest(url: url))
            }
        }

        /// A message from the page-health script: the main frame's only.
        public func userContentController(
            _ userContentController: WKUserContentController, didReceive message: WKScriptMessage
        ) {
            recovery.message(message.body, mainFrame: message.frameInfo.isMainFrame)
        }
    }

    /// A WebKit scheme task as the driver sees it.
    final class WebKitTask: SchemeTask, @unchecked Sendable {
        // @unchecked: WebKit calls a scheme handler, and the driver answers its tasks, on the main thread only.
        let task: any WKURLSchemeTask
        let schemeRequest: SchemeRequest

        init(_ task: any WKURLSchemeTask, _ request: SchemeRequest) {
            self.task = task
            self.schemeRequest = request
        }

        var taskIdentity: ObjectIdentifier { ObjectIdentifier(task) }

        func didReceive(_ head: SchemeResponseHead) {
            let url = task.request.url ?? URL(fileURLWithPath: "/")
            if let response = HTTPURLResponse(
                url: url, statusCode: head.status, httpVersion: nil, headerFields: head.headers)
            {
                task.didReceive(response)
            }
        }

        func didReceive(_ data: Data) { task.didReceive(data) }

        func didFinish() { task.didFinish() }

        func didFail(_ error: SchemeTaskError) { task.didFailWithError(error.urlError) }
    }

    /// WebKit's cookie store (`WKWebsiteDataStore.httpCookieStore`) for `OfflinePackages.webView(cookies:)`.
    public final class WebKitCookies: CookieStore, @unchecked Sendable {
        // @unchecked: WKHTTPCookieStore is used from the main thread, where WebKit calls us.
        let store: WKHTTPCookieStore

        /// Over `store`.
        public init(_ store: WKHTTPCookieStore) { self.store = store }

        /// The cookies a request to `url` carries.
        public func cookies(for url: URL) async -> [WebCookie] {
            await store.allCookies().map(WebCookie.init).filter { $0.matches(url) }
        }

        /// Every cookie named `name`.
        public func cookies(named name: String) async -> [WebCookie] {
            await store.allCookies().map(WebCookie.init).filter { $0.name == name }
        }

        /// Adds one cookie, or deletes its namesake when it has expired.
        public func save(_ cookie: WebCookie) async {
            let expired = cookie.isExpired(at: Date())
            for engineCookie in HTTPCookie.cookies(
                withResponseHeaderFields: cookie.setCookieFields, for: cookie.setCookieURL)
            {
                if expired { await store.deleteCookie(engineCookie) } else { await store.setCookie(engineCookie) }
            }
        }
    }
#endif
