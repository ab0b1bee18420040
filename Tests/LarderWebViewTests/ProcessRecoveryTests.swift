import Foundation
import LarderCore
import LarderResolve
import LarderTestSupport
import LarderWebView
import Synchronization
import Testing

@Suite("WebKit path: recovery from a dead web content process")
struct ProcessRecoveryTests {
    let now = ManualClock()

    func recovery(_ policy: RecoveryPolicy = .standard) -> WebViewRecovery {
        let clock = now
        return WebViewRecovery(policy: policy, clock: { clock.time })
    }

    func advance(_ s: TimeInterval) { now.advance(s) }

    @Test("the page shown is reloaded, each termination in a row waiting twice as long, up to the cap")
    func backoff() {
        let r = recovery(RecoveryPolicy(firstDelay: 0.25, maxDelay: 1.5, stableAfter: 10, maxReloads: 8))
        r.navigationCommitted(url: "larder://app/index.html")
        var delays: [TimeInterval] = []
        for _ in 0..<5 {
            guard case .reload(let url, let delay) = r.processTerminated(.crashed) else {
                Issue.record("not a reload")
                return
            }
            #expect(url == "larder://app/index.html")
            delays.append(delay)
            r.pageLoaded()
            advance(1)
        }
        #expect(delays == [0.25, 0.5, 1, 1.5, 1.5])
    }

    @Test("a page that kills its process at every load stops being reloaded after maxReloads, saying why")
    func givesUp() {
        let r = recovery(RecoveryPolicy(firstDelay: 0, maxDelay: 0, stableAfter: 10, maxReloads: 3))
        r.navigationCommitted(url: "larder://app/")
        for _ in 0..<3 {
            if case .giveUp = r.processTerminated(.memoryLimit) { Issue.record("gave up too soon") }
        }
        guard case .giveUp(let reason) = r.processTerminated(.memoryLimit) else {
            Issue.record("still reloading")
            return
        }
        #expect(reason == "the web content process exceeded its memory limit; 3 reloads in a row did not keep it up")
    }

    @Test("a page that stayed up, or signalled ready, ends the streak")
    func streakEnds() {
        let r = recovery(RecoveryPolicy(firstDelay: 1, maxDelay: 60, stableAfter: 10, maxReloads: 8))
        r.navigationCommitted(url: "larder://app/")
        _ = r.processTerminated(.crashed)
        _ = r.processTerminated(.crashed)
        #expect(r.streak == 2)
        r.pageLoaded()
        advance(9)
        #expect(r.processTerminated(.crashed) == .reload(url: "larder://app/", delay: 4))
        r.pageLoaded()
        advance(10)
        #expect(r.processTerminated(.crashed) == .reload(url: "larder://app/", delay: 1))
        r.pageReady()
        #expect(r.streak == 0)
    }

    @Test("the URL the engine reports wins over the last committed one; with neither there is nothing to reload")
    func urls() {
        let r = recovery()
        guard case .giveUp(let why) = r.processTerminated(.killed) else {
            Issue.record("reloaded nothing")
            return
        }
        #expect(why.contains("before any page was shown"))
        r.navigationCommitted(url: "larder://app/a.html")
        #expect(
            r.processTerminated(.killed, url: "larder://app/b.html") == .reload(url: "larder://app/b.html", delay: 0.25)
        )
        #expect(r.processTerminated(.killed, url: "") == .reload(url: "larder://app/b.html", delay: 0.5))
    }
}

@Suite("WebKit path: a recovery action as the glue reads it")
struct RecoveryActionTests {
    @Test("reload gives the URL and delay; giving up gives nothing")
    func reload() {
        #expect(RecoveryAction.reload(url: "larder://app/", delay: 0.5).reload?.url == URL(string: "larder://app/"))
        #expect(RecoveryAction.reload(url: "larder://app/", delay: 0.5).reload?.delay == 0.5)
        #expect(RecoveryAction.giveUp(reason: "x").reload == nil)
    }
}

/// A clock a test moves by hand, shared by the suite and what it reads.
final class ManualClock: Sendable {
    private let now = Mutex<TimeInterval>(0)

    /// The time now, in seconds from zero.
    var time: TimeInterval { now.withLock { $0 } }

    /// Moves the clock `s` seconds on.
    func advance(_ s: TimeInterval) { now.withLock { $0 += s } }
}
