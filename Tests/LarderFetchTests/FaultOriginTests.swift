import Foundation
import LarderFetch
import LarderTestSupport
import Testing

/// The fault origin's own behaviour beyond the faults, that `larder-fault-origin` (and through it
/// scripts/integration/faults.py) relies on: lanes, a reset under a prefix, rule ids, the control hook.
@Suite("The fault origin: lanes, reset, control", .hangGuard)
struct FaultOriginTests {
    @Test("a lane's path is served as the path; a reset under a lane drops its rules and log only")
    func lanesAndReset() async throws {
        try await withOrigin { env in
            let data = try env.file("index.json", count: 40)
            let a = env.origin.inject(.status(503), at: "/lanes/a/", count: nil)
            let b = env.origin.inject(.status(500), at: "/lanes/b/", count: nil)
            #expect(a == 1)
            #expect(b == 2)
            let transport = try HTTPTransport(options: fastOptions(attempts: 1))
            #expect(
                try await transport.document(env.origin.url("/lanes/c/index.json"), etag: nil, maxBytes: 4096).data
                    == data)
            await #expect(throws: FetchError.self) {
                _ = try await transport.document(env.origin.url("/lanes/a/index.json"), etag: nil, maxBytes: 4096)
            }
            env.origin.reset(under: "/lanes/a/")
            #expect(env.origin.rules.map(\.id) == [b])
            #expect(env.origin.requests.map(\.path) == ["/lanes/c/index.json"])
            #expect(env.origin.requests.map(\.sent) == [40])
        }
    }

    @Test("an answer still being sent when its lane is reset is not logged again")
    func resetInFlight() async throws {
        try await withOrigin { env in
            try env.file("slow.bin", count: 30)
            env.origin.inject(.drip(bytes: 1, every: .milliseconds(30)), at: "/lanes/d/")
            let transport = try HTTPTransport(options: fastOptions(attempts: 1))
            let fetch = Task {
                try? await transport.document(env.origin.url("/lanes/d/slow.bin"), etag: nil, maxBytes: 4096)
            }
            let deadline = Date().addingTimeInterval(10)
            while env.origin.requests(under: "/lanes/d/").isEmpty && Date() < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            env.origin.reset(under: "/lanes/d/")
            _ = await fetch.value
            #expect(
                try await transport.document(env.origin.url("/lanes/e/slow.bin"), etag: nil, maxBytes: 4096).data.count
                    == 30)
            #expect(env.origin.requests.map(\.path) == ["/lanes/e/slow.bin"])
            #expect(env.origin.requests.map(\.sent) == [30])
        }
    }

    @Test("the control hook answers /__ paths, unlogged; a path it declines is served as a file")
    func controlHook() async throws {
        let dir = try TemporaryDirectory("fault-origin-control")
        defer { dir.remove() }
        let origin = try await FaultOrigin.start(serving: dir.url, otherHost: nil) { request in
            request.path == "/__ping" ? (200, Data("{\"ok\":true}\n".utf8)) : nil
        }
        let transport = try HTTPTransport(options: fastOptions(attempts: 1))
        let ping = try await transport.document(origin.url("/__ping"), etag: nil, maxBytes: 4096)
        await #expect(throws: FetchError.self) {
            _ = try await transport.document(origin.url("/__other"), etag: nil, maxBytes: 4096)
        }
        await origin.stop()
        #expect(String(decoding: ping.data, as: UTF8.self) == "{\"ok\":true}\n")
        #expect(origin.requests.map(\.path) == ["/__other"])
        #expect(origin.requests.map(\.status) == [404])
    }
}
