import AsyncHTTPClient
import Foundation
import LarderCore
import LarderGateway
import LarderResolve
import LarderStore
import LarderTestSupport
import NIOHTTP1
import Synchronization
import Testing

/// `serve --page-health`: the script put into each main document, its reserved paths on the
/// page's own origin, and the verdicts they lead to in the store.
@Suite("The gateway's page health", .hangGuard)
struct GatewayPageHealthTests {
    static let settings = PageHealthSettings(readyDeadline: 30, maxScriptErrors: 2)
    static let navigation = [("Sec-Fetch-Dest", "document")]

    /// The page token in a watched document's script tag.
    @available(macOS 14, iOS 17, tvOS 17, *)
    func pageToken(_ html: String) -> String? {
        let marker = "<script src=\"\(PageHealthScript.scriptPath)?page="
        guard let start = html.range(of: marker)?.upperBound else { return nil }
        let rest = html[start...]
        return rest.firstIndex(of: "\"").map { String(rest[..<$0]) }
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    func report(_ world: World, _ token: String, _ message: String) async throws -> Reply {
        try await world.gateway.send(
            .POST, "\(PageHealthScript.reportPath)?page=\(token)", body: Data(message.utf8))
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test("without page health the reserved paths are 404 and documents are served as they are")
    func off() async throws {
        try await withGateway { world in
            let script = try await world.gateway.send(.GET, PageHealthScript.scriptPath)
            #expect(script.status == 404, "\(script)")
            let page = try await world.gateway.send(.GET, "/", headers: Self.navigation)
            #expect(page.body == (try world.installed("index.html")))
        }
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test("the script is served on every origin the gateway answers for (GET and HEAD)")
    func script() async throws {
        try await withGateway(health: Self.settings) { world in
            let r = try await world.gateway.send(.GET, PageHealthScript.scriptPath + "?page=abc")
            #expect(r.status == 200 && r.text == PageHealthScript.source, "\(r)")
            #expect(r.header("Content-Type") == "text/javascript; charset=utf-8")
            let head = try await world.gateway.send(.HEAD, PageHealthScript.scriptPath, host: "other.example.org")
            #expect(head.status == 200 && head.body.isEmpty, "\(head)")
            let unknown = try await world.gateway.send(.GET, "/.larder/nothing-here")
            #expect(unknown.status == 404, "\(unknown)")
        }
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test("a main document of the pending version gets the script first in <head>, uncached; its ready confirms")
    func readyConfirms() async throws {
        try await withGateway(pendingUpdate, health: Self.settings) { world in
            let original = try world.installed("index.html", version: "2.0.0")
            let page = try await world.gateway.send(.GET, "/", headers: Self.navigation)
            #expect(page.status == 200, "\(page)")
            let token = try #require(pageToken(page.text), "\(page.text.prefix(300))")
            let tag = "<script src=\"\(PageHealthScript.scriptPath)?page=\(token)\"></script>"
            #expect(page.body == PageHealthScript.inject(into: original, token: token))
            #expect(page.text.range(of: "<head>")?.upperBound == page.text.range(of: tag)?.lowerBound)
            #expect(page.header("Cache-Control") == "no-store" && page.header("ETag") == nil, "\(page)")
            #expect(page.header("Content-Length") == "\(original.count + tag.utf8.count)")
            #expect(world.gateway.log.contains { $0.contains(" 200 sample-app@2.0.0 page-health ") })

            // A subresource request (no navigation) is the file itself, with its validators.
            let plain = try await world.gateway.send(.GET, "/")
            #expect(plain.body == original && plain.header("ETag") != nil)

            #expect(try world.state().packages["sample-app"]?.health == .pending)
            let loaded = try await report(world, token, #"{"event": "loaded"}"#)
            #expect(loaded.status == 204, "\(loaded)")
            let ready = try await report(world, token, #"{"event": "ready"}"#)
            #expect(ready.status == 204, "\(ready)")
            world.recorder?.flush()
            let pkg = try #require(try world.state().packages["sample-app"])
            #expect(pkg.health == .confirmed && pkg.active?.description == "2.0.0")
            // Decided: a late signal names no page.
            let late = try await report(world, token, #"{"event": "ready"}"#)
            #expect(late.status == 404, "\(late)")
        }
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test("script errors up to the limit fail the page: the pending version rolls back to its fallback")
    func errorsRollBack() async throws {
        try await withGateway(pendingUpdate, health: Self.settings) { world in
            let page = try await world.gateway.send(.GET, "/", headers: Self.navigation)
            let token = try #require(pageToken(page.text))
            let error = #"{"event": "error", "message": "TypeError: x is undefined", "source": "app.js", "line": 7}"#
            #expect(try await report(world, token, error).status == 204)
            #expect(try await report(world, token, error).status == 204)
            world.recorder?.flush()
            let pkg = try #require(try world.state().packages["sample-app"])
            #expect(pkg.active?.description == "1.0.0", "\(pkg)")
            #expect(pkg.hasFailed(SemanticVersion(2, 0, 0)))
            let after = try await world.gateway.send(.GET, "/data/catalog.json")
            #expect(after.header("X-Larder-Outcome") == "sample-app@1.0.0")
        }
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test(
        "a report from another origin is refused; a subframe's frame report stops watching the page its document began")
    func frames() async throws {
        try await withGateway(pendingUpdate, health: Self.settings) { world in
            let page = try await world.gateway.send(.GET, "/", headers: Self.navigation)
            let token = try #require(pageToken(page.text))
            let foreign = try await world.gateway.send(
                .POST, "\(PageHealthScript.reportPath)?page=\(token)",
                headers: [("Origin", "https://other.example.org")],
                body: Data(#"{"event": "ready"}"#.utf8))
            #expect(foreign.status == 403 && foreign.text.contains("other.example.org"), "\(foreign)")
            let own = try await world.gateway.send(
                .POST, "\(PageHealthScript.reportPath)?page=\(token)", headers: [("Origin", "https://\(appHost)")],
                body: Data(#"{"event": "frame"}"#.utf8))
            #expect(own.status == 204, "\(own)")
            // Not watched any more: its ready names no page, and nothing is decided.
            #expect(try await report(world, token, #"{"event": "ready"}"#).status == 404)
            world.recorder?.flush()
            #expect(try world.state().packages["sample-app"]?.health == .pending)
        }
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test(
        "hostile messages are refused and change nothing: not JSON, an unknown event, an unknown page, over 64 KiB",
        arguments: [
            ("not json", 400), (#"{"event": "explode"}"#, 400), (#"{"no": "event"}"#, 400),
            (String(repeating: " ", count: 70_000) + #"{"event": "ready"}"#, 413),
        ])
    func hostile(message: String, status: Int) async throws {
        try await withGateway(pendingUpdate, health: Self.settings) { world in
            let page = try await world.gateway.send(.GET, "/", headers: Self.navigation)
            let token = try #require(pageToken(page.text))
            let r = try await report(world, token, message)
            #expect(r.status == status, "\(r.text)")
            let stranger = try await report(world, "0123456789abcdef", #"{"event": "ready"}"#)
            #expect(stranger.status == 404, "\(stranger)")
            world.recorder?.flush()
            #expect(try world.state().packages["sample-app"]?.health == .pending)
            // The page is still watched: its own ready still counts.
            #expect(try await report(world, token, #"{"event": "ready"}"#).status == 204)
        }
    }

    @Test(
        "a page served but never started by its script is dropped at the deadline with no verdict; a started one fails")
    func unstartedPages() {
        let now = Mutex<TimeInterval>(0)
        let verdicts = Mutex<[HealthVerdict]>([])
        let tracker = PageHealthTracker(
            settings: PageHealthSettings(readyDeadline: 5, maxScriptErrors: 1),
            recorder: RecordingRecorder { verdict in verdicts.withLock { $0.append(verdict) } },
            clock: { now.withLock { $0 } })
        let activation = ActivationRef(package: PackageID("sample-app")!, version: SemanticVersion(2, 0, 0), number: 2)
        let silent = tracker.reserve(activation)
        let started = tracker.reserve(activation)
        #expect(silent != nil && started != nil && tracker.start(page: started ?? ""))
        now.withLock { $0 = 6 }
        tracker.tick()
        #expect(verdicts.withLock { $0 }.count == 1)
        #expect(!tracker.start(page: silent ?? ""), "dropped")
    }
}

/// A recorder that hands each verdict to a closure.
struct RecordingRecorder: HealthRecording {
    let onVerdict: @Sendable (HealthVerdict) -> Void
    func record(_ verdict: HealthVerdict, for activation: ActivationRef) { onVerdict(verdict) }
}
