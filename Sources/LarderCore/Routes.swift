import Foundation

/// A route prefix a package claims: `https://host[:port]/path/`, or a custom scheme
/// `myapp://host/path/`. Normalised so that equal prefixes compare equal: scheme and host lower
/// case, an internationalised host in its ASCII (IDNA, `xn--`) form, default ports (80 for http,
/// 443 for https) dropped, path ending in `/`.
package struct RoutePrefix: Hashable, Sendable, CustomStringConvertible {
    /// Lower-case scheme.
    package let scheme: String
    /// Lower-case host (may be empty for custom schemes written `myapp:///`).
    package let host: String
    /// Port when not the scheme's default.
    package let port: Int?
    /// Path, starting and ending with `/`.
    package let path: String

    /// Why a route text is refused, or `nil` when it is fine.
    package static func problem(_ text: String) -> String? {
        switch parse(text) {
        case .success: nil
        case .failure(let reason): reason.message
        }
    }

    /// Parses and normalises a route.
    package init?(_ text: String) {
        guard case .success(let r) = Self.parse(text) else { return nil }
        self = r
    }

    struct Reason: Error { let message: String }

    private init(scheme: String, host: String, port: Int?, path: String) {
        self.scheme = scheme
        self.host = host
        self.port = port
        self.path = path
    }

    static func parse(_ text: String) -> Result<RoutePrefix, Reason> {
        guard let c = URLComponents(string: text), let scheme = c.scheme?.lowercased(), !scheme.isEmpty else {
            return .failure(Reason(message: "not an absolute URL (expected e.g. https://app.example.com/)"))
        }
        if scheme == "larder" {
            return .failure(Reason(message: "larder://<id>/ is implied for every package; do not list it"))
        }
        if c.query != nil || c.fragment != nil || c.user != nil || c.password != nil {
            return .failure(Reason(message: "a route is a prefix: no query, fragment or credentials"))
        }
        // An internationalised host in its ASCII form, as browsers send it in Host.
        guard let host = BrowserURL.asciiHost(c.host ?? "") else {
            return .failure(Reason(message: "the host \(quoted(c.host ?? "")) has no ASCII (IDNA) form"))
        }
        if (scheme == "http" || scheme == "https") && host.isEmpty {
            return .failure(Reason(message: "an http(s) route needs a host"))
        }
        var port = c.port
        if (scheme == "http" && port == 80) || (scheme == "https" && port == 443) { port = nil }
        var path = c.percentEncodedPath
        if path.isEmpty { path = "/" }
        guard path.hasPrefix("/") else { return .failure(Reason(message: "the path must start with /")) }
        if path.split(separator: "/").contains(where: { $0 == "." || $0 == ".." }) {
            return .failure(Reason(message: "the path has a . or .. segment"))
        }
        if !path.hasSuffix("/") { path += "/" }
        return .success(RoutePrefix(scheme: scheme, host: host, port: port, path: path))
    }

    /// The normalised route, `scheme://host[:port]/path/`, as `init?(_:)` accepts it back.
    package var description: String {
        "\(scheme)://\(host)\(port.map { ":\($0)" } ?? "")\(path)"
    }
}

/// A release channel: a device follows one (`stable` unless told), a publisher packs each version
/// to one. A valid name is `[a-z0-9][a-z0-9._-]{0,31}`; text entering Larder (a config, a command
/// line) is checked with `init?(_:)`, while a channel decoded from a document keeps its text as
/// it is (encoded as that one string) for the index rules to judge with `isValid`.
public struct Channel: RawRepresentable, Codable, Hashable, Comparable, Sendable, ExpressibleByStringLiteral,
    CustomStringConvertible
{
    /// The channel a package is published to, and a device follows, when none is named: `stable`.
    public static let `default`: Channel = "stable"

    /// The name, as written.
    public let rawValue: String

    /// The channel `name` names, or nil when it is not a valid channel name.
    public init?(_ name: String) {
        guard Self.isValid(name) else { return nil }
        rawValue = name
    }

    /// The channel spelled `rawValue`, unchecked (as a document spells it; see `isValid`).
    public init(rawValue: String) { self.rawValue = rawValue }

    /// A channel written in code, such as `"beta"`.
    public init(stringLiteral value: String) { rawValue = value }

    /// Decodes the single string a document spells, unchecked (the index rules check it).
    public init(from decoder: Decoder) throws {
        rawValue = try decoder.singleValueContainer().decode(String.self)
    }

    /// Encodes the name as a single string.
    public func encode(to encoder: Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(rawValue)
    }

    /// Whether the name is a valid channel name.
    public var isValid: Bool { Self.isValid(rawValue) }

    /// The name.
    public var description: String { rawValue }

    /// Channels in the order of their names.
    public static func < (a: Channel, b: Channel) -> Bool { a.rawValue < b.rawValue }

    /// Whether `name` is a valid channel name.
    package static func isValid(_ name: String) -> Bool {
        name.utf8.count <= 32 && PackageID.isValid(name)
    }
}
