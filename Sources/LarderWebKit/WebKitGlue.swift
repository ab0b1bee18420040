// WebKit's glue (Apple platforms; elsewhere empty): delegate calls forwarded to LarderWebView.
#if canImport(WebKit)
    import LarderResolve
    import LarderWebView
    @preconcurrency import WebKit

    /// A `WKURLSchemeHandler` over a `SchemeTaskDriver` (for `larder` and any custom scheme routed).
    @MainActor public final class LarderSchemeHandler: NSObject, WKURLSchemeHandler {
        /// Answers every task.
        public let driver: SchemeTaskDriver
        /// A handler over `driver`.
        public init(driver: SchemeTaskDriver) { self.driver = driver }
        /// Starts a task (a method that is not an HTTP token fails at once).
        public func webView(_ webView: WKWebView, start task: any WKURLSchemeTask) {
            let r = task.request
            guard
                let request = SchemeRequest(
                    methodName: r.httpMethod, url: r.url, fields: r.allHTTPHeaderFields, body: r.httpBody,
                    mainDocumentURL: r.mainDocumentURL)
            else { return task.didFailWithError(URLError(.badURL)) }
            driver.start(WebKitTask(task, request))
        }
        /// Stops a task: no call reaches it afterwards.
        public func webView(_ w: WKWebView, stop task: any WKURLSchemeTask) {
            driver.stop(WebKitTask(task, .init(url: "")))
        }
    }

    final class WebKitTask: SchemeTask, @unchecked Sendable {  // called on the main thread only
        let task: any WKURLSchemeTask, schemeRequest: SchemeRequest
        init(_ task: any WKURLSchemeTask, _ request: SchemeRequest) { (self.task, schemeRequest) = (task, request) }
        var taskIdentity: ObjectIdentifier { ObjectIdentifier(task) }
        func didReceive(_ head: SchemeResponseHead) {
            let url = task.request.url ?? URL(fileURLWithPath: "/")
            HTTPURLResponse(url: url, statusCode: head.status, httpVersion: nil, headerFields: head.headers).map(
                task.didReceive)
        }
        func didReceive(_ data: Data) { task.didReceive(data) }
        func didFinish() { task.didFinish() }
        func didFail(_ e: SchemeTaskError) { task.didFailWithError(e.urlError) }
    }

    /// Page health and recovery for one web view: adds the page-health script and its handler to
    /// `configuration`; set it as (or forward to it from) the web view's navigation delegate.
    @MainActor public final class LarderHealthDelegate: NSObject, WKNavigationDelegate, WKScriptMessageHandler {
        /// The web view's recovery from a dead content process, and its page health.
        public let recovery: WebViewRecovery
        /// Installs the script (first, at document start, main frame) and the `larderHealth` handler.
        public init(health: WebViewHealth, configuration: WKWebViewConfiguration, policy: RecoveryPolicy = .standard) {
            recovery = WebViewRecovery(policy: policy, health: health)
            super.init()
            configuration.userContentController.addUserScript(
                WKUserScript(source: PageHealthScript.source, injectionTime: .atDocumentStart, forMainFrameOnly: true))
            configuration.userContentController.add(self, name: PageHealthScript.messageHandler)
        }
        /// A navigation committed: its page is watched.
        public func webView(_ w: WKWebView, didCommit _: WKNavigation!) {
            recovery.navigationCommitted(url: w.url?.absoluteString ?? "")
        }
        /// The page's load event.
        public func webView(_ w: WKWebView, didFinish _: WKNavigation!) { recovery.pageLoaded() }
        /// A navigation failed before it committed.
        public func webView(_ w: WKWebView, didFailProvisionalNavigation _: WKNavigation!, withError e: any Error) {
            recovery.health?.provisionalNavigationFailed(e)
        }
        /// The content process died: the page comes back (with back-off); no reason is given here.
        public func webViewWebContentProcessDidTerminate(_ w: WKWebView) { recover(w, .unknown) }
        /// Call on return to the foreground: a blank title means the system reclaimed the process.
        public func checkOnForeground(_ w: WKWebView) { if (w.title ?? "").isEmpty { recover(w, .killed) } }
        func recover(_ w: WKWebView, _ reason: TerminationReason) {
            guard case .reload(let url, let delay) = recovery.processTerminated(reason, url: w.url?.absoluteString),
                let to = URL(string: url)
            else { return }
            DispatchQueue.main.asyncAfter(deadline: .now() + delay) { [weak w] in _ = w?.load(URLRequest(url: to)) }
        }
        /// A message from the page-health script.
        public func userContentController(_ c: WKUserContentController, didReceive m: WKScriptMessage) {
            recovery.message(m.body)
        }
    }
#endif
