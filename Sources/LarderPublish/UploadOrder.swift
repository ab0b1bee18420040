import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

/// The order in which a repository's files reach a server or bucket so that the server never
/// serves an index before the files it names: every immutable file first (objects, bundles, file
/// lists, index copies, patches: any order, and those already there can be skipped, since a path
/// never changes its content), then `index.json`, then `index.json.sig` last.
///
/// The signature goes last because devices read it first: once it is there, everything it
/// names — the index, and through it every file — is already served. (Until then devices see the
/// previous signature, which names the previous index, whose copy under `indexes/` is still
/// there: at no moment does a device see a release it cannot fetch.)
package enum UploadOrder {
    /// One file to upload, in order.
    package struct Step: Sendable, Equatable, Encodable {
        /// What the file is, in upload order.
        package enum Phase: String, Sendable, Encodable {
            /// Never changes once published: upload any time before the index, skip when present.
            case immutable
            /// `index.json`: after every immutable file.
            case index
            /// `index.json.sig`: last.
            case signature
        }

        /// The phase.
        package var phase: Phase
        /// The path relative to the repository root.
        package var path: String
        /// Its length in bytes.
        package var size: Int64
    }

    /// The directories of immutable files.
    static let immutableDirectories = ["objects", "packages", "indexes", "patches", "shards"]

    /// Every file of the repository at `root` a server needs, in upload order. Refuses a
    /// repository with a publication under way or interrupted (a `.pending` index or signature):
    /// what would be uploaded is not a published state.
    package static func plan(_ root: FilePath) throws(PublishError) -> [Step] {
        let layout = RepositoryLayout(root: root)
        for pending in [layout.pendingIndex, layout.pendingSignature] where AtomicFile.exists(pending) {
            throw .publicationPending(path: pending.string)
        }
        var steps: [Step] = []
        for dir in immutableDirectories {
            let path = root.joined(dir)
            guard AtomicFile.isDirectory(path) else { continue }
            try walk(path, relative: dir, into: &steps)
        }
        steps.sort { $0.path.utf8.lexicographicallyPrecedes($1.path.utf8) }
        for (name, phase) in [
            (RepositoryLayout.indexName, Step.Phase.index), (RepositoryLayout.signatureName, .signature),
        ] {
            let status: FileStatus
            do { status = try SystemCalls.stat(root.joined(name)) } catch { throw .io(error) }
            steps.append(Step(phase: phase, path: name, size: status.size))
        }
        return steps
    }

    /// Regular files under `dir`, depth first; staging directories (`.…`) of a pack in progress
    /// are left out.
    private static func walk(_ dir: FilePath, relative: String, into steps: inout [Step]) throws(PublishError) {
        let entries: [DirectoryEntry]
        do { entries = try SystemCalls.listDirectory(dir) } catch { throw .io(error) }
        for entry in entries {
            let name = entry.name.string
            if name.hasPrefix(".") { continue }
            let path = dir.joined(entry.name)
            let status: FileStatus
            do { status = try SystemCalls.stat(path) } catch { throw .io(error) }
            switch status.kind {
            case .directory: try walk(path, relative: relative + "/" + name, into: &steps)
            case .regular: steps.append(Step(phase: .immutable, path: relative + "/" + name, size: status.size))
            default: throw .specialFile(path: path.string, type: "\(status.kind)")
            }
        }
    }

    /// What `perform` did.
    package struct Report: Sendable, Equatable, Encodable {
        /// Files copied, in order.
        package var copied: [String] = []
        /// Immutable files already at the target with the same length, left alone.
        package var skipped = 0
        /// Bytes copied.
        package var bytes: Int64 = 0
    }

    /// Copies the repository at `root` to the directory `target` (a web server's document root,
    /// a mounted bucket) in `plan`'s order. Every file is written under a temporary name, synced
    /// and renamed into place, so that a server never serves half a file; an immutable file
    /// already present with the same length is skipped.
    package static func perform(_ root: FilePath, to target: FilePath) throws(PublishError) -> Report {
        let steps = try plan(root)
        var report = Report()
        do throws(FileSystemError) {
            try AtomicFile.makeDirectories(target)
            for step in steps {
                let destination = target.joined(step.path)
                if step.phase == .immutable, let there = try? SystemCalls.stat(destination), there.kind == .regular,
                    there.size == step.size
                {
                    report.skipped += 1
                    continue
                }
                let dir = destination.parentPath
                try AtomicFile.makeDirectories(dir)
                let temporary = dir.joined(".\(destination.lastComponent?.string ?? "file").upload-\(getpid())")
                try? SystemCalls.unlink(temporary)
                try SystemCalls.copyFile(root.joined(step.path), to: temporary)
                do throws(FileSystemError) {
                    let fd = try SystemCalls.open(temporary, .readOnly, options: [.noFollow])
                    defer { try? SystemCalls.close(fd, path: temporary) }
                    try AtomicFile.sync(fd, path: temporary)
                    try SystemCalls.rename(temporary, to: destination)
                    try AtomicFile.syncDirectory(dir)
                } catch {
                    try? SystemCalls.unlink(temporary)
                    throw error
                }
                report.copied.append(step.path)
                report.bytes += step.size
            }
        } catch { throw .io(error) }
        return report
    }
}
