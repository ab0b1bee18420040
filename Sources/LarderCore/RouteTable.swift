import Foundation

/// An immutable URL → file table, built once per sandbox state. Matching and normalisation are
/// pure and make no system call: `larder://<id>/<path>` always, the app's other custom schemes,
/// and http(s) prefixes the index declares (longest prefix wins, host case-insensitive, default
/// ports normalised). Query and fragment are ignored; percent-decoding happens once; dot segments
/// are removed; a path that would leave the package, or holds NUL, a backslash or an encoded
/// slash, is refused before any lookup.
///
/// The hot path (`fastResolve`: an http(s) URL in canonical form naming a file under a declared
/// route) costs one scan of the URL's bytes and three or four lookups on borrowed bytes (the
/// host, the first path segment's prefixes, the file), allocates nothing, and retains the file
/// it returns once; every other URL takes the general path, which answers the same for those.
package struct RouteTable: Sendable {
    /// An http(s) origin (host lower case, default port as 0) → its route prefixes.
    let origins: [Origin: OriginRoutes]
    /// Custom schemes that map `scheme://<id>/<path>` like `larder:`.
    let schemes: Set<String>
    /// The http(s) routes indexed by bytes, for the fast path (`fastResolve`), and every package
    /// by id (`stored`).
    let fast: FastRoutes

    struct Origin: Hashable {
        var https: Bool
        var host: String
        var port: Int
    }

    /// The prefixes of one origin, bucketed by their first path segment (`""` for `/`), longest
    /// first within a bucket.
    struct OriginRoutes {
        var buckets: [String: [(prefix: [UInt8], id: String)]] = [:]
    }

    /// Builds a table; `schemes` are extra custom schemes the app registers (lower case).
    package init(packages: [RoutedPackage], schemes: Set<String> = []) {
        let byID = Dictionary(packages.map { ($0.id.rawValue, $0) }, uniquingKeysWith: { a, _ in a })
        var origins: [Origin: OriginRoutes] = [:]
        var seen = Set<String>()
        for pkg in packages {
            for r in pkg.routes where r.scheme == "http" || r.scheme == "https" {
                guard seen.insert(r.description).inserted else { continue }
                let https = r.scheme == "https"
                let origin = Origin(https: https, host: r.host, port: r.port ?? 0)
                let segment =
                    r.path.dropFirst().split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false).first.map(
                        String.init) ?? ""
                origins[origin, default: OriginRoutes()].buckets[segment, default: []].append(
                    (Array(r.path.utf8), pkg.id.rawValue))
            }
        }
        for (o, var routes) in origins {
            for (k, list) in routes.buckets { routes.buckets[k] = list.sorted { $0.prefix.count > $1.prefix.count } }
            origins[o] = routes
        }
        self.origins = origins
        self.schemes = Set(schemes.map { $0.lowercased() }).union(["larder"])
        fast = FastRoutes(origins: origins, packages: byID)
    }

    /// A table with the routes of `table` and the packages of `fast` (see `replacing`).
    private init(keeping table: RouteTable, fast: FastRoutes) {
        origins = table.origins
        schemes = table.schemes
        self.fast = fast
    }

    /// The same table with some packages replaced or added (a sync's update, a session's pinned
    /// versions). When each package given replaces one with the same routes, only those packages
    /// change: the routes' origins and byte tables are shared with this table, and no route is
    /// indexed again. Otherwise the table is built again.
    package func replacing(_ changed: [RoutedPackage]) -> RouteTable {
        if changed.allSatisfy({ stored($0.id.rawValue)?.routes == $0.routes }), let fast = fast.replacing(changed) {
            return RouteTable(keeping: self, fast: fast)
        }
        var all: [String: RoutedPackage] = [:]
        for (id, slot) in fast.slots { all[id] = fast.refs[slot].package }
        for p in changed { all[p.id.rawValue] = p }
        return RouteTable(packages: all.keys.sorted().compactMap { all[$0] }, schemes: schemes)
    }

    /// The package whose id text is `key`, if the table has it.
    func stored(_ key: String) -> RoutedPackage? {
        fast.slots[key].map { fast.refs[$0].package }
    }

    /// The version of the package whose id text is `key`, if the table has it.
    package func version(idText key: String) -> SemanticVersion? {
        fast.slots[key].map { fast.refs[$0].package.version }
    }

    /// How many packages the table holds.
    package var count: Int { fast.refs.count }

    /// The package with this id, if the table has it.
    package func package(_ id: PackageID) -> RoutedPackage? { stored(id.rawValue) }

    /// Every package in the table, by id.
    package var allPackages: [RoutedPackage] { fast.slots.keys.sorted().compactMap { stored($0) } }

    /// Resolves a URL string. Works on the URL's UTF-8 bytes in place. The common case (an http(s)
    /// URL already in canonical form naming a file under a route) takes `fastResolve`, which
    /// allocates nothing; anything else takes the general path, which gives the same answer for
    /// what the fast path answers.
    ///
    /// The URL is read as a browser would request it (`BrowserURL`): `http://h/app/x//..` is
    /// `/app/x/`, `https://bücher.example/` is `https://xn--bcher-kva.example/`.
    package func resolve(_ url: String) -> Resolution {
        if let r = url.utf8.withContiguousStorageIfAvailable({ fastResolve($0) }) {
            return r ?? resolveGeneral(url)
        }
        // A string without contiguous UTF-8 (bridged): made native once, for both paths.
        var native = url
        return native.withUTF8 { fastResolve($0) } ?? resolveGeneral(native)
    }

    /// `resolve` without the fast path: every URL read as a browser would request it, matched and
    /// looked up in full.
    func resolveGeneral(_ url: String) -> Resolution {
        let url = BrowserURL.canonical(url) ?? url
        if let r = url.utf8.withContiguousStorageIfAvailable({ resolve(bytes: $0) }) { return r }
        var copy = url
        return copy.withUTF8 { resolve(bytes: $0) }
    }

    private static func lower(_ b: UInt8) -> UInt8 { b >= 65 && b <= 90 ? b | 0x20 : b }

    private static func equalsLower(_ b: UnsafeBufferPointer<UInt8>, _ range: Range<Int>, _ word: StaticString) -> Bool
    {
        guard range.count == word.utf8CodeUnitCount else { return false }
        let w = word.utf8Start
        for (n, i) in range.enumerated() where lower(b[i]) != w[n] { return false }
        return true
    }

    private static func string(_ b: UnsafeBufferPointer<UInt8>, _ range: Range<Int>, lowercase: Bool = false) -> String
    {
        let slice = UnsafeBufferPointer(rebasing: b[range])
        if lowercase, slice.contains(where: { $0 >= 65 && $0 <= 90 }) {
            return String(decoding: slice.map { lower($0) }, as: UTF8.self)
        }
        return String(decoding: slice, as: UTF8.self)
    }

    /// Which package of the table a URL routes to (by scheme and host, or by the longest route
    /// prefix), without looking its path up; nil when no package of the table takes it.
    package func routedPackage(_ url: String) -> PackageID? {
        func id(_ b: UnsafeBufferPointer<UInt8>) -> PackageID? {
            if case .package(let p, _) = match(bytes: b) { return p.id }
            return nil
        }
        let url = BrowserURL.canonical(url) ?? url
        if let r = url.utf8.withContiguousStorageIfAvailable(id) { return r }
        var copy = url
        return copy.withUTF8(id)
    }

    /// What the first step of a resolution found: the package and the rest of the path to look
    /// up in it, or the answer already.
    enum Match {
        case package(RoutedPackage, Range<Int>)
        case answer(Resolution)
    }

    func resolve(bytes b: UnsafeBufferPointer<UInt8>) -> Resolution {
        switch match(bytes: b) {
        case .package(let pkg, let rest): return lookup(pkg, b, rest)
        case .answer(let r): return r
        }
    }

    func match(bytes b: UnsafeBufferPointer<UInt8>) -> Match {
        let n = b.count
        // scheme ":" "//" authority path [? query] [# fragment]
        var i = 0
        while i < n, b[i] != UInt8(ascii: ":") {
            let c = b[i]
            let ok =
                (c >= 97 && c <= 122) || (c >= 65 && c <= 90) || (c >= 48 && c <= 57) || c == 43 || c == 45 || c == 46
            guard ok else { return .answer(.passthrough(reason: "not a URL this table routes")) }
            i += 1
        }
        guard i > 0, i + 2 < n, b[i + 1] == UInt8(ascii: "/"), b[i + 2] == UInt8(ascii: "/") else {
            return .answer(.passthrough(reason: "not a URL this table routes"))
        }
        let schemeRange = 0..<i
        let authStart = i + 3
        var j = authStart
        while j < n, b[j] != UInt8(ascii: "/"), b[j] != UInt8(ascii: "?"), b[j] != UInt8(ascii: "#") { j += 1 }
        let authEnd = j
        var k = j
        while k < n, b[k] != UInt8(ascii: "?"), b[k] != UInt8(ascii: "#") { k += 1 }
        let pathRange = j..<k
        var hostStart = authStart
        for x in authStart..<authEnd where b[x] == UInt8(ascii: "@") { hostStart = x + 1 }
        var hostEnd = authEnd
        var port = 0
        if authEnd > hostStart, b[authEnd - 1] != UInt8(ascii: "]") {
            var c = authEnd - 1
            while c >= hostStart, b[c] != UInt8(ascii: ":") { c -= 1 }
            if c >= hostStart {
                var value = 0
                guard c + 1 < authEnd, authEnd - c - 1 <= 5 else {
                    return .answer(.passthrough(reason: "not a URL this table routes"))
                }
                for x in (c + 1)..<authEnd {
                    guard b[x] >= 48, b[x] <= 57 else {
                        return .answer(.passthrough(reason: "not a URL this table routes"))
                    }
                    value = value * 10 + Int(b[x] - 48)
                }
                guard value <= 65535 else { return .answer(.passthrough(reason: "not a URL this table routes")) }
                port = value
                hostEnd = c
            }
        }
        let host = Self.string(b, hostStart..<hostEnd, lowercase: true)
        let https = Self.equalsLower(b, schemeRange, "https")
        let http = !https && Self.equalsLower(b, schemeRange, "http")
        if !https && !http {
            // Custom schemes: scheme://<id>/<path>.
            let scheme =
                Self.equalsLower(b, schemeRange, "larder") ? "larder" : Self.string(b, schemeRange, lowercase: true)
            guard schemes.contains(scheme) else {
                return .answer(.passthrough(reason: "scheme \(scheme) is not routed"))
            }
            guard let pkg = stored(host) else {
                return .answer(.notFound(reason: "no package \(host) in this sandbox"))
            }
            return .package(pkg, pathRange)
        }
        if (https && port == 443) || (http && port == 80) { port = 0 }
        let origin = Origin(https: https, host: host, port: port)
        if let routes = origins[origin], let (id, restStart) = Self.longestPrefix(routes, b, pathRange),
            let pkg = stored(id)
        {
            return .package(pkg, restStart..<pathRange.upperBound)
        }
        return .answer(
            .passthrough(
                reason: Self.unroutedReason(
                    https: https, host: host.utf8, port: port, path: UnsafeBufferPointer(rebasing: b[pathRange]))))
    }

    /// How the reason for a URL no package routes begins: a front-end that tries several URLs
    /// for one request (the gateway: https, then http) prefers another candidate's reason.
    package static let unrouted = "no package routes "

    /// The longest route prefix of the path `b[path]` (each prefix ends in `/`): the package id
    /// and where the rest of the path starts (at its `/`; empty when the path names the prefix
    /// itself without its final `/`).
    static func longestPrefix(_ routes: OriginRoutes, _ b: UnsafeBufferPointer<UInt8>, _ path: Range<Int>) -> (
        String, Int
    )? {
        // The first segment picks the bucket; the root prefix `/` is the last resort.
        var segEnd = path.lowerBound + 1
        while segEnd < path.upperBound, b[segEnd] != UInt8(ascii: "/") { segEnd += 1 }
        let first = path.count > 1 ? string(b, (path.lowerBound + 1)..<min(segEnd, path.upperBound)) : ""
        if !first.isEmpty, let hit = match(routes.buckets[first], b, path) { return hit }
        return match(routes.buckets[""], b, path)
    }

    /// The first (longest) prefix of one bucket that the path starts with, or names as a
    /// directory.
    private static func match(
        _ list: [(prefix: [UInt8], id: String)]?, _ b: UnsafeBufferPointer<UInt8>, _ path: Range<Int>
    ) -> (String, Int)? {
        guard let list else { return nil }
        for (prefix, id) in list {
            let m = prefix.count
            // Rooted paths only; an empty path is `/`.
            if path.isEmpty {
                if m == 1 { return (id, path.upperBound) }
                continue
            }
            if path.count >= m, prefix.withUnsafeBufferPointer({ bytesEqual(b, from: path.lowerBound, $0, count: m) }) {
                return (id, path.lowerBound + m - 1)
            }
            // `/app` names the prefix `/app/` as a directory.
            if path.count == m - 1,
                prefix.withUnsafeBufferPointer({ bytesEqual(b, from: path.lowerBound, $0, count: m - 1) })
            {
                return (id, path.upperBound)
            }
        }
        return nil
    }

    /// The lookup on bytes: a plain path (no `%`, backslash, NUL, empty or dot segment) that
    /// names a file and no bypass prefix is answered here; anything else goes through `lookup`.
    func lookup(_ pkg: RoutedPackage, _ b: UnsafeBufferPointer<UInt8>, _ rest: Range<Int>) -> Resolution {
        if rest.count > 1, b[rest.lowerBound] == UInt8(ascii: "/"), b[rest.upperBound - 1] != UInt8(ascii: "/"),
            Self.isPlain(b, rest), !pkg.policy.bypass.contains(where: { Self.hasBypass(b, rest, $0) })
        {
            if let f = pkg.files[Self.string(b, (rest.lowerBound + 1)..<rest.upperBound)] { return .local(f) }
        }
        return lookup(pkg, rawPath: rest.isEmpty ? "/" : Self.string(b, rest))
    }

    static func isPlain(_ b: UnsafeBufferPointer<UInt8>, _ r: Range<Int>) -> Bool {
        guard r.count <= 4096 else { return false }
        var previous = UInt8(ascii: "/")
        for i in (r.lowerBound + 1)..<r.upperBound {
            let c = b[i]
            switch c {
            case UInt8(ascii: "%"), UInt8(ascii: "\\"), 0: return false
            case UInt8(ascii: "/"): if previous == UInt8(ascii: "/") { return false }
            case UInt8(ascii: "."): if previous == UInt8(ascii: "/") { return false }
            default: break
            }
            previous = c
        }
        return true
    }

    /// Whether the plain path `b[r]` starts with the bypass prefix `bypass` (or names it as a
    /// directory).
    static func hasBypass(_ b: UnsafeBufferPointer<UInt8>, _ r: Range<Int>, _ bypass: String) -> Bool {
        var bp = bypass
        return bp.withUTF8 { p in
            let m = p.count
            if r.count >= m, bytesEqual(b, from: r.lowerBound, p, count: m) { return true }
            return r.count == m - 1 && p.last == UInt8(ascii: "/") && bytesEqual(b, from: r.lowerBound, p, count: m - 1)
        }
    }

    /// Whether the `count` bytes of `b` from `start` equal the first `count` bytes of `p`.
    ///
    /// One `memcmp`; the caller keeps both ranges in bounds. No bytes always compare equal; an
    /// empty buffer (no base address) equals nothing else.
    private static func bytesEqual(
        _ b: UnsafeBufferPointer<UInt8>, from start: Int, _ p: UnsafeBufferPointer<UInt8>, count: Int
    ) -> Bool {
        guard count > 0 else { return count == 0 }
        guard let bBase = b.baseAddress, let pBase = p.baseAddress else { return false }
        return memcmp(pBase, bBase + start, count) == 0
    }

    /// The network URL a custom-scheme URL `<scheme>://<id>/<rest>` stands for: the package's
    /// first http(s) route with `<rest>` (path and query) after it — so a `local-then-network`
    /// package loaded through a custom scheme reaches its own origin for what it lacks. Nil when
    /// the URL is not of that form, names no package here, or the package has no http(s) route.
    package func networkURL(forCustom url: String) -> String? {
        guard let sep = url.range(of: "://") else { return nil }
        let scheme = url[..<sep.lowerBound].lowercased()
        guard scheme != "http", scheme != "https" else { return nil }
        let afterScheme = url[sep.upperBound...]
        let hostEnd = afterScheme.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? afterScheme.endIndex
        let id = afterScheme[..<hostEnd].lowercased()
        guard let pkg = stored(id),
            let route = pkg.routes.first(where: { $0.scheme == "http" || $0.scheme == "https" })
        else { return nil }
        var rest = String(afterScheme[hostEnd...])
        if let hash = rest.firstIndex(of: "#") { rest = String(rest[..<hash]) }
        if rest.hasPrefix("/") { rest.removeFirst() }
        let base = route.description.hasSuffix("/") ? route.description : route.description + "/"
        return base + rest
    }

    /// The lookup inside one package: bypass prefixes, decoding and dot segments, then the file,
    /// the directory's entry file, or the SPA fallback; else the policy decides.
    func lookup(_ pkg: RoutedPackage, rawPath: String) -> Resolution {
        let path: String
        switch Self.normalise(rawPath) {
        case .success(let p): path = p
        case .failure(let why): return .notFound(reason: "refused path \(rawPath): \(why.message)")
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
        case .localOnly:
            return .notFound(reason: "\(pkg.id)@\(pkg.version) has no \(path.isEmpty ? "/" : path) (local-only)")
        case .localThenNetwork:
            return .passthrough(reason: "\(pkg.id)@\(pkg.version) has no \(path.isEmpty ? "/" : path)")
        }
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
