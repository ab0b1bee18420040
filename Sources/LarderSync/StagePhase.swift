import Foundation
import LarderCore
import LarderFileSystem
import LarderStore
import SystemPackage

/// The stage phase: each fetched release placed on disk under `packages/<id>/<version>/`,
/// verified against its file list — a bundle from its staged extraction or its complete file,
/// else a tree assembled from contents (held, made by patches, or downloaded as objects). It
/// runs inside the activation's batch (`Syncer.placeAndActivate`): a tree placed is unknown to
/// the durable state until that batch's one write.
struct StagePhase {
    let sandbox: Sandbox
    /// The contents the sandbox holds, where.
    let local: [SHA256Digest: FilePath]

    /// Places every release that has a list and no failure yet, recording in each its placement
    /// or why it failed.
    func run(_ releases: inout [Release], contents: FetchPhase.Contents) {
        // Contents made by patches are linked like the ones held.
        let applied = contents.applied
        let sources = applied.isEmpty ? local : local.merging(applied) { x, _ in x }
        let objects = contents.objects
        for i in releases.indices {
            let r = releases[i]
            guard let list = r.list, let method = r.method else { continue }
            if sandbox.state[r.id].has(r.entry.version) {
                // Placed by an earlier sync whose group did not activate: nothing to fetch or build.
                releases[i].placement = Release.Placement(bytes: 0, seconds: 0, method: .local)
                continue
            }
            if let err = r.download.error {
                releases[i].failure = err
                continue
            }
            let started = Date()
            do throws(StoreError) {
                try place(r, list: list, method: method, sources: sources, objects: objects)
                releases[i].placement = Release.Placement(
                    bytes: r.download.bytes, seconds: Date().timeIntervalSince(started) + r.download.seconds,
                    method: method)
            } catch {
                releases[i].failure = .store(error)
            }
        }
    }

    /// Places `r` as what was downloaded for it says: from its bundle, or from contents.
    func place(
        _ r: Release, list: FileList, method: FetchMethod, sources: [SHA256Digest: FilePath],
        objects: [SHA256Digest: FilePath]
    ) throws(StoreError) {
        if let part = r.download.bundle {
            if let staged = r.download.staged {
                _ = try sandbox.install(staged: staged, fileList: list, activate: false)
            } else {
                _ = try sandbox.install(
                    bundle: part, id: r.id, version: r.entry.version, fileList: list, force: false, activate: false)
            }
            try? SystemCalls.unlink(part)
            return
        }
        guard method != .bundle else { throw StoreError.fileList("the bundle was not downloaded") }
        let area = try sandbox.makeStagingArea(id: list.id, version: list.version)
        do throws(StoreError) {
            try area.assemble(list: list, local: sources, objects: objects)
        } catch {
            area.discard()
            throw error
        }
        _ = try sandbox.install(assembled: area, list: list, activate: false)
    }
}
