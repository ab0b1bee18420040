import Foundation
import HTTPTypes
import LarderCore
import LarderResolve

extension SchemeTaskDriver {
    /// Redirects a forwarded request follows before its answer reaches the page.
    static let maxRedirects = 10

    /// Why a forwarded exchange failed, and at which URL.
    struct ExchangeFailure: Error {
        let url: String
        let why: String
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
        for hop in 0...Self.maxRedirects {
            if let cookies { fields = await cookies.outgoing(fields, to: url) }
            let outgoing = forwarder.request(method: method, url: url, headers: fields, body: body)
            var answer: ForwardResponse
            switch await forwarder.send(outgoing) {
            case .failure(let why): return .failure(ExchangeFailure(url: url, why: "\(why)"))
            case .success(let a): answer = a
            }
            if let cookies {
                answer.headers = await cookies.incoming(answer.headers, from: url)
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
            url = next.absoluteString
        }
        return .failure(ExchangeFailure(url: url, why: "more than \(Self.maxRedirects) redirects"))
    }

    /// Whether `url` is the cookie bridge's reserved path on a custom scheme.
    static func isCookiePath(_ url: String) -> Bool {
        guard let u = URL(string: url), let scheme = u.scheme?.lowercased(), scheme != "http", scheme != "https"
        else { return false }
        return u.path == CookieBridge.path
    }

    /// Answers the page's `document.cookie` bridge: GET reads the script-visible cookies of the
    /// http(s) URL the page (`?page=`) maps to, POST saves one `document.cookie = …` there.
    /// Returns the status and body bytes sent.
    func answerCookies(_ request: SchemeRequest, _ cookies: CookieBridge, to task: any SchemeTask) async -> (Int, Int) {
        let page =
            URLComponents(string: request.url)?.queryItems?.first { $0.name == "page" }?.value ?? request.url
        let table = loader.resolver.snapshot().table
        guard let origin = forwarder.networkURL(for: page, table: table) else {
            return respond(task, request.url, 404, "no http(s) route for \(page): it keeps no cookies\n")
        }
        switch request.method {
        case .get:
            return respond(task, request.url, 200, await cookies.scriptCookies(for: origin))
        case .post:
            let text = String(decoding: request.body ?? Data(), as: UTF8.self)
            let saved = await cookies.scriptSets(text, for: origin)
            return respond(task, request.url, saved ? 200 : 403, saved ? "" : "refused\n")
        default:
            return respond(task, request.url, 405, "GET or POST\n")
        }
    }

    /// A small text answer, whole.
    func respond(_ task: any SchemeTask, _ url: String, _ status: Int, _ text: String) -> (Int, Int) {
        let body = Data(text.utf8)
        let head = SchemeResponseHead(
            status: status,
            headers: [
                "Content-Type": "text/plain; charset=utf-8", "Content-Length": "\(body.count)",
                "Cache-Control": "no-store",
            ], url: url)
        guard deliver(task, last: false, { $0.didReceive(head) }) else { return (status, 0) }
        if !body.isEmpty { deliver(task, last: false) { $0.didReceive(body) } }
        deliver(task, last: true) { $0.didFinish() }
        return (status, body.count)
    }
}
