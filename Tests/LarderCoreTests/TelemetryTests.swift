import Foundation
import Testing

@testable import LarderCore

@Suite struct TelemetryTests {
    let now = Date(timeIntervalSince1970: 1_796_403_600)  // 2026-12-04T17:00:00Z

    func event(_ kind: TelemetryKind = .activated, reason: String = "bundle", count: Int = 1) -> TelemetryEvent {
        TelemetryEvent(
            kind, package: PackageID("shop")!, version: SemanticVersion("1.2.0")!, channel: .default, reason: reason,
            from: kind.hasFrom ? SemanticVersion("1.1.0") : nil, count: count, bytes: kind == .activated ? 100 : nil,
            at: now.addingTimeInterval(-1800))
    }

    func batch(_ events: [TelemetryEvent]) -> TelemetryBatch {
        TelemetryBatch(
            batch: TelemetryBatch.randomID(), install: TelemetryBatch.randomID(), app: "1.0.0", dropped: 0,
            events: events)
    }

    func body(_ b: TelemetryBatch) throws -> Data { try ManifestCoding.encode(b) }

    @Test func wilsonIntervalsMatchTheFormula() {
        let none = Proportion(0, of: 10)
        #expect(none.rate == 0 && none.lower == 0 && abs(none.upper! - 0.2775) < 0.0001)
        let half = Proportion(5, of: 10)
        #expect(abs(half.lower! - 0.2366) < 0.0001 && abs(half.upper! - 0.7634) < 0.0001)
        let big = Proportion(20, of: 1000)
        #expect(abs(big.lower! - 0.01299) < 0.0001 && abs(big.upper! - 0.03063) < 0.0001)
        #expect(Proportion(3, of: 0).rate == nil && Proportion(3, of: 0).lower == nil)
    }

    @Test func failConditionsParseAndCompare() throws {
        let c = try FailCondition.parseList("failure-rate>2%, devices < 100,adoption>=0.5")
        #expect(c.map(\.metric) == [.failureRate, .devices, .adoption])
        #expect(c[0].value == 0.02 && c[1].op == .less && c[2].op == .greaterOrEqual)
        var v = VersionReport(
            package: "shop", version: "1.2.0", devices: 50, attempts: 50, failureRate: Proportion(2, of: 50),
            rollbackRate: Proportion(0, of: 50), byReason: [], pageErrors: 0, adoption: [], current: 0.5)
        #expect(c[0].holds(v) && c[1].holds(v) && c[2].holds(v))
        v.failureRate = Proportion(1, of: 50)
        #expect(!c[0].holds(v))
        for bad in ["failure-rate", "speed>2", "devices>2%", "failure-rate>150", "failure-rate>x%", ""] {
            #expect(throws: UsageProblem.self) { try FailCondition.parseList(bad) }
        }
    }

    @Test func eventsOfOneKeyMerge() {
        let merged = TelemetryEvent.merged([
            event(.pageError, reason: "script-error", count: 3), event(.pageError, reason: "script-error", count: 4),
            event(.checked, reason: "current"), event(.checked, reason: "current"), event(),
        ])
        #expect(merged.count == 3 && merged[0].count == 7 && merged[1].count == 1 && merged[2].bytes == 100)
    }

    @Test func sampleDrawsTheShareItNames() {
        let s = TelemetrySettings(endpoint: "https://c.example/v1/events", sample: 0.25)
        let ids = (0..<4000).map { _ in TelemetryBatch.randomID() }
        let share = Double(ids.filter { s.includes(install: $0) }.count) / 4000
        #expect(share > 0.2 && share < 0.3, "\(share)")
        #expect(ids.allSatisfy { TelemetrySettings(endpoint: s.endpoint).includes(install: $0) })
    }

    @Test func settingsRules() {
        #expect(TelemetrySettings(endpoint: "https://c.example/v1/events", sample: 1).problem == nil)
        #expect(TelemetrySettings(endpoint: "http://127.0.0.1:9/v1/events").problem == nil)
        for bad in [
            TelemetrySettings(endpoint: "https://c.example/v1/events", sample: 0),
            TelemetrySettings(endpoint: "https://c.example/v1/events", sample: 1.5),
            TelemetrySettings(endpoint: "ftp://c.example/"), TelemetrySettings(endpoint: "/v1/events"),
            TelemetrySettings(endpoint: "https://u:p@c.example/"),
            TelemetrySettings(endpoint: "https://c.example/?id=1"),
        ] {
            #expect(bad.problem != nil, "\(bad)")
        }
        var index = RepositoryIndex(serial: 1, expires: now, packages: [])
        index.telemetry = TelemetrySettings(endpoint: "https://c.example/#x")
        #expect(IndexRules.issues(index).map(\.code) == ["bad-telemetry"])
    }

    @Test func aBatchIsAcceptedWhole() throws {
        let b = batch([event(), event(.checked, reason: "current"), event(.downloadFailed, reason: "hash-mismatch")])
        #expect(try TelemetryBatch.accept(try body(b), now: now) == b)
    }

    /// Each hostile change is refused with its code.
    @Test func hostileBatchesAreRefusedWithTheirCode() throws {
        func refusal(_ change: (inout TelemetryBatch) -> Void) throws -> ReasonCode? {
            var b = batch([event()])
            change(&b)
            do {
                _ = try TelemetryBatch.accept(try body(b), now: now)
                return nil
            } catch let e as BatchRefusal { return e.code }
        }
        #expect(try refusal { $0.schemaVersion = 2 } == "bad-schema-version")
        #expect(try refusal { $0.batch = "x" } == "bad-batch-id")
        #expect(try refusal { $0.install = String(repeating: "A", count: 32) } == "bad-install")
        #expect(try refusal { $0.app = "v1" } == "bad-app-version")
        #expect(try refusal { $0.platform = "beos" } == "bad-platform")
        #expect(try refusal { $0.events = [] } == "too-many-events")
        #expect(try refusal { b in b.events = Array(repeating: b.events[0], count: 1001) } == "too-many-events")
        #expect(try refusal { $0.events[0].kind = "uninstalled" } == "bad-kind")
        #expect(try refusal { $0.events[0].reason = "because" } == "bad-reason")
        #expect(try refusal { $0.events[0].package = "../etc" } == "bad-package")
        #expect(try refusal { $0.events[0].version = "latest" } == "bad-version")
        #expect(try refusal { $0.events[0].channel = "Beta!" } == "bad-channel")
        #expect(try refusal { $0.events[0].count = 0 } == "bad-count")
        #expect(try refusal { $0.events[0].bytes = -1 } == "bad-bytes")
        #expect(try refusal { $0.events[0].hour = now.addingTimeInterval(-40 * 86_400) } == "bad-hour")
        #expect(try refusal { $0.events[0].hour = now.addingTimeInterval(7200) } == "bad-hour")
        #expect(try refusal { $0.events[0].hour = now.addingTimeInterval(-1790) } == "bad-hour")
        #expect(throws: BatchRefusal.self) { try TelemetryBatch.accept(Data("{".utf8), now: now) }
        let extra = try body(batch([event()])).replacingFirst("\"app\"", with: "\"userId\" : \"alice\", \"app\"")
        let refused = #expect(throws: BatchRefusal.self) { try TelemetryBatch.accept(extra, now: now) }
        #expect(refused?.code == "bad-json" && refused?.detail.contains("userId") == true)
    }
}

extension Data {
    fileprivate func replacingFirst(_ a: String, with b: String) -> Data {
        let s = String(decoding: self, as: UTF8.self)
        guard let r = s.range(of: a) else { return self }
        return Data(s.replacingCharacters(in: r, with: b).utf8)
    }
}

/// docs/privacy.md lists every field a device sends, field for field, and the privacy manifest parses.
@Suite struct PrivacyPageTests {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    func fields(_ table: String, in page: String) throws -> [String: String] {
        let start = try #require(page.range(of: "<!-- privacy-fields: \(table)"))
        let end = try #require(page.range(of: "<!-- end privacy-fields -->", range: start.upperBound..<page.endIndex))
        var out: [String: String] = [:]
        for line in page[start.upperBound..<end.lowerBound].split(separator: "\n") where line.hasPrefix("| `") {
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            out[cells[0].trimmingCharacters(in: CharacterSet(charactersIn: "`"))] = cells[1]
        }
        return out
    }

    @Test func thePageListsEveryFieldAndNoOther() throws {
        let page = try String(contentsOf: root.appendingPathComponent("docs/privacy.md"), encoding: .utf8)
        let batch = try fields("batch", in: page)
        #expect(Set(batch.keys) == Set(TelemetryBatch.CodingKeys.allCases.map(\.rawValue)))
        let event = try fields("event", in: page)
        #expect(Set(event.keys) == Set(TelemetryEvent.CodingKeys.allCases.map(\.rawValue)))
        // The closed sets, as the page names them.
        for k in TelemetryKind.allCases { #expect(event["kind"]?.contains("`\(k.rawValue)`") == true, "\(k)") }
        for p in TelemetryPlatform.allCases { #expect(batch["platform"]?.contains("`\(p.rawValue)`") == true, "\(p)") }
        // What a batch encodes is what the page lists.
        let sample = TelemetryBatch(
            batch: TelemetryBatch.randomID(), install: TelemetryBatch.randomID(), app: "1.0.0", dropped: 0,
            events: [
                TelemetryEvent(
                    .activated, package: PackageID("p")!, version: SemanticVersion(1, 0, 0), channel: .default,
                    reason: "bundle", from: SemanticVersion(0, 9, 0), bytes: 1, at: Date())
            ])
        let json = try #require(
            try JSONSerialization.jsonObject(with: try ManifestCoding.encode(sample)) as? [String: Any])
        #expect(Set(json.keys) == Set(batch.keys))
        let first = try #require((json["events"] as? [[String: Any]])?.first)
        #expect(Set(first.keys) == Set(event.keys))
    }

    @Test func thePrivacyManifestDeclaresNoTracking() throws {
        let data = try Data(contentsOf: root.appendingPathComponent("Sources/Larder/PrivacyInfo.xcprivacy"))
        let plist = try #require(try PropertyListSerialization.propertyList(from: data, format: nil) as? [String: Any])
        #expect(plist["NSPrivacyTracking"] as? Bool == false)
        let apis = (plist["NSPrivacyAccessedAPITypes"] as? [[String: Any]] ?? []).compactMap {
            $0["NSPrivacyAccessedAPIType"] as? String
        }
        #expect(
            Set(apis) == [
                "NSPrivacyAccessedAPICategoryFileTimestamp", "NSPrivacyAccessedAPICategoryDiskSpace",
                "NSPrivacyAccessedAPICategorySystemBootTime",
            ])
    }
}
