import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import SystemPackage

extension Sandbox {
    // MARK: status

    /// Per package: active, fallback and pending versions, versions on disk, disk use, failed
    /// versions and the history of state changes.
    package func status() -> StatusReport {
        Self.status(of: state, layout: layout)
    }

    static func status(of state: SandboxState, layout: SandboxLayout) -> StatusReport {
        var packages: [PackageStatus] = []
        for key in state.packages.keys.sorted() {
            guard let pkg = state.packages[key], let id = PackageID(key) else { continue }
            let versions = pkg.versions.map { v in
                PackageStatus.Version(
                    version: v.version.description, fileCount: v.fileCount, size: v.size, installedAt: v.installedAt,
                    pinned: Pins.isPinned(layout, id, v.version),
                    role: v.version == pkg.active ? .active : (v.version == pkg.fallback ? .fallback : .retained))
            }
            packages.append(
                PackageStatus(
                    id: key, active: pkg.active?.description, fallback: pkg.fallback?.description,
                    pending: pkg.health == .pending ? pkg.active?.description : nil, health: pkg.health,
                    failures: pkg.failures, launches: pkg.launches, versions: versions,
                    diskUse: pkg.versions.reduce(0) { $0 + $1.size }, failed: pkg.failed, history: pkg.history))
        }
        return StatusReport(root: layout.root.string, generation: state.generation, packages: packages)
    }

}
