import Foundation
import LarderCore
import LarderResolve
import LarderStore
import LarderTestSupport
import LarderWebView
import Synchronization
import Testing

/// Records verdicts.
final class Verdicts: HealthRecording, Sendable {
    let all = Mutex<[(HealthVerdict, ActivationRef)]>([])
    func record(_ verdict: HealthVerdict, for activation: ActivationRef) {
        all.withLock { $0.append((verdict, activation)) }
    }
    var list: [(HealthVerdict, ActivationRef)] { all.withLock { $0 } }
}

@Suite("WebKit path: a web view's page health, on Linux")
struct WebViewHealthTests {
    let env: ResolveEnv
    let loader: ResourceLoader
    let now = ManualClock()
    let verdicts = Verdicts()
    let health: WebViewHealth

    init() throws {
        env = try ResolveEnv()
        try env.publish("1.0.0")
        try env.publish("2.0.0")
        try env.install("1.0.0")
        try env.withSandbox { _ = try $0.confirm(id: try packageID("sample-app")) }
        try env.install("2.0.0")
        loader = ResourceLoader(resolver: try Resolver(root: env.root))
        let clock = now
        let tracker = PageHealthTracker(
            settings: PageHealthSettings(readyDeadline: 10, maxScriptErrors: 3), recorder: verdicts,
            clock: { clock.time })
        health = WebViewHealth(tracker: tracker, loader: loader)
    }

    func advance(_ s: TimeInterval) { now.advance(s) }

    @Test("navigation, load event and the script's ready message confirm the page's activation")
    func ready() throws {
        defer { env.cleanup() }
        #expect(health.navigationStarted(url: "larder://sample-app/"))
        health.navigationFinished()
        advance(3)
        #expect(health.message(["event": "ready", "secret": health.secret]) == nil)
        let (verdict, activation) = try #require(verdicts.list.first)
        #expect(verdict == .healthy)
        #expect(activation.version == SemanticVersion("2.0.0") && activation.number == 2)
        #expect(verdicts.list.count == 1)
    }

    @Test("no ready within the deadline after didFinish: failed with the script's error")
    func deadline() {
        defer { env.cleanup() }
        #expect(health.navigationStarted(url: "https://app.example.com/index.html"))
        let error: [String: Any] = [
            "event": "error", "message": "Uncaught TypeError: x is undefined", "source": "app.js", "line": 7,
            "secret": health.secret,
        ]
        health.message(error)
        advance(1)
        health.navigationFinished()
        advance(9.9)
        health.tracker.tick()
        #expect(verdicts.list.isEmpty)
        advance(0.1)
        health.tracker.tick()
        #expect(
            verdicts.list.first?.0
                == .failed(
                    reason:
                        "no ready signal within 10 s after the page loaded; an uncaught script error: Uncaught TypeError: x is undefined (app.js:7)"
                ))
    }

    @Test("one termination is not a failure: the page is dropped undecided, and the reload is watched anew")
    func oneTermination() throws {
        defer { env.cleanup() }
        #expect(health.navigationStarted(url: "larder://sample-app/"))
        #expect(!health.processTerminated(.memoryLimit))
        #expect(health.tracker.openPages == 0)
        advance(100)
        health.tracker.tick()
        #expect(verdicts.list.isEmpty)
        // The reload: ready confirms, and clears the count.
        #expect(health.navigationStarted(url: "larder://sample-app/"))
        let activation = try #require(health.activation(for: "larder://sample-app/"))
        #expect(health.terminations(of: activation) == 1)
        health.message(["event": "ready", "secret": health.secret])
        #expect(verdicts.list.first?.0 == .healthy)
        #expect(health.terminations(of: activation) == 0)
    }

    @Test("the third termination before ready fails the activation, naming the count and the last reason")
    func repeatedTerminations() {
        defer { env.cleanup() }
        for reason in [TerminationReason.crashed, .crashed] {
            health.navigationStarted(url: "larder://sample-app/")
            #expect(!health.processTerminated(reason))
        }
        health.navigationStarted(url: "larder://sample-app/")
        #expect(health.processTerminated(.memoryLimit))
        #expect(
            verdicts.list.map(\.0) == [
                .failed(
                    reason:
                        "the web content process terminated 3 times before the page was ready (the last time it exceeded its memory limit)"
                )
            ])
    }

    @Test("a termination after ready changes nothing; one with no page watched neither")
    func terminationAfterReady() {
        defer { env.cleanup() }
        #expect(!health.processTerminated(.crashed))
        health.navigationStarted(url: "larder://sample-app/")
        health.message(["event": "ready", "secret": health.secret])
        for _ in 0..<5 { #expect(!health.processTerminated(.crashed)) }
        #expect(verdicts.list.map(\.0) == [.healthy])
    }

    @Test("a limit of one fails at the first termination")
    func limitOne() {
        defer { env.cleanup() }
        let strict = WebViewHealth(tracker: health.tracker, loader: loader, terminationLimit: 1)
        strict.navigationStarted(url: "larder://sample-app/")
        #expect(strict.processTerminated(.crashed))
        #expect(
            verdicts.list.first?.0
                == .failed(reason: "the web content process crashed before the page was ready"))
    }

    @Test("a page the sandbox does not serve is not watched; its signals go nowhere")
    func unwatched() {
        defer { env.cleanup() }
        #expect(!health.navigationStarted(url: "https://elsewhere.example.org/"))
        health.navigationFinished()
        health.message(["event": "ready", "secret": health.secret])
        advance(100)
        health.tracker.tick()
        #expect(verdicts.list.isEmpty)
    }

    @Test("a provisional failure fails the page it was for, not the one shown")
    func provisional() throws {
        defer { env.cleanup() }
        health.navigationStarted(url: "larder://sample-app/")
        health.navigationFinished()
        let error = NSError(
            domain: NSURLErrorDomain, code: NSURLErrorCannotConnectToHost,
            userInfo: [NSURLErrorFailingURLErrorKey: URL(string: "larder://sample-app/pages/about/index.html")!])
        health.provisionalNavigationFailed(error)
        let (verdict, _) = try #require(verdicts.list.first)
        guard case .failed(let reason) = verdict else {
            Issue.record("not failed")
            return
        }
        #expect(reason.hasPrefix("the main document failed to load"))
        // The page shown before is still watched and can still be confirmed.
        health.message(["event": "ready", "secret": health.secret])
        #expect(verdicts.list.count == 2 && verdicts.list[1].0 == .healthy)
    }

    @Test("messages that are not the script's are refused with a reason")
    func badMessages() {
        defer { env.cleanup() }
        health.navigationStarted(url: "larder://sample-app/")
        #expect(health.message("ready")?.description.contains("not a JSON object") == true)
        // Only the main frame's script, which knows the view's secret, is heard.
        #expect(health.message(["event": "ready"])?.description.contains("secret") == true)
        #expect(health.message(["event": "ready", "secret": "00"])?.description.contains("secret") == true)
        #expect(
            health.message(["event": "ready", "secret": health.secret], mainFrame: false)?.description.contains(
                "main frame") == true)
        #expect(health.pageScript.contains("var secret = '\(health.secret)';") && health.secret.count == 32)
        #expect(
            health.message(["event": "explode", "secret": health.secret])?.description.contains("unknown event") == true
        )
        #expect(health.message(["nothing": 1, "secret": health.secret])?.description.contains("no \"event\"") == true)
        #expect(verdicts.list.isEmpty)
    }
}
