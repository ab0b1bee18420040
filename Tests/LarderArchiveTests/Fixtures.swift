import Foundation
import LarderTestSupport
import SystemPackage
import Testing

/// Runs a program, failing the test when it cannot start or exits non-zero; returns its stdout.
@discardableResult
func run(_ program: String, _ args: [String], cwd: URL? = nil) throws -> Data {
    try runTool(program, args, cwd: cwd).stdoutData
}

/// The zips made by scripts/fixtures/make-zips.py, with the outcome each must have.
/// They are generated once per test process into a temporary directory, read into memory, and
/// the directory is removed at once; `path(_:)` writes one into the current test's directory.
struct ZipFixtures: Sendable {
    let expected: [String: String]
    let bytes: [String: Data]

    init() throws {
        (expected, bytes) = try withTemporaryDirectory("zip-fixtures") { dir in
            let script = TestPaths.packageRoot.appendingPathComponent("scripts/fixtures/make-zips.py").path
            let json = try run("python3", [script, dir.path])
            let expected = try JSONDecoder().decode([String: String].self, from: json)
            var bytes: [String: Data] = [:]
            for name in expected.keys { bytes[name] = try Data(contentsOf: dir.appending(name)) }
            return (expected, bytes)
        }
    }

    /// The fixture `name` as a file in the current test's temporary directory.
    func path(_ name: String) throws -> FilePath {
        guard let data = bytes[name] else { throw TestSupportError("no fixture \(name)") }
        let url = try TemporaryDirectory.forCurrentTest().appending("fixture-\(name)")
        if !FileManager.default.fileExists(atPath: url.path) { try data.write(to: url) }
        return FilePath(url.path)
    }
}
