import Foundation
import Larder
import LarderTestSupport
import Synchronization
import Testing

@testable import larder

/// The values `manifests/README.md` §14 documents for each typed field, read from its table.
private func documented(_ field: String) throws -> [String] {
    let text = try String(contentsOf: packageRoot.appendingPathComponent("manifests/README.md"), encoding: .utf8)
    for line in text.split(separator: "\n") where line.hasPrefix("|") {
        let cells = line.split(separator: "|", omittingEmptySubsequences: false).map {
            $0.trimmingCharacters(in: .whitespaces)
        }
        guard cells.count >= 4, cells[2] == field || cells[1] == field else { continue }
        return cells[3].split(separator: " ").map { $0.trimmingCharacters(in: CharacterSet(charactersIn: "`")) }
    }
    throw HarnessError("manifests/README.md §14 has no row for \(field)")
}

/// Each enum's raw values, in declaration order, against the documented list (order included,
/// so a new case must be documented where it belongs).
@Suite("Typed values match manifests/README.md §14")
struct DocumentedValuesTests {
    @Test func historyEvents() throws {
        #expect(HistoryEvent.allCases.map(\.rawValue) == (try documented("`packages.*.history[].event`")))
    }

    @Test func health() throws {
        #expect(Health.allCases.map(\.rawValue) == (try documented("`health`")))
    }

    @Test func versionRoles() throws {
        #expect(PackageStatus.Role.allCases.map(\.rawValue) == (try documented("`packages[].versions[].role`")))
    }

    @Test func installOutcomes() throws {
        #expect(InstallOutcome.allCases.map(\.rawValue) == (try documented("`outcome`")))
    }

    @Test func planActions() throws {
        #expect(PlanAction.Kind.allCases.map(\.rawValue) == (try documented("`actions[].kind`, `packages[].action`")))
    }

    @Test func fetchMethods() throws {
        #expect(FetchMethod.allCases.map(\.rawValue) == (try documented("`cost.method`, `packages[].method`")))
    }

    @Test func packageOutcomes() throws {
        #expect(PackageOutcome.allCases.map(\.rawValue) == (try documented("`packages[].outcome`")))
    }

    @Test func progressModes() throws {
        #expect(ProgressMode.allCases.map(\.rawValue) == (try documented("`sync --progress`")))
    }

    @Test func policyModes() throws {
        #expect(Set(PolicyMode.allCases.map(\.rawValue)) == Set(try documented("`pack --policy`")))
    }

    @Test func upstreamSchemes() throws {
        #expect(UpstreamScheme.allCases.map(\.rawValue) == (try documented("`serve --upstream-scheme`")))
    }

    @Test("state.json written with every event decodes back to the same values")
    func historyRoundTrip() throws {
        var pkg = PackageState()
        for (i, e) in HistoryEvent.allCases.enumerated() {
            pkg.record(
                HistoryEntry(event: e, version: SemanticVersion(1, 0, UInt64(i)), at: Date(timeIntervalSince1970: 0)))
        }
        var state = SandboxState()
        state.packages["app"] = pkg
        let data = try ManifestCoding.encode(state)
        let text = String(decoding: data, as: UTF8.self)
        #expect(text.contains("\"event\" : \"auto-rollback\""))
        let back = try ManifestCoding.decode(SandboxState.self, from: data, document: "state.json")
        #expect(back == state)
    }
}

@Suite("CLI rendering")
struct RenderingTests {
    @Test("JSON progress is throttled: bursts of byte events become a few lines, none of the others is dropped")
    func progressThrottle() throws {
        let lines = Lines()
        let now = Mutex(Date(timeIntervalSince1970: 0))
        let renderer = ProgressRenderer(
            mode: .json, interval: 0.25, clock: { now.withLock { $0 } }, output: { lines.append($0) })
        renderer.render(.index(serial: 7, changed: true))
        // 1,000 chunks over one simulated second.
        for i in 1...1000 {
            now.withLock { $0 = Date(timeIntervalSince1970: Double(i) / 1000) }
            renderer.render(.bytes(id: "app", done: Int64(i) * 16384, total: 16_384_000))
        }
        renderer.render(.package(id: "app", outcome: .done))
        renderer.finish()
        let decoded = try lines.all.map {
            try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] ?? [:]
        }
        let bytes = decoded.filter { $0["event"] as? String == "bytes" }
        #expect((4...6).contains(bytes.count), "\(bytes.count) byte lines")
        #expect(bytes.last?["done"] as? Int == 16_384_000, "the last count is flushed")
        #expect(decoded.first?["event"] as? String == "index" && decoded.first?["serial"] as? Int == 7)
        #expect(decoded.last?["event"] as? String == "package" && decoded.last?["outcome"] as? String == "done")
        #expect(lines.all.allSatisfy { $0.hasSuffix("\n") && !$0.dropLast().contains("\n") })
    }

    @Test("bundles are byte-identical whatever the time zone (TZ=Asia/Shanghai and TZ=UTC)")
    func bundleIndependentOfTimeZone() throws {
        try withWorkspace { ws in
            let source = try copySampleApp(to: ws.dir)
            var bundles: [Data] = []
            for (i, zone) in ["Asia/Shanghai", "UTC", "America/Los_Angeles"].enumerated() {
                let repo = ws.dir.appendingPathComponent("repo-\(i)")
                let r = try larder(
                    [
                        "pack", source.path, "--repo", repo.path, "--id", "sample-app", "--version", "1.0.0", "--key",
                        ws.key.path,
                    ],
                    environment: ["TZ": zone])
                #expect(r.status == 0, "\(r)")
                bundles.append(
                    try Data(contentsOf: repo.appendingPathComponent("packages/sample-app/1.0.0/bundle.zip")))
            }
            #expect(bundles.count == 3 && Set(bundles).count == 1)
        }
    }
}

/// Lines written by a renderer under test.
private final class Lines: Sendable {
    private let items = Mutex<[String]>([])

    func append(_ s: String) { items.withLock { $0.append(s) } }

    var all: [String] { items.withLock { $0 } }
}
