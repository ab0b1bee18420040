import ArgumentParser
import Foundation
import Larder
import Synchronization

/// A command's result: the document `--json` prints, and the lines of its text form. Every
/// command renders through this one protocol and `Output.emit`.
protocol RenderedReport: Encodable {
    /// The text form, one element per line.
    var textLines: [String] { get }
}

/// The exit codes `larder` uses (see `larder --help`); the library never decides them.
enum ExitStatus {
    /// The command failed, or found problems.
    static let failure = ExitCode(1)
    /// `sync`: some packages failed and the others were applied.
    static let partial = ExitCode(2)
    /// A usage error (ArgumentParser's own code for validation failures).
    static let usage = ExitCode(64)
}

/// Where a command's output goes: stdout and stderr, or a capture in an in-process test.
struct OutputSink: Sendable {
    /// Receives what goes to stdout.
    let out: @Sendable (Data) -> Void
    /// Receives what goes to stderr.
    let err: @Sendable (Data) -> Void

    /// The process's own stdout and stderr.
    static let standard = OutputSink(
        out: { FileHandle.standardOutput.write($0) }, err: { FileHandle.standardError.write($0) })
}

/// Lines for stdout written in batches: a line waits at most `delay` (or until `limit` bytes
/// wait), so a server that prints a line per request makes one `write` per batch, not one per
/// request. Lines keep their order; nothing is written, and no timer runs, while none wait.
/// `flush()` writes what waits (a command calls it before it returns).
final class LineBatch: Sendable {
    /// The lines that wait, and whether a flush is scheduled; the sink is called under this
    /// lock, so batches reach it in order.
    private let state = Mutex((pending: Data(), scheduled: false))
    private let sink: OutputSink
    private let delay: DispatchTimeInterval
    private let limit: Int
    private let queue = DispatchQueue(label: "larder.output.lines")

    init(sink: OutputSink, delay: DispatchTimeInterval = .milliseconds(20), limit: Int = 16 << 10) {
        self.sink = sink
        self.delay = delay
        self.limit = limit
    }

    /// Adds a line, escaped as `Output.line` does.
    func add(_ text: String) {
        let line = Quoting.sanitizeLine(text) + "\n"
        state.withLock { s in
            s.pending.append(contentsOf: line.utf8)
            if s.pending.count >= limit {
                writePending(&s.pending)
            } else if !s.scheduled {
                s.scheduled = true
                queue.asyncAfter(deadline: .now() + delay) { [self] in flush() }
            }
        }
    }

    /// Writes the lines that wait now.
    func flush() {
        state.withLock { s in
            s.scheduled = false
            writePending(&s.pending)
        }
    }

    private func writePending(_ pending: inout Data) {
        guard !pending.isEmpty else { return }
        sink.out(pending)
        pending.removeAll(keepingCapacity: true)
    }
}

/// Rendering: stdout carries the result, stderr everything else.
enum Output {
    /// The sink of the running command (tests run commands in-process with a capture).
    @TaskLocal static var sink = OutputSink.standard

    /// Writes a line to stdout. Control characters and other characters a terminal acts on are
    /// written escaped (`\u{1B}`), whatever the line embeds.
    static func line(_ text: String) {
        sink.out(Data((Quoting.sanitizeLine(text) + "\n").utf8))
    }

    /// Writes a line to stderr, escaped as `line` does.
    static func diagnostic(_ text: String) {
        sink.err(Data((Quoting.sanitizeLine(text) + "\n").utf8))
    }

    /// Prints a command's result on stdout: the canonical JSON document with `--json`, else its
    /// text form.
    static func emit(_ report: some RenderedReport, json: Bool) throws {
        if json {
            sink.out(try ManifestCoding.encode(report))
        } else {
            for l in report.textLines { line(l) }
        }
    }

    /// Reports a failed command on stderr (and as JSON on stdout with --json) and returns the
    /// exit code to throw.
    static func failure(command: String, code: ReasonCode, message: String, json: Bool) -> ExitCode {
        diagnostic("larder \(command): error [\(code)]: \(message)")
        if json {
            struct Failure: Encodable {
                let ok = false
                let error: Detail
                struct Detail: Encodable {
                    let code: ReasonCode
                    let message: String
                }
            }
            if let data = try? ManifestCoding.encode(Failure(error: .init(code: code, message: message))) {
                sink.out(data)
            }
        }
        return ExitStatus.failure
    }

    /// Formats a byte count for people.
    static func bytes(_ n: Int64) -> String { ByteText.format(n) }
}

/// Runs a library call whose typed error carries a code and a message, turning a failure into
/// the command's error report and exit code 1.
func reporting<T, E: Error & CustomStringConvertible>(
    _ command: String, json: Bool, code: (E) -> ReasonCode, _ body: () throws(E) -> T
) throws -> T {
    do {
        return try body()
    } catch {
        throw Output.failure(command: command, code: code(error), message: error.description, json: json)
    }
}

/// The async form of `reporting`.
func reporting<T, E: Error & CustomStringConvertible>(
    _ command: String, json: Bool, code: (E) -> ReasonCode, _ body: () async throws(E) -> T
) async throws -> T {
    do {
        return try await body()
    } catch {
        throw Output.failure(command: command, code: code(error), message: error.description, json: json)
    }
}
