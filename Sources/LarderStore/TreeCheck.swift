import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Checks an installed tree against its file list, file by file: every listed file present,
/// a regular file of the listed size and SHA-256, and nothing else in the tree (no extra file,
/// no link, no special file). Used by `doctor` and by the crash tests.
public enum TreeCheck {
    /// Every problem found, as sentences naming the file; empty when the tree is exact.
    public static func problems(tree: FilePath, list: FileList) -> [String] {
        var problems: [String] = []
        var seen: Set<String> = []
        walk(tree, prefix: "", seen: &seen, problems: &problems)
        let listed = Set(list.files.map(\.path.string))
        for extra in seen.subtracting(listed).sorted() { problems.append("\(extra): not in the file list") }
        var buffer = [UInt8](repeating: 0, count: 256 << 10)
        for f in list.files {
            guard seen.contains(f.path.string) else {
                problems.append("\(f.path): missing")
                continue
            }
            let path = tree.appending(f.path.string)
            guard let fd = try? SystemCalls.open(path, .readOnly, options: [.noFollow]) else {
                problems.append("\(f.path): unreadable")
                continue
            }
            defer { try? SystemCalls.close(fd, path: path) }
            var hasher = SHA256Stream()
            var failed = false
            while true {
                guard let n = try? SystemCalls.read(fd, into: &buffer, path: path) else {
                    failed = true
                    break
                }
                if n == 0 { break }
                buffer.withUnsafeBytes { hasher.update(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            }
            if failed {
                problems.append("\(f.path): read error")
            } else if hasher.count != f.size || hasher.finish() != f.sha256 {
                problems.append(
                    "\(f.path): \(hasher.count) bytes sha256 \(hasher.finish()), the list says \(f.size) bytes sha256 \(f.sha256)"
                )
            }
        }
        return problems
    }

    private static func walk(_ dir: FilePath, prefix: String, seen: inout Set<String>, problems: inout [String]) {
        guard let entries = try? SystemCalls.listDirectory(dir) else {
            problems.append("\(prefix.isEmpty ? "(root)" : prefix): cannot list the directory")
            return
        }
        for entry in entries {
            let name = entry.string
            let rel = prefix.isEmpty ? name : prefix + "/" + name
            let full = dir.appending(entry.name)
            guard let st = try? SystemCalls.lstat(full) else { continue }
            switch st.kind {
            case .directory: walk(full, prefix: rel, seen: &seen, problems: &problems)
            case .regular: seen.insert(rel)
            default: problems.append("\(rel): not a regular file or directory")
            }
        }
    }
}
