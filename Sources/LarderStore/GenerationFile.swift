import Foundation
import LarderFileSystem
import SystemPackage

/// `<root>/generation`: the generation of the last state.json written, as one little-endian
/// 64-bit word. The writer rewrites it in place (one aligned 8-byte `pwrite`) after every state
/// write; a reading process maps it once and then notices a new state with one memory load, no
/// system call. It is a hint: state.json stays the truth, so a lost or stale word only delays a
/// reader until the next writer opens the sandbox (which publishes it again).
package enum GenerationFile {
    /// Writes `generation` into the file, creating it when needed. Best effort.
    static func publish(_ layout: SandboxLayout, _ generation: UInt64) {
        let path = layout.generation
        guard let fd = try? SystemCalls.open(path, .readWrite, options: [.create]) else { return }
        defer { try? SystemCalls.close(fd, path: path) }
        let word = generation.littleEndian
        _ = withUnsafeBytes(of: word) { try? SystemCalls.pwrite(fd, $0, at: 0, path: path) }
    }

    /// The generation the file holds; nil when it is missing or shorter than a word.
    static func read(_ layout: SandboxLayout) -> UInt64? {
        let path = layout.generation
        guard let fd = try? SystemCalls.open(path, .readOnly) else { return nil }
        defer { try? SystemCalls.close(fd, path: path) }
        var bytes = [UInt8](repeating: 0, count: 8)
        guard (try? SystemCalls.pread(fd, into: &bytes, at: 0, path: path)) == 8 else { return nil }
        return bytes.reversed().reduce(0) { $0 << 8 | UInt64($1) }
    }
}
