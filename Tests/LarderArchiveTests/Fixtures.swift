import Foundation
import Testing

/// The package root, found from this file's path.
let packageRoot = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

/// A fresh temporary directory, removed by the caller with `cleanup()`.
struct TempDir {
    let url: URL
    init() throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("larder-test-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }
    var path: String { url.path }
    func cleanup() { try? FileManager.default.removeItem(at: url) }
}

/// Runs a program, failing the test when it cannot start or exits non-zero.
@discardableResult
func run(_ program: String, _ args: [String], cwd: URL? = nil) throws -> Data {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    p.arguments = [program] + args
    if let cwd { p.currentDirectoryURL = cwd }
    let out = Pipe()
    p.standardOutput = out
    p.standardError = FileHandle.nullDevice
    try p.run()
    let data = out.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    try #require(p.terminationStatus == 0, "\(program) \(args) exited \(p.terminationStatus)")
    return data
}

/// The zips made by scripts/fixtures/make-zips.py, with the outcome each must have.
struct ZipFixtures {
    let dir: TempDir
    let expected: [String: String]

    init() throws {
        dir = try TempDir()
        let script = packageRoot.appendingPathComponent("scripts/fixtures/make-zips.py").path
        let json = try run("python3", [script, dir.path])
        expected = try JSONDecoder().decode([String: String].self, from: json)
    }
}
