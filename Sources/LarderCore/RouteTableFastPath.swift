import Foundation

/// The http(s) routes of a table indexed by bytes, for `RouteTable.fastResolve`: the same
/// origins, buckets and prefixes (in the same order) as `RouteTable.origins`, each route naming
/// its package by a slot of `refs`. A class, so that copying a table copies one reference.
///
/// The byte tables and slots depend only on the packages' ids and routes, so a table whose
/// packages change version but keep their routes (a sync's update, a session's pinned version)
/// shares them and gets new `refs` only (`replacing`).
final class FastRoutes: Sendable {
    /// Host (lower case, as the routes hold it) → the origins on that host; empty (every URL
    /// takes the general path) if a route's id names no package of the table.
    let hosts: ByteTable<[Origin]>
    /// Package id → its slot in `refs`.
    let slots: [String: Int]
    /// Each slot's package.
    let refs: [PackageRef]

    /// One origin: scheme, port (0 for the default one) and its prefixes bucketed by their first
    /// path segment (`""` for `/`), longest first within a bucket.
    final class Origin: Sendable {
        let https: Bool
        let port: Int
        let buckets: ByteTable<[Route]>

        init(https: Bool, port: Int, buckets: ByteTable<[Route]>) {
            self.https = https
            self.port = port
            self.buckets = buckets
        }
    }

    /// One route prefix (starting and ending with `/`) and the slot of the package it routes to.
    struct Route: Sendable {
        let prefix: [UInt8]
        let slot: Int
    }

    /// A table's package, shared by reference so that matching a route copies no package.
    final class PackageRef: Sendable {
        let package: RoutedPackage

        init(_ package: RoutedPackage) { self.package = package }
    }

    /// The fast routes of `origins`, whose ids name packages of `packages`.
    init(origins: [RouteTable.Origin: RouteTable.OriginRoutes], packages: [String: RoutedPackage]) {
        var slots: [String: Int] = [:]
        var refs: [PackageRef] = []
        slots.reserveCapacity(packages.count)
        refs.reserveCapacity(packages.count)
        for (id, pkg) in packages {
            slots[id] = refs.count
            refs.append(PackageRef(pkg))
        }
        self.slots = slots
        self.refs = refs
        var byHost: [String: [Origin]] = [:]
        for (origin, routes) in origins {
            var buckets: [(key: [UInt8], value: [Route])] = []
            for (segment, list) in routes.buckets {
                let bucket = list.compactMap { r in slots[r.id].map { Route(prefix: r.prefix, slot: $0) } }
                guard bucket.count == list.count else {
                    hosts = ByteTable([])
                    return
                }
                buckets.append((Array(segment.utf8), bucket))
            }
            byHost[origin.host, default: []].append(
                Origin(https: origin.https, port: origin.port, buckets: ByteTable(buckets)))
        }
        hosts = ByteTable(byHost.map { (key: Array($0.key.utf8), value: $0.value) })
    }

    private init(hosts: ByteTable<[Origin]>, slots: [String: Int], refs: [PackageRef]) {
        self.hosts = hosts
        self.slots = slots
        self.refs = refs
    }

    /// The same routes with `changed` in the slots of the packages with their ids (each already
    /// in the table, with the same routes); nil when one has no slot.
    func replacing(_ changed: [RoutedPackage]) -> FastRoutes? {
        var refs = self.refs
        for p in changed {
            guard let slot = slots[p.id.rawValue] else { return nil }
            refs[slot] = PackageRef(p)
        }
        return FastRoutes(hosts: hosts, slots: slots, refs: refs)
    }
}

/// A package's files, and those whose path is ASCII by the bytes of their path, for
/// `RouteTable.fastResolve`. An ASCII path equals (as a `String`) only a key with the same bytes,
/// so a hit in the index is the dictionary's answer; a miss leaves the URL to the general path.
final class IndexedFiles: Sendable {
    /// Path → file (`RoutedPackage.files`).
    let files: [String: LocalFile]
    /// ASCII path bytes → file.
    let index: ByteTable<LocalFile>

    /// No file.
    static let empty = IndexedFiles([:])

    /// `files` and the index of their ASCII paths.
    init(_ files: [String: LocalFile]) {
        self.files = files
        index = ByteTable(
            files.compactMap { path, file in
                path.utf8.allSatisfy { $0 < 0x80 } ? (key: Array(path.utf8), value: file) : nil
            })
    }
}

extension RouteTable {
    /// The answer for an http(s) URL already in the form a browser requests, naming a file under
    /// a route: lower-case scheme and host (ASCII letters, digits, `-`, `.`, `_`), an optional
    /// port, and a path of printable ASCII with no `%`, `\`, empty or dot-led segment, no final
    /// `/`, under 4 KiB. Such a URL on an origin no route names (an unknown host, another scheme
    /// or port) is answered too: the general path's passthrough, when the host is one a browser
    /// leaves as it is (`isCanonicalHost`). Nil for anything else — any escape, case, user info, IP
    /// literal, control byte, empty path, directory, missing file, bypass prefix or path no
    /// prefix of its origin takes — which the general path (`BrowserURL`, `match`, `lookup`)
    /// answers.
    ///
    /// Where it answers, the answer is the general path's: such a URL is already canonical, and
    /// the origin, bucket, prefix and file it finds are those `match` and `lookup` find; only the
    /// lookups are on borrowed bytes, and the package is not copied.
    func fastResolve(_ b: UnsafeBufferPointer<UInt8>) -> Resolution? {
        guard let (https, authStart) = Self.fastScheme(b),
            let (hostEnd, port, pathStart) = Self.fastAuthority(b, from: authStart),
            let pathEnd = Self.fastPath(b, from: pathStart)
        else { return nil }
        let normalisedPort = (https && port == 443) || (!https && port == 80) ? 0 : port
        guard let origins = fast.hosts.value(Self.raw(b, authStart..<hostEnd)),
            let origin = origins.first(where: { $0.https == https && $0.port == normalisedPort })
        else {
            // No route on this origin (the gateway asks https:// and then http:// for each
            // request): the general path's answer, without its parse, when the host is one a
            // browser leaves as it is.
            guard Self.isCanonicalHost(b, authStart..<hostEnd) else { return nil }
            return .passthrough(
                reason: Self.unroutedReason(
                    https: https, host: UnsafeBufferPointer(rebasing: b[authStart..<hostEnd]), port: normalisedPort,
                    path: UnsafeBufferPointer(rebasing: b[pathStart..<pathEnd])))
        }
        guard let (slot, restStart) = Self.fastPrefix(origin, b, pathStart..<pathEnd) else { return nil }
        let pkg = fast.refs[slot]
        let rest = restStart..<pathEnd
        // As `lookup(_:_:_:)`: a file path (the path scan made it plain), no bypass prefix.
        guard rest.count > 1, b[rest.lowerBound] == UInt8(ascii: "/"), b[rest.upperBound - 1] != UInt8(ascii: "/"),
            !pkg.package.policy.bypass.contains(where: { Self.hasBypass(b, rest, $0) })
        else { return nil }
        guard let file = pkg.package.indexedFiles.index.value(Self.raw(b, (rest.lowerBound + 1)..<rest.upperBound))
        else {
            return nil
        }
        return .local(file)
    }

    /// After a lower-case `http://` or `https://`: whether it is https, and where the authority
    /// starts.
    static func fastScheme(_ b: UnsafeBufferPointer<UInt8>) -> (Bool, Int)? {
        // The last byte too: `BrowserURL` trims trailing spaces and controls (in a query as well).
        guard b.count > 8, let last = b.last, last > 0x20, b[0] == UInt8(ascii: "h"), b[1] == UInt8(ascii: "t"),
            b[2] == UInt8(ascii: "t"), b[3] == UInt8(ascii: "p")
        else { return nil }
        let https = b[4] == UInt8(ascii: "s")
        let colon = https ? 5 : 4
        guard b[colon] == UInt8(ascii: ":"), b[colon + 1] == UInt8(ascii: "/"), b[colon + 2] == UInt8(ascii: "/")
        else { return nil }
        return (https, colon + 3)
    }

    /// A plain authority from `start`: a non-empty host of lower-case ASCII letters, digits, `-`,
    /// `.` and `_`, then optionally `:` and a port of 1 to 5 digits up to 65535, ended by the
    /// path's `/`. Where the host ends, the port (0 when none), and where the path starts.
    static func fastAuthority(_ b: UnsafeBufferPointer<UInt8>, from start: Int) -> (Int, Int, Int)? {
        var i = start
        while i < b.count, isPlainHostByte(b[i]) { i += 1 }
        let hostEnd = i
        guard hostEnd > start, i < b.count else { return nil }
        var port = 0
        if b[i] == UInt8(ascii: ":") {
            i += 1
            let digits = i
            while i < b.count, b[i] >= UInt8(ascii: "0"), b[i] <= UInt8(ascii: "9"), i - digits < 6 {
                port = port * 10 + Int(b[i] - UInt8(ascii: "0"))
                i += 1
            }
            guard i > digits, i - digits <= 5, port <= 65535, i < b.count else { return nil }
        }
        guard b[i] == UInt8(ascii: "/") else { return nil }
        return (hostEnd, port, i)
    }

    /// The reason for a URL no route takes — `no package routes <scheme>://<host>[:<port>]<path>`,
    /// `/` for an empty path — written in one allocation (the gateway's first candidate of every
    /// request to an http origin ends here), for the fast and the general path alike.
    static func unroutedReason(
        https: Bool, host: some Collection<UInt8>, port: Int, path: some Collection<UInt8>
    ) -> String {
        let scheme: StaticString = https ? "https://" : "http://"
        let portText = port == 0 ? "" : ":\(port)"
        let pathText: String? = path.isEmpty ? "/" : nil
        let count =
            RouteTable.unrouted.utf8.count + scheme.utf8CodeUnitCount + host.count + portText.utf8.count
            + (pathText?.utf8.count ?? path.count)
        return String(unsafeUninitializedCapacity: count) { out in
            var n = 0
            func put<C: Collection<UInt8>>(_ bytes: C) {
                for byte in bytes {
                    out[n] = byte
                    n += 1
                }
            }
            put(RouteTable.unrouted.utf8)
            put(UnsafeBufferPointer(start: scheme.utf8Start, count: scheme.utf8CodeUnitCount))
            put(host)
            put(portText.utf8)
            if let pathText { put(pathText.utf8) } else { put(path) }
            return n
        }
    }

    /// Whether a host of plain bytes (`fastAuthority`) is one the URL standard's host parser
    /// leaves as it is: no empty label (so no final dot), no label an IDNA decoder checks
    /// (`xn--`), and a last label that is not a number (which makes the host an IPv4 address,
    /// rewritten: `0x7f.1` is `127.0.0.1`).
    static func isCanonicalHost(_ b: UnsafeBufferPointer<UInt8>, _ host: Range<Int>) -> Bool {
        var labelStart = host.lowerBound
        var i = host.lowerBound
        while i <= host.upperBound {
            if i == host.upperBound || b[i] == UInt8(ascii: ".") {
                let label = labelStart..<i
                if label.isEmpty { return false }
                if label.count >= 4, b[label.lowerBound] == UInt8(ascii: "x"),
                    b[label.lowerBound + 1] == UInt8(ascii: "n"),
                    b[label.lowerBound + 2] == UInt8(ascii: "-"), b[label.lowerBound + 3] == UInt8(ascii: "-")
                {
                    return false
                }
                if i == host.upperBound {
                    let digits = label.allSatisfy { b[$0] >= UInt8(ascii: "0") && b[$0] <= UInt8(ascii: "9") }
                    let hex =
                        label.count >= 2 && b[label.lowerBound] == UInt8(ascii: "0")
                        && b[label.lowerBound + 1] == UInt8(ascii: "x")
                        && label.dropFirst(2).allSatisfy {
                            UInt8(ascii: "0") <= b[$0] && b[$0] <= UInt8(ascii: "9")
                                || UInt8(ascii: "a") <= b[$0] && b[$0] <= UInt8(ascii: "f")
                        }
                    if digits || hex { return false }
                }
                labelStart = i + 1
            }
            i += 1
        }
        return true
    }

    /// Whether `c` may stand in a host the fast path reads as it is.
    private static func isPlainHostByte(_ c: UInt8) -> Bool {
        (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "z")) || (c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9"))
            || c == UInt8(ascii: "-") || c == UInt8(ascii: ".") || c == UInt8(ascii: "_")
    }

    /// Where the path that starts (with `/`) at `start` ends (at `?`, `#` or the end), when every
    /// byte of it is printable ASCII other than `%`, `\` and the bytes a browser escapes in a path
    /// (`isEscapedInPaths`), no segment is empty or starts with
    /// `.`, and it holds at most 4,096 bytes; else nil.
    static func fastPath(_ b: UnsafeBufferPointer<UInt8>, from start: Int) -> Int? {
        var previous = UInt8(ascii: "/")
        var i = start + 1
        while i < b.count {
            let c = b[i]
            if c == UInt8(ascii: "?") || c == UInt8(ascii: "#") { break }
            guard c > 0x20, c < 0x7F, c != UInt8(ascii: "%"), c != UInt8(ascii: "\\"), !isEscapedInPaths(c) else {
                return nil
            }
            if previous == UInt8(ascii: "/"), c == UInt8(ascii: "/") || c == UInt8(ascii: ".") { return nil }
            previous = c
            i += 1
        }
        return i - start <= 4096 ? i : nil
    }

    /// Whether a browser percent-encodes `c` in a path (the WHATWG path percent-encode set, less
    /// space and controls, which the path scan refuses anyway) or may treat it specially (`[`,
    /// `]`, `|`, `^`): the general path reads such a URL.
    private static func isEscapedInPaths(_ c: UInt8) -> Bool {
        switch c {
        case UInt8(ascii: "\""), UInt8(ascii: "<"), UInt8(ascii: ">"), UInt8(ascii: "`"), UInt8(ascii: "{"),
            UInt8(ascii: "}"), UInt8(ascii: "["), UInt8(ascii: "]"), UInt8(ascii: "|"), UInt8(ascii: "^"):
            return true
        default:
            return false
        }
    }

    /// As `longestPrefix`: the slot of the package of the longest prefix of `path` in `origin`
    /// (the bucket of the first segment, then the root bucket) and where the rest of the path
    /// starts.
    static func fastPrefix(_ origin: FastRoutes.Origin, _ b: UnsafeBufferPointer<UInt8>, _ path: Range<Int>)
        -> (Int, Int)?
    {
        var segEnd = path.lowerBound + 1
        while segEnd < path.upperBound, b[segEnd] != UInt8(ascii: "/") { segEnd += 1 }
        let first = raw(b, (path.lowerBound + 1)..<segEnd)
        if !first.isEmpty, let routes = origin.buckets.value(first), let hit = fastMatch(routes, b, path) {
            return hit
        }
        guard let routes = origin.buckets.value(UnsafeRawBufferPointer(start: nil, count: 0)) else { return nil }
        return fastMatch(routes, b, path)
    }

    /// As `match(_:_:_:)` on a non-empty path: the slot of the package of the first (longest)
    /// route of `routes` that the path starts with or names as a directory, and where the rest
    /// starts.
    private static func fastMatch(_ routes: [FastRoutes.Route], _ b: UnsafeBufferPointer<UInt8>, _ path: Range<Int>)
        -> (Int, Int)?
    {
        for route in routes {
            let m = route.prefix.count
            if path.count >= m, route.prefix.withUnsafeBytes({ equalBytes(b, path.lowerBound, $0, m) }) {
                return (route.slot, path.lowerBound + m - 1)
            }
            if path.count == m - 1, route.prefix.withUnsafeBytes({ equalBytes(b, path.lowerBound, $0, m - 1) }) {
                return (route.slot, path.upperBound)
            }
        }
        return nil
    }

    /// The bytes `b[range]`, borrowed.
    private static func raw(_ b: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: b[range]))
    }

    /// Whether the `count` bytes of `b` from `start` equal the first `count` bytes of `p`.
    private static func equalBytes(
        _ b: UnsafeBufferPointer<UInt8>, _ start: Int, _ p: UnsafeRawBufferPointer, _ count: Int
    )
        -> Bool
    {
        guard count > 0 else { return true }
        guard let bBase = b.baseAddress, let pBase = p.baseAddress else { return false }
        return memcmp(pBase, bBase + start, count) == 0
    }
}
