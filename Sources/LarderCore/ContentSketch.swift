import Foundation

/// A small summary of a content's bytes that says how much of it another content holds, whatever
/// either is named: the publisher picks a delta's base by it (`BaseSelection`).
///
/// Content-defined anchors — where a gear rolling hash over the last 64 bytes has its top five
/// bits clear, one place in 32 on average — cut the bytes the same way wherever a run of them
/// appears, so an insertion or a renamed identifier moves the anchors near it only. Each anchor's
/// hash, mixed, is a feature; one feature in eight is kept (those whose low three bits are
/// clear), so a content of N bytes has about N / 256 of them and two contents sharing a run keep
/// the same features from it. The share of a target's features found in a base estimates how
/// much of the target the base holds (its containment), which is what a patch from that base
/// saves.
package struct ContentSketch: Sendable, Equatable {
    /// The kept features, sorted, without repeats.
    package let features: [UInt64]

    /// The sketch of `bytes`.
    package init(_ bytes: Data) {
        var out: [UInt64] = []
        out.reserveCapacity(bytes.count / 200 + 1)
        bytes.withUnsafeBytes { (raw: UnsafeRawBufferPointer) in
            Self.gear.withUnsafeBufferPointer { gear in
                var h: UInt64 = 0
                for b in raw {
                    h = (h << 1) &+ gear[Int(b)]
                    if h >> 59 == 0 {
                        let f = Self.mix(h)
                        if f & 7 == 0 { out.append(f) }
                    }
                }
            }
        }
        out.sort()
        var unique: [UInt64] = []
        unique.reserveCapacity(out.count)
        for f in out where unique.last != f { unique.append(f) }
        features = unique
    }

    /// A sketch of these features (sorted, unique), for tests.
    package init(features: [UInt64]) { self.features = Array(Set(features)).sorted() }

    /// The share of this sketch's features `other` has too (0 when this one has none).
    package func containment(in other: ContentSketch) -> Double {
        guard !features.isEmpty else { return 0 }
        var (i, j, shared) = (0, 0, 0)
        while i < features.count && j < other.features.count {
            if features[i] == other.features[j] {
                shared += 1
                i += 1
                j += 1
            } else if features[i] < other.features[j] {
                i += 1
            } else {
                j += 1
            }
        }
        return Double(shared) / Double(features.count)
    }

    /// 256 fixed random words (SplitMix64 from a fixed seed): the same on every machine, so sketches
    /// made by different packs agree.
    static let gear: [UInt64] = {
        var state: UInt64 = 0x4c61_7264_6572_4753  // "LarderGS"
        return (0..<256).map { _ in
            state &+= 0x9E37_79B9_7F4A_7C15
            return mix(state)
        }
    }()

    /// SplitMix64's finalizer: every bit of the input reaches every bit of the output.
    static func mix(_ x: UInt64) -> UInt64 {
        var z = x
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// The sketches of a base version's contents, indexed by feature: which bases hold most of a
/// target's features, found without comparing the target with every base.
package struct SimilarityIndex: Sendable {
    /// A feature found in more bases than this says little (a license header, a runtime helper
    /// every chunk has) and is left out of the index, which keeps a lookup's cost bounded.
    package static let maxPostings = 32

    private var postings: [UInt64: [Int32]] = [:]
    private(set) var count = 0

    /// An empty index.
    package init() {}

    /// Adds the base numbered `id` (its position in the caller's list) with `sketch`.
    package mutating func add(_ id: Int, _ sketch: ContentSketch) {
        count += 1
        for f in sketch.features {
            postings[f, default: []].append(Int32(id))
        }
    }

    /// The bases holding the largest shares of `target`'s features, most first, each with its
    /// estimated containment (shared features ÷ the target's features, features left out of the
    /// index not counted), at most `limit`, none below `minimum`.
    package func nearest(_ target: ContentSketch, limit: Int, minimum: Double) -> [(id: Int, containment: Double)] {
        guard !target.features.isEmpty, limit > 0 else { return [] }
        var shared: [Int32: Int] = [:]
        for f in target.features {
            guard let ids = postings[f], ids.count <= Self.maxPostings else { continue }
            for id in ids { shared[id, default: 0] += 1 }
        }
        let total = Double(target.features.count)
        var found: [(id: Int, containment: Double)] = []
        for (id, n) in shared {
            let c = Double(n) / total
            if c >= minimum { found.append((Int(id), c)) }
        }
        found.sort { a, b in a.containment != b.containment ? a.containment > b.containment : a.id < b.id }
        return Array(found.prefix(limit))
    }
}
