import Foundation
import LarderCore
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// The end-to-end harness: finds the built `larder` executable, runs it (and the helper tools
// that craft fixtures) with a timeout, and gives each test its own scratch directory. Every
// fixture is generated here, on the fly; nothing hostile is committed to the repository.

/// A failure of the harness itself (missing binary, timeout, a fixture tool that failed). Thrown
/// errors fail the test that hit them, with this message.
struct HarnessError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

// MARK: - Locating the binary

/// The package root: three levels above this file (`<root>/Tests/LarderCLITests/Harness.swift`).
let packageRoot: URL = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

/// `Examples/sample-app`, the good tree most tests pack.
let sampleApp: URL = packageRoot.appendingPathComponent("Examples/sample-app")

/// Where the `larder` executable is, or why it could not be found. Computed once.
let larderBinary: Result<URL, HarnessError> = locateLarder()

private func isExecutable(_ url: URL) -> Bool {
    var st = stat()
    guard stat(url.path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return false }
    return access(url.path, X_OK) == 0
}

private func modificationTime(_ url: URL) -> Date {
    (try? FileManager.default.attributesOfItem(atPath: url.path)[.modificationDate] as? Date) ?? .distantPast
}

/// Looks for `larder`: `$LARDER_BIN`; next to the test bundle (the build products directory);
/// then `<package>/.build*/**/debug/larder`, the most recently built one.
private func locateLarder() -> Result<URL, HarnessError> {
    var tried: [String] = []
    if let env = ProcessInfo.processInfo.environment["LARDER_BIN"], !env.isEmpty {
        let url = URL(fileURLWithPath: env)
        if isExecutable(url) { return .success(url) }
        return .failure(HarnessError("LARDER_BIN=\(env) is not an executable file"))
    }
    // The xctest bundle (an executable on Linux, a directory on macOS) sits in the products dir.
    var productDirs: [URL] = []
    let arg0 = URL(fileURLWithPath: CommandLine.arguments[0]).standardizedFileURL
    productDirs.append(arg0.deletingLastPathComponent())
    let bundle = Bundle.main.bundleURL.standardizedFileURL
    productDirs.append(bundle)
    productDirs.append(bundle.deletingLastPathComponent())
    for b in Bundle.allBundles where b.bundleURL.pathExtension == "xctest" {
        productDirs.append(b.bundleURL.deletingLastPathComponent())
    }
    // macOS: <products>/X.xctest/Contents/MacOS/X.
    var walk = arg0
    for _ in 0..<4 {
        walk = walk.deletingLastPathComponent()
        if walk.pathExtension == "xctest" { productDirs.append(walk.deletingLastPathComponent()) }
    }
    for dir in productDirs {
        let candidate = dir.appendingPathComponent("larder")
        tried.append(candidate.path)
        if isExecutable(candidate) { return .success(candidate) }
    }
    // Fallback: any scratch directory of this package.
    var found: [URL] = []
    let fm = FileManager.default
    if let scratch = try? fm.contentsOfDirectory(atPath: packageRoot.path) {
        for s in scratch where s.hasPrefix(".build") {
            let base = packageRoot.appendingPathComponent(s)
            var candidates = [base.appendingPathComponent("debug/larder")]
            if let triples = try? fm.contentsOfDirectory(atPath: base.path) {
                candidates += triples.map { base.appendingPathComponent("\($0)/debug/larder") }
            }
            for c in candidates {
                tried.append(c.path)
                if isExecutable(c) { found.append(c) }
            }
        }
    }
    if let newest = found.max(by: { modificationTime($0) < modificationTime($1) }) { return .success(newest) }
    return .failure(HarnessError(
        "the larder executable was not found; build it first (swift build --scratch-path .build-cli) or set LARDER_BIN. Looked at: "
            + tried.joined(separator: ", ")))
}

// MARK: - Running processes

/// The outcome of one process run.
struct RunResult: CustomStringConvertible {
    var status: Int32
    var stdout: String
    var stderr: String
    var stdoutData: Data

    /// Both streams, for messages that may land on either.
    var output: String { stdout + "\n" + stderr }

    var description: String { "exit \(status)\n--- stdout\n\(stdout)--- stderr\n\(stderr)" }
}

/// Runs `executable` with `arguments` in `cwd`, capturing both streams (through files, so a
/// chatty child can never block on a full pipe), and kills it after `timeout` seconds.
func runProcess(
    _ executable: URL, _ arguments: [String], cwd: URL? = nil, timeout: TimeInterval = 60,
    environment: [String: String] = [:]
) throws -> RunResult {
    let fm = FileManager.default
    let capture = fm.temporaryDirectory.appendingPathComponent("larder-cli-run-\(UUID().uuidString)")
    try fm.createDirectory(at: capture, withIntermediateDirectories: true)
    defer { try? fm.removeItem(at: capture) }
    let outURL = capture.appendingPathComponent("stdout")
    let errURL = capture.appendingPathComponent("stderr")
    _ = fm.createFile(atPath: outURL.path, contents: nil)
    _ = fm.createFile(atPath: errURL.path, contents: nil)
    let outHandle = try FileHandle(forWritingTo: outURL)
    let errHandle = try FileHandle(forWritingTo: errURL)

    let process = Process()
    process.executableURL = executable
    process.arguments = arguments
    if !environment.isEmpty {
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
    }
    if let cwd { process.currentDirectoryURL = cwd }
    process.standardInput = FileHandle.nullDevice
    process.standardOutput = outHandle
    process.standardError = errHandle
    let done = DispatchSemaphore(value: 0)
    process.terminationHandler = { _ in done.signal() }
    do {
        try process.run()
    } catch {
        try? outHandle.close()
        try? errHandle.close()
        throw HarnessError("cannot start \(executable.path): \(error)")
    }
    var timedOut = false
    if done.wait(timeout: .now() + timeout) == .timedOut {
        timedOut = true
        process.terminate()
        if done.wait(timeout: .now() + 5) == .timedOut { kill(process.processIdentifier, SIGKILL) }
        _ = done.wait(timeout: .now() + 5)
    }
    try? outHandle.close()
    try? errHandle.close()
    let out = (try? Data(contentsOf: outURL)) ?? Data()
    let err = (try? Data(contentsOf: errURL)) ?? Data()
    let result = RunResult(
        status: timedOut ? -1 : process.terminationStatus,
        stdout: String(decoding: out, as: UTF8.self), stderr: String(decoding: err, as: UTF8.self), stdoutData: out)
    if timedOut {
        throw HarnessError("\(executable.lastPathComponent) \(arguments.joined(separator: " ")) timed out after \(timeout)s\n\(result)")
    }
    return result
}

/// Runs the `larder` CLI. Throws (failing the test) when the binary is missing.
@discardableResult
func larder(
    _ arguments: [String], cwd: URL? = nil, timeout: TimeInterval = 60, environment: [String: String] = [:]
) throws -> RunResult {
    let binary = try larderBinary.get()
    return try runProcess(binary, arguments, cwd: cwd, timeout: timeout, environment: environment)
}

/// Runs a helper tool found on PATH (python3, zip, bsdtar, gzip) and requires exit 0.
@discardableResult
func tool(_ name: String, _ arguments: [String], cwd: URL? = nil) throws -> RunResult {
    let result = try runProcess(URL(fileURLWithPath: "/usr/bin/env"), [name] + arguments, cwd: cwd, timeout: 60)
    guard result.status == 0 else {
        throw HarnessError("fixture tool \(name) \(arguments.joined(separator: " ")) failed: \(result)")
    }
    return result
}

/// Runs a Python 3 script (arguments reach it as sys.argv[1...]).
@discardableResult
func python(_ script: String, _ arguments: [String] = [], cwd: URL? = nil) throws -> RunResult {
    try tool("python3", ["-c", script] + arguments, cwd: cwd)
}

// MARK: - Scratch directories

/// Runs `body` with a fresh empty directory (temporaryDirectory + UUID) and removes it after.
func withSandbox<T>(_ body: (URL) throws -> T) throws -> T {
    let fm = FileManager.default
    let dir = fm.temporaryDirectory.appendingPathComponent("larder-cli-\(UUID().uuidString)", isDirectory: true)
    try fm.createDirectory(at: dir, withIntermediateDirectories: true)
    defer { removeTree(dir) }
    return try body(dir.resolvingSymlinksInPath())
}

/// Removes a tree, including directories whose permissions or odd names upset FileManager.
func removeTree(_ url: URL) {
    if (try? FileManager.default.removeItem(at: url)) == nil {
        _ = try? runProcess(URL(fileURLWithPath: "/bin/rm"), ["-rf", url.path], timeout: 30)
    }
}

// MARK: - Files

/// Reads a file's bytes, or `nil` when it does not exist.
func bytes(_ url: URL) -> Data? {
    try? Data(contentsOf: url)
}

/// Writes text to a file, creating parent directories.
func writeText(_ text: String, to url: URL) throws {
    try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
    try Data(text.utf8).write(to: url)
}

/// The absolute path of `name` (raw bytes) in `dir`, NUL-terminated, for the C calls below.
private func rawPath(_ dir: URL, _ name: [UInt8]) -> [CChar] {
    (Array(dir.path.utf8) + [0x2F] + name + [0]).map { CChar(bitPattern: $0) }
}

/// Creates a regular file whose name is exactly `name` (bytes, not normalised or re-encoded by
/// Foundation): for non-UTF-8 and NFD names.
func createRawFile(_ name: [UInt8], in dir: URL, contents: String = "x\n") throws {
    let fd = rawPath(dir, name).withUnsafeBufferPointer { open($0.baseAddress!, O_CREAT | O_EXCL | O_WRONLY, 0o644) }
    guard fd >= 0 else { throw HarnessError("open(\(name)) in \(dir.path) failed: errno \(errno)") }
    defer { close(fd) }
    let data = Array(contents.utf8)
    let n = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    guard n == data.count else { throw HarnessError("write to \(name) failed") }
}

/// Creates a file named by a Swift string, byte for byte as that string's UTF-8.
func createRawFile(_ name: String, in dir: URL, contents: String = "x\n") throws {
    try createRawFile(Array(name.utf8), in: dir, contents: contents)
}

/// Makes a FIFO at `url`.
func makeFIFO(_ url: URL) throws {
    guard mkfifo(url.path, 0o644) == 0 else { throw HarnessError("mkfifo \(url.path) failed: errno \(errno)") }
}

/// The permission bits of a file.
func permissions(_ url: URL) throws -> mode_t {
    var st = stat()
    guard stat(url.path, &st) == 0 else { throw HarnessError("stat \(url.path) failed") }
    return st.st_mode & 0o7777
}

/// Sets every regular file's modification time under `root` to `date`.
func touchAll(_ root: URL, to date: Date) throws {
    let fm = FileManager.default
    guard let e = fm.enumerator(at: root, includingPropertiesForKeys: [.isRegularFileKey]) else { return }
    for case let url as URL in e where (try? url.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true {
        try fm.setAttributes([.modificationDate: date], ofItemAtPath: url.path)
    }
}

/// SHA-256 hex of a file's bytes.
func sha256Hex(_ url: URL) throws -> String {
    SHA256Digest.of(try Data(contentsOf: url)).hex
}

/// Copies the sample app to `<dir>/<name>` and returns its URL.
func copySampleApp(to dir: URL, name: String = "src") throws -> URL {
    let dest = dir.appendingPathComponent(name)
    guard FileManager.default.fileExists(atPath: sampleApp.appendingPathComponent("index.html").path) else {
        throw HarnessError("the sample app is missing at \(sampleApp.path)")
    }
    try FileManager.default.copyItem(at: sampleApp, to: dest)
    return dest
}

/// Rewrites the `"version": "1.0.0"` line of the sample app's catalogue (one file changes).
func setCatalogVersion(_ app: URL, _ version: String) throws {
    let url = app.appendingPathComponent("data/catalog.json")
    let text = try String(contentsOf: url, encoding: .utf8)
    let line = "  \"version\": \"1.0.0\","
    guard text.contains(line) else { throw HarnessError("data/catalog.json lacks the line \(line)") }
    try Data(text.replacingOccurrences(of: line, with: "  \"version\": \"\(version)\",").utf8).write(to: url)
}

// MARK: - A publisher's workspace

/// A sandbox with a key pair and helpers for the usual commands: `<dir>/keys/repo.key|.pub`,
/// a repository at `<dir>/repo`.
struct Workspace {
    let dir: URL
    var key: URL { dir.appendingPathComponent("keys/repo.key") }
    var pub: URL { dir.appendingPathComponent("keys/repo.pub") }
    var repo: URL { dir.appendingPathComponent("repo") }
    var index: URL { repo.appendingPathComponent("index.json") }
    var signature: URL { repo.appendingPathComponent("index.json.sig") }

    /// Makes the key pair.
    init(_ dir: URL) throws {
        self.dir = dir
        let r = try larder(["keygen", "--out", dir.appendingPathComponent("keys/repo").path])
        guard r.status == 0 else { throw HarnessError("keygen failed: \(r)") }
    }

    /// `larder pack SRC --repo REPO --id ID --version V --key KEY [extra]`.
    func pack(_ source: URL, id: String = "sample-app", version: String, repo: URL? = nil, _ extra: [String] = []) throws -> RunResult {
        try larder(["pack", source.path, "--repo", (repo ?? self.repo).path, "--id", id, "--version", version, "--key", key.path] + extra)
    }

    /// Packs and requires success.
    @discardableResult
    func packOK(_ source: URL, id: String = "sample-app", version: String, repo: URL? = nil, _ extra: [String] = []) throws -> RunResult {
        let r = try pack(source, id: id, version: version, repo: repo, extra)
        guard r.status == 0 else { throw HarnessError("pack \(id) \(version) failed: \(r)") }
        return r
    }

    /// `larder verify REPO --public-key PUB [extra]`.
    func verify(_ repo: URL? = nil, publicKey: URL? = nil, _ extra: [String] = []) throws -> RunResult {
        try larder(["verify", (repo ?? self.repo).path, "--public-key", (publicKey ?? pub).path] + extra)
    }

    /// The private key, loaded in-process (for re-signing a hand-edited index).
    func privateKey() throws -> PrivateKey {
        try KeyFile.privateKey(from: try Data(contentsOf: key), path: key.path)
    }

    /// The repository index, decoded.
    func loadIndex(_ repo: URL? = nil) throws -> RepositoryIndex {
        let url = (repo ?? self.repo).appendingPathComponent("index.json")
        return try ManifestCoding.decode(RepositoryIndex.self, from: try Data(contentsOf: url), document: url.path)
    }

    /// Writes `index` canonically and signs it with the repository key, as `pack` would.
    func writeSigned(_ index: RepositoryIndex, repo: URL? = nil, with signer: PrivateKey? = nil) throws {
        let root = repo ?? self.repo
        let bytes = try ManifestCoding.encode(index)
        let sig = try IndexSignature.sign(bytes, with: [try signer ?? privateKey()])
        try bytes.write(to: root.appendingPathComponent("index.json"))
        try ManifestCoding.encode(sig).write(to: root.appendingPathComponent("index.json.sig"))
    }

    /// Edits the index in-process, then re-signs it with the repository key.
    func resign(repo: URL? = nil, _ edit: (inout RepositoryIndex) throws -> Void) throws {
        var index = try loadIndex(repo)
        try edit(&index)
        try writeSigned(index, repo: repo)
    }
}

/// Runs `body` in a fresh sandbox with a key pair.
func withWorkspace<T>(_ body: (Workspace) throws -> T) throws -> T {
    try withSandbox { dir in try body(try Workspace(dir)) }
}

// MARK: - JSON reports (the CLI's --json documents, decoded independently of the CLI's types)

struct KeygenJSON: Decodable {
    var keyId: String
    var publicKey: String
    var privateKeyFile: String
    var publicKeyFile: String
}

struct PackJSON: Decodable {
    var id: String
    var version: String
    var channel: String
    var serial: UInt64
    var expires: Date
    var bundle: BlobRef
    var fileList: BlobRef
    var fileCount: Int
    var totalSize: Int64
    var objectsWritten: Int
    var objectsReused: Int
    var objectBytesWritten: Int64
    var signedBy: String
}

struct RevokeJSON: Decodable {
    var id: String
    var version: String
    var serial: UInt64
    var expires: Date
    var signedBy: String
}

struct ProblemJSON: Decodable {
    var code: String
    var package: String?
    var version: String?
    var file: String?
    var message: String
}

struct VerifyJSON: Decodable {
    var kind: String
    var path: String
    var ok: Bool
    var serial: UInt64?
    var signedBy: String?
    var packagesChecked: Int
    var filesChecked: Int
    var objectsChecked: Int
    var problems: [ProblemJSON]
}

struct FailureJSON: Decodable {
    struct Detail: Decodable {
        var code: String
        var message: String
    }
    var ok: Bool
    var error: Detail
}

/// Decodes a --json document from a run's stdout.
func decode<T: Decodable>(_ type: T.Type, _ result: RunResult) throws -> T {
    do {
        return try ManifestCoding.decode(T.self, from: result.stdoutData, document: "stdout")
    } catch {
        throw HarnessError("stdout is not a \(T.self) document: \(error)\n\(result)")
    }
}

/// Whether `s` is `n` lowercase hex digits.
func isHex(_ s: String, count n: Int) -> Bool {
    s.utf8.count == n && s.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
}
