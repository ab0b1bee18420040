import Foundation

/// An origin as browsers compare them (RFC 6454): scheme, host and port, lower case, the
/// scheme's default port left out. A package's pages are one origin: `larder://<id>`, or the
/// origin of a route it serves.
package struct WebOrigin: Sendable, Hashable, CustomStringConvertible {
    /// The scheme, lower case (`larder`, `https`…).
    package let scheme: String
    /// The host, lower case.
    package let host: String
    /// The port, when it is not the scheme's default.
    package let port: Int?

    /// The origin of `url` (an absolute URL with a host), or nil (no scheme, no host, `null`).
    package init?(url: String) {
        guard let u = URL(string: url) else { return nil }
        self.init(u)
    }

    /// The origin of `url`, or nil when it has no scheme or host.
    package init?(_ url: URL) {
        guard let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased(), !host.isEmpty else {
            return nil
        }
        self.scheme = scheme
        self.host = host
        let defaults = ["http": 80, "https": 443]
        port = url.port.flatMap { defaults[scheme] == $0 ? nil : $0 }
    }

    /// `scheme://host[:port]`, as an `Origin` field gives it.
    package var description: String { "\(scheme)://\(host)\(port.map { ":\($0)" } ?? "")" }

    /// Whether pages of this origin are a secure context: https, a custom scheme (registered
    /// secure by the web-view glue), or a loopback host.
    package var isSecure: Bool {
        scheme != "http" || host == "localhost" || host.hasSuffix(".localhost") || host == "127.0.0.1"
            || host == "[::1]"
    }
}

/// What a package declares about reaching and being reached by others (manifests §17): the
/// origins that may read its files across origins (`corsOrigins`), and the hosts its pages'
/// forwarded requests may go to (`networkHosts`). Checked by the index rules, applied by the
/// resource loader, the web-view driver and the gateway.
package enum PackageAccess {
    /// Most entries either list may have.
    package static let maxEntries = 64

    /// Why `origin` (a `corsOrigins` entry) is not one, or nil: `*`, or `scheme://host[:port]`
    /// written as browsers write an `Origin` field (lower case, no path, no default port).
    package static func originProblem(_ origin: String) -> String? {
        if origin == "*" { return nil }
        guard let o = WebOrigin(url: origin) else { return "not scheme://host[:port]" }
        guard o.description == origin else { return "should be written \(o) (lower case, no path or default port)" }
        return nil
    }

    /// Why `host` (a `networkHosts` entry) is not one, or nil: a host name or address, lower case,
    /// or `*.` and a name with at least two labels (that name's subdomains, not itself).
    package static func hostProblem(_ host: String) -> String? {
        let name = host.hasPrefix("*.") ? String(host.dropFirst(2)) : host
        guard !name.isEmpty, name.count <= 253 else { return "empty or too long" }
        let allowed = Set("abcdefghijklmnopqrstuvwxyz0123456789-.:[]")
        guard name.allSatisfy({ allowed.contains($0) }) else { return "not a lower-case host name" }
        guard !name.hasPrefix("."), !name.hasSuffix("."), !name.contains("..") else { return "an empty label" }
        if host.hasPrefix("*."), !name.contains(".") { return "a wildcard must name at least two labels" }
        return nil
    }

    /// Whether a page of origin `origin` may read a file of a package that lists `corsOrigins`.
    package static func mayRead(_ origin: String, corsOrigins: [String]) -> Bool {
        guard origin != "null", WebOrigin(url: origin)?.description == origin else { return false }
        return corsOrigins.contains("*") || corsOrigins.contains(origin)
    }

    /// Whether `host` is one `networkHosts` allows: equal to an entry, or under a `*.` entry.
    package static func allows(_ host: String, networkHosts: [String]) -> Bool {
        let h = host.lowercased()
        return networkHosts.contains { entry in
            entry.hasPrefix("*.") ? h.hasSuffix(String(entry.dropFirst(1))) : h == entry
        }
    }
}
