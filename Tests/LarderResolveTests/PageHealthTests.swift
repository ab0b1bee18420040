import Foundation
import LarderCore
import LarderFileSystem
import LarderResolve
import LarderStore
import LarderTestSupport
import Synchronization
import SystemPackage
import Testing

/// Records verdicts; fails loudly on none expected.
final class FakeRecorder: HealthRecording, Sendable {
    let verdicts = Mutex<[(HealthVerdict, ActivationRef)]>([])
    func record(_ verdict: HealthVerdict, for activation: ActivationRef) {
        verdicts.withLock { $0.append((verdict, activation)) }
    }
    var all: [(HealthVerdict, ActivationRef)] { verdicts.withLock { $0 } }
}

/// A clock the test moves.
final class FakeClock: Sendable {
    let now = Mutex<TimeInterval>(0)
    func advance(_ s: TimeInterval) { now.withLock { $0 += s } }
    var read: @Sendable () -> TimeInterval { { self.now.withLock { $0 } } }
}

@Suite("Resolve: page health")
struct PageHealthTests {
    let a = ActivationRef(package: PackageID("sample-app")!, version: SemanticVersion("2.0.0")!, number: 4)
    let b = ActivationRef(package: PackageID("docs")!, version: SemanticVersion("1.0.0")!, number: 1)

    @Test("each page's verdict goes to the recorder once, about the activation it loaded from")
    func tracker() throws {
        let clock = FakeClock()
        let recorder = FakeRecorder()
        let t = PageHealthTracker(
            settings: PageHealthSettings(readyDeadline: 5, maxScriptErrors: 3), recorder: recorder, clock: clock.read)
        let p1 = try #require(t.begin(a))
        let p2 = try #require(t.begin(b))
        #expect(p1 != p2 && p1.count == 32)
        #expect(t.signal(.documentLoaded, page: p1) && t.signal(.documentLoaded, page: p2))
        clock.advance(1)
        #expect(t.signal(.ready, page: p2))
        #expect(recorder.all.count == 1 && recorder.all[0].0 == .healthy && recorder.all[0].1 == b)
        // Decided pages are forgotten: a late signal names no page.
        #expect(!t.signal(.ready, page: p2))
        #expect(t.openPages == 1)
        clock.advance(3.9)
        t.tick()
        #expect(recorder.all.count == 1)
        clock.advance(0.1)
        t.tick()
        #expect(recorder.all.count == 2)
        #expect(recorder.all[1].0 == .failed(reason: "no ready signal within 5 s after the page loaded"))
        #expect(recorder.all[1].1 == a)
        #expect(t.openPages == 0)
        #expect(!t.signal(.ready, page: p1))
        #expect(!t.signal(.ready, page: "no-such-page"))
        t.tick()
        #expect(recorder.all.count == 2)
    }

    @Test("the script goes first in <head>, whatever the document looks like")
    func injection() {
        let cases: [(String, String)] = [
            ("<!DOCTYPE html><html><head><title>x</title></head></html>", "<!DOCTYPE html><html><head>TAG<title>"),
            ("<HTML><HEAD lang=en>\n<script>a()</script>", "<HTML><HEAD lang=en>TAG\n<script>"),
            ("<html><header>h</header><head>", "<html><header>h</header><head>TAG"),
            ("<!doctype html><html lang=en><body>b", "<!doctype html><html lang=en>TAG<body>"),
            ("<!doctype html><p>b", "<!doctype html>TAG<p>"),
            ("plain", "TAGplain"),
            ("", "TAG"),
        ]
        for (html, expected) in cases {
            let out = String(decoding: PageHealthScript.inject(into: Data(html.utf8), token: "ab12"), as: UTF8.self)
            let tag = "<script src=\"/.larder/health.js?page=ab12\"></script>"
            #expect(out.replacingOccurrences(of: tag, with: "TAG").hasPrefix(expected), "\(html) → \(out)")
            #expect(out.replacingOccurrences(of: tag, with: "") == html)
        }
    }

    @Test("StoreHealthRecorder: a failing page rolls the pending version back; a late verdict is ignored")
    func recorderOnASandbox() throws {
        let env = try ResolveEnv()
        defer { env.cleanup() }
        try env.publish("1.0.0")
        try env.publish("2.0.0")
        try env.install("1.0.0")
        try env.withSandbox { _ = try $0.confirm(id: try packageID("sample-app")) }
        try env.install("2.0.0")
        let outcomes = Mutex<[PageHealthOutcome]>([])
        let recorder = StoreHealthRecorder(root: env.root) { r in
            if case .success(let o) = r { outcomes.withLock { $0.append(o) } }
        }
        let resolver = try Resolver(root: env.root)
        let id = PackageID("sample-app")!
        let activation = try #require(resolver.snapshot().versions[id]?.activationRef(id))
        #expect(activation.version == SemanticVersion("2.0.0"))
        recorder.record(.failed(reason: "no ready signal within 30 s"), for: activation)
        recorder.flush()
        recorder.record(.healthy, for: activation)
        recorder.flush()
        let seen = outcomes.withLock { $0 }
        #expect(seen.map(\.effect) == [.rolledBack(to: "1.0.0"), .stale(current: "sample-app@1.0.0 (activation 3)")])
        #expect(try resolver.reload().versions[id]?.active == SemanticVersion("1.0.0"))
    }

    @Test(
        "StoreHealthRecorder: after an activation is confirmed, its healthy verdicts need neither the lock nor a write")
    func confirmedIsRemembered() throws {
        let env = try ResolveEnv()
        defer { env.cleanup() }
        try env.publish("1.0.0")
        try env.install("1.0.0")
        let outcomes = Mutex<[PageHealthOutcome.Effect]>([])
        let failures = Mutex<[StoreError]>([])
        let recorder = StoreHealthRecorder(root: env.root) { r in
            switch r {
            case .success(let o): outcomes.withLock { $0.append(o.effect) }
            case .failure(let e): failures.withLock { $0.append(e) }
            }
        }
        let id = PackageID("sample-app")!
        let activation = try #require(try Resolver(root: env.root).snapshot().versions[id]?.activationRef(id))
        recorder.record(.healthy, for: activation)
        recorder.flush()
        // Another writer holds the lock now: a healthy verdict about the confirmed activation
        // is answered without waiting for it (and the state is not written).
        let state = try AtomicFile.read(SandboxLayout(root: env.root).state)
        try env.withSandbox { _ in
            recorder.record(.healthy, for: activation)
            recorder.flush()
        }
        #expect(outcomes.withLock { $0 } == [.confirmed, .unchanged])
        #expect(failures.withLock { $0 }.isEmpty)
        #expect(try AtomicFile.read(SandboxLayout(root: env.root).state) == state)
    }
}
