/// What a URL resolves to.
public enum Resolution: Sendable, Equatable {
    /// Served from the sandbox.
    case local(LocalFile)
    /// Let the request go to the network.
    case passthrough(reason: String)
    /// Inside a package's routes, no such file, and the policy forbids the network.
    case notFound(reason: String)
}

/// A file that serves a URL.
public struct LocalFile: Sendable, Equatable {
    public var package: PackageID
    public var version: SemanticVersion
    /// The path inside the package.
    public var path: RelativePath
    public var mime: String
    public var length: Int64
    /// The file's SHA-256 from its file list (quoted for the header).
    public var etag: String
}

/// One installed package as the resolver sees it: its active version's files and the serving
/// settings the index gave it. Every answer is computed here, once per snapshot (type, ETag), so
/// a lookup is one dictionary access.
public struct RoutedPackage: Sendable {
    public var id: PackageID
    public var version: SemanticVersion
    public var routes: [RoutePrefix]
    public var entry: String
    public var spaFallback: Bool
    public var policy: Policy
    /// Path inside the package → the answer for it.
    public var files: [String: LocalFile]

    /// Creates one from a file list and the index's settings.
    public init(list: FileList, routes: [RoutePrefix], entry: String, spaFallback: Bool, policy: Policy) {
        id = list.id
        version = list.version
        self.routes = routes
        self.entry = entry
        self.spaFallback = spaFallback
        self.policy = policy
        var files: [String: LocalFile] = [:]
        files.reserveCapacity(list.files.count)
        for f in list.files where files[f.path.string] == nil {
            files[f.path.string] = LocalFile(
                package: list.id, version: list.version, path: f.path, mime: f.mime ?? MediaTypes.type(for: f.path),
                length: f.size, etag: "\"\(f.sha256.hex)\"")
        }
        self.files = files
    }
}

/// An immutable URL → file table, built once per sandbox state. Matching and normalisation are
/// pure and make no system call: `larder://<id>/<path>` always, the app's other custom schemes,
/// and http(s) prefixes the index declares (longest prefix wins, host case-insensitive, default
/// ports normalised). Query and fragment are ignored; percent-decoding happens once; dot segments
/// are removed; a path that would leave the package, or holds NUL, a backslash or an encoded
/// slash, is refused before any lookup.
///
/// The hot path (a plain path under a declared route) costs a scan of the URL's bytes and three
/// or four dictionary lookups: the origin, the route prefix (one per path segment, longest
/// first), and the file.
public struct RouteTable: Sendable {
    /// Package id text → package.
    let packages: [String: RoutedPackage]
    /// `scheme://host[:port]` (normalised) → route path prefix → package id.
    let origins: [String: [String: String]]
    /// Custom schemes that map `scheme://<id>/<path>` like `larder:`.
    let schemes: Set<String>

    /// Builds a table; `schemes` are extra custom schemes the app registers (lower case).
    public init(packages: [RoutedPackage], schemes: Set<String> = []) {
        self.packages = Dictionary(packages.map { ($0.id.rawValue, $0) }, uniquingKeysWith: { a, _ in a })
        var origins: [String: [String: String]] = [:]
        for pkg in packages {
            for r in pkg.routes {
                let origin = "\(r.scheme)://\(r.host)\(r.port.map { ":\($0)" } ?? "")"
                if origins[origin]?[r.path] == nil { origins[origin, default: [:]][r.path] = pkg.id.rawValue }
            }
        }
        self.origins = origins
        self.schemes = Set(schemes.map { $0.lowercased() }).union(["larder"])
    }

    /// The same table with some packages replaced (a session's pinned versions).
    public func replacing(_ pinned: [RoutedPackage]) -> RouteTable {
        var all = packages
        for p in pinned { all[p.id.rawValue] = p }
        return RouteTable(packages: all.keys.sorted().compactMap { all[$0] }, schemes: schemes)
    }

    /// The package with this id, if the table has it.
    public func package(_ id: PackageID) -> RoutedPackage? { packages[id.rawValue] }

    /// Every package in the table, by id.
    public var allPackages: [RoutedPackage] { packages.keys.sorted().compactMap { packages[$0] } }

    /// Resolves a URL string.
    public func resolve(_ url: String) -> Resolution {
        guard let u = ParsedURL(url) else { return .passthrough(reason: "not a URL this table routes") }
        // Custom schemes: scheme://<id>/<path>.
        if u.scheme != "http" && u.scheme != "https" {
            guard schemes.contains(u.scheme) else { return .passthrough(reason: "scheme \(u.scheme) is not routed") }
            guard let pkg = packages[u.host] else { return .notFound(reason: "no package \(u.host) in this sandbox") }
            return lookup(pkg, rawPath: u.path)
        }
        let isDefaultPort = u.port == nil || (u.port == 80 && u.scheme == "http") || (u.port == 443 && u.scheme == "https")
        let origin = isDefaultPort ? u.scheme + "://" + u.host : "\(u.scheme)://\(u.host):\(u.port!)"
        if let prefixes = origins[origin], let (id, rest) = Self.longestPrefix(prefixes, of: u.path), let pkg = packages[id] {
            return lookup(pkg, rawPath: rest)
        }
        return .passthrough(reason: "no package routes \(origin)\(u.path)")
    }

    /// The longest route prefix of `path` in `prefixes` (each ends in `/`), and the rest of the
    /// path after it (starting with `/`). `/app` matches the prefix `/app/` as its directory.
    static func longestPrefix(_ prefixes: [String: String], of path: String) -> (String, String)? {
        let bytes = path.utf8
        if bytes.last != UInt8(ascii: "/"), let id = prefixes[path + "/"] { return (id, "/") }
        var end = bytes.endIndex
        while end > bytes.startIndex {
            guard let slash = bytes[..<end].lastIndex(of: UInt8(ascii: "/")) else { break }
            let after = bytes.index(after: slash)
            if let id = prefixes[String(path[..<after])] {
                return (id, "/" + String(path[after...]))
            }
            end = slash
        }
        return nil
    }

    /// The lookup inside one package: bypass prefixes, decoding and dot segments, then the file,
    /// the directory's entry file, or the SPA fallback; else the policy decides.
    func lookup(_ pkg: RoutedPackage, rawPath: String) -> Resolution {
        let path: String
        if let plain = Self.plainPath(rawPath) {
            path = plain
        } else {
            switch Self.normalise(rawPath) {
            case .success(let p): path = p
            case .failure(let why): return .notFound(reason: "refused path \(rawPath): \(why.message)")
            }
        }
        // Bypass prefixes match the normalised path, so `//api/x` or `/%61pi/x` cannot dodge them.
        if !pkg.policy.bypass.isEmpty {
            let rooted = "/" + path
            for b in pkg.policy.bypass where rooted.hasPrefix(b) || (rooted + "/") == b {
                return .passthrough(reason: "\(rawPath) matches the bypass prefix \(b) of \(pkg.id)")
            }
        }
        let isDirectory = path.isEmpty || path.utf8.last == UInt8(ascii: "/")
        if isDirectory {
            if let f = pkg.files[path + pkg.entry] { return .local(f) }
        } else {
            if let f = pkg.files[path] { return .local(f) }
            if let f = pkg.files[path + "/" + pkg.entry] { return .local(f) }
        }
        let last = path.split(separator: "/").last ?? ""
        if pkg.spaFallback, !isDirectory, !last.contains("."), let f = pkg.files[pkg.entry] {
            return .local(f)
        }
        switch pkg.policy.mode {
        case .localOnly: return .notFound(reason: "\(pkg.id)@\(pkg.version) has no \(path.isEmpty ? "/" : path) (local-only)")
        case .localThenNetwork: return .passthrough(reason: "\(pkg.id)@\(pkg.version) has no \(path.isEmpty ? "/" : path)")
        }
    }

    /// The common case without decoding: a path of plain segments (no `%`, backslash, NUL, empty
    /// or dot segment) normalises to itself without its leading `/`. `nil` sends the path through
    /// `normalise`.
    static func plainPath(_ raw: String) -> String? {
        let bytes = raw.utf8
        guard bytes.first == UInt8(ascii: "/"), bytes.count <= 4096 else { return nil }
        var previous = UInt8(ascii: "/")
        var segmentStart = true
        for b in bytes.dropFirst() {
            switch b {
            case UInt8(ascii: "%"), UInt8(ascii: "\\"), 0: return nil
            case UInt8(ascii: "/"): if previous == UInt8(ascii: "/") { return nil }
            case UInt8(ascii: "."): if segmentStart { return nil }
            default: break
            }
            segmentStart = b == UInt8(ascii: "/")
            previous = b
        }
        return String(raw.dropFirst())
    }

    typealias Refusal = PercentDecoding.Refusal

    /// Percent-decodes once and removes dot segments; refuses NUL, backslash, an encoded slash,
    /// bad escapes, non-UTF-8, and paths that climb above the package root. Returns the path
    /// without its leading `/` (a trailing `/` is kept to mark a directory).
    static func normalise(_ raw: String) -> Result<String, Refusal> {
        if raw.utf8.count > 4096 { return .failure(Refusal(message: "longer than 4096 bytes")) }
        if raw.utf8.contains(0) { return .failure(Refusal(message: "a NUL byte")) }
        if raw.utf8.contains(UInt8(ascii: "\\")) { return .failure(Refusal(message: "a backslash")) }
        let decoded = PercentDecoding.decode(raw) { byte in
            switch byte {
            case UInt8(ascii: "/"): "an encoded slash"
            case UInt8(ascii: "\\"): "an encoded backslash"
            case 0: "an encoded NUL"
            default: nil
            }
        }
        let text: String
        switch decoded {
        case .success(let t): text = t
        case .failure(let r): return .failure(r)
        }
        var out: [Substring] = []
        for s in text.split(separator: "/", omittingEmptySubsequences: false) {
            if s.isEmpty || s == "." { continue }
            if s == ".." {
                guard !out.isEmpty else { return .failure(Refusal(message: "it climbs above the package root")) }
                out.removeLast()
                continue
            }
            out.append(s)
        }
        let trailing = text.hasSuffix("/") || text.hasSuffix("/.") || text.hasSuffix("/..") || text.isEmpty
        let joined = out.joined(separator: "/")
        return .success(trailing && !joined.isEmpty ? joined + "/" : joined)
    }
}

/// The pieces of a URL the table matches on, parsed without Foundation: scheme and host lower
/// case, port, path (still percent-encoded); query and fragment dropped.
struct ParsedURL {
    let scheme: String
    let host: String
    let port: Int?
    let path: String

    init?(_ text: String) {
        guard let colon = text.firstIndex(of: ":") else { return nil }
        let scheme = text[..<colon].lowercased()
        guard !scheme.isEmpty, scheme.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "+" || $0 == "-" || $0 == "." }) else { return nil }
        var rest = text[text.index(after: colon)...]
        guard rest.hasPrefix("//") else { return nil }
        rest = rest.dropFirst(2)
        if let cut = rest.firstIndex(where: { $0 == "?" || $0 == "#" }) { rest = rest[..<cut] }
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        var authority = rest[..<slash]
        if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
        var host = authority
        var port: Int?
        if let c = authority.lastIndex(of: ":"), !authority.hasSuffix("]") {
            host = authority[..<c]
            guard let p = Int(authority[authority.index(after: c)...]), (0...65535).contains(p) else { return nil }
            port = p
        }
        self.scheme = scheme
        self.host = host.lowercased()
        self.port = port
        let path = String(rest[slash...])
        self.path = path.isEmpty ? "/" : path
    }
}

/// Content types by extension, covering what web pages load; text types carry `charset=utf-8`.
public enum MediaTypes {
    static let table: [String: String] = [
        "html": "text/html; charset=utf-8", "htm": "text/html; charset=utf-8", "css": "text/css; charset=utf-8",
        "js": "text/javascript; charset=utf-8", "mjs": "text/javascript; charset=utf-8",
        "json": "application/json; charset=utf-8", "map": "application/json; charset=utf-8",
        "webmanifest": "application/manifest+json; charset=utf-8", "txt": "text/plain; charset=utf-8",
        "xml": "application/xml; charset=utf-8", "svg": "image/svg+xml; charset=utf-8", "wasm": "application/wasm",
        "png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "gif": "image/gif", "webp": "image/webp",
        "avif": "image/avif", "ico": "image/x-icon", "woff": "font/woff", "woff2": "font/woff2", "ttf": "font/ttf",
        "otf": "font/otf", "mp4": "video/mp4", "webm": "video/webm", "mp3": "audio/mpeg", "m4a": "audio/mp4",
        "ogg": "audio/ogg", "wav": "audio/wav", "pdf": "application/pdf",
    ]

    /// The type for a path (by its extension), `application/octet-stream` when unknown.
    public static func type(for path: RelativePath) -> String {
        table[path.pathExtension] ?? "application/octet-stream"
    }
}
