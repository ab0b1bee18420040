import HTTPTypes

/// The head of a response the resource loader sends for a local file, decided from the request
/// alone (pure, no I/O): status, headers, and which bytes of the file form the body.
package struct ResponsePlan: Sendable, Equatable {
    /// The HTTP status: 200, 206, 304, 405 or 416.
    package var status: Int
    /// Header name → value, in a stable order.
    package var headers: [(String, String)]
    /// The byte range of the file to send (empty for HEAD, 304 and 416).
    package var body: Range<Int64>

    /// Equal when status, body range and headers (names, values and order) are.
    package static func == (l: ResponsePlan, r: ResponsePlan) -> Bool {
        l.status == r.status && l.body == r.body
            && l.headers.map { "\($0.0): \($0.1)" } == r.headers.map { "\($0.0): \($0.1)" }
    }

    /// The value of a header (case-insensitive name).
    package func header(_ name: String) -> String? {
        headers.first { $0.0.lowercased() == name.lowercased() }?.1
    }
}

/// How the loader answers requests for local files.
package enum ResponsePlanner {
    /// Decides the response to `method` with the request's `Range` and `If-None-Match` for `file`:
    /// GET or HEAD only (405 otherwise); If-None-Match matching the ETag (or `*`) → 304; one
    /// satisfiable byte range (`a-b`, `a-`, `-n`) → 206 with Content-Range; unsatisfiable → 416
    /// with `Content-Range: bytes */LENGTH`; several ranges or a malformed header → the whole file
    /// (RFC 9110 lets a server ignore Range). `allowOrigin` (an origin the package's `corsOrigins`
    /// lets read it, or `*`) adds `Access-Control-Allow-Origin` with it, and `Vary: Origin`;
    /// `varyOrigin` adds `Vary: Origin` alone (the answer depends on the origin, which may not read it).
    package static func plan(
        method: HTTPRequest.Method, range: String?, ifNoneMatch: String?, file: LocalFile,
        cacheControl: String = "no-cache", allowOrigin: String? = nil, varyOrigin: Bool = false
    ) -> ResponsePlan {
        var headers: [(String, String)] = [
            ("Content-Type", file.mime), ("ETag", file.etag), ("Cache-Control", cacheControl),
            ("Accept-Ranges", "bytes"),
        ]
        if let allowOrigin {
            headers.append(("Access-Control-Allow-Origin", allowOrigin))
            if allowOrigin != "*" { headers.append(("Vary", "Origin")) }
        } else if varyOrigin {
            headers.append(("Vary", "Origin"))
        }
        // Compared without case, as before the method was typed (a token such as `head` is
        // answered as HEAD; RFC 9110 methods are case-sensitive, but a file has no other meaning).
        let m = method.rawValue.uppercased()
        guard m == "GET" || m == "HEAD" else {
            return ResponsePlan(status: 405, headers: [("Allow", "GET, HEAD"), ("Content-Length", "0")], body: 0..<0)
        }
        let length = file.length
        if let inm = ifNoneMatch, matches(inm, file.etag) {
            return ResponsePlan(status: 304, headers: headers.filter { $0.0 != "Content-Type" }, body: 0..<0)
        }
        var status = 200
        var body: Range<Int64> = 0..<length
        if let r = range {
            switch parseRange(r, length: length) {
            case .whole:
                break
            case .unsatisfiable:
                headers.append(("Content-Range", "bytes */\(length)"))
                headers.append(("Content-Length", "0"))
                return ResponsePlan(status: 416, headers: headers, body: 0..<0)
            case .part(let part):
                status = 206
                body = part
                headers.append(("Content-Range", "bytes \(part.lowerBound)-\(part.upperBound - 1)/\(length)"))
            }
        }
        headers.append(("Content-Length", "\(body.count)"))
        return ResponsePlan(status: status, headers: headers, body: m == "HEAD" ? 0..<0 : body)
    }

    /// Whether an If-None-Match list names `etag` (weak comparison, `*` matches anything).
    static func matches(_ header: String, _ etag: String) -> Bool {
        let strip = { (s: Substring) -> Substring in s.hasPrefix("W/") ? s.dropFirst(2) : s }
        let want = strip(Substring(etag))
        return header.split(separator: ",").contains { tag in
            let t = tag.trimmingCharacters(in: .whitespaces)
            return t == "*" || strip(Substring(t)) == want
        }
    }

    enum RangeResult: Equatable {
        case whole
        case unsatisfiable
        case part(Range<Int64>)
    }

    /// One `bytes=` range of RFC 9110 §14.1.2 against `length`.
    static func parseRange(_ header: String, length: Int64) -> RangeResult {
        let h = header.trimmingCharacters(in: .whitespaces)
        guard h.lowercased().hasPrefix("bytes=") else { return .whole }
        let spec = h.dropFirst(6).trimmingCharacters(in: .whitespaces)
        guard !spec.contains(",") else { return .whole }
        let parts = spec.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return .whole }
        let first = parts[0].trimmingCharacters(in: .whitespaces)
        let last = parts[1].trimmingCharacters(in: .whitespaces)
        if first.isEmpty {
            // Suffix: the last n bytes.
            guard let n = Int64(last), n >= 0 else { return .whole }
            if n == 0 || length == 0 { return .unsatisfiable }
            return .part(max(0, length - n)..<length)
        }
        guard let start = Int64(first), start >= 0 else { return .whole }
        if start >= length { return .unsatisfiable }
        if last.isEmpty { return .part(start..<length) }
        guard let end = Int64(last), end >= start else { return .whole }
        return .part(start..<min(end, length - 1) + 1)
    }
}
