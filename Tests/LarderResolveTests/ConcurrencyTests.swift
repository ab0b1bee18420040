import Foundation
import LarderCore
import LarderResolve
import LarderStore
import LarderTestSupport
import Synchronization
import SystemPackage
import Testing

/// Runs `larder` with `args`; returns stdout, failing the test on a non-zero exit.
@discardableResult
func larder(_ args: [String]) throws -> String {
    let r = try LarderBinary.run(args, timeout: 120)
    #expect(r.status == 0, "larder \(args.joined(separator: " ")) exited \(r.status): \(r.stderr)")
    return r.stdout
}

/// What the resolving threads saw.
final class Observations: Sendable {
    private struct Seen {
        var stop = false
        var problems: [String] = []
        var liveVersions: [String: Int] = [:]
        var sessionVersions: [String: Int] = [:]
    }
    private let seen = Mutex(Seen())

    var problems: [String] { seen.withLock { $0.problems } }
    var liveVersions: [String: Int] { seen.withLock { $0.liveVersions } }
    var sessionVersions: [String: Int] { seen.withLock { $0.sessionVersions } }
    var stopped: Bool { seen.withLock { $0.stop } }
    func finish() { seen.withLock { $0.stop = true } }
    func problem(_ p: String) {
        seen.withLock { if $0.problems.count < 20 { $0.problems.append(p) } }
    }
    func saw(_ v: String, session: Bool) {
        seen.withLock { s in
            if session { s.sessionVersions[v, default: 0] += 1 } else { s.liveVersions[v, default: 0] += 1 }
        }
    }
}

@Suite("Resolving while another process updates and collects")
struct ConcurrencyTests {
    /// Threads load the sample app's JSON (live) and the docs package's JSON (through a session
    /// that pinned docs 1.0.0) while `larder` processes install 2.0.0 and 3.0.0 of both, confirm,
    /// and run gc with nothing retained. Every load must answer 200 with the bytes of the version
    /// it names; the live loads move forward; the session sees docs 1.0.0 throughout, and gc keeps
    /// that version for it while deleting sample-app 1.0.0.
    @Test func resolvingDuringUpdatesAndGC() throws {
        let env = try ResolveEnv()
        defer { env.cleanup() }
        for v in ["1.0.0", "2.0.0", "3.0.0"] {
            try env.publish(v)
            try env.publish(v, id: "docs")
        }
        try env.install("1.0.0")
        try env.install("1.0.0", id: "docs")
        let resolver = try Resolver(root: env.root)
        let session = try resolver.session(pinning: ["docs"])
        let loader = ResourceLoader(resolver: resolver)
        let seen = Observations()
        let group = DispatchGroup()
        for t in 0..<6 {
            let pinned = t % 3 == 0
            let url =
                pinned ? "https://app.example.com/docs/data/catalog.json" : "https://app.example.com/data/catalog.json"
            group.enter()
            BlockingWork.start("test.resolver-\(t)") { [session] in
                defer { group.leave() }
                while !seen.stopped {
                    guard case .response(let r) = loader.load(LoadRequest(url: url), session: pinned ? session : nil)
                    else {
                        seen.problem("\(url): passthrough")
                        continue
                    }
                    guard r.status == 200, case .local(_, let version) = r.outcome else {
                        seen.problem("\(url): \(r.status) \(r.outcome)")
                        continue
                    }
                    var body = Data()
                    do {
                        while let c = try r.nextChunk() { body.append(c) }
                    } catch {
                        seen.problem("\(url): \(error)")
                        continue
                    }
                    guard String(decoding: body, as: UTF8.self).contains("\"\(version)\"") else {
                        seen.problem("\(url): the body is not \(version)'s")
                        continue
                    }
                    seen.saw(version.description, session: pinned)
                }
            }
        }
        usleep(50_000)
        let root = env.root.string
        for v in ["2.0.0", "3.0.0"] {
            for id in ["sample-app", "docs"] {
                try larder([
                    "install", env.bundle(id, v).string, "--root", root, "--id", id, "--version", v, "--files",
                    env.list(id, v).string,
                ])
                try larder(["confirm", id, "--root", root])
            }
            usleep(30_000)
        }
        let gc = try larder(["gc", "--keep", "0", "--root", root, "--json"])
        usleep(100_000)
        seen.finish()
        #expect(group.wait(timeout: .now() + 30) == .success)
        #expect(seen.problems.isEmpty, "\(seen.problems)")
        #expect(seen.sessionVersions.keys.sorted() == ["1.0.0"], "\(seen.sessionVersions)")
        #expect(seen.liveVersions["3.0.0", default: 0] > 0 && seen.liveVersions.count >= 2, "\(seen.liveVersions)")
        #expect(Set(seen.liveVersions.keys).isSubset(of: ["1.0.0", "2.0.0", "3.0.0"]))
        #expect(gc.contains("sample-app@1.0.0") && gc.contains("docs@1.0.0"), "\(gc)")
        let report = try JSONDecoder().decode(GCReport.self, from: Data(gc.utf8))
        #expect(report.removed.contains("sample-app@1.0.0") && report.keptPinned.contains("docs@1.0.0"), "\(report)")
        if case .local(let f) = resolver.resolve("https://app.example.com/") {
            #expect(f.version.description == "3.0.0")
        } else {
            Issue.record("expected 3.0.0")
        }
        session.release()
    }
}
