import Foundation
import LarderCore
import LarderFetch
import LarderTestSupport
import Testing

/// Small documents (index, signature, file list) over HTTP: conditional GET, the size cap, and
/// the same retry and redirect policy as downloads.
@Suite("HTTP documents against a fault-injecting origin", .hangGuard)
struct HTTPDocumentTests {
    @Test("ETag: the first GET gets the body and its tag; If-None-Match with it gets 304; a stale tag gets the body")
    func conditionalGet() async throws {
        try await withOrigin { env in
            let data = try env.file("index.json", count: 3_000)
            let tag = try env.origin.etag(of: "index.json")
            let transport = try HTTPTransport(options: fastOptions())
            let first = try await transport.document(env.url("index.json"), etag: nil, maxBytes: 1 << 20)
            #expect(first == FetchedDocument(data: data, etag: tag, notModified: false))
            let again = try await transport.document(env.url("index.json"), etag: tag, maxBytes: 1 << 20)
            #expect(again == FetchedDocument(data: Data(), etag: tag, notModified: true))
            let stale = try await transport.document(env.url("index.json"), etag: "\"old\"", maxBytes: 1 << 20)
            #expect(stale == FetchedDocument(data: data, etag: tag, notModified: false))
            let log = env.requests("index.json")
            #expect(log.map(\.ifNoneMatch) == [nil, tag, "\"old\""], "\(log)")
            #expect(log.map(\.status) == [200, 304, 200], "\(log)")
        }
    }

    @Test("serve-from: the same path from another directory while the rule lasts, then the root's again")
    func serveFrom() async throws {
        try await withOrigin { env in
            let current = try env.file("index.json", count: 3_000, seed: 1)
            let elsewhere = env.dir.appending("replay")
            try FileManager.default.createDirectory(at: elsewhere, withIntermediateDirectories: true)
            let old = content(2_000, seed: 2)
            try old.write(to: elsewhere.appendingPathComponent("index.json"))
            env.origin.inject(.serveFrom(elsewhere), at: "/index.json")
            let transport = try HTTPTransport(options: fastOptions())
            let first = try await transport.document(env.url("index.json"), etag: nil, maxBytes: 1 << 20)
            let second = try await transport.document(env.url("index.json"), etag: nil, maxBytes: 1 << 20)
            #expect(first.data == old && second.data == current)
            #expect(env.requests("index.json").map(\.fault) == [.serveFrom(elsewhere), nil])
        }
    }

    @Test("an exact rule faults its own path only, not the paths it is a prefix of")
    func exactRule() async throws {
        try await withOrigin { env in
            let sig = try env.file("index.json.sig", count: 64)
            try env.file("index.json", count: 1_000)
            env.origin.inject(.status(404), at: "/index.json", count: nil, exact: true)
            let transport = try HTTPTransport(options: fastOptions())
            #expect(try await transport.document(env.url("index.json.sig"), etag: nil, maxBytes: 4096).data == sig)
            await #expect(throws: FetchError.self) {
                _ = try await transport.document(env.url("index.json"), etag: nil, maxBytes: 4096)
            }
            #expect(env.origin.rules.map(\.applied) == [1])
        }
    }

    @Test("a document larger than maxBytes: too-large at the head, or while streaming when it has no length")
    func tooLarge() async throws {
        for fault in [FaultOrigin.Fault?.none, .extra(8_000, declared: false)] {
            try await withOrigin { env in
                try env.file("index.json", count: fault == nil ? 10_000 : 2_000)
                if let fault { env.origin.inject(fault, at: "/index.json") }
                let url = env.url("index.json")
                await #expect(throws: FetchError.tooLarge(url: url.absoluteString, limit: 4096)) {
                    _ = try await HTTPTransport(options: fastOptions()).document(url, etag: nil, maxBytes: 4096)
                }
                #expect(env.requests("index.json").count == 1, "\(String(describing: fault)): not retried")
            }
        }
    }

    @Test("transient failures (5xx, 429, a cut) are retried; the document is fetched whole again")
    func retried() async throws {
        let faults: [FaultOrigin.Fault] = [
            .status(503), .status(429, retryAfter: "0"), .truncate(), .stall(seconds: 30),
        ]
        for fault in faults {
            try await withOrigin { env in
                let data = try env.file("index.json", count: 20_000)
                env.origin.inject(fault, at: "/index.json")
                let stalls = if case .stall = fault { true } else { false }
                let doc = try await HTTPTransport(options: fastOptions(stall: stalls ? 1 : 10)).document(
                    env.url("index.json"), etag: nil, maxBytes: 1 << 20)
                #expect(doc.data == data, "\(fault)")
                let log = env.requests("index.json")
                #expect(log.count == 2 && log.allSatisfy { $0.range == nil }, "\(fault): \(log)")
            }
        }
    }

    @Test("a Retry-After longer than maxDelay waits maxDelay, not what the server asked")
    func retryAfterCapped() async throws {
        try await withOrigin { env in
            let data = try env.file("index.json", count: 100)
            env.origin.inject(.status(503, retryAfter: "3600"), at: "/index.json")
            var options = fastOptions()
            options.maxDelay = 0.05
            let doc = try await HTTPTransport(options: options).document(
                env.url("index.json"), etag: nil, maxBytes: 1 << 20)
            #expect(doc.data == data)
        }
    }

    @Test("statuses that end a document fetch: a 4xx at once, a 5xx after the attempts")
    func statuses() async throws {
        try await withOrigin { env in
            let transport = try HTTPTransport(options: fastOptions())
            let missing = env.url("missing.json")
            await #expect(throws: FetchError.status(url: missing.absoluteString, code: 404)) {
                _ = try await transport.document(missing, etag: nil, maxBytes: 1 << 20)
            }
            #expect(env.requests("missing.json").count == 1)
            try env.file("index.json", count: 100)
            env.origin.inject(.status(500), at: "/index.json", count: nil)
            let url = env.url("index.json")
            await #expect(throws: FetchError.status(url: url.absoluteString, code: 500)) {
                _ = try await transport.document(url, etag: nil, maxBytes: 1 << 20)
            }
            #expect(env.requests("index.json").count == 3)
        }
    }

    @Test("a body longer than its Content-Length claims (declared short) never passes as the document")
    func declaredLonger() async throws {
        try await withOrigin { env in
            try env.file("index.json", count: 1_000)
            env.origin.inject(.lengthMore(by: 100), at: "/index.json", count: nil)
            let url = env.url("index.json")
            let error = await failure {
                _ = try await HTTPTransport(options: fastOptions()).document(url, etag: nil, maxBytes: 1 << 20)
            }
            guard case .connection(let u, _) = error else {
                Issue.record("expected a connection error, got \(String(describing: error))")
                return
            }
            #expect(u == url.absoluteString)
            #expect(env.requests("index.json").count == 3)
        }
    }

    @Test("redirects: the same host followed (If-None-Match kept), another host and loops refused")
    func redirects() async throws {
        try await withOrigin { env in
            try env.file("index.json", count: 500)
            let tag = try env.origin.etag(of: "index.json")
            let transport = try HTTPTransport(options: fastOptions())
            env.origin.inject(.redirect, at: "/index.json")
            let doc = try await transport.document(env.url("index.json"), etag: tag, maxBytes: 1 << 20)
            #expect(doc.notModified && doc.data.isEmpty)
            #expect(env.requests("index.json").map(\.ifNoneMatch) == [tag, tag])
            #expect(env.requests("index.json").map(\.status) == [302, 304])

            env.origin.inject(.redirectToOtherHost, at: "/index.json", count: nil)
            let url = env.url("index.json")
            await #expect(
                throws: FetchError.redirect(
                    url: url.absoluteString, detail: "redirect to another host (127.0.0.2) refused")
            ) {
                _ = try await transport.document(url, etag: nil, maxBytes: 1 << 20)
            }
            env.origin.heal()
            env.origin.inject(.redirectLoop, at: "/index.json", count: nil)
            await #expect(
                throws: FetchError.redirect(url: url.absoluteString, detail: "more than 5 redirects (a loop?)")
            ) {
                _ = try await transport.document(url, etag: nil, maxBytes: 1 << 20)
            }
            #expect(env.origin.requests.allSatisfy { $0.host == "127.0.0.1" })
        }
    }
}
