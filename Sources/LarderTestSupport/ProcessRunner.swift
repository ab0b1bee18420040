import Foundation

/// The outcome of one process run.
package struct RunResult: CustomStringConvertible, Sendable {
    /// The exit status (-1 when the run was killed for taking too long).
    package var status: Int32
    /// Standard output as text.
    package var stdout: String
    /// Standard error as text.
    package var stderr: String
    /// Standard output as bytes.
    package var stdoutData: Data

    /// Both streams, for messages that may land on either.
    package var output: String { stdout + "\n" + stderr }

    /// The status and both streams, for failure messages.
    package var description: String { "exit \(status)\n--- stdout\n\(stdout)--- stderr\n\(stderr)" }
}

/// Runs `executable` with `arguments` in `cwd`, capturing both streams (through files, so a
/// chatty child can never block on a full pipe), and kills it after `timeout` seconds, which
/// throws. `environment` is added to this process's environment.
package func runProcess(
    _ executable: URL, _ arguments: [String], cwd: URL? = nil, timeout: TimeInterval = 60,
    environment: [String: String] = [:]
) throws -> RunResult {
    let fm = FileManager.default
    let capture = fm.temporaryDirectory.appendingPathComponent("larder-run-\(UUID().uuidString)")
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
        throw TestSupportError("cannot start \(executable.path): \(error)")
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
        throw TestSupportError(
            "\(executable.lastPathComponent) \(arguments.joined(separator: " ")) timed out after \(timeout)s\n\(result)"
        )
    }
    return result
}

/// Runs a tool found on PATH (python3, zip, bsdtar, gzip…) and requires exit 0.
@discardableResult
package func runTool(
    _ name: String, _ arguments: [String], cwd: URL? = nil, timeout: TimeInterval = 120
) throws -> RunResult {
    let r = try runProcess(URL(fileURLWithPath: "/usr/bin/env"), [name] + arguments, cwd: cwd, timeout: timeout)
    guard r.status == 0 else { throw TestSupportError("\(name) \(arguments.joined(separator: " ")) failed: \(r)") }
    return r
}
