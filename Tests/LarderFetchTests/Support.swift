import Foundation
import LarderCore
import LarderFetch
import LarderFetchNIO
import LarderFetchURLSession
import LarderFileSystem
import LarderTestSupport
import Synchronization
import SystemPackage
import Testing

/// One test's world: a directory of files served by its own fault-injecting origin on loopback,
/// and a `downloads/` directory for part files.
struct OriginEnv: Sendable {
    let dir: TemporaryDirectory
    let origin: FaultOrigin

    /// The directory the origin serves.
    var served: URL { dir.appending("served") }

    /// Writes `count` bytes of content (different for each `seed`) as `name` in the served
    /// directory; returns them.
    @discardableResult
    func file(_ name: String, count: Int, seed: UInt32 = 1) throws -> Data {
        let data = content(count, seed: seed)
        try data.write(to: served.appendingPathComponent(name))
        return data
    }

    /// The URL of a served file.
    func url(_ name: String) -> URL { origin.url("/" + name) }

    /// A part file path under `downloads/`.
    func part(_ name: String = "file.part") -> FilePath { FilePath(dir.appending("downloads").path).appending(name) }

    /// The bytes of a part file (empty when it does not exist).
    func bytes(_ part: FilePath) -> Data { (try? Data(contentsOf: URL(fileURLWithPath: part.string))) ?? Data() }

    /// Writes a part file (and, with `etag`, the validator an earlier attempt kept beside it).
    func seed(_ part: FilePath, _ data: Data, etag: String? = nil) throws {
        try data.write(to: URL(fileURLWithPath: part.string))
        if let etag { try Data(etag.utf8).write(to: URL(fileURLWithPath: part.string + ".etag")) }
    }

    /// Whether the validator file beside a part file exists.
    func hasValidator(_ part: FilePath) -> Bool { FileManager.default.fileExists(atPath: part.string + ".etag") }

    /// The requests the origin saw for `name` (any query), in order.
    func requests(_ name: String) -> [FaultOrigin.Request] {
        origin.requests.filter { $0.path == "/" + name || $0.path.hasPrefix("/" + name + "?") }
    }

    /// The requests for `name` once there are `count` of them, or after `seconds`: the origin
    /// logs a request on its own tasks, which on a loaded machine may run after the client has
    /// given up on it.
    func requests(_ name: String, awaiting count: Int, seconds: Double = 10) async -> [FaultOrigin.Request] {
        let deadline = Date().addingTimeInterval(seconds)
        while requests(name).count < count && Date() < deadline { try? await Task.sleep(for: .milliseconds(20)) }
        return requests(name)
    }
}

/// Runs `body` with a fresh directory and an origin serving it (optionally over TLS, and with the
/// second loopback address), then stops the origin and removes the directory.
func withOrigin(
    tls: Bool = false, otherHost: String? = "127.0.0.2", _ body: (OriginEnv) async throws -> Void
) async throws {
    let dir = try TemporaryDirectory("fetch")
    defer { dir.remove() }
    try FileManager.default.createDirectory(at: dir.appending("served"), withIntermediateDirectories: true)
    try FileManager.default.createDirectory(at: dir.appending("downloads"), withIntermediateDirectories: true)
    let files = tls ? try makeLoopbackCertificate(in: dir.url) : nil
    let origin = try await FaultOrigin.start(serving: dir.appending("served"), otherHost: otherHost, tls: files)
    do {
        // The test's client on the tests' own threads too: its stall timeout runs while it reads.
        try await onOwnThreads { try await body(OriginEnv(dir: dir, origin: origin)) }
    } catch {
        await origin.stop()
        throw error
    }
    await origin.stop()
}

/// Deterministic content of `count` bytes (a xorshift stream seeded by `seed`).
func content(_ count: Int, seed: UInt32 = 1) -> Data {
    var x = seed &* 2_654_435_761 | 1
    var out = [UInt8](repeating: 0, count: count)
    for i in 0..<count {
        x ^= x << 13
        x ^= x >> 17
        x ^= x << 5
        out[i] = UInt8(truncatingIfNeeded: x)
    }
    return Data(out)
}

/// What a download must be (Swift Testing has an `Expectation` too).
typealias FetchExpectation = LarderFetch.Expectation

/// The SHA-256 of `data`.
func sha(_ data: Data) -> SHA256Digest { SHA256Digest.of(data) }

/// What a download of `data` must be: its exact size and hash.
func exactly(_ data: Data, limit: Int64 = 64 << 20) -> FetchExpectation {
    FetchExpectation(size: Int64(data.count), limit: limit, sha256: sha(data))
}

/// Options that make a test fast: few attempts, short backoff, no rate floor to speak of. The
/// stall timeout stays long but for the tests of stalls: on a busy machine (the suites run in
/// parallel) a healthy answer can take a while, and a short one would turn it into a retry.
func fastOptions(attempts: Int = 3, stall: Double = 10) -> HTTPOptions {
    var o = HTTPOptions()
    o.attempts = attempts
    o.backoff = 0.01
    o.maxDelay = 0.25
    o.deadline = 30
    o.stallTimeout = stall
    o.minimumRate = 1
    o.floorWindow = 30
    return o
}

/// The error `body` throws (a `FetchError`, else the test fails), or nil when it returns.
func failure(_ body: () async throws -> Void) async -> FetchError? {
    do {
        try await body()
        return nil
    } catch let error as FetchError {
        return error
    } catch {
        Issue.record("not a FetchError: \(error)")
        return nil
    }
}

/// Adds up progress reports from any thread.
final class ProgressTotal: Sendable {
    private let total = Mutex<Int64>(0)
    /// The handler to pass to a transport.
    var handler: ProgressHandler { { [self] n in self.total.withLock { $0 += n } } }
    /// The bytes reported so far.
    var value: Int64 { total.withLock { $0 } }
}

/// The HTTP engine these suites test (`HTTPStack.tested`: `LARDER_TEST_ENGINE` chooses).
let testedStack = HTTPStack.tested

/// Whether the engine under test reads `HTTPOptions.caFiles`: AsyncHTTPClient does; URLSession
/// trusts the system's roots only (documented at `caFiles`), so a private CA is not trusted.
let testedEngineReadsCAFiles = testedStack.name != HTTPStack.urlSession.name

extension HTTPTransport {
    /// A transport over the engine under test (`testedStack`).
    convenience init(options: HTTPOptions) throws(FetchError) { try self.init(options: options, stack: testedStack) }
}

/// The transport for a repository URL, with the engine under test for http(s).
func transport(for url: URL) throws(FetchError) -> any Transport { try transport(for: url, stack: testedStack) }
