import Foundation
import LarderCore
import LarderFileSystem
import Synchronization
import SystemPackage

/// Checks an installed tree against its file list, file by file: every listed file present,
/// a regular file of the listed size and SHA-256, and nothing else in the tree (no extra file,
/// no link, no special file). Used by `doctor` and by the crash tests.
package enum TreeCheck {
    /// Every problem found, as sentences naming the file; empty when the tree is exact.
    package static func problems(tree: FilePath, list: FileList) -> [String] {
        var problems: [String] = []
        // Each regular file found, by its path under the tree, with its full path (made once:
        // a FilePath costs swift-system a parse and its checks).
        var seen: [String: FilePath] = [:]
        walk(tree, prefix: "", seen: &seen, problems: &problems)
        let listed = Set(list.files.map(\.path.string))
        for extra in Set(seen.keys).subtracting(listed).sorted() { problems.append("\(extra): not in the file list") }
        // The files are hashed on every core at once (a verification reads the whole tree), each
        // worker with its own buffer; the problems keep the list's order.
        let files = list.files
        let present = seen
        let workers = max(1, min(ProcessInfo.processInfo.activeProcessorCount, 8, files.count))
        let found = ProblemSlots(files.count)
        DispatchQueue.concurrentPerform(iterations: workers) { w in
            var buffer = [UInt8](repeating: 0, count: 256 << 10)
            var i = w
            while i < files.count {
                let f = files[i]
                if let path = present[f.path.string] {
                    found.set(i, check(path, f, buffer: &buffer))
                } else {
                    found.set(i, "\(f.path): missing")
                }
                i += workers
            }
        }
        problems += found.all
        return problems
    }

    /// The problem with one listed file, or nil when it has the listed size and SHA-256.
    private static func check(_ path: FilePath, _ f: FileEntry, buffer: inout [UInt8]) -> String? {
        guard let fd = try? SystemCalls.open(path, .readOnly, options: [.noFollow]) else {
            return "\(f.path): unreadable"
        }
        defer { try? SystemCalls.close(fd, path: path) }
        var hasher = SHA256Stream()
        while true {
            guard let n = try? SystemCalls.read(fd, into: &buffer, path: path) else { return "\(f.path): read error" }
            if n == 0 { break }
            buffer.withUnsafeBytes { hasher.update(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
        }
        if hasher.count != f.size || hasher.finish() != f.sha256 {
            return
                "\(f.path): \(hasher.count) bytes sha256 \(hasher.finish()), the list says \(f.size) bytes sha256 \(f.sha256)"
        }
        return nil
    }

    private static func walk(
        _ dir: FilePath, prefix: String, seen: inout [String: FilePath], problems: inout [String]
    ) {
        guard let entries = try? SystemCalls.listDirectory(dir) else {
            problems.append("\(prefix.isEmpty ? "(root)" : prefix): cannot list the directory")
            return
        }
        for entry in entries {
            let name = entry.string
            let rel = prefix.isEmpty ? name : prefix + "/" + name
            let full = dir.joined(entry.bytes)
            guard let st = try? SystemCalls.lstat(full) else { continue }
            switch st.kind {
            case .directory: walk(full, prefix: rel, seen: &seen, problems: &problems)
            case .regular: seen[rel] = full
            default: problems.append("\(rel): not a regular file or directory")
            }
        }
    }
}

/// One optional problem per listed file, written by the workers of a verification (each slot by
/// one worker only).
private final class ProblemSlots: Sendable {
    private let slots: Mutex<[String?]>
    init(_ count: Int) { slots = Mutex([String?](repeating: nil, count: count)) }
    func set(_ i: Int, _ problem: String?) {
        guard let problem else { return }
        slots.withLock { $0[i] = problem }
    }
    var all: [String] { slots.withLock { $0.compactMap { $0 } } }
}
