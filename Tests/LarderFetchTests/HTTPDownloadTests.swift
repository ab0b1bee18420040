import Foundation
import LarderCore
import LarderFetch
import LarderTestSupport
import SystemPackage
import Testing

/// Downloads over HTTP against a fault-injecting origin on loopback (the cases of
/// `scripts/integration/faults.py`, at the transport's level): each fault ends in the
/// documented `FetchError`, or in a verified file after a retry, a resume or a restart, with the
/// requests the origin logged showing how the client got there.
@Suite("HTTP downloads against a fault-injecting origin", .hangGuard)
struct HTTPDownloadTests {
    static let size = 64 << 10

    @Test("a healthy download: one plain GET, the verified bytes, progress for each, no validator left behind")
    func healthy() async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: Self.size)
            let part = env.part()
            let progress = ProgressTotal()
            try await HTTPTransport(options: fastOptions()).download(
                env.url("bundle.zip"), to: part, expecting: exactly(data), progress: progress.handler)
            #expect(env.bytes(part) == data)
            #expect(progress.value == Int64(data.count))
            #expect(!env.hasValidator(part))
            let log = env.requests("bundle.zip")
            #expect(log.map(\.status) == [200] && log.first?.range == nil, "\(log)")
        }
    }

    // MARK: resume

    /// A small file, and one over 1 MiB (a bulk transfer: the HTTP/1.1 client).
    static let sizes = [64 << 10, 3 << 19]

    @Test(
        "a connection closed or reset (RST) mid-body: the next attempt resumes with Range and If-Range",
        arguments: sizes, [false, true])
    func resumeAfterCut(size: Int, reset: Bool) async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: size)
            let cut = size * 2 / 3
            env.origin.inject(.truncate(after: cut, reset: reset), at: "/bundle.zip")
            let part = env.part()
            try await HTTPTransport(options: fastOptions()).download(
                env.url("bundle.zip"), to: part, expecting: exactly(data), progress: nil)
            #expect(env.bytes(part) == data)
            let log = env.requests("bundle.zip")
            let tag = try env.origin.etag(of: "bundle.zip")
            try #require(log.map(\.status) == [200, 206], "\(log)")
            #expect(log[0].fault == .truncate(after: cut, reset: reset) && log[0].sent == cut, "\(log)")
            // The resume starts where the part file ends: at the cut, or before it when the
            // client had not read the last bytes yet (a reset drops them, and AsyncHTTPClient drops
            // what it buffered when the connection ends early).
            let start = log[1].range.flatMap { Int($0.dropFirst("bytes=".count).dropLast()) } ?? -1
            #expect(log[1].range?.hasSuffix("-") == true && (1...cut).contains(start), "\(log)")
            #expect(log[1].ifRange == tag, "\(log)")
        }
    }

    @Test("a cut on every attempt: each resumes where the last stopped; the attempts used up, a connection error")
    func cutEveryTime() async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: Self.size)
            env.origin.inject(.truncate(after: 10_000), at: "/bundle.zip", count: nil)
            let part = env.part()
            let error = await failure {
                try await HTTPTransport(options: fastOptions(attempts: 3)).download(
                    env.url("bundle.zip"), to: part, expecting: exactly(data), progress: nil)
            }
            guard case .connection(let url, _) = error else {
                Issue.record("expected a connection error, got \(String(describing: error))")
                return
            }
            #expect(url == env.url("bundle.zip").absoluteString)
            // Each attempt continues from what the part file holds (the cut, unless the client
            // had not read the last bytes when the connection ended).
            let log = env.requests("bundle.zip")
            let starts = log.map { $0.range.flatMap { Int($0.dropFirst("bytes=".count).dropLast()) } ?? 0 }
            #expect(log.count == 3 && log[0].range == nil, "\(log)")
            #expect(starts == starts.sorted() && starts.last ?? 0 <= 20_000, "\(log)")
            // What arrived stays for a later resume, with its validator.
            let kept = env.bytes(part)
            #expect(kept.count >= starts.last ?? 0 && kept.count <= 30_000 && kept == data.prefix(kept.count))
            #expect(env.hasValidator(part))
        }
    }

    @Test("a body shorter than declared once: truncated, then resumed with Range from what arrived")
    func shortOnce() async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: Self.size)
            env.origin.inject(.lengthLess(by: 100), at: "/bundle.zip")
            let part = env.part()
            try await HTTPTransport(options: fastOptions()).download(
                env.url("bundle.zip"), to: part, expecting: exactly(data), progress: nil)
            #expect(env.bytes(part) == data)
            let log = env.requests("bundle.zip")
            #expect(log.map(\.status) == [200, 206], "\(log)")
            #expect(log.last?.range == "bytes=\(Self.size - 100)-", "\(log)")
        }
    }

    @Test("a body shorter than declared every time: truncated, naming the bytes that arrived")
    func shortAlways() async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: Self.size)
            env.origin.inject(.lengthLess(by: 100), at: "/bundle.zip", count: nil)
            let url = env.url("bundle.zip")
            await #expect(
                throws: FetchError.truncated(
                    url: url.absoluteString, expected: Int64(Self.size), got: Int64(Self.size - 100))
            ) {
                try await HTTPTransport(options: fastOptions()).download(
                    url, to: env.part(), expecting: exactly(data), progress: nil)
            }
            #expect(env.requests("bundle.zip").count == 3)
        }
    }

    @Test("a part file left by an earlier run is continued with Range and If-Range, not fetched again")
    func resumeFromPartFile() async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: Self.size)
            let part = env.part()
            let tag = try env.origin.etag(of: "bundle.zip")
            try env.seed(part, data.prefix(12_345), etag: tag)
            let progress = ProgressTotal()
            try await HTTPTransport(options: fastOptions()).download(
                env.url("bundle.zip"), to: part, expecting: exactly(data), progress: progress.handler)
            #expect(env.bytes(part) == data)
            #expect(progress.value == Int64(Self.size - 12_345))
            let log = env.requests("bundle.zip")
            #expect(log.count == 1 && log.first?.status == 206, "\(log)")
            #expect(log.first?.range == "bytes=12345-" && log.first?.ifRange == tag, "\(log)")
        }
    }

    @Test("a part file of another content (its validator stale): the server sends it all, the client starts over")
    func staleValidator() async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: Self.size)
            let part = env.part()
            try env.seed(part, content(20_000, seed: 99), etag: "\"an-older-version\"")
            try await HTTPTransport(options: fastOptions()).download(
                env.url("bundle.zip"), to: part, expecting: exactly(data), progress: nil)
            #expect(env.bytes(part) == data)
            let log = env.requests("bundle.zip")
            #expect(log.map(\.status) == [200] && log.first?.range == "bytes=20000-", "\(log)")
        }
    }

    @Test("a part file a power cut left at full size holding zeros: fetched again whole, not blamed on the server")
    func zeroedPart() async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: Self.size)
            let part = env.part()
            try env.seed(part, Data(count: Self.size))
            try await HTTPTransport(options: fastOptions()).download(
                env.url("bundle.zip"), to: part, expecting: exactly(data), progress: nil)
            #expect(env.bytes(part) == data)
            let log = env.requests("bundle.zip")
            #expect(log.count == 1 && log.first?.range == nil && log.first?.status == 200, "\(log)")
        }
    }

    @Test("a server that ignores Range (200 with the whole body): the client starts over instead of appending")
    func rangeIgnored() async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: Self.size)
            // A body shorter than its length says: the client has exactly 30,000 bytes when it asks for the rest.
            env.origin.inject(.lengthLess(by: Self.size - 30_000), at: "/bundle.zip")
            env.origin.inject(.ignoreRange, at: "/bundle.zip")
            let part = env.part()
            try await HTTPTransport(options: fastOptions()).download(
                env.url("bundle.zip"), to: part, expecting: exactly(data), progress: nil)
            #expect(env.bytes(part) == data)
            let log = env.requests("bundle.zip")
            #expect(log.map(\.status) == [200, 200], "\(log)")
            #expect(log.last?.range == "bytes=30000-" && log.last?.fault == .ignoreRange, "\(log)")
        }
    }

    @Test("416 to a Range: the part file is dropped and the file fetched whole")
    func unsatisfiableRange() async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: Self.size)
            let part = env.part()
            try env.seed(part, data.prefix(5_000), etag: try env.origin.etag(of: "bundle.zip"))
            env.origin.inject(.status(416), at: "/bundle.zip", onlyRange: true)
            try await HTTPTransport(options: fastOptions()).download(
                env.url("bundle.zip"), to: part, expecting: exactly(data), progress: nil)
            #expect(env.bytes(part) == data)
            let log = env.requests("bundle.zip")
            #expect(log.map(\.status) == [416, 200], "\(log)")
            #expect(log.map(\.range) == ["bytes=5000-", nil], "\(log)")
        }
    }

    @Test("a 206 that does not continue at the requested byte: bad-range, and the part file emptied")
    func badContentRange() async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: Self.size)
            // A body shorter than its length says: the client has exactly 30,000 bytes when it asks for the rest.
            env.origin.inject(.lengthLess(by: Self.size - 30_000), at: "/bundle.zip")
            env.origin.inject(.badContentRange(shift: 7), at: "/bundle.zip")
            let url = env.url("bundle.zip")
            let part = env.part()
            let detail = "Content-Range \"bytes 30007-\(Self.size - 1)/\(Self.size)\" does not continue at byte 30000"
            await #expect(throws: FetchError.badRange(url: url.absoluteString, detail: detail)) {
                try await HTTPTransport(options: fastOptions()).download(
                    url, to: part, expecting: exactly(data), progress: nil)
            }
            #expect(env.bytes(part).isEmpty)
            #expect(env.requests("bundle.zip").count == 2)
        }
    }

    @Test("a 206 whose total is not the declared size: bad-range naming both")
    func wrongRangeTotal() async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: Self.size)
            // A body shorter than its length says: the client has exactly 30,000 bytes when it asks for the rest.
            env.origin.inject(.lengthLess(by: Self.size - 30_000), at: "/bundle.zip")
            env.origin.inject(.badContentRange(shift: 0, total: 99_999), at: "/bundle.zip")
            let url = env.url("bundle.zip")
            await #expect(
                throws: FetchError.badRange(
                    url: url.absoluteString, detail: "Content-Range total 99999, expected \(Self.size)")
            ) {
                try await HTTPTransport(options: fastOptions()).download(
                    url, to: env.part(), expecting: exactly(data), progress: nil)
            }
        }
    }

    // MARK: hard stop and hash

    @Test("a Content-Length above the declared size (lying or with junk after the file): refused at the head")
    func declaredTooLong() async throws {
        for fault in [FaultOrigin.Fault.lengthMore(by: 100), .extra(64)] {
            try await withOrigin { env in
                let data = try env.file("bundle.zip", count: Self.size)
                env.origin.inject(fault, at: "/bundle.zip")
                let url = env.url("bundle.zip")
                let part = env.part()
                await #expect(throws: FetchError.tooLarge(url: url.absoluteString, limit: Int64(Self.size))) {
                    try await HTTPTransport(options: fastOptions()).download(
                        url, to: part, expecting: exactly(data), progress: nil)
                }
                #expect(env.requests("bundle.zip").count == 1, "\(fault): not retried")
                #expect(env.bytes(part).isEmpty, "\(fault)")
            }
        }
    }

    @Test("a body with no length that runs past the declared size: stopped at the size, never written beyond")
    func unlabelledTooLong() async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: Self.size)
            env.origin.inject(.extra(4096, declared: false), at: "/bundle.zip")
            let url = env.url("bundle.zip")
            let part = env.part()
            await #expect(throws: FetchError.tooLarge(url: url.absoluteString, limit: Int64(Self.size))) {
                try await HTTPTransport(options: fastOptions()).download(
                    url, to: part, expecting: exactly(data), progress: nil)
            }
            #expect(env.bytes(part).count <= Self.size)
            #expect(env.bytes(part) == data.prefix(env.bytes(part).count))
            let log = env.requests("bundle.zip")
            #expect(log.count == 1 && log.first?.declared == nil, "\(log)")
        }
    }

    @Test("an object with no declared size, larger than its limit: too-large at the limit")
    func overLimit() async throws {
        try await withOrigin { env in
            try env.file("object", count: 10_000)
            let url = env.url("object")
            await #expect(throws: FetchError.tooLarge(url: url.absoluteString, limit: 4096)) {
                try await HTTPTransport(options: fastOptions()).download(
                    url, to: env.part(), expecting: FetchExpectation(size: nil, limit: 4096, sha256: nil), progress: nil
                )
            }
            let small = try env.file("small", count: 4096)
            let part = env.part("small.part")
            try await HTTPTransport(options: fastOptions()).download(
                env.url("small"), to: part, expecting: FetchExpectation(size: nil, limit: 4096, sha256: nil),
                progress: nil)
            #expect(env.bytes(part) == small)
        }
    }

    @Test("wrong content: hash-mismatch with both digests, the part file emptied, not retried")
    func flipped() async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: Self.size)
            env.origin.inject(.flip(), at: "/bundle.zip")
            let url = env.url("bundle.zip")
            var wrong = data
            wrong[Self.size / 2] ^= 0xFF
            let part = env.part()
            await #expect(
                throws: FetchError.hashMismatch(url: url.absoluteString, expected: sha(data), got: sha(wrong))
            ) {
                try await HTTPTransport(options: fastOptions()).download(
                    url, to: part, expecting: exactly(data), progress: nil)
            }
            #expect(env.bytes(part).isEmpty)
            #expect(!env.hasValidator(part))
            #expect(env.requests("bundle.zip").count == 1)
        }
    }

    @Test("wrong bytes in the resumed part: the hash covers the whole content, so the mismatch is caught")
    func flippedAfterResume() async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: Self.size)
            // A body shorter than its length says: the client has exactly 30,000 bytes when it asks for the rest.
            env.origin.inject(.lengthLess(by: Self.size - 30_000), at: "/bundle.zip")
            env.origin.inject(.flip(at: 5), at: "/bundle.zip")
            let url = env.url("bundle.zip")
            var wrong = data
            wrong[30_005] ^= 0xFF
            await #expect(
                throws: FetchError.hashMismatch(url: url.absoluteString, expected: sha(data), got: sha(wrong))
            ) {
                try await HTTPTransport(options: fastOptions()).download(
                    url, to: env.part(), expecting: exactly(data), progress: nil)
            }
            #expect(env.requests("bundle.zip").map(\.status) == [200, 206])
        }
    }

    @Test("wrong bytes after resuming a part file an earlier run left: fetched once more whole, then verified")
    func flippedAfterEarlierRun() async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: Self.size)
            let part = env.part()
            try env.seed(part, data.prefix(30_000), etag: try env.origin.etag(of: "bundle.zip"))
            env.origin.inject(.flip(at: 5), at: "/bundle.zip")
            try await HTTPTransport(options: fastOptions()).download(
                env.url("bundle.zip"), to: part, expecting: exactly(data), progress: nil)
            #expect(env.bytes(part) == data)
            let log = env.requests("bundle.zip")
            #expect(log.map(\.range) == ["bytes=30000-", nil] && log.map(\.status) == [206, 200], "\(log)")

            // Wrong again on the fresh transfer: now it is the server's, and the download fails.
            try env.seed(part, data.prefix(30_000), etag: try env.origin.etag(of: "bundle.zip"))
            env.origin.inject(.flip(at: 5), at: "/bundle.zip", count: nil)
            let error = await failure {
                try await HTTPTransport(options: fastOptions()).download(
                    env.url("bundle.zip"), to: part, expecting: exactly(data), progress: nil)
            }
            guard case .hashMismatch(_, let expected, _) = error else {
                Issue.record("expected hash-mismatch, got \(String(describing: error))")
                return
            }
            #expect(expected == sha(data))
            #expect(env.requests("bundle.zip").count == 4)
        }
    }

    // MARK: retries

    @Test("a 5xx or 429 once: retried, and the download completes", arguments: [500, 502, 503, 429])
    func statusOnce(code: Int) async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: Self.size)
            env.origin.inject(.status(code), at: "/bundle.zip")
            let part = env.part()
            try await HTTPTransport(options: fastOptions()).download(
                env.url("bundle.zip"), to: part, expecting: exactly(data), progress: nil)
            #expect(env.bytes(part) == data)
            #expect(env.requests("bundle.zip").map(\.status) == [code, 200])
        }
    }

    @Test("503 on every attempt: http-status 503 after exactly the configured attempts")
    func statusAlways() async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: Self.size)
            env.origin.inject(.status(503), at: "/bundle.zip", count: nil)
            let url = env.url("bundle.zip")
            await #expect(throws: FetchError.status(url: url.absoluteString, code: 503)) {
                try await HTTPTransport(options: fastOptions(attempts: 4)).download(
                    url, to: env.part(), expecting: exactly(data), progress: nil)
            }
            #expect(env.requests("bundle.zip").count == 4)
        }
    }

    @Test("a 404 (or another 4xx) is not retried", arguments: [404, 403])
    func clientErrorNotRetried(code: Int) async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: Self.size)
            env.origin.inject(.status(code), at: "/bundle.zip", count: nil)
            let url = env.url("bundle.zip")
            await #expect(throws: FetchError.status(url: url.absoluteString, code: code)) {
                try await HTTPTransport(options: fastOptions()).download(
                    url, to: env.part(), expecting: exactly(data), progress: nil)
            }
            #expect(env.requests("bundle.zip").count == 1)
        }
    }

    @Test("429 with Retry-After: the retry waits what the server asked, capped at maxDelay")
    func retryAfterHonoured() async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: Self.size)
            env.origin.inject(.status(429, retryAfter: "1"), at: "/bundle.zip")
            var options = fastOptions()
            options.backoff = 0.001
            options.maxDelay = 0.3
            let part = env.part()
            try await HTTPTransport(options: options).download(
                env.url("bundle.zip"), to: part, expecting: exactly(data), progress: nil)
            #expect(env.bytes(part) == data)
            let log = env.requests("bundle.zip")
            try #require(log.count == 2, "\(log)")
            // A lower bound only: the backoff alone (1-2 ms) would retry far sooner.
            #expect(log[1].arrived - log[0].arrived >= .milliseconds(250), "\(log[1].arrived - log[0].arrived)")
        }
    }

    // MARK: slow servers

    @Test("a stall mid-body once: the stall timeout ends the attempt, and the next resumes at the stall")
    func stallOnce() async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: Self.size)
            env.origin.inject(.stall(after: 8_000, seconds: 30), at: "/bundle.zip")
            let part = env.part()
            try await HTTPTransport(options: fastOptions(stall: 1.5)).download(
                env.url("bundle.zip"), to: part, expecting: exactly(data), progress: nil)
            #expect(env.bytes(part) == data)
            // One stall, then resumes: normally one, but on a loaded machine the resumed attempt
            // can time out too (AsyncHTTPClient's read timeout also runs while the transport
            // holds back reading: the known "stall while Larder is slow" issue), and resume again;
            // and bytes the client had read but not yet handed over are lost with the attempt, so
            // an attempt that kept nothing is followed by a plain GET (a 200, no Range).
            let log = env.requests("bundle.zip")
            try #require(log.count >= 2 && log[0].status == 200, "\(log)")
            #expect(
                log.dropFirst().allSatisfy { $0.status == 206 || ($0.status == 200 && $0.range == nil) }, "\(log)")
            let starts = log.dropFirst().compactMap { r in
                r.range.flatMap { Int($0.dropFirst("bytes=".count).dropLast()) }
            }
            // The download resumed at the stall (or before it), never past it. Over URLSession
            // (FoundationNetworking) on a loaded machine, the bytes before the stall can still be
            // inside it when its timeout ends the attempt (seen in 1 of 4 runs of this suite): then
            // no byte was kept and the next attempt is a plain GET, which the checks above allow.
            if testedStack.name == HTTPStack.urlSession.name && starts.isEmpty {
                #expect(log[1].status == 200 && log[1].range == nil, "\(log)")
            } else {
                #expect(starts.first.map { (1...8_000).contains($0) } == true, "\(log)")
            }
            #expect(
                zip(starts, starts.dropFirst()).allSatisfy { $0 <= $1 },
                "each resume starts where the last ended: \(log)")
        }
    }

    @Test("a server that always stalls: a connection error naming the stall, after the attempts")
    func stallAlways() async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: Self.size)
            env.origin.inject(.stall(seconds: 30), at: "/bundle.zip", count: nil)
            let url = env.url("bundle.zip")
            await #expect(
                throws: FetchError.connection(
                    url: url.absoluteString, detail: "connection stalled: no byte within the stall timeout")
            ) {
                try await HTTPTransport(options: fastOptions(attempts: 2, stall: 0.5)).download(
                    url, to: env.part(), expecting: exactly(data), progress: nil)
            }
            let count = await env.requests("bundle.zip", awaiting: 2).count
            if testedStack.name == HTTPStack.urlSession.name {
                // URLSession's stall timeout (`timeoutIntervalForRequest`) also runs while it
                // connects, so on a loaded machine the second attempt can end before the origin
                // has logged its request (seen in 1 of 13 runs of this suite).
                #expect((1...2).contains(count), "\(count) requests")
            } else {
                #expect(count == 2)
            }
        }
    }

    @Test("a trickle below the rate floor: too-slow, naming the floor")
    func belowRateFloor() async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: Self.size)
            env.origin.inject(.drip(bytes: 64, every: .milliseconds(20)), at: "/bundle.zip", count: nil)
            var options = fastOptions(attempts: 1)
            options.minimumRate = Double(1 << 20)
            options.floorWindow = 0.5
            let url = env.url("bundle.zip")
            let error = await failure {
                try await HTTPTransport(options: options).download(
                    url, to: env.part(), expecting: exactly(data), progress: nil)
            }
            guard case .tooSlow(let u, let detail) = error else {
                Issue.record("expected too-slow, got \(String(describing: error))")
                return
            }
            #expect(u == url.absoluteString && detail.hasSuffix("below the 1048576 bytes/s floor"), "\(detail)")
        }
    }

    @Test("a transfer still running at the deadline: too-slow, naming the deadline, stopped there")
    func deadline() async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: Self.size)
            // 64 KiB in about 2.5 s: well above the rate floor, past the 1 s deadline.
            env.origin.inject(.drip(bytes: 512, every: .milliseconds(20)), at: "/bundle.zip", count: nil)
            var options = fastOptions(attempts: 5)
            options.deadline = 1
            let url = env.url("bundle.zip")
            let part = env.part()
            await #expect(
                throws: FetchError.tooSlow(url: url.absoluteString, detail: "not complete after the 1 s deadline")
            ) {
                try await HTTPTransport(options: options).download(
                    url, to: part, expecting: exactly(data), progress: nil)
            }
            // Stopped while the body streamed (or, on a very busy machine, before its head came).
            let kept = env.bytes(part).count
            #expect(kept < data.count, "\(kept) of \(data.count) bytes in the part file")
        }
    }

    @Test("a server that keeps failing past the deadline: the retries stop there, too-slow")
    func deadlineBetweenAttempts() async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: Self.size)
            env.origin.inject(.status(503, retryAfter: "0.2"), at: "/bundle.zip", count: nil)
            var options = fastOptions(attempts: 1000)
            options.deadline = 1
            let url = env.url("bundle.zip")
            await #expect(
                throws: FetchError.tooSlow(url: url.absoluteString, detail: "not complete after the 1 s deadline")
            ) {
                try await HTTPTransport(options: options).download(
                    url, to: env.part(), expecting: exactly(data), progress: nil)
            }
            #expect(env.requests("bundle.zip").count < 1000)
        }
    }

    // MARK: redirects

    @Test("a redirect to the same host is followed, with the request's Range and If-Range")
    func redirectSameHost() async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: Self.size)
            let part = env.part()
            let tag = try env.origin.etag(of: "bundle.zip")
            try env.seed(part, data.prefix(1_000), etag: tag)
            env.origin.inject(.redirect, at: "/bundle.zip")
            try await HTTPTransport(options: fastOptions()).download(
                env.url("bundle.zip"), to: part, expecting: exactly(data), progress: nil)
            #expect(env.bytes(part) == data)
            let log = env.requests("bundle.zip")
            #expect(log.map(\.status) == [302, 206], "\(log)")
            #expect(log.last?.path == "/bundle.zip?redirected=1", "\(log)")
            #expect(log.last?.range == "bytes=1000-" && log.last?.ifRange == tag, "\(log)")
        }
    }

    @Test("a redirect to another host is refused, and nothing reaches that host")
    func redirectOtherHost() async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: Self.size)
            env.origin.inject(.redirectToOtherHost, at: "/bundle.zip", count: nil)
            let url = env.url("bundle.zip")
            await #expect(
                throws: FetchError.redirect(
                    url: url.absoluteString, detail: "redirect to another host (127.0.0.2) refused")
            ) {
                try await HTTPTransport(options: fastOptions()).download(
                    url, to: env.part(), expecting: exactly(data), progress: nil)
            }
            #expect(env.origin.requests.allSatisfy { $0.host == "127.0.0.1" }, "\(env.origin.requests)")
            #expect(env.requests("bundle.zip").count == 1, "not retried")
        }
    }

    @Test("a redirect loop ends after maxRedirects, not retried")
    func redirectLoop() async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: Self.size)
            env.origin.inject(.redirectLoop, at: "/bundle.zip", count: nil)
            var options = fastOptions()
            options.maxRedirects = 3
            let url = env.url("bundle.zip")
            await #expect(
                throws: FetchError.redirect(url: url.absoluteString, detail: "more than 3 redirects (a loop?)")
            ) {
                try await HTTPTransport(options: options).download(
                    url, to: env.part(), expecting: exactly(data), progress: nil)
            }
            #expect(env.requests("bundle.zip").count == 4)
        }
    }

    // MARK: following the file

    @Test("a reader following the part file gets every byte as it lands, then the end")
    func growingPart() async throws {
        try await withOrigin { env in
            let data = try env.file("bundle.zip", count: Self.size)
            env.origin.inject(.drip(bytes: 16 << 10, every: .milliseconds(5)), at: "/bundle.zip")
            let part = env.part()
            let watch = GrowingPart(part)
            // The reader blocks while it waits for bytes: a thread of its own, not one of the pool's.
            async let reading = withCheckedContinuation { (done: CheckedContinuation<Result<Data, any Error>, Never>) in
                BlockingWork.start("test.growing-part-reader") {
                    done.resume(
                        returning: Result {
                            var got = Data()
                            var buffer = [UInt8](repeating: 0, count: 10_000)
                            while true {
                                let n = try buffer.withUnsafeMutableBytes { try watch.read(into: $0) }
                                if n == 0 { return got }
                                got.append(contentsOf: buffer[0..<n])
                            }
                        })
                }
            }
            try await HTTPTransport(options: fastOptions()).download(
                env.url("bundle.zip"), to: part, expecting: exactly(data), progress: nil, watch: watch)
            #expect(try watch.complete() == part)
            #expect(try await reading.get() == data)
            #expect(env.requests("bundle.zip").first?.fault == .drip(bytes: 16 << 10, every: .milliseconds(5)))
        }
    }

    // MARK: what is refused before any request

    @Test("plain http to a host that is not loopback is refused without a request")
    func insecure() async throws {
        let url = try #require(URL(string: "http://example.invalid/bundle.zip"))
        try await withTemporaryDirectory("fetch") { dir in
            await #expect(throws: FetchError.insecure(url: url.absoluteString)) {
                try await HTTPTransport(options: fastOptions()).download(
                    url, to: FilePath(dir.appending("x.part").path),
                    expecting: FetchExpectation(size: 1, limit: 1, sha256: nil), progress: nil)
            }
            await #expect(throws: FetchError.insecure(url: url.absoluteString)) {
                _ = try await HTTPTransport(options: fastOptions()).document(url, etag: nil, maxBytes: 100)
            }
        }
    }

    @Test("the transport follows the URL's scheme; any other scheme is refused by name")
    func schemes() throws {
        let file = try #require(URL(string: "file:///tmp/repo/"))
        let http = try #require(URL(string: "https://cdn.example.com/repo/"))
        let ftp = try #require(URL(string: "ftp://example.com/repo/"))
        #expect(try transport(for: file) is FileTransport)
        #expect(try transport(for: http) is HTTPTransport)
        #expect(throws: FetchError.unsupportedScheme("ftp")) { _ = try transport(for: ftp) }
    }
}
