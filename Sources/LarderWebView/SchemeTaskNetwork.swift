import Foundation
import HTTPTypes
import LarderCore
import LarderResolve

extension SchemeTaskDriver {
    /// Redirects a forwarded request follows before its answer reaches the page.
    static let maxRedirects = 10

    /// Why a forwarded exchange failed, and at which URL; `refused`: a redirect to a host the
    /// page's package may not reach (answered 403).
    struct ExchangeFailure: Error {
        let url: String
        let why: String
        var refused = false
    }

    /// Sends `request` to `first` and follows redirects as a browser would — an engine does not
    /// follow a scheme handler's 3xx — with the cookie bridge on every hop: each hop carries the
    /// store's cookies for its URL, and its `Set-Cookie` fields are saved before the next hop
    /// (or the answer) goes on. 303, and 301/302 after a POST, continue as GET without a body.
    /// Returns the last answer (its `Set-Cookie` fields taken out), its URL and the hops taken.
    func exchange(
        _ request: SchemeRequest, to first: String
    ) async -> Result<(ForwardResponse, String, Int), ExchangeFailure> {
        var (url, method, body, fields) = (first, request.method, request.body, request.headers)
        let table = pins?.current?.table().1 ?? loader.resolver.snapshot().table
        let page = request.mainDocumentURL ?? request.header("Origin")
        for hop in 0...Self.maxRedirects {
            // Each hop is held to the page's package's networkHosts, not only the first.
            if hop > 0, let why = forwarder.hostRefusal(url, page: page, url: request.url, table: table) {
                forwarder.refusedHosts.add()
                return .failure(ExchangeFailure(url: url, why: why, refused: true))
            }
            let context = cookies.map { siteContext(request, method: method, to: url, $0.suffixes) } ?? .crossSite
            if let cookies { fields = await cookies.outgoing(fields, to: url, context: context) }
            let outgoing = forwarder.request(method: method, url: url, headers: fields, body: body)
            var answer: ForwardResponse
            switch await forwarder.send(outgoing) {
            case .failure(let why): return .failure(ExchangeFailure(url: url, why: "\(why)"))
            case .success(let a): answer = a
            }
            if let cookies {
                answer.headers = await cookies.incoming(answer.headers, from: url, context: context)
            } else {
                answer.headers.removeAll { $0.0.lowercased() == "set-cookie" }
            }
            guard followsRedirects, [301, 302, 303, 307, 308].contains(answer.status),
                let location = answer.headers.first(where: { $0.0.lowercased() == "location" })?.1,
                let next = URL(string: location, relativeTo: URL(string: url))?.absoluteURL,
                ["http", "https"].contains(next.scheme?.lowercased() ?? "")
            else { return .success((answer, url, hop)) }
            guard hop < Self.maxRedirects else { break }
            // The redirect's own body is read and dropped, so its connection can be reused.
            var drained = 0
            while drained < 1 << 20, let chunk = try? await answer.body.next() { drained += chunk.count }
            if answer.status == 303 || ([301, 302].contains(answer.status) && method == .post) {
                (method, body) = (.get, nil)
                fields.removeAll { ["content-type", "content-length"].contains($0.0.lowercased()) }
            }
            // Credentials of one origin never go on to another (Fetch: a cross-origin redirect).
            if WebOrigin(url: url) != WebOrigin(next) {
                fields.removeAll { ["authorization", "proxy-authorization"].contains($0.0.lowercased()) }
            }
            url = next.absoluteString
        }
        return .failure(ExchangeFailure(url: url, why: "more than \(Self.maxRedirects) redirects"))
    }

    /// How a forwarded request to `url` (its network URL) relates to the page that makes it,
    /// for SameSite (RFC 6265bis §5.2). A subresource or frame: same-site when the top-level
    /// document's site is `url`'s (the engine's main document URL; without one, the request's
    /// `Origin`, else `Referer`); a main document with no site (a package with no http(s)
    /// route), or none known, is cross-site. A top-level navigation: same-site when the engine
    /// names no initiator (`Origin`, `Referer`: typed, or opened by the app), else same-site
    /// only when that initiator's site is `url`'s — an initiator with no site (`null`, a package
    /// with no route) is another site; cross-site, a GET or HEAD carries Lax cookies. Sites are
    /// schemes and registrable domains of network URLs.
    func siteContext(
        _ request: SchemeRequest, method: HTTPRequest.Method, to url: String, _ suffixes: PublicSuffixList
    ) -> CookieSiteContext {
        let table = pins?.current?.table().1 ?? loader.resolver.snapshot().table
        func site(_ u: String?) -> String? {
            guard let u, u != "null", let n = forwarder.networkURL(for: u, table: table), let url = URL(string: n)
            else { return nil }
            return CookieRules.site(of: url, suffixes)
        }
        guard let target = site(url) else { return .crossSite }
        if request.isNavigation {
            guard let initiator = request.header("Origin") ?? request.header("Referer") else { return .sameSite }
            if site(initiator) == target { return .sameSite }
            return method == .get || method == .head ? .crossSiteNavigation : .crossSite
        }
        let top = request.mainDocumentURL ?? request.header("Origin") ?? request.header("Referer")
        return top != nil && site(top) == target ? .sameSite : .crossSite
    }

    /// Whether `url` is the cookie bridge's reserved path on a custom scheme.
    static func isCookiePath(_ url: String) -> Bool {
        guard let u = URL(string: url), let scheme = u.scheme?.lowercased(), scheme != "http", scheme != "https"
        else { return false }
        return u.path == CookieBridge.path
    }

    /// Answers the page's `document.cookie` bridge, for the origin that asks only: GET reads
    /// the script-visible cookies of the http(s) URL the page maps to, POST saves one
    /// `document.cookie = …` there. Anything `cookiePage` refuses gets 403. Returns the status,
    /// the body bytes sent and the outcome for the log.
    func answerCookies(
        _ request: SchemeRequest, _ cookies: CookieBridge, to task: any SchemeTask
    ) async -> (Int, Int, String) {
        let page: String
        switch Self.cookiePage(request) {
        case .failure(let why):
            let (status, bytes) = respond(task, request.url, 403, "refused: \(why.message)\n")
            return (status, bytes, "cookie bridge refused: \(why.message)")
        case .success(let p): page = p
        }
        let table = loader.resolver.snapshot().table
        guard let origin = forwarder.networkURL(for: page, table: table) else {
            let (status, bytes) = respond(task, request.url, 404, "no http(s) route for \(page): it keeps no cookies\n")
            return (status, bytes, "cookie bridge")
        }
        switch request.method {
        case .get:
            let (status, bytes) = respond(task, request.url, 200, await cookies.scriptCookies(for: origin))
            return (status, bytes, "cookie bridge")
        case .post:
            let text = String(decoding: request.body ?? Data(), as: UTF8.self)
            if let why = await cookies.scriptSets(text, for: origin) {
                let (status, bytes) = respond(task, request.url, 403, "refused: \(why)\n")
                return (status, bytes, "cookie bridge refused: \(why)")
            }
            let (status, bytes) = respond(task, request.url, 200, "")
            return (status, bytes, "cookie bridge")
        default:
            let (status, bytes) = respond(task, request.url, 405, "GET or POST\n")
            return (status, bytes, "cookie bridge")
        }
    }

    /// Why the cookie bridge refuses a request.
    package struct CookieRefusal: Error {
        let message: String
        init(_ message: String) { self.message = message }
    }

    /// The page a cookie-bridge request speaks for, taken from what the engine says about the
    /// request, never from a parameter alone: the endpoint's own origin (the page script asks
    /// its page's origin) with the page script's marker field; an `Origin` field (required for
    /// POST), a `Referer` and the main document's URL, when there, of that same origin (a
    /// frame under another origin's page gets no cookies: WebKit blocks third-party cookies);
    /// `page=` names the page's path within that origin only.
    package static func cookiePage(_ request: SchemeRequest) -> Result<String, CookieRefusal> {
        guard let endpoint = WebOrigin(url: request.url) else { return .failure(CookieRefusal("no origin")) }
        func same(_ url: String?, _ what: String) -> CookieRefusal? {
            guard let url else { return nil }
            return WebOrigin(url: url) == endpoint ? nil : CookieRefusal("\(what) \(url) is not \(endpoint)")
        }
        guard request.header(CookieBridge.requestMarker) == "1" else {
            return .failure(CookieRefusal("not the page script's request (no \(CookieBridge.requestMarker))"))
        }
        let origin = request.header("Origin")
        if request.method == .post, origin == nil { return .failure(CookieRefusal("a POST without Origin")) }
        let page = URLComponents(string: request.url)?.queryItems?.first { $0.name == "page" }?.value
        let referer = request.header("Referer")
        for (url, what) in [(origin, "Origin"), (referer, "Referer"), (request.mainDocumentURL, "the main document")] {
            if let why = same(url, what) { return .failure(why) }
        }
        if let why = same(page, "page") { return .failure(why) }
        return .success(page ?? referer ?? "\(endpoint)/")
    }

    /// A small text answer, whole.
    func respond(_ task: any SchemeTask, _ url: String, _ status: Int, _ text: String) -> (Int, Int) {
        let body = Data(text.utf8)
        let head = SchemeResponseHead(
            status: status,
            headers: [
                "Content-Type": "text/plain; charset=utf-8", "Content-Length": "\(body.count)",
                "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
            ], url: url)
        guard deliver(task, last: false, { $0.didReceive(head) }) else { return (status, 0) }
        if !body.isEmpty { deliver(task, last: false) { $0.didReceive(body) } }
        deliver(task, last: true) { $0.didFinish() }
        return (status, body.count)
    }
}
