import Foundation
import LarderCore
import LarderPublish
import LarderTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// The end-to-end harness: finds the built `larder` executable, runs it (and the helper tools
// that craft fixtures) with a timeout, and gives each test its own scratch directory. Every
// fixture is generated here, on the fly; nothing hostile is committed to the repository.

/// A failure of the harness itself (a fixture tool that failed, a missing file).
typealias HarnessError = TestSupportError

/// The package root.
let packageRoot: URL = TestPaths.packageRoot

/// `Examples/sample-app`, the good tree most tests pack.
let sampleApp: URL = TestPaths.sampleApp

// MARK: - Running processes

/// Runs the `larder` CLI. Throws (failing the test) when the binary is missing.
@discardableResult
func larder(
    _ arguments: [String], cwd: URL? = nil, timeout: TimeInterval = 60, environment: [String: String] = [:]
) throws -> RunResult {
    try LarderBinary.run(arguments, cwd: cwd, timeout: timeout, environment: environment)
}

/// Runs a helper tool found on PATH (python3, zip, bsdtar, gzip) and requires exit 0.
@discardableResult
func tool(_ name: String, _ arguments: [String], cwd: URL? = nil) throws -> RunResult {
    try runTool(name, arguments, cwd: cwd, timeout: 60)
}

/// Runs a Python 3 script (arguments reach it as sys.argv[1...]).
@discardableResult
func python(_ script: String, _ arguments: [String] = [], cwd: URL? = nil) throws -> RunResult {
    try tool("python3", ["-c", script] + arguments, cwd: cwd)
}

// MARK: - Scratch directories

/// Runs `body` with a fresh empty directory and removes it after.
func withSandbox<T>(_ body: (URL) throws -> T) throws -> T {
    try withTemporaryDirectory("cli") { dir in try body(dir.url) }
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
    func pack(_ source: URL, id: String = "sample-app", version: String, repo: URL? = nil, _ extra: [String] = [])
        throws -> RunResult
    {
        try larder(
            [
                "pack", source.path, "--repo", (repo ?? self.repo).path, "--id", id, "--version", version, "--key",
                key.path,
            ] + extra)
    }

    /// Packs and requires success.
    @discardableResult
    func packOK(_ source: URL, id: String = "sample-app", version: String, repo: URL? = nil, _ extra: [String] = [])
        throws -> RunResult
    {
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
        let copy = root.appendingPathComponent(RepositoryLayout.indexCopyPath(SHA256Digest.of(bytes)))
        try FileManager.default.createDirectory(at: copy.deletingLastPathComponent(), withIntermediateDirectories: true)
        try bytes.write(to: copy)
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
