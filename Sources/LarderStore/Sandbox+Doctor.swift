import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import SystemPackage

extension Sandbox {
    // MARK: doctor

    /// Checks every version the state names against its file list, file by file, and the state
    /// against the disk. With `repair`, rebuilds the state from the versions on disk that verify
    /// (keeping the active version when it verifies, else the highest verified one), and removes
    /// trees that do not verify.
    public func doctor(repair: Bool) throws(StoreError) -> DoctorReport {
        var problems: [String] = []
        if let p = stateProblem { problems.append("state.json: \(p)") }
        var verified: [String] = []
        var good: [PackageID: [(SemanticVersion, FileList)]] = [:]
        // The trees found with a problem, so that one is not also reported as missing.
        var flagged: Set<String> = []
        for (id, version) in try Self.installedTrees(layout) {
            guard let data = try? AtomicFile.read(layout.list(id, version)),
                let list = try? ManifestCoding.decode(FileList.self, from: data, document: "list")
            else {
                problems.append("\(id)@\(version): no readable file list")
                flagged.insert("\(id)@\(version)")
                continue
            }
            let found = TreeCheck.problems(tree: layout.tree(id, version), list: list)
            if found.isEmpty {
                verified.append("\(id)@\(version)")
                good[id, default: []].append((version, list))
            } else {
                problems += found.map { "\(id)@\(version): \($0)" }
                flagged.insert("\(id)@\(version)")
            }
        }
        if stateProblem == nil {
            for key in state.packages.keys.sorted() {
                guard let id = PackageID(key), let pkg = state.packages[key] else { continue }
                for v in pkg.versions where !(good[id]?.contains { $0.0 == v.version } ?? false) {
                    if !verified.contains("\(id)@\(v.version)") && !flagged.contains("\(id)@\(v.version)") {
                        problems.append("\(id)@\(v.version): in state.json but not on disk")
                    }
                }
            }
        }
        guard repair, !problems.isEmpty else {
            return DoctorReport(problems: problems, verifiedVersions: verified, repaired: false)
        }
        if let e = readOnly { throw .io(e) }
        guard lock != nil else { throw .closed }
        var rebuilt = SandboxState()
        rebuilt.generation = state.generation
        for (id, versions) in good {
            rebuilt[id] = rebuiltPackage(stateProblem == nil ? state[id] : PackageState(), from: versions)
        }
        // Trees that did not verify are removed; the rebuilt state no longer names them.
        state = rebuilt
        stateProblem = nil
        try commit()
        try removeUnknownTrees()
        return DoctorReport(problems: problems, verifiedVersions: verified, repaired: true)
    }

    /// `pkg` rebuilt from the `versions` on disk that verified: the state's installation order
    /// kept (gc retention relies on it), versions only found on disk after it in version order;
    /// an active or fallback version not on disk dropped, and with no active version left the
    /// highest verified one active and confirmed.
    func rebuiltPackage(_ pkg: PackageState, from versions: [(SemanticVersion, FileList)]) -> PackageState {
        var pkg = pkg
        let onDisk = versions.map(\.0)
        let known = pkg.versions.filter { v in onDisk.contains(v.version) }
        let found = versions.filter { v, _ in !known.contains { $0.version == v } }.sorted { $0.0 < $1.0 }
        pkg.versions =
            known
            + found.map { v, list in
                InstalledVersion(version: v, fileCount: list.files.count, size: list.totalSize, installedAt: now)
            }
        if let a = pkg.active, !onDisk.contains(a) { pkg.active = nil }
        if let f = pkg.fallback, !onDisk.contains(f) { pkg.fallback = nil }
        if pkg.active == nil {
            let sorted = onDisk.sorted(by: >)
            pkg.active = sorted.first
            pkg.fallback = sorted.dropFirst().first
            pkg.health = .confirmed
        }
        pkg.record(
            HistoryEntry(
                event: .repair, version: pkg.active,
                reason: "state rebuilt by doctor from the verified versions on disk", at: now))
        return pkg
    }

}
