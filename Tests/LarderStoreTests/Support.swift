import Foundation
import LarderCore
import LarderFileSystem
import LarderPublish
import LarderStore
import LarderTestSupport
import Logging
import Synchronization
import SystemPackage
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// Helpers shared by the Store suites. Every fixture is made on the fly: the sample app is packed
// by `Publisher` and the hostile zips are written by scripts/fixtures/make-zips.py, both once per
// test process into a temporary directory that is read into memory and deleted at once. Each test
// then writes the bytes it needs into its own temporary directory and removes it.

/// The package root.
let packageRoot = TestPaths.packageRoot

let sampleID = "sample-app"
let otherID = "other-app"
let sampleVersions = ["1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0"]

func pid(_ text: String) -> PackageID { PackageID(text)! }
func ver(_ text: String) -> SemanticVersion { SemanticVersion(text)! }

/// A fresh temporary directory (see `TemporaryDirectory` for where), removed with `cleanup()`.
struct TempDir {
    let dir: TemporaryDirectory
    init(_ label: String = "store") throws { dir = try TemporaryDirectory(label) }
    var url: URL { dir.url }
    var path: String { dir.path }
    func cleanup() { dir.remove() }
}

/// Runs a program through /usr/bin/env, failing when it cannot start or exits non-zero.
@discardableResult
func run(_ program: String, _ args: [String]) throws -> Data {
    try runTool(program, args).stdoutData
}

struct FixtureError: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

/// A clock that moves one minute forward at every reading, from a whole second (state.json keeps
/// whole seconds), so that timestamps are distinct, ordered and survive a round trip.
final class TestClock: Sendable {
    private let time: Mutex<Date>
    private let step: TimeInterval

    init(start: Date = Date(timeIntervalSince1970: 1_750_000_000), step: TimeInterval = 60) {
        time = Mutex(start)
        self.step = step
    }

    func now() -> Date {
        time.withLock { time in
            time = time.addingTimeInterval(step)
            return time
        }
    }
}

// MARK: fixtures made once per process

/// Releases of the sample app packed by `Publisher` into a throw-away repository: bundle.zip and
/// files.json of `sample-app` at every `sampleVersions` and of `other-app` 1.0.0 and 1.1.0, each
/// version with its own data/catalog.json.
struct SampleReleases: Sendable {
    struct Release: Sendable {
        let bundle: Data
        let listBytes: Data
        let list: FileList
    }

    let releases: [String: Release]

    static let shared: Result<SampleReleases, any Error> = Result { try make() }

    static func get() throws -> SampleReleases { try shared.get() }

    func release(_ version: String, id: String = sampleID) throws -> Release {
        try #require(releases["\(id)@\(version)"], "no release \(id)@\(version) was packed")
    }

    private static func make() throws -> SampleReleases {
        let tmp = try TempDir("publish")
        defer { tmp.cleanup() }
        let repository = SampleRepository(in: tmp.url)
        let repo = repository.path
        var out: [String: Release] = [:]
        for (id, versions) in [(sampleID, sampleVersions), (otherID, Array(sampleVersions.prefix(2)))] {
            for v in versions {
                let catalog = "{\"id\": \"\(id)\", \"version\": \"\(v)\", \"items\": []}\n"
                let report = try repository.publish(
                    v, id: id,
                    edit: { app in try Data(catalog.utf8).write(to: app.appendingPathComponent("data/catalog.json")) }
                ) { $0.routes = ["https://\(id).example.com/"] }
                let bundle = try Data(contentsOf: URL(fileURLWithPath: repo.appending(report.bundle.path).string))
                let listBytes = try Data(contentsOf: URL(fileURLWithPath: repo.appending(report.fileList.path).string))
                let list = try ManifestCoding.decode(FileList.self, from: listBytes, document: "files.json")
                out["\(id)@\(v)"] = Release(bundle: bundle, listBytes: listBytes, list: list)
            }
        }
        return SampleReleases(releases: out)
    }
}

/// The zips written by scripts/fixtures/make-zips.py, with the outcome each must have ("ok" or
/// the error code the store must refuse it with), held in memory.
struct ZipFixtures: Sendable {
    let expected: [String: String]
    let data: [String: Data]

    static let shared: Result<ZipFixtures, any Error> = Result { try make() }

    static func get() throws -> ZipFixtures { try shared.get() }

    /// The fixture names whose outcome is (or is not) "ok"; a placeholder when the script failed,
    /// so that the parameterised test runs and reports the failure.
    static func names(ok: Bool) -> [String] {
        guard let set = try? shared.get() else { return ["(make-zips.py failed)"] }
        return set.expected.filter { ($0.value == "ok") == ok }.map(\.key).sorted()
    }

    private static func make() throws -> ZipFixtures {
        let tmp = try TempDir("zips")
        defer { tmp.cleanup() }
        let script = packageRoot.appendingPathComponent("scripts/fixtures/make-zips.py").path
        let json = try run("python3", [script, tmp.path])
        let expected = try JSONDecoder().decode([String: String].self, from: json)
        var data: [String: Data] = [:]
        for name in expected.keys {
            data[name] = try Data(contentsOf: tmp.url.appendingPathComponent(name))
        }
        return ZipFixtures(expected: expected, data: data)
    }
}

// MARK: a sandbox per test

/// One test's world: a temporary directory holding the sandbox root (`sandbox/`), the bundles it
/// installs (`bundles/`), and anything else the test puts beside the root.
final class StoreEnv {
    let dir: TempDir
    let root: FilePath
    let layout: SandboxLayout
    let clock = TestClock()

    init() throws {
        dir = try TempDir()
        root = FilePath(dir.url.appendingPathComponent("sandbox").path)
        layout = SandboxLayout(root: root)
    }

    func cleanup() { dir.cleanup() }

    /// Options with the test clock and a short lock timeout.
    func options() -> Sandbox.Options {
        var o = Sandbox.Options()
        let clock = self.clock
        o.clock = { clock.now() }
        o.lockTimeout = 0.3
        o.logger = Logger(label: "larder.store.test", factory: { _ in SwiftLogNoOpLogHandler() })
        return o
    }

    func open(_ options: Sandbox.Options? = nil) throws -> Sandbox {
        try Sandbox.open(root, options: options ?? self.options())
    }

    /// Opens a writer, runs `body`, and closes it.
    @discardableResult
    func withSandbox<T>(_ options: Sandbox.Options? = nil, _ body: (Sandbox) throws -> T) throws -> T {
        let sandbox = try open(options)
        defer { sandbox.close() }
        return try body(sandbox)
    }

    var reader: SandboxReader { SandboxReader(root: root) }

    /// Writes `data` to `bundles/<name>` and returns its path.
    func write(_ data: Data, named name: String) throws -> FilePath {
        let dirURL = dir.url.appendingPathComponent("bundles")
        try FileManager.default.createDirectory(at: dirURL, withIntermediateDirectories: true)
        let url = dirURL.appendingPathComponent(name)
        try data.write(to: url)
        return FilePath(url.path)
    }

    /// The packed bundle of a sample release, written into `bundles/`.
    func bundle(_ version: String, id: String = sampleID) throws -> FilePath {
        try write(try SampleReleases.get().release(version, id: id).bundle, named: "\(id)-\(version).zip")
    }

    /// The files.json of a sample release.
    func list(_ version: String, id: String = sampleID) throws -> FileList {
        try SampleReleases.get().release(version, id: id).list
    }

    /// Installs a sample release (verified against its files.json unless `withList` is false).
    @discardableResult
    func install(
        _ sandbox: Sandbox, _ version: String, id: String = sampleID, withList: Bool = true, force: Bool = false
    ) throws -> InstallReport {
        try sandbox.install(
            bundle: bundle(version, id: id), id: try packageID(id), version: try semanticVersion(version),
            fileList: withList ? list(version, id: id) : nil, force: force)
    }

    /// Installs each version in turn, confirming each one so the previous becomes the fallback.
    func installConfirmed(_ sandbox: Sandbox, _ versions: [String], id: String = sampleID) throws {
        for v in versions {
            try install(sandbox, v, id: id)
            _ = try sandbox.confirm(id: try packageID(id))
        }
    }

    func stateBytes() throws -> Data { try Data(contentsOf: URL(fileURLWithPath: layout.state.string)) }

    /// A copy of installed `version`'s tree as `unknown`, which the state does not name (what an
    /// interrupted install leaves); returns its path.
    func unknownCopy(of version: String, as unknown: String) throws -> FilePath {
        let copy = layout.tree(pid(sampleID), ver(unknown))
        try FileManager.default.copyItem(atPath: layout.tree(pid(sampleID), ver(version)).string, toPath: copy.string)
        return copy
    }

    func fileExists(_ path: FilePath) -> Bool { AtomicFile.exists(path) }
}

// MARK: file-system observations

/// What a path holds, compared byte for byte.
enum Node: Equatable, CustomStringConvertible {
    case directory
    case file(Data)
    case link(String)
    case other(mode: UInt32)

    var description: String {
        switch self {
        case .directory: "directory"
        case .file(let d): "file(\(d.count) bytes)"
        case .link(let t): "link(\(t))"
        case .other(let m): "other(\(String(m, radix: 8)))"
        }
    }
}

/// Every path under `path` (not following links) with what it holds; empty when it does not exist.
func snapshot(_ path: String) -> [String: Node] {
    var out: [String: Node] = [:]
    func walk(_ dir: String, _ prefix: String) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: dir) else { return }
        for name in names {
            let full = dir + "/" + name
            let rel = prefix.isEmpty ? name : prefix + "/" + name
            var st = stat()
            guard lstat(full, &st) == 0 else { continue }
            switch st.st_mode & S_IFMT {
            case S_IFDIR:
                out[rel] = .directory
                walk(full, rel)
            case S_IFREG:
                out[rel] = .file((try? Data(contentsOf: URL(fileURLWithPath: full))) ?? Data())
            case S_IFLNK:
                out[rel] = .link((try? FileManager.default.destinationOfSymbolicLink(atPath: full)) ?? "?")
            default:
                out[rel] = .other(mode: UInt32(st.st_mode))
            }
        }
    }
    walk(path, "")
    return out
}

func snapshot(_ path: FilePath) -> [String: Node] { snapshot(path.string) }

/// The names directly in `path`, sorted (empty when it does not exist).
func names(_ path: String) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted()
}

func names(_ path: FilePath) -> [String] { names(path.string) }

/// The start time of `pid` (field 22 of /proc/<pid>/stat), as Pins reads it.
func processStartTime(_ pid: Int32) throws -> UInt64 {
    let text = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
    let close = try #require(text.lastIndex(of: ")"))
    let fields = text[text.index(after: close)...].split(separator: " ")
    return try #require(UInt64(fields[19]))
}

/// A child process started with posix_spawn and ended by the test itself, by pid (SIGKILL, then
/// reaped with waitpid, so that it is really gone — a zombie still answers kill(pid, 0)).
/// Foundation's `Process` is not used here: its `waitUntilExit` can stall until the child would
/// have exited on its own when the child is killed right after it was started.
final class Child {
    let pid: pid_t
    private var reaped = false

    init(_ path: String, _ arguments: [String]) throws {
        let argv: [UnsafeMutablePointer<CChar>?] = ([path] + arguments).map { strdup($0) } + [nil]
        defer { for p in argv { free(p) } }
        var child: pid_t = 0
        let rc = argv.withUnsafeBufferPointer { posix_spawn(&child, path, nil, nil, $0.baseAddress!, environ) }
        guard rc == 0 else { throw FixtureError("posix_spawn \(path): \(rc)") }
        pid = child
    }

    /// Kills and reaps the child. Idempotent.
    func stop() {
        guard !reaped else { return }
        reaped = true
        kill(pid, SIGKILL)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    }

    deinit { stop() }
}

/// A health outcome as [id, active, health, rolledBackTo, rolledBackFrom].
func fields(_ o: HealthOutcome) -> [String?] { [o.id, o.active, o.health.rawValue, o.rolledBackTo, o.rolledBackFrom] }

/// Runs `body`, expecting a `StoreError` with `code`; returns the error.
@discardableResult
func expectStoreError(
    _ code: ReasonCode, _ comment: Comment? = nil, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () throws -> Void
) -> StoreError? {
    let error = #expect(throws: StoreError.self, comment, sourceLocation: sourceLocation) { try body() }
    if let error {
        #expect(error.code == code, "got \(error.code): \(error)", sourceLocation: sourceLocation)
    }
    return error
}
