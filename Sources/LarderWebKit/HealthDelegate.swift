// WebKit glue only (compiled on Apple platforms): the decisions are in WebViewHealth.
#if canImport(WebKit)
    import Foundation
    import LarderResolve
    @preconcurrency import WebKit

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
