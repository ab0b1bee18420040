import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import SystemPackage

extension StagingArea {
    /// Builds `list`'s tree in this area from contents already in the sandbox (hard links to
    /// `local`, else copies) and downloaded objects (`objects`: stored objects, decoded by the byte
    /// pipeline while their size and SHA-256 are checked). The tree is not yet verified as a whole:
    /// `Sandbox.install(assembled:…)` does that before placing it.
    package func assemble(
        list: FileList, local: [SHA256Digest: FilePath], objects: [SHA256Digest: FilePath]
    ) throws(StoreError) {
        for f in list.files {
            let target = tree.joined(f.path.string)
            try io { () throws(FileSystemError) in try AtomicFile.makeDirectories(target.parentPath) }
            if let source = local[f.sha256] {
                // A hard link shares the content; across file systems (or where links are
                // refused) the bytes are copied.
                do throws(FileSystemError) { try SystemCalls.link(source, to: target) } catch {
                    try io { () throws(FileSystemError) in try SystemCalls.copyFile(source, to: target) }
                }
            } else if let gz = objects[f.sha256] {
                try place(gz, to: target, expecting: f, of: list)
            } else {
                throw .verification(
                    id: list.id.rawValue, version: list.version.description,
                    problems: ["\(f.path): no source for its content"])
            }
        }
    }

    /// Decodes a downloaded object into `target` (the pipeline checks size and SHA-256 while
    /// writing). An object whose content is not the declared one is deleted, so the next sync
    /// fetches it anew.
    func place(_ stored: FilePath, to target: FilePath, expecting f: FileEntry, of list: FileList)
        throws(StoreError)
    {
        do throws(BlobError) { try pipeline.placeObject(stored, at: target, size: f.size, sha256: f.sha256) } catch {
            switch error {
            case .io(let e): throw .io(e)
            case .malformed(_, let detail):
                throw .objectCorrupt(id: list.id.rawValue, version: list.version.description, detail: detail)
            case .mismatch(_, _, let got):
                try? SystemCalls.unlink(stored)
                throw .objectMismatch(object: RepositoryLayout.objectPath(f.sha256), expected: f.sha256, got: got)
            }
        }
    }
}
