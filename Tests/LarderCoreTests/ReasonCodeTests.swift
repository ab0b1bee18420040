import Foundation
import LarderCore
import Testing

@Suite("Reason codes")
struct ReasonCodeTests {
    @Test(
        "text that is a code is taken, any other is refused",
        arguments: [
            ("hash-mismatch", true), ("no-space", true), ("http-404", true), ("a", true), ("", false),
            ("Hash-Mismatch", false), ("-lead", false), ("with space", false), ("under_score", false),
            ("é", false), (String(repeating: "a", count: 65), false), (String(repeating: "a", count: 64), true),
        ])
    func parse(text: String, valid: Bool) {
        #expect((ReasonCode(rawValue: text) != nil) == valid)
        #expect(ReasonCode(rawValue: text)?.rawValue == (valid ? text : nil))
    }

    @Test("a code is a JSON string both ways, and a string that is not a code does not decode")
    func codable() throws {
        let code: ReasonCode = "index-expired"
        let data = try JSONEncoder().encode([code])
        #expect(String(decoding: data, as: UTF8.self) == #"["index-expired"]"#)
        #expect(try JSONDecoder().decode([ReasonCode].self, from: data) == [code])
        #expect(throws: DecodingError.self) {
            try JSONDecoder().decode([ReasonCode].self, from: Data(#"["Bad Code"]"#.utf8))
        }
        #expect("\(code)" == "index-expired")
    }

    /// Codes in the source are literals, which `ReasonCode(stringLiteral:)` takes unchecked: each
    /// literal an error type's `code` returns (and each `code:` argument) is checked here.
    @Test("every code literal in Sources is a valid code")
    func literalsInSources() throws {
        let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Sources")
        let files = try #require(FileManager.default.enumerator(atPath: sources.path)).compactMap { $0 as? String }
            .filter { $0.hasSuffix(".swift") }
        let body = try NSRegularExpression(
            pattern: #"var code: ReasonCode \{(.*?)\n    \}"#, options: .dotMatchesLineSeparators)
        let caseLiteral = try NSRegularExpression(pattern: #":\s*"([^"\\]*)"\s*$"#, options: .anchorsMatchLines)
        let argument = try NSRegularExpression(pattern: #"\bcode: "([^"\\]*)""#)
        var checked = 0
        for file in files {
            let text = try String(contentsOf: sources.appendingPathComponent(file), encoding: .utf8)
            let all = NSRange(text.startIndex..., in: text)
            var literals: [String] = []
            for m in body.matches(in: text, range: all) {
                guard let r = Range(m.range(at: 1), in: text) else { continue }
                let block = String(text[r])
                for c in caseLiteral.matches(in: block, range: NSRange(block.startIndex..., in: block)) {
                    if let lr = Range(c.range(at: 1), in: block) { literals.append(String(block[lr])) }
                }
            }
            for m in argument.matches(in: text, range: all) {
                if let r = Range(m.range(at: 1), in: text) { literals.append(String(text[r])) }
            }
            for literal in literals {
                #expect(ReasonCode(rawValue: literal) != nil, "\(file): \(literal)")
                checked += 1
            }
        }
        // The error types of the product modules hold well over a hundred codes.
        #expect(checked > 100)
    }
}
