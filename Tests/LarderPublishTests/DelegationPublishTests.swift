import Foundation
import LarderCore
import LarderPublish
import SystemPackage
import Testing

/// The publisher's side of delegations (manifests §18): root changes, parts, composition, and
/// what it refuses before writing anything.
@Suite("Delegations: publishing")
struct DelegationPublishTests {
    let pay = PrivateKey()
    let pay2 = PrivateKey()
    let shop = PrivateKey()
    let online = PrivateKey()

    func team(_ name: String, _ keys: [PrivateKey], _ patterns: [String], threshold: Int = 1) -> TeamRequest {
        TeamRequest(
            name: name, publicKeys: keys.map(\.publicKey), patterns: patterns.compactMap(PackagePattern.init),
            threshold: threshold)
    }

    func publisher(_ key: PrivateKey, index: PrivateKey? = nil, co: [PrivateKey] = []) -> Publisher {
        var p = Publisher(key: key, coSigners: co)
        p.indexKeys = index.map { [$0] } ?? []
        return p
    }

    /// A single-key repository with `sample-app` and `pay-card`, delegated to pay and shop (each
    /// claiming), its index moved to the online key.
    func delegated(_ w: Workspace) throws {
        _ = try w.publisher().pack(w.request("1.0.0", id: "pay-card"))
        _ = try w.publisher().pack(w.request("1.0.0", id: "shop").with(routes: ["https://shop.example.com/"]))
        let root = w.publisher()
        let first = try root.delegateAdd(team("pay", [pay], ["pay-*"]), repository: w.repoPath)
        #expect(first.rootVersion == 1 && !first.composed)
        #expect(first.notComposed?.contains("pay-card (team pay)") == true)
        _ = try root.delegateAdd(team("shop", [shop], ["shop", "shop.*"]), repository: w.repoPath)
        _ = try publisher(pay, index: w.key).claim(repository: w.repoPath)
        let claimed = try publisher(shop, index: w.key).claim(repository: w.repoPath)
        #expect(claimed.composed)
        let moved = try publisher(w.key, index: online).delegateRole(
            .index, keys: [online.publicKey], threshold: 1, repository: w.repoPath)
        #expect(moved.composed && moved.roles.index.keyIds == [online.publicKey.keyID])
    }

    @Test("migration: root 1 from the repository's key, claims, then the index under the online key; verify walks it")
    func migration() throws {
        let w = try Workspace()
        defer { w.cleanup() }
        try delegated(w)
        let index = try w.index()
        #expect(index.delegations?.parts.map(\.team).sorted() == ["pay", "shop"])
        #expect(index.delegations?.root.version == 3)
        let report = w.verify()
        #expect(report.problems.isEmpty, "\(report.problems)")
        #expect(report.rootVersion == 3 && report.teamsChecked == 2)
    }

    @Test("a team publishes only its packages; without the index key its part waits for compose")
    func teamsPublish() throws {
        let w = try Workspace()
        defer { w.cleanup() }
        try delegated(w)
        #expect(throws: PublishError.self) {
            _ = try publisher(shop, index: online).pack(w.request("1.1.0", id: "pay-card"))
        }
        #expect(!FileManager.default.fileExists(atPath: w.repo.appendingPathComponent("packages/pay-card/1.1.0").path))
        do {
            _ = try publisher(PrivateKey(), index: online).pack(w.request("1.1.0", id: "pay-card"))
            Issue.record("a key of no team packed")
        } catch { #expect(error.code == "delegation") }
        let serial = try w.index().serial
        let report = try publisher(pay).pack(w.request("1.1.0", id: "pay-card"))
        #expect(report.part?.composed == false && report.part?.serial == 2)
        #expect(try w.index().serial == serial)
        let composed = try publisher(online).compose(repository: w.repoPath)
        #expect(composed.serial == serial + 1)
        #expect(try w.index().packages.first { $0.id.rawValue == "pay-card" }?.version.description == "1.1.0")
        #expect(w.verify().problems.isEmpty)
    }

    @Test("root changes that would orphan a part, overlap another team or leave packages ownerless are refused")
    func refusedRootChanges() throws {
        let w = try Workspace()
        defer { w.cleanup() }
        try delegated(w)
        let root = publisher(w.key, index: online)
        let before = try w.data("index.json")
        func code(_ body: () throws -> Void) -> String? {
            do { try body() } catch let e as PublishError { return e.code.rawValue } catch { return "other" }
            return nil
        }
        // Dropping pay's only key before the team signed with the new one.
        #expect(
            code { _ = try root.delegateAdd(team("pay", [pay2], ["pay-*"]), repository: w.repoPath) } == "delegation")
        // Overlapping shop's patterns.
        #expect(
            code { _ = try root.delegateAdd(team("ads", [pay2], ["shop*"]), repository: w.repoPath) } == "delegation")
        // Removing a team that still has packages.
        #expect(
            code { _ = try root.delegateRemove("shop", dropPackages: false, repository: w.repoPath) } == "delegation")
        #expect(try w.data("index.json") == before)
        // The rotation done right: both keys, a pack with the new one, then the old one dropped.
        _ = try root.delegateAdd(team("pay", [pay, pay2], ["pay-*"]), repository: w.repoPath)
        _ = try publisher(pay2, index: online).pack(w.request("1.2.0", id: "pay-card"))
        let rotated = try root.delegateAdd(team("pay", [pay2], ["pay-*"]), repository: w.repoPath)
        #expect(rotated.composed)
        // Removing shop with its packages: they leave the index.
        let removed = try root.delegateRemove("shop", dropPackages: true, repository: w.repoPath)
        #expect(removed.composed && removed.revokedKeys.contains(shop.publicKey.keyID))
        #expect(try w.index().packages.map(\.id.rawValue) == ["pay-card"])
        #expect(w.verify().problems.isEmpty)
    }

    @Test("a threshold of two: a part signed by one key is refused before anything is written")
    func threshold() throws {
        let w = try Workspace()
        defer { w.cleanup() }
        try delegated(w)
        let root = publisher(w.key, index: online)
        // pay's part is signed by pay alone: a threshold of two would orphan it.
        do {
            _ = try root.delegateAdd(team("pay", [pay, pay2], ["pay-*"], threshold: 2), repository: w.repoPath)
            Issue.record("a threshold the newest part does not meet was accepted")
        } catch { #expect(error.code == "delegation") }
        _ = try root.delegateAdd(team("pay", [pay, pay2], ["pay-*"]), repository: w.repoPath)
        let resigned = try publisher(pay, index: online, co: [pay2]).claim(repository: w.repoPath)
        #expect(resigned.part?.serial == 2 && resigned.composed)
        _ = try root.delegateAdd(team("pay", [pay, pay2], ["pay-*"], threshold: 2), repository: w.repoPath)
        do {
            _ = try publisher(pay, index: online).pack(w.request("1.1.0", id: "pay-card"))
            Issue.record("one key of a threshold of two packed")
        } catch { #expect(error.code == "delegation-threshold") }
        #expect(!FileManager.default.fileExists(atPath: w.repo.appendingPathComponent("packages/pay-card/1.1.0").path))
        let both = try publisher(pay, index: online, co: [pay2]).pack(w.request("1.1.0", id: "pay-card"))
        #expect(both.part?.composed == true)
        #expect(w.verify().problems.isEmpty)
    }
}

extension PackRequest {
    /// The request with other routes.
    func with(routes: [String]) -> PackRequest {
        var r = self
        r.routes = routes
        return r
    }
}
