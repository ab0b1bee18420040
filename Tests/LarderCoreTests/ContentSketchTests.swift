import Foundation
import Testing

@testable import LarderCore

@Suite("Core: content sketches pick a delta's base by what it holds, not by its name")
struct ContentSketchTests {
    /// Deterministic pseudo-random text shaped like minified JavaScript.
    static func script(seed: UInt64, bytes: Int) -> Data {
        var state = seed
        let words = ["function", "return", "const", "let", "=>", "{", "}", "(", ")", ";", "this", "props", "null"]
        var out = ""
        while out.utf8.count < bytes {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            let w = words[Int(state >> 59) % words.count]
            out += w + "v\(state >> 40 & 0xFFFF)" + (state & 1 == 0 ? "," : ";")
        }
        return Data(out.utf8.prefix(bytes))
    }

    @Test("an edited copy keeps most features; an unrelated content shares almost none")
    func containment() {
        let a = Self.script(seed: 1, bytes: 200_000)
        var edited = a
        edited.replaceSubrange(50_000..<50_100, with: Data("INSERTED".utf8))  // a local change
        edited.insert(contentsOf: Data(repeating: 0x41, count: 3_000), at: 120_000)  // a shift
        let other = Self.script(seed: 2, bytes: 200_000)
        let (sa, se, so) = (ContentSketch(a), ContentSketch(edited), ContentSketch(other))
        #expect(sa.features.count > 400 && sa.features.count < 1_600)  // about one per 256 bytes
        #expect(se.containment(in: sa) > 0.9)
        #expect(so.containment(in: sa) < 0.02)
    }

    @Test("a small content split out of a large one is found inside it")
    func contained() {
        let big = Self.script(seed: 3, bytes: 400_000)
        let part = big.subdata(in: 100_000..<140_000)
        #expect(ContentSketch(part).containment(in: ContentSketch(big)) > 0.9)
        #expect(ContentSketch(big).containment(in: ContentSketch(part)) < 0.15)
    }

    @Test("the index ranks bases by the share of the target they hold")
    func index() {
        let a = Self.script(seed: 4, bytes: 100_000)
        let b = Self.script(seed: 5, bytes: 100_000)
        var target = a.prefix(60_000)
        target.append(b.prefix(20_000))
        var index = SimilarityIndex()
        index.add(0, ContentSketch(b))
        index.add(1, ContentSketch(a))
        index.add(2, ContentSketch(Self.script(seed: 6, bytes: 100_000)))
        let near = index.nearest(ContentSketch(Data(target)), limit: 3, minimum: 0.1)
        #expect(near.map(\.id) == [1, 0])
        #expect(near[0].containment > 0.6 && near[1].containment > 0.15)
    }

    @Test("bases are chosen by content across bundlers' renames; names only hint")
    func renamedByContent() {
        // A Vite-style rename (hash with - and _), and camelCase names a name rule takes for hashes.
        let chart = Self.script(seed: 7, bytes: 80_000)
        var chartNew = chart
        chartNew.replaceSubrange(40_000..<40_010, with: Data("changed!!!".utf8))
        let decoys = (0..<6).map { Self.script(seed: 100 + UInt64($0), bytes: 80_000) }
        var files = [DeltaTests.e("assets/Chart.Bx3-q_9K.js", "chart", size: Int64(chart.count))]
        var sketches = [ContentSketch(chart)]
        for (i, d) in decoys.enumerated() {
            files.append(DeltaTests.e("assets/ChartLegendItem\(i).DfA9_x2L.js", "decoy\(i)", size: Int64(d.count)))
            sketches.append(ContentSketch(d))
        }
        let base = DeltaTests.list("1.0.0", files)
        var i = 0
        let (contents, index) = BaseSelection.index(base) { (_: FileEntry) -> ContentSketch? in
            defer { i += 1 }
            return sketches[i]
        }
        let target = DeltaTests.e("assets/Chart.C7w_kP-2.js", "chart2", size: Int64(chartNew.count))
        let picked = BaseSelection.candidates(
            for: target, sketch: ContentSketch(chartNew), in: base, contents: contents, index: index)
        #expect(picked.map(\.0.path.string) == ["assets/Chart.Bx3-q_9K.js"])
        #expect(picked.map(\.1) == [.content])
    }
}

@Suite("Core: Set-Cookie fields an HTTP stack joined, apart again")
struct SetCookieFieldsTests {
    @Test(
        "a comma starts a cookie only where a name and = follow; an Expires date's comma does not",
        arguments: [
            ("a=1, b=2", ["a=1", "b=2"]),
            (
                "sid=s; Path=/; Expires=Wed, 09 Jun 2100 10:18:14 GMT; HttpOnly, theme=dark; Max-Age=60",
                ["sid=s; Path=/; Expires=Wed, 09 Jun 2100 10:18:14 GMT; HttpOnly", "theme=dark; Max-Age=60"]
            ),
            ("one=1", ["one=1"]),
            ("v=a,b; Path=/", ["v=a,b; Path=/"]),
            ("x=1,y=2,  z=3", ["x=1", "y=2", "z=3"]),
        ])
    func split(_ joined: String, _ want: [String]) {
        #expect(SetCookieFields.split(joined: joined) == want)
    }
}
