/// Finds the local references in HTML and CSS text (`src=`, `href=`, `url(...)`, `@import`) and
/// resolves them inside a package, so that `verify` can report links to files a bundle lacks.
/// A scan, not a full HTML parser: comments and `<script>` bodies are skipped; attribute values
/// may be quoted or bare.
package enum References {
    /// The raw reference texts in an HTML document.
    package static func inHTML(_ text: String) -> [String] {
        let bytes = Array(text.utf8)
        var refs: [String] = []
        var i = 0
        let n = bytes.count
        func lower(_ c: UInt8) -> UInt8 { (c >= 0x41 && c <= 0x5A) ? c + 32 : c }
        func hasPrefix(_ s: String, at k: Int) -> Bool {
            let p = Array(s.utf8)
            guard k + p.count <= n else { return false }
            for j in 0..<p.count where lower(bytes[k + j]) != p[j] { return false }
            return true
        }
        func skip(to end: String, from k: Int) -> Int {
            var j = k
            while j < n, !hasPrefix(end, at: j) { j += 1 }
            return min(n, j + end.utf8.count)
        }
        var styleStart: Int?
        while i < n {
            if hasPrefix("<!--", at: i) {
                i = skip(to: "-->", from: i + 4)
                continue
            }
            guard bytes[i] == UInt8(ascii: "<") else {
                i += 1
                continue
            }
            // A tag: read to its closing '>' honouring quotes.
            var j = i + 1
            var quote: UInt8 = 0
            while j < n {
                let c = bytes[j]
                if quote != 0 {
                    if c == quote { quote = 0 }
                } else if c == 0x22 || c == 0x27 {
                    quote = c
                } else if c == UInt8(ascii: ">") {
                    break
                }
                j += 1
            }
            let tag = Array(bytes[i..<min(j, n)])
            refs += attributes(in: tag)
            refs += inCSS(String(decoding: tag, as: UTF8.self)).filter { _ in styleAttribute(tag) }
            let isScript = hasPrefix("<script", at: i)
            let isStyle = hasPrefix("<style", at: i)
            if let s = styleStart, hasPrefix("</style", at: i) {
                refs += inCSS(String(decoding: bytes[s..<i], as: UTF8.self))
                styleStart = nil
            }
            i = min(n, j + 1)
            if isScript { i = max(i, skip(to: "</script", from: i) - "</script".utf8.count) }
            if isStyle { styleStart = i }
        }
        return refs
    }

    private static func styleAttribute(_ tag: [UInt8]) -> Bool {
        String(decoding: tag, as: UTF8.self).lowercased().contains("style=")
    }

    /// `src` and `href` values of one tag's text (`<img src="a.png" …`).
    static func attributes(in tag: [UInt8]) -> [String] {
        var out: [String] = []
        let n = tag.count
        var k = 1
        // Skip the tag name.
        while k < n, !isSpace(tag[k]) { k += 1 }
        while k < n {
            while k < n, isSpace(tag[k]) || tag[k] == UInt8(ascii: "/") { k += 1 }
            let nameStart = k
            while k < n, !isSpace(tag[k]), tag[k] != UInt8(ascii: "="), tag[k] != UInt8(ascii: ">") { k += 1 }
            let name = String(decoding: tag[nameStart..<k], as: UTF8.self).lowercased()
            while k < n, isSpace(tag[k]) { k += 1 }
            guard k < n, tag[k] == UInt8(ascii: "=") else {
                if k == nameStart { k += 1 }
                continue
            }
            k += 1
            while k < n, isSpace(tag[k]) { k += 1 }
            var value: [UInt8] = []
            if k < n, tag[k] == 0x22 || tag[k] == 0x27 {
                let q = tag[k]
                k += 1
                let s = k
                while k < n, tag[k] != q { k += 1 }
                value = Array(tag[s..<min(k, n)])
                k += 1
            } else {
                let s = k
                while k < n, !isSpace(tag[k]), tag[k] != UInt8(ascii: ">") { k += 1 }
                value = Array(tag[s..<k])
            }
            if name == "src" || name == "href" { out.append(String(decoding: value, as: UTF8.self)) }
        }
        return out
    }

    private static func isSpace(_ c: UInt8) -> Bool { c == 0x20 || c == 0x09 || c == 0x0A || c == 0x0D || c == 0x0C }

    /// `url(...)` and `@import "…"` targets in CSS text.
    package static func inCSS(_ text: String) -> [String] {
        var out: [String] = []
        let b = Array(text.utf8)
        let n = b.count
        var i = 0
        func lower(_ c: UInt8) -> UInt8 { (c >= 0x41 && c <= 0x5A) ? c + 32 : c }
        func match(_ s: String, _ k: Int) -> Bool {
            let p = Array(s.utf8)
            guard k + p.count <= n else { return false }
            for j in 0..<p.count where lower(b[k + j]) != p[j] { return false }
            return true
        }
        while i < n {
            if match("/*", i) {
                i += 2
                while i < n, !match("*/", i) { i += 1 }
                i += 2
                continue
            }
            if match("url(", i) {
                var k = i + 4
                while k < n, isSpace(b[k]) { k += 1 }
                var value: [UInt8] = []
                if k < n, b[k] == 0x22 || b[k] == 0x27 {
                    let q = b[k]
                    k += 1
                    let s = k
                    while k < n, b[k] != q { k += 1 }
                    value = Array(b[s..<min(k, n)])
                } else {
                    let s = k
                    while k < n, b[k] != UInt8(ascii: ")") { k += 1 }
                    value = Array(b[s..<k])
                    while let l = value.last, isSpace(l) { value.removeLast() }
                }
                out.append(String(decoding: value, as: UTF8.self))
                i = k
                continue
            }
            if match("@import", i) {
                var k = i + 7
                while k < n, isSpace(b[k]) { k += 1 }
                if k < n, b[k] == 0x22 || b[k] == 0x27 {
                    let q = b[k]
                    k += 1
                    let s = k
                    while k < n, b[k] != q { k += 1 }
                    out.append(String(decoding: b[s..<min(k, n)], as: UTF8.self))
                }
                i = k
                continue
            }
            i += 1
        }
        return out
    }

    /// How a reference resolves inside a package.
    package enum Target: Equatable, Sendable {
        /// Not checked: external (`http:`, `data:`, `larder:` …), protocol-relative, a fragment, empty,
        /// or a template placeholder.
        case external
        /// A path inside the package (a directory ends with `/`).
        case local(String)
        /// The reference climbs out of the package root.
        case escapes
        /// Percent-encoding that does not decode to UTF-8.
        case malformed
    }

    /// Resolves `reference` found in the file at `from`. Root-relative references (`/x`) are
    /// resolved against the package root.
    package static func resolve(_ reference: String, from: RelativePath) -> Target {
        var ref = Substring(reference.trimmingSpaces)
        if ref.isEmpty || ref.hasPrefix("#") || ref.hasPrefix("//") { return .external }
        if ref.contains("{{") || ref.contains("${") || ref.contains("<%") { return .external }
        if let colon = ref.firstIndex(of: ":") {
            let before = ref[..<colon]
            if !before.contains("/") && !before.contains("?") && !before.contains("#") { return .external }
        }
        if let cut = ref.firstIndex(where: { $0 == "?" || $0 == "#" }) { ref = ref[..<cut] }
        if ref.isEmpty { return .external }
        guard let decoded = String(ref).removingPercentEncodingStrict else { return .malformed }
        var parts: [Substring] = decoded.hasPrefix("/") ? [] : Array(from.components.dropLast())
        let segments = decoded.split(separator: "/", omittingEmptySubsequences: false)
        for (i, seg) in segments.enumerated() {
            if seg == "." || (seg.isEmpty && i < segments.count - 1) { continue }
            if seg == ".." {
                if parts.isEmpty { return .escapes }
                parts.removeLast()
                continue
            }
            if seg.isEmpty { continue }
            parts.append(seg)
        }
        let endsAsDirectory = decoded.hasSuffix("/") || segments.last == "." || segments.last == ".."
        let joined = parts.joined(separator: "/")
        return .local(endsAsDirectory ? (joined.isEmpty ? "" : joined + "/") : joined)
    }
}

extension String {
    fileprivate var trimmingSpaces: String {
        var s = Substring(self)
        while let f = s.first, f.isWhitespace { s = s.dropFirst() }
        while let l = s.last, l.isWhitespace { s = s.dropLast() }
        return String(s)
    }

    /// Percent-decoding that fails on a bad escape or on bytes that are not UTF-8.
    fileprivate var removingPercentEncodingStrict: String? {
        try? PercentDecoding.decode(self).get()
    }
}
