import Foundation
import HTTPTypes
import LarderCore
import Synchronization

/// What a front-end does with a request no package serves.
public enum NetworkMode: Sendable, Equatable {
    /// Forward it: an http(s) URL to itself (its scheme replaced by this one), a custom-scheme URL
    /// `<scheme>://<id>/<rest>` to its package's first http(s) route (`https` or `http`).
    case forward(scheme: String)
    /// Refuse it (502): the device is offline, or the app wants no network.
    case offline
}

/// Passthrough forwarding, shared by the HTTP gateway and the WebKit scheme-task driver so that
/// a `local-then-network` route behaves the same in both: where a request goes, which header
/// fields go with it (hop-by-hop ones removed, a loop marker added), and which come back. The
/// network itself is an injected `NetworkExchange`.
public struct Forwarder: Sendable {
    /// Forward or refuse.
    public let network: NetworkMode
    /// What carries the requests; nil refuses every one (502).
    package let exchange: (any NetworkExchange)?
    /// Largest request body forwarded, and largest answer relayed.
    package var maxBytes: Int
    /// Requests refused because their package's `networkHosts` does not list the host.
    package let refusedHosts = SharedCount()
    /// How many requests were refused because their package's `networkHosts` does not list the host.
    package var refusedHostCount: Int { refusedHosts.value }

    /// The header field a forwarded request carries, so a request that comes back is refused (508).
    package static let loopMarker = "X-Larder-Gateway"

    /// Header fields that concern one connection, never forwarded either way.
    package static let hopByHop: Set<String> = [
        "connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade", "host",
        "proxy-authorization", "proxy-authenticate",
    ]

    /// A forwarder that forwards nothing: every request no package serves fails (`.offline`).
    public static var offline: Forwarder { Forwarder(network: .offline, exchange: nil) }

    /// A forwarder in `network` mode over `exchange`.
    package init(network: NetworkMode, exchange: (any NetworkExchange)?, maxBytes: Int = 64 << 20) {
        self.network = network
        self.exchange = exchange
        self.maxBytes = maxBytes
    }

    /// Where a request goes, or why it does not.
    package enum Target: Sendable, Equatable {
        /// Send it to this URL.
        case url(String)
        /// Answer it with this status (502 refused or offline, 508 a loop) and reason.
        case refused(status: Int, reason: String)
    }

    /// Where a request for `url` that the loader passed through (for `reason`) goes; `table` maps
    /// custom-scheme URLs to their package's origin; `marked` says the request carries the loop
    /// marker (it came from a forwarder); `page` is the URL of the page that makes it, when known
    /// (its package's `networkHosts`, else that of the package `url` routes to, decides which
    /// hosts it may reach: 403 for another, counted in `refusedHosts`).
    package func target(
        for url: String, reason: String, table: RouteTable, marked: Bool, page: String? = nil
    ) -> Target {
        guard case .forward = network else {
            return .refused(status: 502, reason: "offline: \(reason)")
        }
        guard let to = networkURL(for: url, table: table) else {
            return .refused(status: 502, reason: "\(reason); a custom-scheme URL with no http(s) route has no network")
        }
        if let why = hostRefusal(to, page: page, url: url, table: table) {
            refusedHosts.add()
            return .refused(status: 403, reason: why)
        }
        if marked { return .refused(status: 508, reason: "the request would loop back through a Larder forwarder") }
        guard exchange != nil else { return .refused(status: 502, reason: "\(reason); no network exchange") }
        return .url(to)
    }

    /// Why the package whose page asks (else the one `url` routes to) may not reach `to`'s host:
    /// its `networkHosts` lists neither that host nor is it one of its own routes' hosts. Nil
    /// when it may, or when the package lists no `networkHosts` (any host, as before the field).
    package func hostRefusal(_ to: String, page: String?, url: String, table: RouteTable) -> String? {
        guard let id = page.flatMap({ table.routedPackage($0) }) ?? table.routedPackage(url),
            let pkg = table.package(id), let hosts = pkg.networkHosts
        else { return nil }
        let host = URL(string: to)?.host?.lowercased() ?? ""
        if PackageAccess.allows(host, networkHosts: hosts) || pkg.routes.contains(where: { $0.host == host }) {
            return nil
        }
        return "\(id)'s networkHosts does not list \(host.isEmpty ? to : host)"
    }

    /// The http(s) URL `url` stands for on the network: a custom-scheme URL through its package's
    /// http(s) route (nil when it has none), in the upstream scheme when forwarding (offline,
    /// as routed). The cookie bridge keeps a page's cookies for it.
    package func networkURL(for url: String, table: RouteTable) -> String? {
        var to = url
        let lower = url.lowercased()
        if !lower.hasPrefix("http://") && !lower.hasPrefix("https://") {
            guard let mapped = table.networkURL(forCustom: url) else { return nil }
            to = mapped
        }
        guard case .forward(let scheme) = network else { return to }
        if scheme == "http", to.lowercased().hasPrefix("https://") { to = "http://" + to.dropFirst(8) }
        if scheme == "https", to.lowercased().hasPrefix("http://") { to = "https://" + to.dropFirst(7) }
        return to
    }

    /// The request to send: the method and body as received, the header fields without hop-by-hop
    /// ones, and the loop marker.
    package func request(
        method: HTTPRequest.Method, url: String, headers: [(String, String)], body: Data?
    ) -> ForwardRequest {
        var fields = headers.filter {
            !Self.hopByHop.contains($0.0.lowercased()) && $0.0.lowercased() != "content-length"
        }
        fields.removeAll { $0.0.lowercased() == Self.loopMarker.lowercased() }
        fields.append((Self.loopMarker, "1"))
        let hasBody = body.map { !$0.isEmpty } ?? false
        return ForwardRequest(method: method, url: url, headers: fields, body: hasBody ? body : nil)
    }

    /// Sends `request`; the answer's header fields without hop-by-hop ones, its body streamed
    /// (empty for HEAD), or why it failed.
    package func send(_ request: ForwardRequest) async -> Result<ForwardResponse, ForwardFailure> {
        guard let exchange else { return .failure(ForwardFailure(message: "no network exchange")) }
        if let body = request.body, body.count > maxBytes {
            return .failure(ForwardFailure(message: "the request body is larger than \(maxBytes) bytes"))
        }
        do {
            var response = try await exchange.send(request, maxBytes: maxBytes)
            response.headers.removeAll { Self.hopByHop.contains($0.0.lowercased()) }
            if request.method == .head { response.body = .bytes(Data()) }
            return .success(response)
        } catch {
            return .failure(ForwardFailure(message: "\(error)"))
        }
    }
}

/// Why a forwarded request got no answer.
public struct ForwardFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong (the network's error in words).
    public let message: String
    /// Creates one.
    public init(message: String) { self.message = message }
    /// The message.
    public var description: String { message }
}

/// A count every copy of a value shares (a `Mutex` is not copyable, so a struct holds it in a class).
package final class SharedCount: Sendable {
    private let count = Mutex(0)

    /// A count of zero.
    package init() {}

    /// The count now.
    package var value: Int { count.withLock { $0 } }

    /// Adds one.
    package func add() { count.withLock { $0 += 1 } }
}
