import Foundation
import LarderCore
import Testing

/// A small delegated repository in memory: keys, a root, team parts and the composed index.
struct DelegationFixture {
    let now = Date(timeIntervalSince1970: 1_900_000_000)
    let rootKeys = (0..<3).map { _ in PrivateKey() }
    let indexKey = PrivateKey()
    let payKeys = (0..<2).map { _ in PrivateKey() }
    let shopKey = PrivateKey()
    let guardKey = PrivateKey()

    var root: RootDocument {
        RootDocument(
            version: 1, expires: now.addingTimeInterval(86_400 * 365),
            keys: (rootKeys + [indexKey] + payKeys + [shopKey, guardKey]).map { RootKey($0.publicKey) },
            roles: RootRoles(
                root: RoleKeys(keyIds: rootKeys.map(\.publicKey.keyID), threshold: 2),
                index: RoleKeys(keyIds: [indexKey.publicKey.keyID], threshold: 1)),
            teams: [
                Team(
                    name: "pay", keyIds: payKeys.map(\.publicKey.keyID), threshold: 2,
                    packages: [PackagePattern("pay-*")!]),
                Team(
                    name: "shop", keyIds: [shopKey.publicKey.keyID], threshold: 1,
                    packages: [PackagePattern("shop")!, PackagePattern("shop.*")!]),
                Team(
                    name: "guard", role: .rollout, keyIds: [guardKey.publicKey.keyID], threshold: 1,
                    packages: [PackagePattern("*")!]),
            ])
    }

    static func sign(_ bytes: Data, _ keys: [PrivateKey]) -> [SignatureEntry] {
        (try? IndexSignature.sign(bytes, with: keys).signatures) ?? []
    }

    static func signed(_ bytes: Data, _ keys: [PrivateKey]) -> DelegationCheck.Signed {
        let file = SignatureFile(signatures: sign(bytes, keys))
        return DelegationCheck.Signed(bytes: bytes, signature: (try? ManifestCoding.encode(file)) ?? Data())
    }

    func part(_ team: String, _ serial: UInt64, _ entries: [PackageEntry]) -> (TeamPart, Data) {
        let p = TeamPart(team: team, serial: serial, packages: entries)
        return (p, (try? ManifestCoding.encode(p)) ?? Data())
    }

    func row(_ team: String, _ serial: UInt64, _ bytes: Data, _ keys: [PrivateKey]) -> PartRow {
        PartRow(
            team: team, serial: serial,
            part: BlobRef(
                path: TeamPart.path(team: team, serial: serial), size: Int64(bytes.count),
                sha256: SHA256Digest.of(bytes)),
            signatures: Self.sign(bytes, keys))
    }

    static func entry(_ id: String, onDemand: Bool = false) -> PackageEntry {
        IndexShardsTests.entry(id, onDemand: onDemand)
    }
}

@Suite("Delegations: package patterns")
struct PackagePatternTests {
    @Test("a pattern matches ids with * standing for any run of characters")
    func matching() throws {
        let p = try #require(PackagePattern("pay-*"))
        #expect(p.matches(PackageID("pay-card")!))
        #expect(p.matches(PackageID("pay-")!))  // the star may stand for nothing
        #expect(!p.matches(PackageID("pay")!))
        #expect(!p.matches(PackageID("shop-pay-x")!))
        let mid = try #require(PackagePattern("a*b*c"))
        #expect(mid.matches(PackageID("abc")!))
        #expect(mid.matches(PackageID("axxbyyc")!))
        #expect(!mid.matches(PackageID("axxbyy")!))
        #expect(!mid.matches(PackageID("acb")!))
        let exact = try #require(PackagePattern("checkout"))
        #expect(exact.matches(PackageID("checkout")!))
        #expect(!exact.matches(PackageID("checkout2")!))
        #expect(try #require(PackagePattern("*")).matches(PackageID("anything.at-all")!))
    }

    @Test(
        "text that is not a pattern is refused",
        arguments: ["", "Pay-*", "pay/*", "-x*", ".x", "a b", String(repeating: "a", count: 65)])
    func refused(text: String) {
        #expect(PackagePattern(text) == nil)
    }

    /// Every word over a small alphabet up to a length, to compare `overlaps` with brute force.
    static func words(_ alphabet: [Character], upTo n: Int) -> [String] {
        var out = [""]
        var layer = [""]
        for _ in 0..<n {
            layer = layer.flatMap { w in alphabet.map { w + String($0) } }
            out += layer
        }
        return out
    }

    @Test("overlaps agrees with brute force over every pattern pair of a small alphabet")
    func overlapIsExact() throws {
        let patterns = Self.words(["a", "b", "*"], upTo: 4).filter { !$0.isEmpty }.compactMap(PackagePattern.init)
        let ids = Self.words(["a", "b"], upTo: 9).compactMap(PackageID.init)
        var pairs = 0
        for (i, p) in patterns.enumerated() {
            for q in patterns[i...] {
                let brute = ids.contains { p.matches($0) && q.matches($0) }
                #expect(p.overlaps(q) == brute, "\(p) and \(q)")
                #expect(q.overlaps(p) == brute, "\(q) and \(p)")
                pairs += 1
            }
        }
        #expect(pairs > 1000)
    }
}

@Suite("Delegations: the trust rules")
struct DelegationCheckTests {
    let f = DelegationFixture()

    @Test("a root with two release teams claiming one id, an unknown key or an unreachable threshold is refused")
    func rootRules() {
        #expect(f.root.problem() == nil)
        var r = f.root
        r.teams[1].packages.append(PackagePattern("pay-c*")!)
        #expect(r.problem()?.contains("teams pay and shop both claim") == true)
        r = f.root
        r.teams[2].packages = [PackagePattern("pay-*")!]  // a rollout team may overlap
        #expect(r.problem() == nil)
        r = f.root
        r.roles.index.threshold = 2
        #expect(r.problem()?.contains("threshold 2 with 1 keys") == true)
        r = f.root
        r.teams[0].keyIds.append("0123456789abcdef")
        #expect(r.problem()?.contains("unknown key") == true)
        r = f.root
        r.teams.append(r.teams[0])
        #expect(r.problem()?.contains("listed twice") == true)
        #expect(f.root.owner(of: PackageID("pay-card")!)?.name == "pay")
        #expect(f.root.owner(of: PackageID("shop.cart")!)?.name == "shop")
        #expect(f.root.owner(of: PackageID("news")!) == nil)
    }

    @Test("a threshold counts distinct valid keys of the role; revoked and expired keys are named")
    func thresholds() throws {
        let msg = Data("part".utf8)
        let root = f.root
        let team = try #require(root.team(named: "pay"))
        func check(_ sigs: [SignatureEntry], _ r: RootDocument = root) throws(DelegationRefusal) {
            try DelegationCheck.requireThreshold(
                role: "team pay", message: msg, signatures: sigs, keyIDs: team.keyIds, threshold: team.threshold,
                root: r, now: f.now)
        }
        try check(DelegationFixture.sign(msg, f.payKeys))
        let one = DelegationFixture.sign(msg, [f.payKeys[0]])
        #expect(throws: DelegationRefusal.threshold(role: "team pay", signed: 1, threshold: 2)) { try check(one) }
        // The same key twice is one key.
        #expect(throws: DelegationRefusal.threshold(role: "team pay", signed: 1, threshold: 2)) { try check(one + one) }
        // A key outside the role does not count, nor fail.
        #expect(throws: DelegationRefusal.self) { try check(one + DelegationFixture.sign(msg, [f.shopKey])) }
        var revoked = root
        revoked.revokedKeys = [f.payKeys[1].publicKey.keyID]
        #expect(throws: DelegationRefusal.keyRevoked(role: "team pay", keyID: f.payKeys[1].publicKey.keyID)) {
            try check(DelegationFixture.sign(msg, f.payKeys), revoked)
        }
        var expired = root
        let i = try #require(expired.keys.firstIndex { $0.keyId == f.payKeys[0].publicKey.keyID })
        expired.keys[i].expires = f.now.addingTimeInterval(-1)
        #expect(throws: DelegationRefusal.keyExpired(role: "team pay", keyID: f.payKeys[0].publicKey.keyID)) {
            try check(DelegationFixture.sign(msg, f.payKeys), expired)
        }
        var bad = DelegationFixture.sign(msg, f.payKeys)
        bad[0].signature = DelegationFixture.sign(Data("other".utf8), [f.payKeys[0]])[0].signature
        #expect(throws: DelegationRefusal.invalidSignature(role: "team pay", keyID: f.payKeys[0].publicKey.keyID)) {
            try check(bad)
        }
        #expect(DelegationRefusal.keyRevoked(role: "x", keyID: "y").code == "delegation-key-revoked")
        #expect(DelegationRefusal.keyExpired(role: "x", keyID: "y").code == "delegation-key-expired")
        #expect(DelegationRefusal.threshold(role: "x", signed: 0, threshold: 1).code == "delegation-threshold")
    }

    /// Root `version` with the root keys given, encoded.
    func rootBytes(_ version: UInt64, rootKeys: [PrivateKey], threshold: Int = 2) -> Data {
        var r = f.root
        r.version = version
        let extra = rootKeys.filter { k in !r.keys.contains { $0.keyId == k.publicKey.keyID } }
        r.keys += extra.map { RootKey($0.publicKey) }
        r.roles.root = RoleKeys(keyIds: rootKeys.map(\.publicKey.keyID), threshold: threshold)
        return (try? ManifestCoding.encode(r)) ?? Data()
    }

    @Test("roots are followed one version at a time, each signed by the old threshold and its own")
    func rootChain() throws {
        let v1 = rootBytes(1, rootKeys: f.rootKeys)
        let newKeys = (0..<2).map { _ in PrivateKey() }
        let v2 = rootBytes(2, rootKeys: newKeys, threshold: 2)
        let old = Array(f.rootKeys.prefix(2))
        // First contact: one configured key and root 1's own threshold.
        let held1 = try DelegationCheck.followRoots(
            held: nil, configured: [f.rootKeys[0].publicKey], chain: [DelegationFixture.signed(v1, old)],
            named: RootName(version: 1, of: v1), now: f.now)
        #expect(held1.document.version == 1)
        // Root 1 not signed by any configured key.
        #expect(throws: DelegationRefusal.self) {
            try DelegationCheck.followRoots(
                held: nil, configured: [PrivateKey().publicKey], chain: [DelegationFixture.signed(v1, old)],
                named: RootName(version: 1, of: v1), now: f.now)
        }
        // Rotation: root 2 signed by two old root keys and both new ones.
        let held2 = try DelegationCheck.followRoots(
            held: held1, configured: [], chain: [DelegationFixture.signed(v2, old + newKeys)],
            named: RootName(version: 2, of: v2), now: f.now)
        #expect(held2.document.roles.root.keyIds == newKeys.map(\.publicKey.keyID))
        // Signed by the new keys only, or by one old key: refused as a root change.
        for signers in [newKeys, [f.rootKeys[0]] + newKeys, old + [newKeys[0]]] {
            do {
                _ = try DelegationCheck.followRoots(
                    held: held1, configured: [], chain: [DelegationFixture.signed(v2, signers)],
                    named: RootName(version: 2, of: v2), now: f.now)
                Issue.record("root 2 signed by \(signers.count) keys was accepted")
            } catch {
                #expect(error.code == "delegation-root")
            }
        }
        // An older root than the one held, a skipped version, other bytes than named.
        #expect(throws: DelegationRefusal.self) {
            try DelegationCheck.followRoots(
                held: held2, configured: [], chain: [], named: RootName(version: 1, of: v1), now: f.now)
        }
        let v3 = rootBytes(3, rootKeys: newKeys)
        #expect(throws: DelegationRefusal.self) {
            try DelegationCheck.followRoots(
                held: held1, configured: [], chain: [DelegationFixture.signed(v3, newKeys)],
                named: RootName(version: 3, of: v3), now: f.now)
        }
        #expect(throws: DelegationRefusal.self) {
            try DelegationCheck.followRoots(
                held: held1, configured: [], chain: [DelegationFixture.signed(v2, old + newKeys)],
                named: RootName(version: 2, of: v3), now: f.now)
        }
        // The held root named again: nothing to fetch.
        #expect(
            try DelegationCheck.followRoots(held: held2, configured: [], chain: [], named: held2.name, now: f.now)
                == held2)
    }

    func parts() -> (rows: [PartRow], bytes: [String: Data]) {
        let (_, pay) = f.part("pay", 3, [DelegationFixture.entry("pay-card"), DelegationFixture.entry("pay-wallet")])
        let (_, shop) = f.part("shop", 1, [DelegationFixture.entry("shop")])
        return (
            [f.row("pay", 3, pay, f.payKeys), f.row("shop", 1, shop, [f.shopKey])], ["pay": pay, "shop": shop]
        )
    }

    func checkParts(
        _ rows: [PartRow], _ bytes: [String: Data], accepted: [String: AcceptedPart] = [:]
    ) throws(DelegationRefusal) -> [String: TeamPart] {
        try DelegationCheck.checkParts(rows, partBytes: bytes, root: f.root, accepted: accepted, now: f.now)
    }

    @Test("parts named by the index are checked against the root: team, bytes, threshold, serial, patterns")
    func partRules() throws {
        let (rows, bytes) = parts()
        let ok = try checkParts(rows, bytes)
        #expect(ok["pay"]?.packages.count == 2)
        func code(_ body: () throws -> Void) -> ReasonCode? {
            do { try body() } catch let e as DelegationRefusal { return e.code } catch { return "not-a-refusal" }
            return nil
        }
        // A team the root does not know.
        var r = rows
        r[1].team = "news"
        #expect(code { _ = try checkParts(r, bytes) } == "delegation-unknown-team")
        // Other bytes than named, or a part that says another serial.
        #expect(
            code { _ = try checkParts(rows, ["pay": bytes["pay"]!, "shop": Data("{}".utf8)]) }
                == "delegation-part-mismatch")
        let (_, wrongSerial) = f.part("shop", 9, [DelegationFixture.entry("shop")])
        #expect(
            code {
                _ = try checkParts(
                    [rows[0], f.row("shop", 1, wrongSerial, [f.shopKey])], ["pay": bytes["pay"]!, "shop": wrongSerial])
            }
                == "delegation-part-mismatch")
        // Fewer signatures than the threshold.
        r = rows
        r[0].signatures.removeLast()
        #expect(code { _ = try checkParts(r, bytes) } == "delegation-threshold")
        // Signed by another team's key.
        r = rows
        r[1].signatures = DelegationFixture.sign(bytes["shop"]!, [f.payKeys[0]])
        #expect(code { _ = try checkParts(r, bytes) } == "delegation-threshold")
        // Older than accepted, or the accepted serial with other bytes.
        let acc = ["pay": AcceptedPart(serial: 4, sha256: SHA256Digest.of(Data()))]
        #expect(code { _ = try checkParts(rows, bytes, accepted: acc) } == "delegation-part-rollback")
        let same = ["pay": AcceptedPart(serial: 3, sha256: SHA256Digest.of(Data()))]
        #expect(code { _ = try checkParts(rows, bytes, accepted: same) } == "delegation-part-rollback")
        let accepted = ["pay": AcceptedPart(serial: 3, sha256: SHA256Digest.of(bytes["pay"]!))]
        #expect(code { _ = try checkParts(rows, bytes, accepted: accepted) } == nil)
        // A team key signing a package outside its patterns, validly.
        let (_, stray) = f.part("shop", 2, [DelegationFixture.entry("shop"), DelegationFixture.entry("pay-card")])
        #expect(
            code { _ = try checkParts([f.row("shop", 2, stray, [f.shopKey])], ["shop": stray]) }
                == "delegation-outside")
        // A rollout team's part holds no entries.
        let (_, guardPart) = f.part("guard", 1, [DelegationFixture.entry("shop")])
        #expect(
            code { _ = try checkParts([f.row("guard", 1, guardPart, [f.guardKey])], ["guard": guardPart]) }
                == "delegation-outside")
        // A part path that is not the team's.
        r = rows
        r[0].part.path = "parts/shop/3.json"
        #expect(code { _ = try checkParts(r, bytes) } == "delegation-part-mismatch")
    }

    @Test("the index lists exactly the parts' entries; the index role adds nothing of its own")
    func composition() throws {
        let (rows, bytes) = parts()
        let ps = try checkParts(rows, bytes)
        let all = ps.values.flatMap(\.packages).sorted { $0.id < $1.id }
        let index = RepositoryIndex(serial: 1, expires: f.now, packages: all)
        try DelegationCheck.checkComposition(index, parts: ps, root: f.root)
        func code(_ i: RepositoryIndex) -> ReasonCode? {
            do { try DelegationCheck.checkComposition(i, parts: ps, root: f.root) } catch { return error.code }
            return nil
        }
        var changed = index
        changed.packages[0].routes = ["https://evil.example/"]
        #expect(code(changed) == "delegation-part-mismatch")
        var added = index
        added.packages.append(DelegationFixture.entry("pay-extra"))
        #expect(code(added) == "delegation-part-mismatch")
        var unowned = index
        unowned.packages.append(DelegationFixture.entry("news"))
        #expect(code(unowned) == "delegation-outside")
        var dropped = index
        dropped.packages.removeFirst()
        #expect(code(dropped) == "delegation-part-mismatch")
        // A team accepted before, not decoded again: its entries are compared by their digest.
        let payDigest = try #require(DelegationCheck.entriesDigest(ps["pay"]!.packages))
        let onlyShop = ps.filter { $0.key == "shop" }
        try DelegationCheck.checkComposition(index, parts: onlyShop, root: f.root, known: ["pay": payDigest])
        do {
            try DelegationCheck.checkComposition(changed, parts: onlyShop, root: f.root, known: ["pay": payDigest])
            Issue.record("an index whose entries differ from the accepted part's digest was accepted")
        } catch { #expect(error.code == "delegation-part-mismatch") }
        do {
            try DelegationCheck.checkComposition(dropped, parts: onlyShop, root: f.root, known: ["pay": payDigest])
            Issue.record("an index missing an entry of a known part was accepted")
        } catch { #expect(error.code == "delegation-part-mismatch") }
    }

    @Test("in a sharded index, on-demand entries are checked shard by shard")
    func shards() throws {
        let (_, pay) = f.part(
            "pay", 1,
            [DelegationFixture.entry("pay-card")]
                + (0..<6).map { DelegationFixture.entry("pay-mini-\($0)", onDemand: true) })
        let ps = try checkParts([f.row("pay", 1, pay, f.payKeys)], ["pay": pay])
        let entries = ps["pay"]!.packages
        let eager = entries.filter { $0.install?.mode != .onDemand }
        let sharded = RepositoryIndex(
            schemaVersion: 2, serial: 1, expires: f.now, packages: eager,
            shards: IndexShards(
                files: [
                    BlobRef(path: "x", size: 0, sha256: .of(Data())), BlobRef(path: "y", size: 0, sha256: .of(Data())),
                ],
                catalog: BlobRef(path: "z", size: 0, sha256: .of(Data()))))
        try DelegationCheck.checkComposition(sharded, parts: ps, root: f.root)
        for number in 0..<2 {
            let mine = entries.filter {
                $0.install?.mode == .onDemand && IndexShards.bucket(of: $0.id, count: 2) == number
            }
            try DelegationCheck.checkShard(mine, number: number, count: 2, parts: ps, root: f.root)
            if !mine.isEmpty {
                #expect(throws: DelegationRefusal.self) {
                    try DelegationCheck.checkShard(
                        Array(mine.dropLast()), number: number, count: 2, parts: ps, root: f.root)
                }
                var edited = mine
                edited[0].version = SemanticVersion("9.9.9")!
                #expect(throws: DelegationRefusal.self) {
                    try DelegationCheck.checkShard(edited, number: number, count: 2, parts: ps, root: f.root)
                }
            }
        }
        // An unsharded index may not leave an on-demand entry out.
        var inline = sharded
        inline.schemaVersion = 1
        inline.shards = nil
        #expect(throws: DelegationRefusal.self) {
            try DelegationCheck.checkComposition(inline, parts: ps, root: f.root)
        }
    }

    @Test("an index signed by the index role only; an expired root refuses every index")
    func indexSignature() throws {
        let bytes = Data("index".utf8)
        let good = SignatureFile(signatures: DelegationFixture.sign(bytes, [f.indexKey]))
        try DelegationCheck.requireIndexSignature(bytes, signatures: good, root: f.root, now: f.now)
        let byRoot = SignatureFile(signatures: DelegationFixture.sign(bytes, f.rootKeys))
        #expect(throws: DelegationRefusal.threshold(role: "the index", signed: 0, threshold: 1)) {
            try DelegationCheck.requireIndexSignature(bytes, signatures: byRoot, root: f.root, now: f.now)
        }
        var old = f.root
        old.expires = f.now
        do {
            try DelegationCheck.requireIndexSignature(bytes, signatures: good, root: old, now: f.now)
            Issue.record("an expired root was accepted")
        } catch { #expect(error.code == "delegation-root") }
    }
}
