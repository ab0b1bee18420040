import Foundation
import LarderCore
import LarderGateway
import LarderTestSupport
import NIOHTTP1
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The gateway's event-loop responder (`PackageHits`): the requests a package answers are
/// answered on the connection's event loop, bodies over 64 KiB by `sendfile`; everything else is
/// handed on to the task-based responder. Both must answer alike, in order.
@Suite("The gateway's event-loop responder", .hangGuard)
struct EventLoopResponderTests {
    /// A 1 MiB file no byte pattern repeats in for long, larger than the buffered bodies.
    static let big = Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: ($0 &* 2_654_435_761) >> 13) })

    /// Publishes and activates 2.0.0 of the sample app with `media/big.bin` (1 MiB) in it.
    static func withBigFile(_ env: ResolveEnv) throws {
        try env.repository.publish(
            "2.0.0",
            edit: { dir in
                try Data("{\"version\": \"2.0.0\", \"items\": []}\n".utf8)
                    .write(to: dir.appendingPathComponent("data/catalog.json"))
                try FileManager.default.createDirectory(
                    at: dir.appendingPathComponent("media"), withIntermediateDirectories: true)
                try big.write(to: dir.appendingPathComponent("media/big.bin"))
            },
            configure: { r in
                r.routes = ["https://app.example.com/"]
                r.policy = Policy(mode: .localThenNetwork, bypass: ["/api/"])
            })
        try env.install("2.0.0")
    }

    /// Requests covering each kind of answer: package hits (small and large bodies, HEAD, a
    /// range of each size, 304), and what is handed on (405, 416, 404 of a local-only route, a
    /// bypassed path answered 502 offline, a reserved path, the larder: form of a missing package).
    static let requests: [(HTTPMethod, String, [(String, String)])] = [
        (.GET, "/", []),
        (.GET, "/js/app.js", []),
        (.GET, "/media/big.bin", []),
        (.HEAD, "/media/big.bin", []),
        (.GET, "/media/big.bin", [("Range", "bytes=70000-900000")]),
        (.GET, "/css/app.css", [("Range", "bytes=3-40")]),
        (.GET, "/media/big.bin", [("Range", "bytes=5000000-")]),
        (.GET, "/img/logo.png", [("If-None-Match", "\"0000\"")]),
        (.POST, "/js/app.js", []),
        (.GET, "/api/items", []),
        (.GET, "/.larder/health.js", []),
        (.GET, "/no-such-file.js", []),
    ]

    /// Status, header fields (names lowercased, sorted; without `Date`) and body of each answer.
    @available(macOS 14, iOS 17, tvOS 17, *)
    static func answers(_ world: World) async throws -> [String] {
        var out: [String] = []
        let etagOfLogo = etag(try world.installed("img/logo.png", version: "2.0.0"))
        for (method, target, headers) in requests + [(.GET, "/img/logo.png", [("If-None-Match", etagOfLogo)])] {
            let r = try await world.gateway.send(method, target, headers: headers)
            let fields = r.headers.filter { $0.name.lowercased() != "date" }
                .map { "\($0.name.lowercased()): \($0.value)" }.sorted()
            out.append("\(method) \(target) \(headers) → \(r.status) \(fields) \(SHA256Digest.of(r.body).hex)")
        }
        return out
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test("answers on the event loop are those of the task-based responder: status, header fields and bytes")
    func sameAnswers() async throws {
        var byTask: [String] = []
        try await withGateway(Self.withBigFile, answersOnEventLoop: false) { world in
            byTask = try await Self.answers(world)
            #expect(try await world.gateway.send(.GET, "/media/big.bin").body == Self.big)
        }
        try await withGateway(Self.withBigFile) { world in
            let onLoop = try await Self.answers(world)
            #expect(onLoop.count == byTask.count)
            for (a, b) in zip(onLoop, byTask) { #expect(a == b) }
            let whole = try await world.gateway.send(.GET, "/media/big.bin")
            #expect(whole.status == 200)
            #expect(whole.body == Self.big)
            let part = try await world.gateway.send(.GET, "/media/big.bin", headers: [("Range", "bytes=70000-900000")])
            #expect(part.status == 206)
            #expect(part.body == Self.big[70000...900000])
            #expect(part.header("Date")?.hasSuffix(" GMT") == true)
            #expect(
                world.gateway.log.contains {
                    $0.hasPrefix("GET https://\(appHost)/media/big.bin 206 sample-app@2.0.0 ")
                })
        }
    }

    @available(macOS 14, iOS 17, tvOS 17, *)
    @Test(
        "pipelined on one connection, a request handed on and the package hits after it are answered in order",
        arguments: [
            "POST /js/app.js HTTP/1.1\r\nHost: app.example.com\r\nContent-Length: 5\r\n\r\nhello",
            "GET /api/items HTTP/1.1\r\nHost: app.example.com\r\n\r\n",
        ])
    func pipelined(first: String) async throws {
        try await withGateway(Self.withBigFile) { world in
            let js = try world.installed("js/app.js", version: "2.0.0")
            let css = try world.installed("css/app.css", version: "2.0.0")
            let wire =
                "GET /css/app.css HTTP/1.1\r\nHost: app.example.com\r\n\r\n" + first
                + "GET /js/app.js HTTP/1.1\r\nHost: app.example.com\r\n\r\n"
                + "GET /media/big.bin HTTP/1.1\r\nHost: app.example.com\r\n\r\n"
                + "GET /css/app.css HTTP/1.1\r\nHost: app.example.com\r\nConnection: close\r\n\r\n"
            let replies = try await RawConnection.onThread(port: world.gateway.port, Data(wire.utf8), count: 5)
            #expect(replies.map(\.status) == [200, first.hasPrefix("POST") ? 405 : 502, 200, 200, 200])
            #expect(replies[0].body == css)
            #expect(replies[2].body == js)
            #expect(replies[3].body == Self.big)
            #expect(replies[4].body == css)
        }
    }
}

/// A plain TCP connection to the gateway that writes bytes as given (pipelined requests) and
/// reads the answers: each a status line, header fields and a body of its Content-Length.
enum RawConnection {
    struct Answer {
        let status: Int
        let body: Data
    }

    /// `exchange` on a thread of its own: its blocking reads must not hold one of the executor
    /// threads the gateway's tasks (and other suites' tests) run on.
    static func onThread(port: Int, _ bytes: Data, count: Int) async throws -> [Answer] {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try exchange(port: port, bytes, count: count) }) }.start()
        }
    }

    static func exchange(port: Int, _ bytes: Data, count: Int) throws -> [Answer] {
        #if canImport(Glibc)
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
            let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { throw TestSupportError("socket: errno \(errno)") }
        defer { _ = close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else { throw TestSupportError("connect: errno \(errno)") }
        var timeout = timeval(tv_sec: 30, tv_usec: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        try bytes.withUnsafeBytes { raw in
            var sent = 0
            while sent < raw.count {
                let n = send(fd, raw.baseAddress! + sent, raw.count - sent, 0)
                guard n > 0 else { throw TestSupportError("send: errno \(errno)") }
                sent += n
            }
        }
        var input = Data()
        var answers: [Answer] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while answers.count < count {
            if let (answer, used) = parse(input) {
                answers.append(answer)
                input.removeFirst(used)
                continue
            }
            let n = recv(fd, &chunk, chunk.count, 0)
            guard n > 0 else {
                throw TestSupportError("the connection ended after \(answers.count) answers of \(count)")
            }
            input.append(contentsOf: chunk[0..<n])
        }
        return answers
    }

    /// The first whole answer in `data` and how many bytes it took, or nil if incomplete.
    static func parse(_ data: Data) -> (Answer, Int)? {
        guard let end = data.range(of: Data("\r\n\r\n".utf8)) else { return nil }
        let head = String(decoding: data[data.startIndex..<end.lowerBound], as: UTF8.self)
        let lines = head.components(separatedBy: "\r\n")
        let status = Int(lines[0].split(separator: " ")[1]) ?? 0
        let length =
            lines.dropFirst().compactMap { line -> Int? in
                let parts = line.split(separator: ":", maxSplits: 1)
                guard parts.count == 2, parts[0].lowercased() == "content-length" else { return nil }
                return Int(parts[1].trimmingCharacters(in: .whitespaces))
            }.first ?? 0
        let bodyStart = end.upperBound
        guard data.endIndex - bodyStart >= length else { return nil }
        let body = Data(data[bodyStart..<(bodyStart + length)])
        return (Answer(status: status, body: body), bodyStart + length - data.startIndex)
    }
}
