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
    package func doctor(repair: Bool) throws(StoreError) -> DoctorReport {
        var problems: [DoctorFinding] = []
        if let p = stateProblem { problems.append(.stateUnreadable(p)) }
        var verified: [String] = []
        var good: [PackageID: [(SemanticVersion, FileList)]] = [:]
        // The trees found with a problem, so that one is not also reported as missing.
        var flagged: Set<String> = []
        for (id, version) in try Self.installedTrees(layout) {
            guard let data = try? AtomicFile.read(layout.list(id, version)),
                let list = try? ManifestCoding.decode(FileList.self, from: data, document: "list")
            else {
                problems.append(.fileListUnreadable(id, version))
                flagged.insert("\(id)@\(version)")
                continue
            }
            let found = TreeCheck.problems(tree: layout.tree(id, version), list: list)
            if found.isEmpty {
                verified.append("\(id)@\(version)")
                good[id, default: []].append((version, list))
            } else {
                problems += found.map { .treeDiffers(id, version, $0) }
                flagged.insert("\(id)@\(version)")
            }
        }
        if stateProblem == nil {
            for key in state.packages.keys.sorted() {
                guard let id = PackageID(key), let pkg = state.packages[key] else { continue }
                for v in pkg.versions where !(good[id]?.contains { $0.0 == v.version } ?? false) {
                    if !verified.contains("\(id)@\(v.version)") && !flagged.contains("\(id)@\(v.version)") {
                        problems.append(.versionMissing(id, v.version))
                    }
                }
            }
        }
        guard repair, !problems.isEmpty else {
            return DoctorReport(findings: problems, verifiedVersions: verified, repaired: false)
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
        return DoctorReport(findings: problems, verifiedVersions: verified, repaired: true)
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

/// One thing `doctor` found wrong with a sandbox.
package enum DoctorFinding: Sendable, Equatable, CustomStringConvertible {
    /// `state.json` cannot be read or decoded (why).
    case stateUnreadable(String)
    /// A version's tree is on disk without a readable file list.
    case fileListUnreadable(PackageID, SemanticVersion)
    /// A version's tree on disk differs from its file list.
    case treeDiffers(PackageID, SemanticVersion, TreeProblem)
    /// A version `state.json` names is not on disk.
    case versionMissing(PackageID, SemanticVersion)

    /// A stable code, for `--json` and scripts: `state-unreadable`, `file-list-unreadable`,
    /// `version-missing`, or the tree problem's (`file-missing`, `file-differs`, …).
    package var code: String {
        switch self {
        case .stateUnreadable: "state-unreadable"
        case .fileListUnreadable: "file-list-unreadable"
        case .treeDiffers(_, _, let problem): problem.code
        case .versionMissing: "version-missing"
        }
    }

    /// The package concerned, if one is.
    package var id: PackageID? {
        switch self {
        case .stateUnreadable: nil
        case .fileListUnreadable(let id, _), .treeDiffers(let id, _, _), .versionMissing(let id, _): id
        }
    }

    /// The version concerned, if one is.
    package var version: SemanticVersion? {
        switch self {
        case .stateUnreadable: nil
        case .fileListUnreadable(_, let v), .treeDiffers(_, let v, _), .versionMissing(_, let v): v
        }
    }

    /// One line: `id@version: …`, or `state.json: …`.
    package var description: String {
        switch self {
        case .stateUnreadable(let why): "state.json: \(why)"
        case .fileListUnreadable(let id, let v): "\(id)@\(v): no readable file list"
        case .treeDiffers(let id, let v, let problem): "\(id)@\(v): \(problem)"
        case .versionMissing(let id, let v): "\(id)@\(v): in state.json but not on disk"
        }
    }
}
