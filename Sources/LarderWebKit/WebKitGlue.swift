// WebKit's glue (Apple platforms; elsewhere empty): WebKit's calls forwarded to LarderWebView.
#if canImport(WebKit)
    import LarderWebView
    @preconcurrency import WebKit

    extension URLRequest: EngineRequest {}
    extension HTTPCookie: EngineCookie {
        /// `sameSitePolicy` (`lax`, `strict`) as text.
        public var sameSiteName: String? { sameSitePolicy?.rawValue }
    }

    /// One web view's scheme handler (`larder` and routed schemes) and navigation delegate.
    public final class WebViewGlue: NSObject, WKURLSchemeHandler, WKNavigationDelegate, WKScriptMessageHandler {
        /// Answers scheme tasks; brings the page back when its content process dies (and judges it).
        public let driver: SchemeTaskDriver, recovery: WebViewRecovery
        /// Glue over `driver` and `health`, adding the page-health and `document.cookie` scripts.
        public init(driver: SchemeTaskDriver, health: WebViewHealth, configuration c: WKWebViewConfiguration) {
            (self.driver, recovery) = (driver, WebViewRecovery(health: health))
            super.init()
            c.userContentController.addUserScript(
                .init(source: health.pageScript, injectionTime: .atDocumentStart, forMainFrameOnly: true))
            c.userContentController.addUserScript(
                .init(source: WebViewRecovery.pageScripts, injectionTime: .atDocumentStart, forMainFrameOnly: false))
            c.userContentController.add(self, name: WebViewRecovery.messageHandler)
        }
        /// Starts a task (a method that is not an HTTP token fails at once).
        public func webView(_ w: WKWebView, start task: any WKURLSchemeTask) {
            guard let r = SchemeRequest(task.request) else { return task.didFailWithError(URLError(.badURL)) }
            driver.start(WebKitTask(task, r))
        }
        /// Stops a task: no call reaches it afterwards.
        public func webView(_ w: WKWebView, stop task: any WKURLSchemeTask) { driver.stop(id: ObjectIdentifier(task)) }
        /// A navigation committed: its page is watched, and is the one to come back to.
        public func webView(_ w: WKWebView, didCommit _: WKNavigation!) { recovery.navigationCommitted(w.url) }
        /// The page's load event.
        public func webView(_ w: WKWebView, didFinish _: WKNavigation!) { recovery.pageLoaded() }
        /// A navigation failed before it committed: that page fails.
        public func webView(_ w: WKWebView, didFailProvisionalNavigation _: WKNavigation!, withError e: any Error) {
            recovery.health?.provisionalNavigationFailed(e)
        }
        /// The content process died: the page comes back (with back-off); WebKit gives no reason.
        public func webViewWebContentProcessDidTerminate(_ w: WKWebView) { recover(w, .unknown) }
        /// Call on return to the foreground: a blank title means the system reclaimed the process.
        public func checkOnForeground(_ w: WKWebView) { if (w.title ?? "").isEmpty { recover(w, .killed) } }
        func recover(_ w: WKWebView, _ reason: TerminationReason) {
            guard case (let to, let delay)? = recovery.processTerminated(reason, url: w.url).reload else { return }
            DispatchQueue.main.asyncAfter(deadline: .now() + delay) { [weak w] in _ = w?.load(URLRequest(url: to)) }
        }
        /// A message from the page-health script: the main frame's only.
        public func userContentController(_ c: WKUserContentController, didReceive m: WKScriptMessage) {
            recovery.message(m.body, mainFrame: m.frameInfo.isMainFrame)
        }
    }

    final class WebKitTask: SchemeTask, @unchecked Sendable {  // called on the main thread only
        let task: any WKURLSchemeTask, schemeRequest: SchemeRequest
        init(_ task: any WKURLSchemeTask, _ request: SchemeRequest) { (self.task, schemeRequest) = (task, request) }
        var taskIdentity: ObjectIdentifier { ObjectIdentifier(task) }
        func didReceive(_ h: SchemeResponseHead) {
            let u = task.request.url ?? URL(fileURLWithPath: "/")
            HTTPURLResponse(url: u, statusCode: h.status, httpVersion: nil, headerFields: h.headers).map(
                task.didReceive)
        }
        func didReceive(_ data: Data) { task.didReceive(data) }
        func didFinish() { task.didFinish() }
        func didFail(_ e: SchemeTaskError) { task.didFailWithError(e.urlError) }
    }

    /// WebKit's cookie store (`WKWebsiteDataStore.httpCookieStore`) for `OfflinePackages.webView(cookies:)`.
    public final class WebKitCookies: CookieStore, @unchecked Sendable {  // WKHTTPCookieStore is main-thread
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
        public func save(_ c: WebCookie) async {
            for k in HTTPCookie.cookies(withResponseHeaderFields: c.setCookieFields, for: c.setCookieURL) {
                if c.isExpired(at: Date()) { await store.deleteCookie(k) } else { await store.setCookie(k) }
            }
        }
    }
#endif
