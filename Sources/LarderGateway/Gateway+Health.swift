import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import LarderCore
import LarderResolve
import Logging
import NIOCore

/// Page health in the gateway: watching a served page, and the reserved paths on the page's own origin.
@available(macOS 14, iOS 17, tvOS 17, *)
extension Gateway {
    /// Starts watching the page `r` serves, when it is an HTML document of an active version no
    /// larger than `maxInjectedDocumentBytes`: returns the document with the page-health script
    /// in it, having read (and closed) the response's body. Nil leaves `r` untouched.
    func watch(_ r: LoadResponse) -> ByteBuffer? {
        guard let tracker = health, r.status == 200, case .local(let package, let version) = r.outcome,
            r.header("Content-Type")?.lowercased().hasPrefix("text/html") == true,
            let length = Int(r.header("Content-Length") ?? ""), length <= maxInjectedDocumentBytes,
            let activation = loader.resolver.snapshot().versions[package]?.activationRef(package),
            activation.version == version
        else { return nil }
        var html = Data(capacity: length)
        do {
            while let chunk = try r.nextChunk() { html.append(chunk) }
        } catch {
            return nil
        }
        guard let token = tracker.reserve(activation) else { return ByteBuffer(bytes: html) }
        return ByteBuffer(bytes: PageHealthScript.inject(into: html, token: token))
    }

    /// A watched document: the loader's headers without the validators (the body is not the
    /// file's), never stored by a cache.
    static func document(_ r: LoadResponse, _ body: ByteBuffer) -> Response {
        var headers = HTTPFields()
        for (k, v) in r.headers
        where !["etag", "last-modified", "content-length", "cache-control", "accept-ranges"]
            .contains(k.lowercased())
        {
            if let name = HTTPField.Name(k) { headers[name] = v }
        }
        headers[.contentLength] = "\(body.readableBytes)"
        headers[.cacheControl] = "no-store"
        if let name = HTTPField.Name("X-Larder-Outcome") { headers[name] = "\(r.outcome)" }
        return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: body))
    }

    /// The reserved paths on every origin: the page-health script and its report endpoint.
    func reserved(_ request: inout Request, target: String, authority: String, started: Date) async -> Response {
        let method = request.method
        let path = String(target.prefix { $0 != "?" })
        let url = "http://\(authority)\(target)"
        guard let tracker = health else {
            log(line(method, url, 404, "page-health is off", nil, started))
            return Self.text(404, "larder gateway: page health is off (larder serve --page-health)\n")
        }
        switch (method, path) {
        case (.get, PageHealthScript.scriptPath), (.head, PageHealthScript.scriptPath):
            var headers = HTTPFields()
            headers[.contentType] = "text/javascript; charset=utf-8"
            headers[.cacheControl] = "no-cache"
            let body = ByteBuffer(string: PageHealthScript.source)
            headers[.contentLength] = "\(body.readableBytes)"
            log(line(method, url, 200, "page-health script", "\(body.readableBytes)", started))
            return Response(
                status: .ok, headers: headers, body: ResponseBody(byteBuffer: method == .head ? ByteBuffer() : body))
        case (.post, PageHealthScript.reportPath):
            return await report(&request, tracker, target: target, authority: authority, started: started)
        default:
            log(line(method, url, 404, "no such reserved path", nil, started))
            return Self.text(
                404,
                "larder gateway: \(path) is not a reserved path (\(PageHealthScript.scriptPath), POST \(PageHealthScript.reportPath))\n"
            )
        }
    }

    /// A POST to the report path: refused from another origin; the script's own `start` and
    /// `frame` reports; else a page signal for the page its token names.
    func report(
        _ request: inout Request, _ tracker: PageHealthTracker, target: String, authority: String, started: Date
    ) async -> Response {
        let method = request.method
        let url = "http://\(authority)\(target)"
        let token = Self.query(target, "page") ?? ""
        let data: ByteBuffer
        do { data = try await request.collectBody(upTo: 64 << 10) } catch {
            log(line(method, url, 413, "page-health message refused: larger than 64 KiB", nil, started))
            return Self.text(413, "larder gateway: a page-health message is at most 64 KiB\n")
        }
        if let refused = Self.foreignReport(request, authority: authority) {
            log(line(method, url, 403, "page-health message refused: \(refused)", nil, started))
            return Self.text(403, "larder gateway: \(refused)\n")
        }
        switch Self.scriptReport(Data(buffer: data)) {
        case "frame":
            let forgotten = tracker.forget(page: token)
            let what = forgotten ? "not watched" : "no such page"
            log(line(method, url, 204, "page-health frame: \(what)", nil, started))
            return Response(status: .noContent, headers: [.cacheControl: "no-store"], body: ResponseBody())
        case "start":
            let begun = tracker.start(page: token)
            log(line(method, url, 204, "page-health start\(begun ? "" : ": no such page")", nil, started))
            return Response(status: .noContent, headers: [.cacheControl: "no-store"], body: ResponseBody())
        default:
            break
        }
        switch PageSignal.decode(Data(buffer: data)) {
        case .failure(let why):
            log(line(method, url, 400, "page-health message refused: \(why)", nil, started))
            return Self.text(400, "larder gateway: \(why)\n")
        case .success(let signal):
            guard tracker.signal(signal, page: token) else {
                log(line(method, url, 404, "page-health \(Self.name(signal)) for no open page", nil, started))
                return Self.text(404, "larder gateway: no page \(token) is watched (unknown, or decided already)\n")
            }
            log(line(method, url, 204, "page-health \(Self.name(signal))", nil, started))
            return Response(status: .noContent, headers: [.cacheControl: "no-store"], body: ResponseBody())
        }
    }

    /// Why a page-health report must be refused for who sent it: an `Origin` field (browsers
    /// send one with every POST) of another host than the one the report was sent to.
    static func foreignReport(_ request: Request, authority: String) -> String? {
        guard let origin = request.headers[named: "Origin"] else { return nil }
        guard let o = WebOrigin(url: origin), let asked = WebOrigin(url: "\(o.scheme)://\(authority)"),
            asked.host == o.host, asked.port == o.port
        else { return "a report from \(origin) for a page of \(authority)" }
        return nil
    }

    /// The page-health script's own reports, which are no page signal: `start` (a top-level
    /// page's script ran: watch it) and `frame` (a subframe's: never watch it). Nil for any other.
    static func scriptReport(_ data: Data) -> String? {
        guard data.count < 256, let o = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let event = o["event"] as? String, event == "start" || event == "frame"
        else { return nil }
        return event
    }

    static func name(_ s: PageSignal) -> String {
        switch s {
        case .ready: "ready"
        case .documentLoaded: "loaded"
        case .scriptError: "error"
        case .loadFailed: "load-failed"
        case .processTerminated: "terminated"
        }
    }

    /// The value of the query parameter `name` of a request target.
    static func query(_ target: String, _ name: String) -> String? {
        URLComponents(string: target)?.queryItems?.first { $0.name == name }?.value
    }
}
