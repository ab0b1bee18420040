import Foundation
import LarderCore
import LarderFileSystem
import Synchronization
import SystemPackage

/// Checks an installed tree against its file list, file by file: every listed file present,
/// a regular file of the listed size and SHA-256, and nothing else in the tree (no extra file,
/// no link, no special file). Used by `doctor` and by the crash tests.
package enum TreeCheck {
    /// Every problem found, each naming its file; empty when the tree is exact.
    package static func problems(tree: FilePath, list: FileList) -> [TreeProblem] {
        var problems: [TreeProblem] = []
        // Each regular file found, by its path under the tree, with its full path (made once:
        // a FilePath costs swift-system a parse and its checks).
        var seen: [String: FilePath] = [:]
        walk(tree, prefix: "", seen: &seen, problems: &problems)
        let listed = Set(list.files.map(\.path.string))
        for extra in Set(seen.keys).subtracting(listed).sorted() { problems.append(.notListed(path: extra)) }
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
                    found.set(i, .missing(path: f.path.string))
                }
                i += workers
            }
        }
        problems += found.all
        return problems
    }

    /// The problem with one listed file, or nil when it has the listed size and SHA-256.
    private static func check(_ path: FilePath, _ f: FileEntry, buffer: inout [UInt8]) -> TreeProblem? {
        guard let fd = try? SystemCalls.open(path, .readOnly, options: [.noFollow]) else {
            return .unreadable(path: f.path.string)
        }
        defer { try? SystemCalls.close(fd, path: path) }
        var hasher = SHA256Stream()
        while true {
            guard let n = try? SystemCalls.read(fd, into: &buffer, path: path) else {
                return .readError(path: f.path.string)
            }
            if n == 0 { break }
            buffer.withUnsafeBytes { hasher.update(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
        }
        if hasher.count != f.size || hasher.finish() != f.sha256 {
            return .contentDiffers(
                path: f.path.string, size: hasher.count, sha256: hasher.finish(), listedSize: f.size,
                listedSHA256: f.sha256)
        }
        return nil
    }

    private static func walk(
        _ dir: FilePath, prefix: String, seen: inout [String: FilePath], problems: inout [TreeProblem]
    ) {
        guard let entries = try? SystemCalls.listDirectory(dir) else {
            problems.append(.directoryUnlistable(path: prefix.isEmpty ? "(root)" : prefix))
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
            default: problems.append(.notRegularFile(path: rel))
            }
        }
    }
}

/// One optional problem per listed file, written by the workers of a verification (each slot by
/// one worker only).
private final class ProblemSlots: Sendable {
    private let slots: Mutex<[TreeProblem?]>
    init(_ count: Int) { slots = Mutex([TreeProblem?](repeating: nil, count: count)) }
    func set(_ i: Int, _ problem: TreeProblem?) {
        guard let problem else { return }
        slots.withLock { $0[i] = problem }
    }
    var all: [TreeProblem] { slots.withLock { $0.compactMap { $0 } } }
}

/// One way an installed tree differs from its file list.
package enum TreeProblem: Sendable, Equatable, CustomStringConvertible {
    /// A listed file is not in the tree.
    case missing(path: String)
    /// A regular file in the tree is not in the list.
    case notListed(path: String)
    /// A listed file cannot be opened (or is a link).
    case unreadable(path: String)
    /// Reading a listed file failed midway.
    case readError(path: String)
    /// A listed file's size or SHA-256 is not the list's.
    case contentDiffers(path: String, size: Int64, sha256: SHA256Digest, listedSize: Int64, listedSHA256: SHA256Digest)
    /// Something in the tree is neither a regular file nor a directory (a link, a device, …).
    case notRegularFile(path: String)
    /// A directory of the tree cannot be listed.
    case directoryUnlistable(path: String)

    /// The path, under the tree, of the file concerned.
    package var path: String {
        switch self {
        case .missing(let p), .notListed(let p), .unreadable(let p), .readError(let p), .notRegularFile(let p),
            .directoryUnlistable(let p):
            p
        case .contentDiffers(let p, _, _, _, _): p
        }
    }

    /// A stable code, for `--json` and scripts.
    package var code: String {
        switch self {
        case .missing: "file-missing"
        case .notListed: "file-not-listed"
        case .unreadable: "file-unreadable"
        case .readError: "file-read-error"
        case .contentDiffers: "file-differs"
        case .notRegularFile: "not-a-regular-file"
        case .directoryUnlistable: "directory-unlistable"
        }
    }

    /// The file and what is wrong with it, as `path: …`.
    package var description: String {
        switch self {
        case .missing(let p): "\(p): missing"
        case .notListed(let p): "\(p): not in the file list"
        case .unreadable(let p): "\(p): unreadable"
        case .readError(let p): "\(p): read error"
        case .contentDiffers(let p, let size, let sha, let listedSize, let listedSHA):
            "\(p): \(size) bytes sha256 \(sha), the list says \(listedSize) bytes sha256 \(listedSHA)"
        case .notRegularFile(let p): "\(p): not a regular file or directory"
        case .directoryUnlistable(let p): "\(p): cannot list the directory"
        }
    }
}
