import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import SystemPackage

extension Sandbox {
    // MARK: activate, record, remove

    /// Activates several versions (already on disk) in one state write: a dependency group
    /// becomes active together or not at all.
    package func activate(_ versions: [(PackageID, SemanticVersion)], reason: String? = nil) throws(StoreError) {
        try requireWritable()
        for (id, v) in versions where !state[id].has(v) {
            throw .notInstalled(id: id.rawValue, version: v.description)
        }
        for (id, v) in versions {
            var pkg = state[id]
            if pkg.active != v { pkg.activate(v, reason: reason, at: now) }
            state[id] = pkg
        }
        try commit()
    }

    /// Records a version as failed (never installed again automatically) and stops using it as
    /// the fallback — for a revoked version the device has moved off.
    package func markFailed(id: PackageID, version v: SemanticVersion, reason: String) throws(StoreError) {
        try requireWritable()
        var pkg = state[id]
        if pkg.active == v { return }
        if !pkg.hasFailed(v) { pkg.failed.append(FailedVersion(version: v, reason: reason, at: now)) }
        if pkg.fallback == v { pkg.fallback = nil }
        state[id] = pkg
        try commit()
    }

    /// Records the index a sync accepted (before acting on it), durably.
    package func recordIndex(_ accepted: AcceptedIndex) throws(StoreError) {
        try requireWritable()
        state.index = accepted
        try commit()
    }

    /// Forgets a package that left the index: its versions are deleted like gc deletes them
    /// (state first, then trees via trash), unless a session pins them.
    package func removePackage(id idText: String, reason: String) throws(StoreError) -> [String] {
        let outcome = try removePackages([idText])
        if let error = outcome.failed[idText] { throw error }
        return outcome.removed[idText] ?? []
    }

    /// As `removePackages(_:)` with typed ids (none of them then refused as a bad id).
    package func removePackages(_ ids: [PackageID]) throws(StoreError) -> (
        removed: [String: [String]], failed: [String: StoreError]
    ) {
        try removePackages(ids.map(\.rawValue))
    }

    /// Forgets several packages with one state write, then deletes their trees (those no session
    /// pins). Returns, per id, the versions deleted, and the ids refused (bad or unknown).
    package func removePackages(_ ids: [String]) throws(StoreError) -> (
        removed: [String: [String]], failed: [String: StoreError]
    ) {
        try requireWritable()
        precondition(!deferringCommits, "trees are removed only after the state without them is durable")
        var failed: [String: StoreError] = [:]
        var gone: [(String, PackageID, PackageState)] = []
        for text in ids {
            guard let id = PackageID(text) else {
                failed[text] = .badID(text)
                continue
            }
            guard let pkg = state.packages[id.rawValue] else {
                failed[text] = .unknownPackage(text)
                continue
            }
            state.packages[id.rawValue] = nil
            gone.append((text, id, pkg))
        }
        guard !gone.isEmpty else { return ([:], failed) }
        try commit()
        var removed: [String: [String]] = [:]
        // Unknown to the state just written until removed (a pinned one stays for a later gc).
        for (_, id, pkg) in gone { for v in pkg.versions { unsettled.insert(TreeName(id: id, version: v.version)) } }
        for (text, id, pkg) in gone {
            var list: [String] = []
            for v in pkg.versions where !Pins.isPinned(layout, id, v.version) {
                do throws(StoreError) { try removeTree(id, v.version) } catch {
                    failed[text] = error
                    break
                }
                unsettled.remove(TreeName(id: id, version: v.version))
                list.append("\(id)@\(v.version)")
            }
            removed[text] = list
        }
        return (removed, failed)
    }

    /// Every content (SHA-256) present in an installed version, with one file that holds it.
    package func localContents() -> [SHA256Digest: FilePath] {
        var out: [SHA256Digest: FilePath] = [:]
        for key in state.packages.keys.sorted() {
            guard let id = PackageID(key), let pkg = state.packages[key] else { continue }
            for v in pkg.versions {
                guard let data = try? AtomicFile.read(layout.list(id, v.version)),
                    let list = try? ManifestCoding.decode(FileList.self, from: data, document: "list")
                else { continue }
                for f in list.files where out[f.sha256] == nil {
                    out[f.sha256] = layout.tree(id, v.version).joined(f.path.string)
                }
            }
        }
        return out
    }

    /// The differences between what a bundle held and what its list says, one sentence each.
    static func compare(_ actual: [FileEntry], _ list: FileList) -> [String] {
        list.differences(from: actual).map { d in
            switch d {
            case .missing(let f): "\(f.path) is listed but not in the bundle"
            case .extra(let f): "\(f.path) is in the bundle but not listed"
            case .differs(let l, let g):
                "\(l.path) is \(g.size) bytes sha256 \(g.sha256), the list says \(l.size) bytes sha256 \(l.sha256)"
            }
        }
    }
}
