// WebKit glue only (compiled on Apple platforms): the decisions are in SchemeTaskDriver and WebViewHealth.
#if canImport(WebKit)
    import Foundation
    import LarderResolve
    @preconcurrency import WebKit

    /// A `WKURLSchemeHandler` over a `SchemeTaskDriver` (for `larder` and any custom scheme routed).
    @MainActor public final class LarderSchemeHandler: NSObject, WKURLSchemeHandler {
        /// Answers every task.
        public let driver: SchemeTaskDriver
        /// A handler over `driver`.
        public init(driver: SchemeTaskDriver) { self.driver = driver }
        /// Starts a task.
        public func webView(_ webView: WKWebView, start task: any WKURLSchemeTask) { driver.start(WebKitTask(task)) }
        /// Stops a task: no call reaches it afterwards.
        public func webView(_ webView: WKWebView, stop task: any WKURLSchemeTask) { driver.stop(WebKitTask(task)) }
    }

    final class WebKitTask: SchemeTask, @unchecked Sendable {
        // @unchecked: the driver calls it on the main thread only (DeliveryQueue.main), hence `onMain`.
        let task: any WKURLSchemeTask
        init(_ task: any WKURLSchemeTask) { self.task = task }
        var taskIdentity: ObjectIdentifier { ObjectIdentifier(task) }
        private func onMain<T: Sendable>(_ body: @MainActor () -> T) -> T { MainActor.assumeIsolated { body() } }
        var schemeRequest: SchemeRequest {
            let r = onMain { task.request }
            return SchemeRequest(
                method: r.httpMethod ?? "GET", url: r.url?.absoluteString ?? "",
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
#endif
