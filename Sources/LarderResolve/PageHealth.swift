import Foundation
import LarderCore
import LarderStore
import Logging
import Synchronization
import SystemPackage

/// Where page-health verdicts go (the store, through `StoreHealthRecorder`; a fake in tests).
package protocol HealthRecording: Sendable {
    /// Records `verdict` about `activation`; must not block the caller.
    func record(_ verdict: HealthVerdict, for activation: ActivationRef)
    /// Records `verdict` with what telemetry reports about the page (by default, the verdict alone).
    func record(_ verdict: HealthVerdict, for activation: ActivationRef, facts: PageFacts)
}

extension HealthRecording {
    /// The verdict alone.
    package func record(_ verdict: HealthVerdict, for activation: ActivationRef, facts: PageFacts) {
        record(verdict, for: activation)
    }
}

/// The page-health monitors of the pages a container has open, on one clock.
///
/// A front-end calls `begin` when it serves a page's main document (the activation it came
/// from), feeds what it observes with `signal`, and calls `tick` now and then (the gateway every
/// 200 ms; the WebKit glue on a timer). Each page's verdict goes to the recorder once; the page is
/// then forgotten, so a late signal names an unknown page and changes nothing.
public final class PageHealthTracker: Sendable {
    /// The deadline and error limit of every page.
    public let settings: PageHealthSettings
    /// Where verdicts go.
    package let recorder: any HealthRecording
    /// Seconds on a monotonic clock (injected in tests).
    let clock: @Sendable () -> TimeInterval
    private let pages = Mutex<[String: HealthMonitor]>([:])
    /// Pages served but not started: no page script has spoken for them yet (`reserve`).
    private let unstarted = Mutex<[String: (activation: ActivationRef, servedAt: TimeInterval)]>([:])
    /// The most pages watched at once; a page beyond it is served without a monitor.
    package static let maxPages = 4096

    /// A tracker with `settings`, sending verdicts to `recorder`; `clock` gives seconds on a
    /// monotonic clock (the system's uptime by default).
    package init(
        settings: PageHealthSettings = .standard, recorder: any HealthRecording,
        clock: @escaping @Sendable () -> TimeInterval = { ProcessInfo.processInfo.systemUptime }
    ) {
        self.settings = settings
        self.recorder = recorder
        self.clock = clock
    }

    /// Starts watching a page loaded from `activation`; returns its token (the name its signals
    /// carry), or nil when `maxPages` pages are open already.
    package func begin(_ activation: ActivationRef) -> String? {
        let token = Self.newToken()
        let monitor = HealthMonitor(activation: activation, settings: settings, startedAt: clock())
        let added = pages.withLock { pages -> Bool in
            guard pages.count < Self.maxPages else { return false }
            pages[token] = monitor
            return true
        }
        return added ? token : nil
    }

    /// Names a page served from `activation` without watching it yet: it is watched — its
    /// deadline counted from now — only once its page script speaks for it (`start`, or any
    /// signal), and dropped with no verdict when none has by the deadline. What the gateway
    /// does: any client (another origin's `fetch`, a frame) can be served a document, but only
    /// the page whose script runs in a top-level window starts it. Nil when `maxPages` are open.
    package func reserve(_ activation: ActivationRef) -> String? {
        let token = Self.newToken()
        let now = clock()
        let open = pages.withLock { $0.count }
        let added = unstarted.withLock { u -> Bool in
            guard open + u.count < Self.maxPages else { return false }
            u[token] = (activation, now)
            return true
        }
        return added ? token : nil
    }

    /// The page script of the reserved page `token` spoke: it is watched from when it was
    /// served. False when no such page is reserved (unknown, started or dropped already).
    @discardableResult
    package func start(page token: String) -> Bool {
        guard let (activation, servedAt) = unstarted.withLock({ $0.removeValue(forKey: token) }) else { return false }
        let monitor = HealthMonitor(activation: activation, settings: settings, startedAt: servedAt)
        pages.withLock { $0[token] = monitor }
        return true
    }

    /// Applies `signal` to the page `token` (starting it first when it is only reserved); false
    /// when no such page is open (never begun, or decided already).
    @discardableResult
    package func signal(_ signal: PageSignal, page token: String) -> Bool {
        start(page: token)
        let now = clock()
        let result = pages.withLock { pages -> (Bool, (HealthVerdict, ActivationRef, PageFacts)?) in
            guard var monitor = pages[token] else { return (false, nil) }
            let verdict = monitor.handle(signal, at: now)
            if verdict == nil { pages[token] = monitor } else { pages[token] = nil }
            return (true, verdict.map { ($0, monitor.activation, monitor.facts) })
        }
        if let (verdict, activation, facts) = result.1 { recorder.record(verdict, for: activation, facts: facts) }
        return result.0
    }

    /// Stops watching the page `token` with no verdict (its content process died and the page
    /// will be loaded again as a new page); false when no such page is open.
    @discardableResult
    package func forget(page token: String) -> Bool {
        unstarted.withLock { $0.removeValue(forKey: token) != nil }
            || pages.withLock { $0.removeValue(forKey: token) != nil }
    }

    /// Applies the clock to every open page; the ones past their deadline fail.
    package func tick() {
        let now = clock()
        let deadline = settings.readyDeadline
        unstarted.withLock { u in u = u.filter { now < $0.value.servedAt + deadline } }
        let decided = pages.withLock { pages -> [(HealthVerdict, ActivationRef, PageFacts)] in
            var out: [(HealthVerdict, ActivationRef, PageFacts)] = []
            for (token, var monitor) in pages where (monitor.deadline ?? 0) <= now {
                if let v = monitor.tick(at: now) { out.append((v, monitor.activation, monitor.facts)) }
                pages[token] = nil
            }
            return out
        }
        for (verdict, activation, facts) in decided { recorder.record(verdict, for: activation, facts: facts) }
    }

    /// How many pages are being watched.
    package var openPages: Int { pages.withLock { $0.count } }

    static func newToken() -> String {
        var g = SystemRandomNumberGenerator()
        return String(format: "%016llx%016llx", g.next() as UInt64, g.next() as UInt64)
    }
}

/// Applies page-health verdicts to the sandbox's store from a background queue, so a page's
/// signal never waits for the writer lock. `onOutcome` hears what each verdict did.
package final class StoreHealthRecorder: HealthRecording, Sendable {
    /// The root of the sandbox the verdicts are recorded in.
    package let root: FilePath
    let onOutcome: @Sendable (Result<PageHealthOutcome, StoreError>) -> Void
    let handoff: ServingHandoff?
    private let queue = DispatchQueue(label: "larder.page-health")
    /// Activations known to be confirmed (only touched on `queue`). A confirmed activation stays
    /// confirmed until the next activation, which has another number: a healthy verdict about
    /// one of these needs neither the lock nor a read of the state (every page load sends one).
    /// (Behind a lock no other thread takes, so that the compiler can check the class.)
    private let confirmed = Mutex<Set<ActivationRef>>([])

    /// A recorder for the sandbox at `root`; `onOutcome` hears each verdict's effect, or why it
    /// could not be recorded. Its state writes are told to `handoff` (the resolver's, when the
    /// app shares one).
    package init(
        root: FilePath, handoff: ServingHandoff? = nil,
        onOutcome: @escaping @Sendable (Result<PageHealthOutcome, StoreError>) -> Void
    ) {
        self.root = root
        self.handoff = handoff
        self.onOutcome = onOutcome
    }

    /// Queues the verdict and returns at once.
    package func record(_ verdict: HealthVerdict, for activation: ActivationRef) {
        record(verdict, for: activation, facts: .none)
    }

    /// Queues the verdict, with what telemetry reports about the page, and returns at once.
    package func record(_ verdict: HealthVerdict, for activation: ActivationRef, facts: PageFacts) {
        queue.async { [self] in
            if facts.scriptErrors > 0 {
                TelemetrySpool(root: root).record { ctx in
                    [
                        TelemetryEvent(
                            .pageError, package: activation.package, version: activation.version, channel: ctx.channel,
                            reason: "script-error", count: min(facts.scriptErrors, TelemetryEvent.maxCount), at: Date())
                    ]
                }
            }
            if verdict == .healthy, confirmed.withLock({ $0.contains(activation) }) {
                onOutcome(.success(PageHealthOutcome(activation: activation, verdict: verdict, effect: .unchanged)))
                return
            }
            var options = Sandbox.Options()
            options.lockTimeout = 30
            options.handoff = handoff
            do throws(StoreError) {
                let sandbox = try Sandbox.open(root, options: options)
                defer { sandbox.close() }
                let outcome = try sandbox.recordPageHealth(verdict, for: activation, facts: facts)
                if verdict == .healthy, outcome.effect == .confirmed || outcome.effect == .unchanged {
                    confirmed.withLock { known in
                        if known.count > 4096 { known.removeAll() }
                        known.insert(activation)
                    }
                }
                onOutcome(.success(outcome))
            } catch {
                onOutcome(.failure(error))
            }
        }
    }

    /// Waits until every verdict queued so far is recorded (for tests and orderly shutdown).
    package func flush() { queue.sync {} }
}

/// The page-health script a container puts in every page it watches, first in `<head>`.
///
/// It defines `window.larder.ready()`, which the page calls once it has rendered, and forwards
/// the page's `load` event, uncaught errors (`error` events) and unhandled promise rejections.
/// Messages go to WebKit's script-message handler `larderHealth` when there is one, else as a
/// POST (`navigator.sendBeacon`, else `fetch`) to `/.larder/health?page=<token>` on the page's
/// own origin, the token read from the script's own URL (`/.larder/health.js?page=<token>`).
/// Loaded twice, it does nothing the second time. In a subframe it defines nothing and sends
/// only `{"event": "frame"}` (the gateway then stops watching the page that frame's document
/// began: a client that sends no fetch metadata makes a frame look like a navigation), so no
/// subframe can confirm or fail a release.
package enum PageHealthScript {
    /// The path the gateway serves the script at.
    package static let scriptPath = "/.larder/health.js"
    /// The path the script posts its messages to.
    package static let reportPath = "/.larder/health"
    /// The WebKit script-message handler's name.
    package static let messageHandler = "larderHealth"

    /// The script's text.
    package static let source = """
        (function () {
          'use strict';
          if (window.larder && window.larder.__health) return;
          var me = document.currentScript && document.currentScript.src || '';
          var m = /[?&]page=([0-9a-f]+)/.exec(me);
          var url = '/.larder/health?page=' + (m ? m[1] : '');
          var handler = window.webkit && window.webkit.messageHandlers && window.webkit.messageHandlers.larderHealth;
          var secret = '';
          // Taken now, before any script of the page runs: a page that later replaces them, or
          // puts a setter for `secret` on Object.prototype, sees nothing of the secret.
          var post = handler && handler.postMessage, apply = Reflect.apply, define = Object.defineProperty;
          if (window.top === window && !handler && navigator.sendBeacon) {
            // The gateway watches the page from when it was served, once its script speaks for it.
            try { navigator.sendBeacon(url, new Blob([JSON.stringify({ event: 'start' })], { type: 'text/plain' })); }
            catch (e) {}
          }
          if (window.top !== window) {
            // A subframe is never watched: it tells the gateway to forget the page its document began.
            if (!handler && navigator.sendBeacon) {
              try { navigator.sendBeacon(url, new Blob([JSON.stringify({ event: 'frame' })], { type: 'text/plain' })); }
              catch (e) {}
            }
            return;
          }
          function send(message) {
            if (handler) {
              try { define(message, 'secret', { value: secret, enumerable: true }); apply(post, handler, [message]); }
              catch (e) {}
              return;
            }
            var body = JSON.stringify(message);
            try {
              if (navigator.sendBeacon && navigator.sendBeacon(url, new Blob([body], { type: 'text/plain' }))) return;
            } catch (e) {}
            try { fetch(url, { method: 'POST', body: body, keepalive: true }); } catch (e) {}
          }
          var readySent = false;
          window.larder = {
            __health: true,
            ready: function () { if (!readySent) { readySent = true; send({ event: 'ready' }); } }
          };
          window.addEventListener('error', function (e) {
            send({ event: 'error', message: String(e.message || (e.error && e.error.message) || 'error'),
                   source: e.filename || '', line: e.lineno || 0 });
          });
          window.addEventListener('unhandledrejection', function (e) {
            var r = e.reason;
            send({ event: 'error', message: 'unhandled rejection: ' + (r && r.message ? r.message : String(r)),
                   source: (r && r.fileName) || '', line: (r && r.lineNumber) || 0 });
          });
          window.addEventListener('load', function () { send({ event: 'loaded' }); });
        })();

        """

    /// The script for a web view's main frame: its messages to `messageHandler` carry `secret`
    /// (lower-case hex), which no other frame knows (it is in no property a page can read:
    /// `WebViewHealth` refuses a message without it).
    package static func source(secret: String) -> String {
        precondition(secret.allSatisfy(\.isHexDigit), "a hex secret")
        return source.replacingOccurrences(of: "var secret = '';", with: "var secret = '\(secret)';")
    }

    /// `html` with the script's tag (carrying `token`) inserted first in `<head>` — after the
    /// `<head>` tag, else after `<html>`, else after the doctype, else at the start — so it runs
    /// before any of the page's own scripts.
    package static func inject(into html: Data, token: String) -> Data {
        let tag = Data("<script src=\"\(scriptPath)?page=\(token)\"></script>".utf8)
        let at = insertionPoint(html)
        var out = Data(capacity: html.count + tag.count)
        out.append(html.prefix(at))
        out.append(tag)
        out.append(html.dropFirst(at))
        return out
    }

    /// The byte offset just past the first `<head…>` tag (else `<html…>`, else `<!doctype…>`),
    /// looked for in the first 64 KiB, case-insensitively; 0 when there is none.
    static func insertionPoint(_ html: Data) -> Int {
        let bytes = [UInt8](html.prefix(64 << 10))
        let lower = bytes.map { ($0 >= 65 && $0 <= 90) ? $0 + 32 : $0 }
        for name in ["<head", "<html", "<!doctype"] {
            let needle = Array(name.utf8)
            var i = 0
            while i + needle.count <= lower.count {
                if lower[i..<(i + needle.count)].elementsEqual(needle) {
                    let next = i + needle.count < lower.count ? lower[i + needle.count] : 0
                    // `<head>` or `<head attr…>`, not `<header>`.
                    if next == UInt8(ascii: ">") || next == 0x20 || next == 0x09 || next == 0x0A || next == 0x0D
                        || next == UInt8(ascii: "/")
                    {
                        if let close = lower[(i + needle.count)...].firstIndex(of: UInt8(ascii: ">")) {
                            return close + 1
                        }
                        return 0
                    }
                }
                i += 1
            }
        }
        return 0
    }
}
