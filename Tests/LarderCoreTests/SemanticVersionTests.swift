import LarderCore
import Testing

@Suite("SemVer 2.0.0")
struct SemanticVersionTests {
    /// The precedence chain given in the SemVer 2.0.0 spec, §11.
    static let specOrder = [
        "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2", "1.0.0-beta.11",
        "1.0.0-rc.1", "1.0.0", "2.0.0", "2.1.0", "2.1.1",
    ]

    @Test func specPrecedenceChain() throws {
        let versions = try Self.specOrder.map { try #require(SemanticVersion($0)) }
        for i in 0..<versions.count - 1 {
            #expect(versions[i] < versions[i + 1], "\(versions[i]) < \(versions[i + 1])")
            #expect(!(versions[i + 1] < versions[i]))
        }
        #expect(versions.shuffled().sorted() == versions)
    }

    @Test func numericNotStringOrder() throws {
        #expect(try #require(SemanticVersion("1.10.0")) > #require(SemanticVersion("1.9.0")))
        #expect(try #require(SemanticVersion("1.0.0-rc.10")) > #require(SemanticVersion("1.0.0-rc.9")))
    }

    @Test func buildMetadataIgnored() throws {
        let a = try #require(SemanticVersion("1.0.0+20130313144700"))
        let b = try #require(SemanticVersion("1.0.0+exp.sha.5114f85"))
        #expect(a == b)
        #expect(!(a < b) && !(b < a))
        #expect(a.description == "1.0.0+20130313144700")
        #expect(Set([a, b]).count == 1)
    }

    @Test(arguments: [
        "1.0.0", "0.0.4", "1.2.3", "10.20.30", "1.1.2-prerelease+meta", "1.0.0-alpha.beta.1",
        "1.0.0-alpha0.valid", "1.0.0-0A.is.legal", "1.2.3----RC-SNAPSHOT.12.9.1--.12+788", "2.0.0+build.1848",
    ])
    func validVersions(_ text: String) throws {
        let v = try #require(SemanticVersion(text))
        #expect(v.description == text)
    }

    @Test(arguments: [
        "1", "1.2", "1.2.3.4", "01.1.1", "1.01.1", "1.1.01", "1.2.3-0123", "1.2.3-", "1.2.3+",
        "v1.2.3", "1.2.3-alpha..1", "1.2.3-alpha_1", "", " 1.2.3", "1.2.-3", "+invalid", "-invalid",
    ])
    func invalidVersions(_ text: String) {
        #expect(SemanticVersion(text) == nil)
    }

    @Test func ranges() throws {
        let r = try #require(VersionRange(">=1.2.0 <2.0.0"))
        #expect(r.contains(try #require(SemanticVersion("1.2.0"))))
        #expect(r.contains(try #require(SemanticVersion("1.9.9"))))
        #expect(!r.contains(try #require(SemanticVersion("2.0.0"))))
        #expect(!r.contains(try #require(SemanticVersion("1.1.9"))))
        let caret = try #require(VersionRange("^1.2.0"))
        #expect(caret.contains(try #require(SemanticVersion("1.4.0"))))
        #expect(!caret.contains(try #require(SemanticVersion("2.0.0-alpha"))))
        #expect(!caret.contains(try #require(SemanticVersion("2.0.0"))))
        let tilde = try #require(VersionRange("~1.2.0"))
        #expect(tilde.contains(try #require(SemanticVersion("1.2.9"))))
        #expect(!tilde.contains(try #require(SemanticVersion("1.3.0"))))
        let zero = try #require(VersionRange("^0.2.1"))
        #expect(zero.contains(try #require(SemanticVersion("0.2.5"))))
        #expect(!zero.contains(try #require(SemanticVersion("0.3.0"))))
        #expect(VersionRange(">=x") == nil)
        #expect(VersionRange("") == nil)
    }
}
