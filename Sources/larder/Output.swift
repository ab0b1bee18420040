import ArgumentParser
import Foundation
import Larder

/// Rendering: stdout carries the result, stderr everything else.
enum Output {
    /// Writes a line to stdout.
    static func line(_ text: String) {
        FileHandle.standardOutput.write(Data((text + "\n").utf8))
    }

    /// Writes a line to stderr.
    static func diagnostic(_ text: String) {
        FileHandle.standardError.write(Data((text + "\n").utf8))
    }

    /// Writes `value` as the canonical JSON document on stdout.
    static func json<T: Encodable>(_ value: T) throws {
        FileHandle.standardOutput.write(try ManifestCoding.encode(value))
    }

    /// Reports a failed command on stderr (and as JSON on stdout with --json) and returns the
    /// exit code to throw.
    static func failure(command: String, code: String, message: String, json: Bool) -> ExitCode {
        diagnostic("larder \(command): error [\(code)]: \(message)")
        if json {
            struct Failure: Encodable {
                let ok = false
                let error: Detail
                struct Detail: Encodable { let code: String; let message: String }
            }
            try? Output.json(Failure(error: .init(code: code, message: message)))
        }
        return ExitCode(1)
    }

    /// Formats a byte count for people.
    static func bytes(_ n: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB"]
        var v = Double(n)
        var u = 0
        while v >= 1024, u < units.count - 1 {
            v /= 1024
            u += 1
        }
        return u == 0 ? "\(n) B" : String(format: "%.1f", v) + " " + units[u]
    }
}
