// A WKURLSchemeHandler over the resource loader. WebKit exists only on Apple platforms, so this
// file compiles to nothing elsewhere — and it has never been compiled by this project's CI
// (Linux). It is kept deliberately thin: everything it decides comes from `ResourceLoader`,
// which is tested on Linux with the gateway and the browser end-to-end test.
#if canImport(WebKit)
    import Foundation
    import LarderCore
    import LarderResolve
    @preconcurrency import WebKit

    /// Serves `larder://<id>/<path>` (and other custom schemes the resolver routes) to a
    /// WKWebView from the sandbox. Bodies are streamed in chunks read on a background queue;
    /// after WebKit stops a task, no further call reaches it. A request the loader would pass
    /// through fails with `URLError(.fileDoesNotExist)` (a custom scheme has no network behind
    /// it); a missing local file has already been reported and served from the fallback when
    /// possible.
    ///
    /// ```swift
    /// let resolver = try Resolver(root: sandboxRoot)
    /// let session = try resolver.session(pinning: ["sample-app"])   // this web view keeps its version
    /// let handler = LarderSchemeHandler(loader: ResourceLoader(resolver: resolver,
    ///     reporter: StoreFailureReporter(root: sandboxRoot)), session: session)
    /// let config = WKWebViewConfiguration()
    /// config.setURLSchemeHandler(handler, forURLScheme: "larder")
    /// ```
    public final class LarderSchemeHandler: NSObject, WKURLSchemeHandler, @unchecked Sendable {
        // @unchecked: `active` is only touched on the main thread.
        /// Answers every request, from a background queue.
        public let loader: ResourceLoader
        /// The pinned versions this handler's web view keeps; `nil` follows the sandbox as it changes.
        public let session: ResolverSession?
        private let queue = DispatchQueue(label: "larder.webkit", qos: .userInitiated, attributes: .concurrent)
        /// Tasks started and neither stopped nor finished.
        private var active = Set<ObjectIdentifier>()

        /// A handler over `loader`, resolving with `session`'s pinned versions when one is given.
        public init(loader: ResourceLoader, session: ResolverSession? = nil) {
            self.loader = loader
            self.session = session
        }

        /// Starts loading the task's URL on the background queue and delivers head, chunks and end on the
        /// main thread while the task is not stopped.
        public func webView(_ webView: WKWebView, start task: any WKURLSchemeTask) {
            let request = task.request
            active.insert(ObjectIdentifier(task))
            guard let url = request.url else {
                active.remove(ObjectIdentifier(task))
                task.didFailWithError(URLError(.badURL))
                return
            }
            let load = LoadRequest(
                method: request.httpMethod ?? "GET", url: url.absoluteString,
                range: request.value(forHTTPHeaderField: "Range"),
                ifNoneMatch: request.value(forHTTPHeaderField: "If-None-Match"), cors: true)
            queue.async { [self] in
                switch loader.load(load, session: session) {
                case .passthrough(let reason):
                    deliver(task, last: true) {
                        task.didFailWithError(
                            URLError(.fileDoesNotExist, userInfo: [NSLocalizedDescriptionKey: reason]))
                    }
                case .response(let r):
                    let headers = Dictionary(r.headers, uniquingKeysWith: { a, _ in a })
                    guard
                        let head = HTTPURLResponse(
                            url: url, statusCode: r.status, httpVersion: "HTTP/1.1", headerFields: headers),
                        deliver(task, last: false, { task.didReceive(head) })
                    else { return r.close() }
                    do {
                        while let chunk = try r.nextChunk() {
                            guard deliver(task, last: false, { task.didReceive(chunk) }) else { return r.close() }
                        }
                        deliver(task, last: true) { task.didFinish() }
                    } catch {
                        deliver(task, last: true) { task.didFailWithError(error) }
                    }
                }
            }
        }

        /// Stops deliveries to the task (WebKit calls it on the main thread).
        public func webView(_ webView: WKWebView, stop task: any WKURLSchemeTask) {
            // Called on the main thread, as every delivery below runs: after this, none reaches
            // the task.
            active.remove(ObjectIdentifier(task))
        }

        /// Runs `call` on the main thread unless the task was stopped; `false` when it was.
        @discardableResult
        private func deliver(_ task: any WKURLSchemeTask, last: Bool, _ call: @escaping () -> Void) -> Bool {
            DispatchQueue.main.sync {
                let id = ObjectIdentifier(task)
                guard active.contains(id) else { return false }
                if last { active.remove(id) }
                call()
                return true
            }
        }
    }
#endif
