import Foundation
import Testing

@Suite("README quick start")
struct QuickStartTests {
    @Test("the README's Linux quick start is Sources/larder-quickstart/main.swift, byte for byte")
    func same() throws {
        let readme = try String(contentsOf: packageRoot.appendingPathComponent("README.md"), encoding: .utf8)
        let code = try String(
            contentsOf: packageRoot.appendingPathComponent("Sources/larder-quickstart/main.swift"), encoding: .utf8)
        let open = "<!-- quickstart: Sources/larder-quickstart/main.swift -->\n```swift\n"
        let close = "```\n<!-- end quickstart -->"
        let start = try #require(readme.range(of: open), "README.md has no quickstart block")
        let end = try #require(readme.range(of: close, range: start.upperBound..<readme.endIndex))
        #expect(String(readme[start.upperBound..<end.lowerBound]) == code)
    }

    @Test("the README's iOS quick start is at most 15 lines of code")
    func iosLength() throws {
        let readme = try String(contentsOf: packageRoot.appendingPathComponent("README.md"), encoding: .utf8)
        let marker = try #require(readme.range(of: "On iOS ("))
        let fence = try #require(readme.range(of: "```swift\n", range: marker.upperBound..<readme.endIndex))
        let end = try #require(readme.range(of: "```\n", range: fence.upperBound..<readme.endIndex))
        let lines = readme[fence.upperBound..<end.lowerBound].split(separator: "\n")
            .filter { !$0.isEmpty && !$0.hasPrefix("import ") }
        #expect(lines.count <= 15, "\(lines.count) lines")
        #expect(lines.contains { $0.contains("OfflinePackages(config)") })
    }
}
