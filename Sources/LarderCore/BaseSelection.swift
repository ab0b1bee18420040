import Foundation

/// How the publisher finds, for a content the base version lacks, a content of the base version
/// to patch from. By content first: the base contents holding the largest share of the target's
/// bytes (`ContentSketch`, `SimilarityIndex`), whatever they are named — bundlers rename chunks
/// on every build, and each in its own way. Names are hints only: the same path is always
/// tried, and the masked name and the same type and size only for a content too small to have a
/// sketch, or when nothing holds any of it.
package enum BaseSelection {
    /// Which rule proposed a base.
    package enum Rule: String, Codable, Sendable, CaseIterable {
        /// A base holding much of the target's content (its sketch).
        case content = "content"
        /// The same path, with other content.
        case samePath = "same-path"
        /// The same path once hash-like parts of the file name are masked.
        case maskedPath = "masked-path"
        /// The same extension and a size within a factor of two, nearest first.
        case sizeAndType = "size-and-type"
    }

    /// A target with fewer features than this is judged by its name too (a few hundred bytes).
    package static let smallSketch = 8
    /// A base must hold at least this share of the target's features to be proposed by content.
    package static let minimumContainment = 0.1

    /// The distinct contents of `base` (one entry each) and their index, from each content's
    /// sketch (`sketch(entry)`; nil: not sketched, e.g. too large to patch).
    package static func index<E: Error>(
        _ base: FileList, sketch: (FileEntry) throws(E) -> ContentSketch?
    ) throws(E) -> (contents: [FileEntry], index: SimilarityIndex) {
        var seen: Set<SHA256Digest> = []
        var contents: [FileEntry] = []
        var index = SimilarityIndex()
        for f in base.files where f.size > 0 && seen.insert(f.sha256).inserted {
            guard let s = try sketch(f) else { continue }
            index.add(contents.count, s)
            contents.append(f)
        }
        return (contents, index)
    }

    /// Up to `limit` distinct base contents for `target`, each with the rule that proposed it: the
    /// same path, then the bases holding the most of `sketch` (from `index` over `contents`), then
    /// — for a small target, or when nothing holds any of it — the masked name (nearest size
    /// first) and the same type and size.
    package static func candidates(
        for target: FileEntry, sketch: ContentSketch? = nil, in base: FileList, contents: [FileEntry] = [],
        index: SimilarityIndex = SimilarityIndex(), limit: Int = 3
    ) -> [(FileEntry, Rule)] {
        candidates(
            for: target, sketch: sketch, in: Names(base), contents: contents, index: index, limit: limit)
    }

    /// A base version's files grouped by what the rules by name match on, made once per base
    /// (scanning every base file for every target would cost the square of the file count).
    package struct Names: Sendable {
        let byPath: [String: FileEntry]
        let byMasked: [String: [FileEntry]]
        let byType: [String: [FileEntry]]

        /// Groups `base`'s files, each group in the list's order.
        package init(_ base: FileList) {
            var byPath: [String: FileEntry] = [:]
            var byMasked: [String: [FileEntry]] = [:]
            var byType: [String: [FileEntry]] = [:]
            for f in base.files {
                let path = f.path.string
                if byPath[path] == nil { byPath[path] = f }
                byMasked[BaseSelection.masked(path), default: []].append(f)
                byType[BaseSelection.ext(path), default: []].append(f)
            }
            (self.byPath, self.byMasked, self.byType) = (byPath, byMasked, byType)
        }
    }

    /// `candidates(for:sketch:in:contents:index:limit:)` over a base grouped once.
    package static func candidates(
        for target: FileEntry, sketch: ContentSketch? = nil, in base: Names, contents: [FileEntry] = [],
        index: SimilarityIndex = SimilarityIndex(), limit: Int = 3
    ) -> [(FileEntry, Rule)] {
        var out: [(FileEntry, Rule)] = []
        var seen: Set<SHA256Digest> = [target.sha256]
        func add(_ f: FileEntry, _ r: Rule) {
            guard out.count < limit, f.size > 0, seen.insert(f.sha256).inserted else { return }
            out.append((f, r))
        }
        if let f = base.byPath[target.path.string] { add(f, .samePath) }
        let near = sketch.map { index.nearest($0, limit: limit, minimum: minimumContainment) } ?? []
        for (id, _) in near where id < contents.count { add(contents[id], .content) }
        let small = (sketch?.features.count ?? 0) < smallSketch
        guard small || near.isEmpty else { return out }
        let key = masked(target.path.string)
        let distance = { (f: FileEntry) in abs(log(Double(max(f.size, 1)) / Double(max(target.size, 1)))) }
        if key != target.path.string {
            for f in (base.byMasked[key] ?? []).filter({ $0.path != target.path }).sorted(by: {
                distance($0) < distance($1)
            }) {
                add(f, .maskedPath)
            }
        }
        let ext = Self.ext(target.path.string)
        let similar = (base.byType[ext] ?? []).filter { distance($0) <= log(2.0) }.sorted {
            distance($0) < distance($1)
        }
        for f in similar.prefix(limit * 2) { add(f, .sizeAndType) }
        return out
    }

    /// The path with each hash-like part of its file name replaced by `*`: a part (between `.`,
    /// `-`, `_` or `~`) of 6 or more characters that is hexadecimal with a digit, or of 8 or more
    /// letters, digits, `-` or `_` mixing digits or cases — what bundlers put in chunk names.
    package static func masked(_ path: String) -> String {
        let slash = path.lastIndex(of: "/")
        let dir = slash.map { String(path[...$0]) } ?? ""
        let name = slash.map { String(path[path.index(after: $0)...]) } ?? path
        var out = ""
        var token = ""
        func flush() {
            out += isHashLike(token) ? "*" : token
            token = ""
        }
        for c in name {
            if c == "." || c == "-" || c == "_" || c == "~" {
                flush()
                out.append(c)
            } else {
                token.append(c)
            }
        }
        flush()
        return dir + out
    }

    static func isHashLike(_ t: String) -> Bool {
        let u = Array(t.utf8)
        guard u.count >= 6 else { return false }
        let digits = u.contains { $0 >= 0x30 && $0 <= 0x39 }
        let hex = u.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }
        if hex && digits && u.count >= 6 { return !u.allSatisfy { $0 >= 0x30 && $0 <= 0x39 } || u.count >= 16 }
        guard u.count >= 8, u.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 | 0x20 >= 0x61 && $0 | 0x20 <= 0x7A) })
        else { return false }
        let upper = u.contains { $0 >= 0x41 && $0 <= 0x5A }
        let lower = u.contains { $0 >= 0x61 && $0 <= 0x7A }
        return (digits && (upper || lower)) || (upper && lower && u.count >= 8 && !isWord(u))
    }

    /// A plain word in camel case (`MyComponent`) is not a hash: it starts with a capital and has
    /// no other capital after a lower-case run… only a few do; treat words of one leading capital
    /// as words.
    static func isWord(_ u: [UInt8]) -> Bool {
        let capitals = u.filter { $0 >= 0x41 && $0 <= 0x5A }.count
        return capitals <= 2 && u.first.map { $0 >= 0x41 && $0 <= 0x5A } == true
    }

    static func ext(_ path: String) -> String {
        let name = path.split(separator: "/").last.map(String.init) ?? path
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return "" }
        return name[dot...].lowercased()
    }
}
