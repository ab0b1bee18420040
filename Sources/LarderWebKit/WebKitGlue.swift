// The WebKit engine's glue (Apple platforms; elsewhere this module is empty): WebKit's delegate and
// handler calls forwarded to the platform-neutral LarderWebView, where every decision is made.
#if canImport(WebKit)
    import Foundation
    import HTTPTypes
    import LarderResolve
    import LarderWebView
    @preconcurrency import WebKit

    /// A `WKURLSchemeHandler` over a `SchemeTaskDriver` (for `larder` and any custom scheme routed).
    @MainActor public final class LarderSchemeHandler: NSObject, WKURLSchemeHandler {
        /// Answers every task.
        public let driver: SchemeTaskDriver
        /// A handler over `driver`.
        public init(driver: SchemeTaskDriver) { self.driver = driver }
        /// Starts a task; one whose method is not an HTTP method token fails at once (WebKit hands
        /// over tokens only: fetch and XMLHttpRequest refuse anything else).
        public func webView(_ webView: WKWebView, start task: any WKURLSchemeTask) {
            guard let request = WebKitTask.schemeRequest(task.request) else {
                let message = "\((task.request.httpMethod ?? "").debugDescription) is not an HTTP method"
                task.didFailWithError(URLError(.badURL, userInfo: [NSLocalizedDescriptionKey: message]))
                return
            }
            driver.start(WebKitTask(task, request: request))
        }
        /// Stops a task: no call reaches it afterwards (the driver reads only its identity).
        public func webView(_ webView: WKWebView, stop task: any WKURLSchemeTask) {
            driver.stop(WebKitTask(task, request: SchemeRequest(url: "")))
        }
    }

    final class WebKitTask: SchemeTask, @unchecked Sendable {
        // @unchecked: the driver calls it on the main thread only (DeliveryQueue.main), hence `onMain`.
        let task: any WKURLSchemeTask
        /// The task's request, read when it started.
        let schemeRequest: SchemeRequest
        init(_ task: any WKURLSchemeTask, request: SchemeRequest) {
            self.task = task
            self.schemeRequest = request
        }
        var taskIdentity: ObjectIdentifier { ObjectIdentifier(task) }
        private func onMain<T: Sendable>(_ body: @MainActor () -> T) -> T { MainActor.assumeIsolated { body() } }
        /// `r` in plain values (no method: GET, as URLRequest's default); nil when its method is
        /// not an RFC 9110 token.
        static func schemeRequest(_ r: URLRequest) -> SchemeRequest? {
            guard let method = HTTPRequest.Method(r.httpMethod ?? "GET") else { return nil }
            return SchemeRequest(
                method: method, url: r.url?.absoluteString ?? "",
                headers: (r.allHTTPHeaderFields ?? [:]).map { ($0.key, $0.value) }, body: r.httpBody,
                isNavigation: r.mainDocumentURL == r.url)
        }
        func didReceive(_ head: SchemeResponseHead) {
            let url = onMain { task.request.url } ?? URL(fileURLWithPath: "/")
            guard
                let r = HTTPURLResponse(url: url, statusCode: head.status, httpVersion: nil, headerFields: head.headers)
            else { return didFail(SchemeTaskError(.badURL, "no response for \(url)")) }
            onMain { task.didReceive(r) }
        }
        func didReceive(_ data: Data) { onMain { task.didReceive(data) } }
        func didFinish() { onMain { task.didFinish() } }
        func didFail(_ error: SchemeTaskError) {
            let code: URLError.Code =
                error.kind == .network ? .cannotConnectToHost : error.kind == .badURL ? .badURL : .fileDoesNotExist
            onMain { task.didFailWithError(URLError(code, userInfo: [NSLocalizedDescriptionKey: error.message])) }
        }
    }

    /// Page health for one web view: adds the page-health script and its message handler to
    /// `configuration`; set it as (or forward to it from) the web view's navigation delegate.
    @MainActor public final class LarderHealthDelegate: NSObject, WKNavigationDelegate, WKScriptMessageHandler {
        /// The web view's page health.
        public let health: WebViewHealth
        /// Installs the script (first, at document start, main frame) and the `larderHealth` handler.
        public init(health: WebViewHealth, configuration: WKWebViewConfiguration) {
            self.health = health
            super.init()
            let c = configuration.userContentController
            c.addUserScript(
                WKUserScript(source: PageHealthScript.source, injectionTime: .atDocumentStart, forMainFrameOnly: true))
            c.add(self, name: PageHealthScript.messageHandler)
        }
        /// A navigation committed: its page is watched.
        public func webView(_ w: WKWebView, didCommit _: WKNavigation!) {
            health.navigationStarted(url: w.url?.absoluteString ?? "")
        }
        /// The page's load event.
        public func webView(_ w: WKWebView, didFinish _: WKNavigation!) { health.navigationFinished() }
        /// The committed page failed to load.
        public func webView(_ w: WKWebView, didFail _: WKNavigation!, withError e: any Error) {
            health.navigationFailed("\(e)")
        }
        /// A navigation failed before it committed.
        public func webView(_ w: WKWebView, didFailProvisionalNavigation _: WKNavigation!, withError e: any Error) {
            health.provisionalNavigationFailed(e)
        }
        /// The web content process terminated.
        public func webViewWebContentProcessDidTerminate(_ w: WKWebView) { health.processTerminated() }
        /// A message from the page-health script.
        public func userContentController(_ c: WKUserContentController, didReceive m: WKScriptMessage) {
            health.message(m.body)
        }
    }
#endif
