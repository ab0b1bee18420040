import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import SystemPackage

extension Sandbox {
    // MARK: gc

    /// Deletes versions that are neither active, fallback, pinned by a live session, nor among
    /// the `keep` most recently installed others. The state without them is written first; each
    /// tree is then renamed into `trash/` and deleted. A version pinned between the two steps is
    /// left on disk and removed by a later gc.
    package func gc(keep: Int = 1) throws(StoreError) -> GCReport {
        try requireWritable()
        var report = GCReport(removed: [], keptPinned: [], freedBytes: 0)
        var doomed: [(PackageID, InstalledVersion)] = []
        for key in state.packages.keys.sorted() {
            guard let id = PackageID(key), var pkg = state.packages[key] else { continue }
            let protected = Set([pkg.active, pkg.fallback].compactMap { $0 })
            var retained = 0
            var keepList: [InstalledVersion] = []
            // Newest first by installation order (`versions` is appended to; timestamps tie).
            for v in pkg.versions.reversed() {
                if protected.contains(v.version) {
                    keepList.append(v)
                } else if Pins.isPinned(layout, id, v.version) {
                    keepList.append(v)
                    report.keptPinned.append("\(id)@\(v.version)")
                } else if retained < keep {
                    retained += 1
                    keepList.append(v)
                } else {
                    doomed.append((id, v))
                    pkg.record(
                        HistoryEntry(
                            event: .gc, version: v.version, reason: "not active, fallback, pinned or retained", at: now)
                    )
                }
            }
            pkg.versions = pkg.versions.filter { v in keepList.contains { $0.version == v.version } }
            state.packages[key] = pkg
        }
        guard !doomed.isEmpty else {
            try settleTrees()
            return report
        }
        try commit()
        // Unknown to the state just written until removed (a pinned one stays for a later gc).
        for (id, v) in doomed { unsettled.insert(TreeName(id: id, version: v.version)) }
        for (id, v) in doomed {
            if Pins.isPinned(layout, id, v.version) {
                report.keptPinned.append("\(id)@\(v.version)")
                continue
            }
            try removeTree(id, v.version)
            unsettled.remove(TreeName(id: id, version: v.version))
            report.removed.append("\(id)@\(v.version)")
            report.freedBytes += v.size
        }
        // Copies left behind earlier because a session pinned them go once unpinned.
        try settleTrees()
        return report
    }

    /// Renames a tree into trash (atomic disappearance), removes its list, then deletes it.
    func removeTree(_ id: PackageID, _ version: SemanticVersion, keepList: Bool = false) throws(StoreError) {
        let tree = layout.tree(id, version)
        let trashed = layout.newTrashEntry(id, version)
        if AtomicFile.exists(tree) {
            try io { () throws(FileSystemError) in try SystemCalls.rename(tree, to: trashed) }
            try io { () throws(FileSystemError) in try AtomicFile.syncDirectory(tree.parentPath) }
        }
        if !keepList { try? SystemCalls.unlink(layout.list(id, version)) }
        // Out of sight already; a failure here leaves bytes in trash/, emptied by the next open.
        try? SystemCalls.removeTree(trashed)
    }

}
