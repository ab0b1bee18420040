import Foundation
import HTTPTypes
import LarderCore
import LarderFileSystem
import LarderStore
import Logging
import Synchronization
import SystemPackage

/// A request as every front-end (the HTTP gateway, the WebKit scheme handler) hands it over.
public struct LoadRequest: Sendable {
    /// The HTTP method; the loader answers `GET` and `HEAD`, anything else with 405.
    public var method: HTTPRequest.Method
    /// The URL as the page asked for it: `larder://<id>/<path>`, another custom scheme, or http(s).
    public var url: String
    /// The `Range` header, if any.
    public var range: String?
    /// The `If-None-Match` header, if any.
    public var ifNoneMatch: String?
    /// The `Origin` header, if any: a file is answered with `Access-Control-Allow-Origin` only
    /// when its package's `corsOrigins` lists this origin (manifests §17).
    public var origin: String?

    /// A request with the headers it carried (none by default).
    public init(
        method: HTTPRequest.Method = .get, url: String, range: String? = nil, ifNoneMatch: String? = nil,
        origin: String? = nil
    ) {
        self.method = method
        self.url = url
        self.range = range
        self.ifNoneMatch = ifNoneMatch
        self.origin = origin
    }
}

/// Where a response came from, for logs and tests.
public enum LoadOutcome: Sendable, Equatable, CustomStringConvertible {
    /// The active (or a session's pinned) version served it.
    case local(package: PackageID, version: SemanticVersion)
    /// The file was missing or unreadable in `failed`; the fallback version served it.
    case fallback(package: PackageID, version: SemanticVersion, failed: SemanticVersion)
    /// Inside a package's routes, no such file, and the policy forbids the network (404).
    case notFound(reason: String)

    /// `<id>@<version>`, the failed version for a fallback, or `not found: <reason>` (the gateway's log
    /// and `X-Larder-Outcome` header).
    public var description: String {
        switch self {
        case .local(let p, let v): "\(p)@\(v)"
        case .fallback(let p, let v, let failed): "\(p)@\(v) fallback (missing in \(failed))"
        case .notFound(let reason): "not found: \(reason)"
        }
    }
}

/// A response of the loader: head, then a body read in chunks.
public final class LoadResponse: Sendable {
    /// The HTTP status: 200, 206, 304, 404, 405 or 416.
    public let status: Int
    /// Header name and value pairs, in the order to send them.
    public let headers: [(String, String)]
    /// Which version served the response (or the fallback that did), or why nothing was found.
    public let outcome: LoadOutcome
    /// What is left of the body (read by one front-end task at a time, so the lock is uncontended).
    private let body: Mutex<Body>

    enum Body {
        case none
        case bytes(Data)
        /// An open file, its path, and the range still to send.
        case file(FileDescriptor, FilePath, Range<Int64>)
    }

    init(status: Int, headers: [(String, String)], outcome: LoadOutcome, body: Body) {
        self.status = status
        self.headers = headers
        self.outcome = outcome
        self.body = Mutex(body)
    }

    /// The value of a header (case-insensitive name).
    public func header(_ name: String) -> String? {
        headers.first { Self.sameFieldName($0.0, name) }?.1
    }

    /// Whether two field names are equal ignoring ASCII case (as HTTP compares them), with no copy.
    static func sameFieldName(_ a: String, _ b: String) -> Bool {
        a.utf8.count == b.utf8.count
            && zip(a.utf8, b.utf8).allSatisfy { x, y in
                x == y || (x | 0x20 == y | 0x20 && (x | 0x20) >= UInt8(ascii: "a") && (x | 0x20) <= UInt8(ascii: "z"))
            }
    }

    /// The next chunk of the body (at most `maxBytes`), or `nil` at its end. Never holds more
    /// than one chunk: the file is read where it lies. A file that ends early (changed or
    /// damaged under the server) throws, so a front-end aborts the response instead of sending a
    /// short one.
    public func nextChunk(maxBytes: Int = 64 << 10) throws -> Data? {
        enum Next {
            case end
            case bytes(Data)
            case file(left: Int64)
        }
        let next: Next = body.withLock { body in
            switch body {
            case .none:
                return .end
            case .bytes(let d):
                guard !d.isEmpty else {
                    body = .none
                    return .end
                }
                let n = min(maxBytes, d.count)
                body = n == d.count ? .none : .bytes(d.dropFirst(n))
                return .bytes(Data(d.prefix(n)))
            case .file(_, _, let range):
                return .file(left: Int64(max(range.count, 0)))
            }
        }
        switch next {
        case .end:
            return nil
        case .bytes(let d):
            return d
        case .file(let left):
            var chunk = Data(count: Int(min(Int64(maxBytes), left)))
            let n = try chunk.withUnsafeMutableBytes { try nextChunk(into: $0) }
            guard n > 0 else { return nil }
            if n < chunk.count { chunk.removeSubrange(n...) }
            return chunk
        }
    }

    /// Reads the next bytes of the body into `buffer` (at most its size): how many, 0 at the end.
    /// Throws as `nextChunk(maxBytes:)` does; a front-end that writes into its own buffers (the
    /// gateway's event-loop responder) reads with it, without a `Data` in between.
    public func nextChunk(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        try body.withLock { body throws(LoadError) -> Int in
            switch body {
            case .none:
                return 0
            case .bytes(let d):
                let n = min(buffer.count, d.count)
                d.prefix(n).copyBytes(to: buffer)
                body = n == d.count ? .none : .bytes(d.dropFirst(n))
                return n
            case .file(let fd, let path, let range):
                guard !range.isEmpty else {
                    Self.close(&body)
                    return 0
                }
                let want = Int(min(Int64(buffer.count), Int64(range.count)))
                if want == 0 { return 0 }
                // Through the funnel: an interrupted read is retried, an I/O error is one.
                let read = Result { () throws(FileSystemError) in
                    try SystemCalls.pread(
                        fd, into: UnsafeMutableRawBufferPointer(rebasing: buffer[..<want]), at: range.lowerBound,
                        path: path)
                }
                let n: Int
                switch read {
                case .success(let count) where count > 0:
                    n = count
                case .success:
                    Self.close(&body)
                    throw LoadError.shortFile(expected: range.upperBound, at: range.lowerBound)
                case .failure(let error):
                    Self.close(&body)
                    throw LoadError.unreadable(error)
                }
                body = .file(fd, path, (range.lowerBound + Int64(n))..<range.upperBound)
                return n
            }
        }
    }

    /// The rest of the body as an open file and the byte range of it still to send, handed over:
    /// the caller owns the descriptor from then on (and closes it), and this response has no body
    /// left. Nil, with nothing changed, when the body is not a file. A front-end that can send a
    /// file's bytes without reading them (`sendfile`) takes it.
    public func takeFile() -> (descriptor: CInt, range: Range<Int64>)? {
        body.withLock { body in
            guard case .file(let fd, _, let range) = body else { return nil }
            body = .none
            return (fd.rawValue, range)
        }
    }

    /// Closes the file (idempotent; also done at the end of the body and on deinit). A front-end
    /// calls it when its request is cancelled.
    public func close() { body.withLock { Self.close(&$0) } }

    private static func close(_ body: inout Body) {
        if case .file(let fd, let path, _) = body { try? SystemCalls.close(fd, path: path) }
        body = .none
    }

    deinit { close() }
}

/// A body that could not be read to its end.
public enum LoadError: Error, CustomStringConvertible {
    /// The file ended before the range did (it changed or was damaged under the server).
    case shortFile(expected: Int64, at: Int64)
    /// Reading the file failed.
    case unreadable(FileSystemError)

    /// Where the file ended and the offset the response needed to reach, for an error message.
    public var description: String {
        switch self {
        case .shortFile(let expected, let at): "the file ended at byte \(at) of \(expected)"
        case .unreadable(let error): "the file could not be read: \(error)"
        }
    }
}

/// What the loader answers.
public enum LoadResult: Sendable {
    /// A response to send (a local file, 304, 416, 405, or 404 for local-only routes).
    case response(LoadResponse)
    /// Not ours: let the request go to the network (the reason says why). A custom-scheme
    /// front-end, which has no network, fails the request instead.
    case passthrough(reason: String)
}

/// Where the loader reports a missing or unreadable file of an active version.
package protocol FailureReporting: Sendable {
    /// Records that `version` of `package` has a listed file missing or unreadable; must not block.
    func report(package: PackageID, version: SemanticVersion, reason: String)
}

/// The resource loader every front-end shares: (method, URL, Range, If-None-Match) → a response
/// head and a body streamed in chunks. When the file list names a file that is missing or
/// unreadable in the active version, the failure is reported (the store applies its automatic
/// rollback policy) and the fallback version serves the path if it has it; with no local copy
/// the answer is passthrough. It never answers an empty 200.
public struct ResourceLoader: Sendable {
    /// Resolves URLs to files of the sandbox (with its current snapshot, or a session's pins).
    public let resolver: Resolver
    /// Hears of listed files missing or unreadable in an active version; `nil` tells nobody.
    package let reporter: (any FailureReporting)?
    /// The `Cache-Control` value of every response served from a file (`no-cache` by default).
    public let cacheControl: String
    /// Records when each package was last served (for the disk budget's least-recently-used
    /// order), at most one file touch per package a minute.
    package let usage: UsageRecorder
    let logger: Logger

    /// A loader over `resolver`; `reporter` hears of broken files, `logger` gets a warning for each.
    package init(
        resolver: Resolver, reporter: (any FailureReporting)? = nil, cacheControl: String = "no-cache",
        logger: Logger = Logger(label: "larder.loader")
    ) {
        self.resolver = resolver
        self.reporter = reporter
        self.cacheControl = cacheControl
        self.usage = UsageRecorder(root: resolver.root)
        self.logger = logger
    }

    /// Answers `request`, with a session's pinned versions when given.
    public func load(_ request: LoadRequest, session: ResolverSession? = nil) -> LoadResult {
        let (snapshot, table) =
            session?.table()
            ?? {
                let s = resolver.snapshot()
                return (s, s.table)
            }()
        switch table.resolve(request.url) {
        case .passthrough(let reason):
            return .passthrough(reason: reason)
        case .notFound(let reason):
            return .response(Self.notFound(reason))
        case .local(let file):
            usage.note(file.package)
            return serve(file, request, snapshot: snapshot, session: session, retried: false)
        }
    }

    static func notFound(_ reason: String) -> LoadResponse {
        let text = Data("not found: \(reason)\n".utf8)
        return LoadResponse(
            status: 404,
            headers: [
                ("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", "\(text.count)"),
                ("Cache-Control", "no-store"),
            ],
            outcome: .notFound(reason: reason), body: .bytes(text))
    }

    private func serve(
        _ file: LocalFile, _ request: LoadRequest, snapshot: Snapshot, session: ResolverSession?, retried: Bool
    ) -> LoadResult {
        let readers = snapshot.table.package(file.package)?.corsOrigins ?? []
        switch respond(file, request, .local(package: file.package, version: file.version), readers) {
        case .success(let r): return .response(r)
        case .failure(let problem):
            return recover(file, problem, request, snapshot: snapshot, session: session, retried: retried)
        }
    }

    /// The response for `file`: without opening it when no bytes are needed (304, 405, 416),
    /// else with it open for the body — or why it could not be opened.
    /// `readers`: the package's `corsOrigins`, which decide whether the request's origin may read it.
    private func respond(
        _ file: LocalFile, _ request: LoadRequest, _ outcome: LoadOutcome, _ readers: [String]
    ) -> Result<LoadResponse, OpenProblem> {
        let allowed = request.origin.flatMap { PackageAccess.mayRead($0, corsOrigins: readers) ? $0 : nil }
        let plan = ResponsePlanner.plan(
            method: request.method, range: request.range, ifNoneMatch: request.ifNoneMatch, file: file,
            cacheControl: cacheControl, allowOrigin: readers.contains("*") && allowed != nil ? "*" : allowed,
            varyOrigin: !readers.isEmpty && !readers.contains("*"))
        guard plan.status == 200 || plan.status == 206 else {
            return .success(LoadResponse(status: plan.status, headers: plan.headers, outcome: outcome, body: .none))
        }
        // HEAD opens the file too, so that it answers as GET would (fallback included).
        return self.open(file).map { (fd, path) in
            if plan.body.isEmpty { try? SystemCalls.close(fd, path: path) }
            let body: LoadResponse.Body = plan.body.isEmpty ? .none : .file(fd, path, plan.body)
            return LoadResponse(status: plan.status, headers: plan.headers, outcome: outcome, body: body)
        }
    }

    /// A listed file could not be served from `file.version`.
    private func recover(
        _ file: LocalFile, _ problem: OpenProblem, _ request: LoadRequest, snapshot: Snapshot,
        session: ResolverSession?, retried: Bool
    ) -> LoadResult {
        let pkgState =
            (try? SandboxReader(root: resolver.root).servingState()).map {
                $0.packages[file.package.rawValue] ?? ServingState.Versions(active: nil, fallback: nil)
            } ?? snapshot.versions[file.package] ?? ServingState.Versions(active: nil, fallback: nil)
        let pinned = session?.versions[file.package] == file.version
        // Not the active version any more (an update or gc ran since the snapshot): resolve again
        // with the new state, once. A pinned version stays pinned.
        if pkgState.active != file.version, !pinned, !retried {
            let fresh = (try? resolver.reload()) ?? snapshot
            if case .local(let f) = fresh.table.resolve(request.url), f.version != file.version {
                return serve(f, request, snapshot: fresh, session: session, retried: true)
            }
        }
        let reason = "\(file.path) of \(file.package)@\(file.version): \(problem.message)"
        if pkgState.active == file.version {
            logger.warning(
                "a listed file is missing or unreadable; reporting the failure", metadata: ["file": "\(reason)"])
            reporter?.report(package: file.package, version: file.version, reason: reason)
        }
        // The fallback version (else, for a pinned session, the active one) when it has the path.
        let candidates = [pkgState.fallback, pinned ? pkgState.active : nil].compactMap { $0 }.filter {
            $0 != file.version
        }
        for v in candidates {
            guard let pkg = snapshot.routed(resolver.layout, file.package, v), let f = pkg.files[file.path.string],
                case .success(let r) = respond(
                    f, request, .fallback(package: f.package, version: f.version, failed: file.version),
                    snapshot.table.package(file.package)?.corsOrigins ?? [])
            else { continue }
            return .response(r)
        }
        return .passthrough(reason: "\(reason), and no other local version has it")
    }

    /// Opens a listed file for reading: a regular file (not through a symbolic link) of the
    /// listed length; its descriptor and path.
    func open(_ file: LocalFile) -> Result<(FileDescriptor, FilePath), OpenProblem> {
        let path = resolver.filePath(file)
        let fd: FileDescriptor
        do { fd = try SystemCalls.open(path, .readOnly, options: [.noFollow]) } catch {
            return .failure(OpenProblem(error.errno.description.lowercased()))
        }
        guard let status = try? SystemCalls.fstat(fd, path: path), status.kind == .regular else {
            try? SystemCalls.close(fd, path: path)
            return .failure(OpenProblem("not a regular file"))
        }
        guard status.size == file.length else {
            try? SystemCalls.close(fd, path: path)
            return .failure(OpenProblem("\(status.size) bytes on disk, \(file.length) listed"))
        }
        return .success((fd, path))
    }
}

/// Why a listed file could not be opened.
struct OpenProblem: Error {
    let message: String
    init(_ message: String) { self.message = message }
}

/// Reports failures to the sandbox's store from a background queue, so a request never waits for
/// the writer lock: at most one report per package version per `interval` seconds, each counted
/// only while that version is still the active one.
package final class StoreFailureReporter: FailureReporting, Sendable {
    /// The root of the sandbox the failures are recorded in.
    package let root: FilePath
    /// The shortest time between two reports of one package version, in seconds.
    package let interval: Double
    let logger: Logger
    let handoff: ServingHandoff?
    private let queue = DispatchQueue(label: "larder.failure-reporter")
    /// When each package version was last reported (touched on `queue` only; behind a lock no
    /// other thread takes, so that the compiler can check the class).
    private let last = Mutex<[String: Date]>([:])

    /// A reporter for the sandbox at `root`, recording each version at most once per `interval`
    /// seconds; its state writes are told to `handoff` (the resolver's, when the app shares one).
    package init(
        root: FilePath, interval: Double = 1, logger: Logger = Logger(label: "larder.loader"),
        handoff: ServingHandoff? = nil
    ) {
        self.root = root
        self.interval = interval
        self.logger = logger
        self.handoff = handoff
    }

    /// Queues the report and returns at once; the queue records it (the store may roll back) while
    /// `version` is still the active one.
    package func report(package: PackageID, version: SemanticVersion, reason: String) {
        queue.async { [self] in
            let key = "\(package)@\(version)"
            let due = last.withLock { last in
                if let t = last[key], Date().timeIntervalSince(t) < interval { return false }
                last[key] = Date()
                return true
            }
            guard due else { return }
            var options = Sandbox.Options()
            options.lockTimeout = 30
            options.handoff = handoff
            do {
                let sandbox = try Sandbox.open(root, options: options)
                defer { sandbox.close() }
                guard sandbox.state[package].active == version else { return }
                let outcome = try sandbox.reportFailure(id: package, reason: reason)
                logger.warning(
                    "failure recorded",
                    metadata: [
                        "package": "\(key)", "health": "\(outcome.health)",
                        "rolledBackTo": "\(outcome.rolledBackTo ?? "-")",
                    ])
            } catch {
                logger.error("could not record a failure", metadata: ["package": "\(key)", "error": "\(error)"])
            }
        }
    }

    /// Waits until every report made so far is written (for tests and orderly shutdown).
    package func flush() { queue.sync {} }
}
