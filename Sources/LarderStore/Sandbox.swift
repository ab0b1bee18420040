import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import Logging
import SystemPackage

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A sandbox opened for writing: holds the writer lock until `close()`, and has recovered from
/// any interrupted operation when `open` returns.
///
/// Invariants kept here: a version's tree is extracted into a fresh staging directory, verified
/// file by file, made durable, and only then renamed into `packages/`; `state.json` is the one
/// source of truth, replaced atomically; a tree is deleted only after the state that no longer
/// needs it is durable, by renaming it into `trash/` first.
public final class Sandbox {
    /// Options for opening.
    public struct Options: Sendable {
        /// How long a writer waits for another writer's lock.
        public var lockTimeout: Double = 10
        public var healthPolicy: HealthPolicy = .standard
        public var limits: TreeLimits = .standard
        /// Open even when state.json is unreadable (for `doctor`).
        public var allowCorruptState = false
        public var clock: @Sendable () -> Date = { Date() }
        public var logger = Logger(label: "larder.store")

        /// The defaults.
        public init() {}
    }

    public let layout: SandboxLayout
    /// The state as last written.
    public private(set) var state: SandboxState
    /// Set when state.json could not be read (only with `allowCorruptState`).
    public private(set) var stateProblem: String?
    private let options: Options
    private var lock: FileLock?

    private init(layout: SandboxLayout, state: SandboxState, options: Options, lock: FileLock) {
        self.layout = layout
        self.state = state
        self.options = options
        self.lock = lock
    }

    /// Opens (creating it if needed) the sandbox at `root` for writing: takes the lock, then
    /// recovers — empties `staging/` and `trash/`, removes trees and lists the state does not
    /// know (an install or deletion interrupted before or after its state write), and reads
    /// `state.json`.
    public static func open(_ root: FilePath, options: Options = Options()) throws(StoreError) -> Sandbox {
        let layout = SandboxLayout(root: root)
        try io { try AtomicFile.makeDirectories(root) }
        let lock: FileLock
        do { lock = try FileLock(path: layout.lock, timeout: options.lockTimeout) } catch {
            switch error {
            case .locked(let pid, let waited): throw .locked(holderPID: pid, waitedSeconds: waited)
            case .io(let e): throw .io(e)
            }
        }
        for dir in [layout.packages, layout.lists, layout.staging, layout.downloads, layout.trash, layout.pins] {
            try io { try AtomicFile.makeDirectories(dir) }
        }
        emptyDirectory(layout.staging)
        emptyDirectory(layout.trash)
        removeTemporaryStateFiles(layout)
        var state = SandboxState()
        var problem: String?
        if AtomicFile.exists(layout.state) {
            do {
                let data = try AtomicFile.read(layout.state)
                state = try ManifestCoding.decode(SandboxState.self, from: data, document: "state.json")
            } catch {
                guard options.allowCorruptState else { throw .corruptState(detail: "\(error)") }
                problem = "\(error)"
            }
        } else if !(try installedTrees(layout)).isEmpty {
            guard options.allowCorruptState else { throw .missingState }
            problem = "state.json is missing"
        }
        let sandbox = Sandbox(layout: layout, state: state, options: options, lock: lock)
        sandbox.stateProblem = problem
        if problem == nil { try sandbox.removeUnknownTrees() }
        // A writer that died between its state write and its generation write left readers a
        // stale number; publishing it again here makes them notice.
        GenerationFile.publish(layout, state.generation)
        return sandbox
    }

    /// Releases the lock. The sandbox must not be used afterwards.
    public func close() {
        lock?.unlock()
        lock = nil
    }

    deinit { close() }

    /// The clock, in whole seconds (as state.json stores it).
    private var now: Date { Date(timeIntervalSince1970: options.clock().timeIntervalSince1970.rounded(.down)) }

    /// Refuses to change anything through a closed handle or over an unreadable state.
    private func requireWritable() throws(StoreError) {
        guard lock != nil else { throw .closed }
        if let p = stateProblem { throw .corruptState(detail: p) }
    }

    // MARK: install

    /// Installs a bundle as `version` of `id` and activates it (pending, the previous active
    /// version kept as fallback). The bundle is extracted into a fresh staging directory, hashing
    /// while writing; every file is checked against `fileList` (size, SHA-256, nothing missing,
    /// nothing extra) — without a list the bundle itself is trusted and its computed list is
    /// recorded. A version already on disk is re-activated without extracting.
    public func install(
        bundle: FilePath, id idText: String, version versionText: String, fileList: FileList? = nil, force: Bool = false
    ) throws(StoreError) -> InstallReport {
        try install(bundle: bundle, id: idText, version: versionText, fileList: fileList, force: force, activate: true)
    }

    /// As `install`, but with `activate: false` the verified version is only placed on disk and
    /// recorded, to be activated later with others (`activate(_:)`).
    public func install(
        bundle: FilePath, id idText: String, version versionText: String, fileList: FileList?, force: Bool, activate: Bool
    ) throws(StoreError) -> InstallReport {
        try requireWritable()
        guard let id = PackageID(idText) else { throw .badID(idText) }
        guard let version = SemanticVersion(versionText) else { throw .badVersion(versionText) }
        return try install(id: id, version: version, fileList: fileList, force: force, activate: activate) { () throws(StoreError) in
            let area = try makeStagingArea(id: id, version: version)
            do throws(StoreError) {
                // With a file list every SHA-256 is checked against it, which makes the CRC redundant.
                return try area.extract(bundle: bundle, checkCRC: fileList == nil)
            } catch {
                area.discard()
                throw error
            }
        }
    }

    /// Installs a bundle already extracted into a staging area (by `StagingArea.extract`, on any
    /// thread): its listing is checked against `fileList` like a bundle's, and it is placed; with
    /// `activate`, activated as pending. The staging area is consumed either way.
    public func install(staged: StagedBundle, fileList: FileList, activate: Bool) throws(StoreError) -> InstallReport {
        defer { staged.area.discard() }
        try requireWritable()
        return try install(id: staged.area.id, version: staged.area.version, fileList: fileList, force: false, activate: activate) {
            () throws(StoreError) in staged
        }
    }

    /// A fresh staging area for one version (see `StagingArea`).
    public func makeStagingArea(id: PackageID, version: SemanticVersion) throws(StoreError) -> StagingArea {
        try requireWritable()
        let dir = try makeStagingDirectory("\(id)@\(version)")
        return StagingArea(id: id, version: version, directory: dir, limits: options.limits)
    }

    /// The install of both kinds: the state's checks (a failed version, a vanished tree, a
    /// version already on disk), then `stage` for the extracted tree, checked against the list
    /// and placed.
    private func install(
        id: PackageID, version: SemanticVersion, fileList: FileList?, force: Bool, activate: Bool,
        stage: () throws(StoreError) -> StagedBundle
    ) throws(StoreError) -> InstallReport {
        if let list = fileList, list.id != id || list.version != version {
            throw .fileList("it describes \(list.id) \(list.version), not \(id) \(version)")
        }
        var pkg = state[id]
        var changed = false
        if let failed = pkg.failed.first(where: { $0.version == version }) {
            guard force else { throw .previouslyFailed(id: id.rawValue, version: version.description, reason: failed.reason) }
            pkg.failed.removeAll { $0.version == version }
            pkg.record(HistoryEntry(event: "unfail", version: version, reason: "installed with --force (was: \(failed.reason))", at: now))
            changed = true
        }
        let previous = pkg.active
        let target = layout.tree(id, version)
        if pkg.has(version), !AtomicFile.isDirectory(target) {
            // The state names a tree that is gone: forget it and install afresh.
            pkg.versions.removeAll { $0.version == version }
            if pkg.active == version { pkg.active = nil }
            if pkg.fallback == version { pkg.fallback = nil }
            pkg.record(HistoryEntry(event: "forget", version: version, reason: "its tree was missing from disk", at: now))
            changed = true
        }
        if let existing = pkg.versions.first(where: { $0.version == version }) {
            if let list = fileList {
                let problems = TreeCheck.problems(tree: target, list: list)
                if !problems.isEmpty { throw .verification(id: id.rawValue, version: version.description, problems: problems) }
            }
            var outcome = "unchanged"
            if activate, pkg.active != version {
                pkg.activate(version, event: "activate", reason: "installed again (already on disk)", at: now)
                outcome = "activated"
                changed = true
            }
            if changed {
                state[id] = pkg
                try commit()
            }
            return InstallReport(
                id: id.rawValue, version: version.description, outcome: outcome, previous: previous?.description,
                fallback: pkg.fallback?.description, fileCount: existing.fileCount, size: existing.size,
                verifiedAgainstFileList: fileList != nil)
        }

        // Changes made above (a failed mark cleared, a vanished tree forgotten) are committed
        // with the placement below.
        if changed { state[id] = pkg }

        // Extracted into a directory nothing else shares and made durable, then verified.
        let staged = try stage()
        defer { staged.area.discard() }
        let list = fileList ?? FileList(id: id, version: version, files: staged.listing.files)
        let problems = Self.compare(staged.listing.files, list)
        if !problems.isEmpty {
            throw .verification(id: id.rawValue, version: version.description, problems: problems)
        }
        let record = try place(tree: staged.area.tree, id: id, version: version, list: list, trusted: fileList == nil)
        pkg = state[id]
        if activate {
            pkg.activate(version, event: "activate", at: now)
            state[id] = pkg
            try commit()
        }
        options.logger.debug("installed", metadata: ["id": "\(id)", "version": "\(version)", "files": "\(list.files.count)"])
        return InstallReport(
            id: id.rawValue, version: version.description, outcome: activate ? "installed" : "placed", previous: previous?.description,
            fallback: pkg.fallback?.description, fileCount: record.fileCount, size: record.size,
            verifiedAgainstFileList: fileList != nil)
    }

    /// Moves a verified, durable tree into `packages/<id>/<version>` with its list, and records
    /// it in the state (not active). The list is written first, then the tree renamed, then the
    /// state that names both.
    private func place(tree: FilePath, id: PackageID, version: SemanticVersion, list: FileList, trusted: Bool) throws(StoreError) -> InstalledVersion {
        let listPath = layout.list(id, version)
        let target = layout.tree(id, version)
        try io { try AtomicFile.makeDirectories(listPath.removingLastComponent()) }
        try io { try AtomicFile.write(try ManifestCoding.encode(list), to: listPath) }
        try io { try AtomicFile.makeDirectories(target.removingLastComponent()) }
        if AtomicFile.exists(target) {
            // A copy the state does not name, left by an interrupted operation and kept because a
            // session pinned it.
            if Pins.isPinned(layout, id, version) {
                _ = unlink(listPath.string)
                throw .versionBusy(id: id.rawValue, version: version.description)
            }
            try removeTree(id, version, keepList: true)
        }
        if rename(tree.string, target.string) != 0 {
            let e = Errno(rawValue: errno)
            _ = unlink(listPath.string)
            throw .io(FileSystemError("rename", tree, e))
        }
        try io { try AtomicFile.syncDirectory(target.removingLastComponent()) }
        var pkg = state[id]
        let record = InstalledVersion(version: version, fileCount: list.files.count, size: list.totalSize, installedAt: now)
        pkg.versions.removeAll { $0.version == version }
        pkg.versions.append(record)
        pkg.record(HistoryEntry(event: "install", version: version, reason: trusted ? "bundle trusted (no file list)" : "verified against its file list", at: now))
        state[id] = pkg
        try commit()
        return record
    }

    /// A fresh directory under `staging/` that nothing else shares, for assembling a tree
    /// outside `install` (sync's object updates). Removed by the next recovery if abandoned.
    public func makeStagingDirectory(_ label: String) throws(StoreError) -> FilePath {
        try requireWritable()
        let dir = layout.staging.appending("\(label)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try io { try AtomicFile.makeDirectories(dir.appending("tree")) }
        return dir
    }

    /// Installs a tree assembled under a staging directory from `makeStagingDirectory`: it is
    /// checked file by file against `list` (size, SHA-256, nothing missing or extra), made
    /// durable, and placed; with `activate`, activated as pending.
    public func installAssembled(stagingDirectory: FilePath, list: FileList, activate: Bool) throws(StoreError) -> InstalledVersion {
        try requireWritable()
        let tree = stagingDirectory.appending("tree")
        defer { try? FileManager.default.removeItem(atPath: stagingDirectory.string) }
        let problems = TreeCheck.problems(tree: tree, list: list)
        if !problems.isEmpty {
            throw .verification(id: list.id.rawValue, version: list.version.description, problems: problems)
        }
        let dir: FileDescriptor
        do { dir = try FileDescriptor.open(tree, .readOnly, options: [.directory]) } catch {
            throw .io(FileSystemError("open", tree, (error as? Errno) ?? .ioError))
        }
        defer { try? dir.close() }
        #if os(Linux)
            do { try AtomicFile.syncFileSystem(dir.rawValue, path: tree) } catch { throw .io(error) }
        #else
            // Elsewhere: each file, then each directory (assembled trees are small updates).
            for f in list.files {
                guard let fd = try? FileDescriptor.open(tree.appending(f.path.string), .readOnly) else { continue }
                defer { try? fd.close() }
                do { try AtomicFile.sync(fd, path: tree.appending(f.path.string)) } catch { throw .io(error) }
            }
            do { try AtomicFile.sync(dir, path: tree) } catch { throw .io(error) }
        #endif
        let record = try place(tree: tree, id: list.id, version: list.version, list: list, trusted: false)
        if activate { try self.activate([(list.id, list.version)]) }
        return record
    }

    /// Activates several versions (already on disk) in one state write: a dependency group
    /// becomes active together or not at all.
    public func activate(_ versions: [(PackageID, SemanticVersion)], reason: String? = nil) throws(StoreError) {
        try requireWritable()
        for (id, v) in versions where !state[id].has(v) {
            throw .notInstalled(id: id.rawValue, version: v.description)
        }
        for (id, v) in versions {
            var pkg = state[id]
            if pkg.active != v { pkg.activate(v, event: "activate", reason: reason, at: now) }
            state[id] = pkg
        }
        try commit()
    }

    /// Records a version as failed (never installed again automatically) and stops using it as
    /// the fallback — for a revoked version the device has moved off.
    public func markFailed(id idText: String, version versionText: String, reason: String) throws(StoreError) {
        try requireWritable()
        guard let id = PackageID(idText) else { throw .badID(idText) }
        guard let v = SemanticVersion(versionText) else { throw .badVersion(versionText) }
        var pkg = state[id]
        if pkg.active == v { return }
        if !pkg.hasFailed(v) { pkg.failed.append(FailedVersion(version: v, reason: reason, at: now)) }
        if pkg.fallback == v { pkg.fallback = nil }
        state[id] = pkg
        try commit()
    }

    /// Records the index a sync accepted (before acting on it), durably.
    public func recordIndex(_ accepted: AcceptedIndex) throws(StoreError) {
        try requireWritable()
        state.index = accepted
        try commit()
    }

    /// Forgets a package that left the index: its versions are deleted like gc deletes them
    /// (state first, then trees via trash), unless a session pins them.
    public func removePackage(id idText: String, reason: String) throws(StoreError) -> [String] {
        try requireWritable()
        guard let id = PackageID(idText) else { throw .badID(idText) }
        guard let pkg = state.packages[id.rawValue] else { throw .unknownPackage(idText) }
        state.packages[id.rawValue] = nil
        try commit()
        var removed: [String] = []
        for v in pkg.versions where !Pins.isPinned(layout, id, v.version) {
            try removeTree(id, v.version)
            removed.append("\(id)@\(v.version)")
        }
        _ = reason
        return removed
    }

    /// Every content (SHA-256) present in an installed version, with one file that holds it.
    public func localContents() -> [SHA256Digest: FilePath] {
        var out: [SHA256Digest: FilePath] = [:]
        for key in state.packages.keys.sorted() {
            guard let id = PackageID(key), let pkg = state.packages[key] else { continue }
            for v in pkg.versions {
                guard let data = try? AtomicFile.read(layout.list(id, v.version)),
                    let list = try? ManifestCoding.decode(FileList.self, from: data, document: "list")
                else { continue }
                for f in list.files where out[f.sha256] == nil {
                    out[f.sha256] = layout.tree(id, v.version).appending(f.path.string)
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

    // MARK: health

    /// The app confirms that the active version of `id` works.
    public func confirm(id idText: String) throws(StoreError) -> HealthOutcome {
        try requireWritable()
        let id = try knownPackage(idText)
        var pkg = state[id]
        pkg.confirm(at: now)
        state[id] = pkg
        try commit()
        return outcome(id, from: nil, to: nil)
    }

    /// Counts a failure of the active version of `id` (a missing file, a crash, a page that did
    /// not load); a pending version with too many failures is rolled back automatically.
    public func reportFailure(id idText: String, reason: String) throws(StoreError) -> HealthOutcome {
        try requireWritable()
        let id = try knownPackage(idText)
        var pkg = state[id]
        let from = pkg.active
        let to = pkg.recordFailure(reason, policy: options.healthPolicy, at: now)
        state[id] = pkg
        try commit()
        return outcome(id, from: to == nil ? nil : from, to: to)
    }

    /// Counts an app launch for every pending package; one still unconfirmed after too many
    /// launches is rolled back automatically.
    public func beginLaunch() throws(StoreError) -> [HealthOutcome] {
        try requireWritable()
        var results: [HealthOutcome] = []
        for key in state.packages.keys.sorted() {
            guard let id = PackageID(key), var pkg = state.packages[key], pkg.health == .pending else { continue }
            let from = pkg.active
            let to = pkg.recordLaunch(policy: options.healthPolicy, at: now)
            state[id] = pkg
            results.append(outcome(id, from: to == nil ? nil : from, to: to))
        }
        if !results.isEmpty { try commit() }
        return results
    }

    private func outcome(_ id: PackageID, from: SemanticVersion?, to: SemanticVersion?) -> HealthOutcome {
        let pkg = state[id]
        return HealthOutcome(
            id: id.rawValue, active: pkg.active?.description, health: pkg.health.rawValue,
            rolledBackTo: to?.description, rolledBackFrom: from?.description)
    }

    // MARK: rollback

    /// Activates the fallback of `id`, or the named version on disk. The version left is recorded
    /// as failed (never installed again automatically).
    public func rollback(id idText: String, to versionText: String? = nil, reason: String = "rolled back by the operator") throws(StoreError) -> RollbackReport {
        try requireWritable()
        let id = try knownPackage(idText)
        var pkg = state[id]
        let target: SemanticVersion
        if let t = versionText {
            guard let v = SemanticVersion(t) else { throw .badVersion(t) }
            guard pkg.has(v) else { throw .notInstalled(id: id.rawValue, version: v.description) }
            target = v
        } else {
            guard let f = pkg.fallback, pkg.has(f) else { throw .noFallback(id: id.rawValue) }
            target = f
        }
        let from = pkg.rollBack(to: target, reason: reason, at: now)
        state[id] = pkg
        try commit()
        return RollbackReport(id: id.rawValue, from: from?.description, to: target.description)
    }

    // MARK: status

    /// Per package: active, fallback and pending versions, versions on disk, disk use, failed
    /// versions and the history of state changes.
    public func status() -> StatusReport {
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
                    role: v.version == pkg.active ? "active" : (v.version == pkg.fallback ? "fallback" : "retained"))
            }
            packages.append(
                PackageStatus(
                    id: key, active: pkg.active?.description, fallback: pkg.fallback?.description,
                    pending: pkg.health == .pending ? pkg.active?.description : nil, health: pkg.health.rawValue,
                    failures: pkg.failures, launches: pkg.launches, versions: versions,
                    diskUse: pkg.versions.reduce(0) { $0 + $1.size }, failed: pkg.failed, history: pkg.history))
        }
        return StatusReport(root: layout.root.string, generation: state.generation, packages: packages)
    }

    // MARK: gc

    /// Deletes versions that are neither active, fallback, pinned by a live session, nor among
    /// the `keep` most recently installed others. The state without them is written first; each
    /// tree is then renamed into `trash/` and deleted. A version pinned between the two steps is
    /// left on disk and removed by a later gc.
    public func gc(keep: Int = 1) throws(StoreError) -> GCReport {
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
                    pkg.record(HistoryEntry(event: "gc", version: v.version, reason: "not active, fallback, pinned or retained", at: now))
                }
            }
            pkg.versions = pkg.versions.filter { v in keepList.contains { $0.version == v.version } }
            state.packages[key] = pkg
        }
        guard !doomed.isEmpty else {
            try removeUnknownTrees()
            return report
        }
        try commit()
        for (id, v) in doomed {
            if Pins.isPinned(layout, id, v.version) {
                report.keptPinned.append("\(id)@\(v.version)")
                continue
            }
            try removeTree(id, v.version)
            report.removed.append("\(id)@\(v.version)")
            report.freedBytes += v.size
        }
        // Copies left behind earlier because a session pinned them go once unpinned.
        try removeUnknownTrees()
        return report
    }

    /// Renames a tree into trash (atomic disappearance), removes its list, then deletes it.
    private func removeTree(_ id: PackageID, _ version: SemanticVersion, keepList: Bool = false) throws(StoreError) {
        let tree = layout.tree(id, version)
        let trashed = layout.trash.appending("\(id)@\(version)-\(UInt32.random(in: 0...UInt32.max))")
        if AtomicFile.exists(tree) {
            if rename(tree.string, trashed.string) != 0 {
                throw .io(FileSystemError("rename", tree, Errno(rawValue: errno)))
            }
            try io { try AtomicFile.syncDirectory(tree.removingLastComponent()) }
        }
        if !keepList { _ = unlink(layout.list(id, version).string) }
        try? FileManager.default.removeItem(atPath: trashed.string)
    }

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
        for (id, version) in try Self.installedTrees(layout) {
            guard let data = try? AtomicFile.read(layout.list(id, version)),
                let list = try? ManifestCoding.decode(FileList.self, from: data, document: "list")
            else {
                problems.append("\(id)@\(version): no readable file list")
                continue
            }
            let found = TreeCheck.problems(tree: layout.tree(id, version), list: list)
            if found.isEmpty {
                verified.append("\(id)@\(version)")
                good[id, default: []].append((version, list))
            } else {
                problems += found.map { "\(id)@\(version): \($0)" }
            }
        }
        if stateProblem == nil {
            for key in state.packages.keys.sorted() {
                guard let id = PackageID(key), let pkg = state.packages[key] else { continue }
                for v in pkg.versions where !(good[id]?.contains { $0.0 == v.version } ?? false) {
                    if !verified.contains("\(id)@\(v.version)") && !problems.contains(where: { $0.hasPrefix("\(id)@\(v.version):") }) {
                        problems.append("\(id)@\(v.version): in state.json but not on disk")
                    }
                }
            }
        }
        guard repair, !problems.isEmpty else {
            return DoctorReport(problems: problems, verifiedVersions: verified, repaired: false)
        }
        guard lock != nil else { throw .closed }
        var rebuilt = SandboxState()
        rebuilt.generation = state.generation
        for (id, versions) in good {
            var pkg = stateProblem == nil ? state[id] : PackageState()
            let onDisk = versions.map(\.0)
            // Keep the state's installation order (gc retention relies on it); versions only
            // found on disk follow, in version order.
            let known = pkg.versions.filter { v in onDisk.contains(v.version) }
            let found = versions.filter { v, _ in !known.contains { $0.version == v } }.sorted { $0.0 < $1.0 }
            pkg.versions = known + found.map { v, list in
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
            pkg.record(HistoryEntry(event: "repair", version: pkg.active, reason: "state rebuilt by doctor from the verified versions on disk", at: now))
            rebuilt[id] = pkg
        }
        // Trees that did not verify are removed; the rebuilt state no longer names them.
        state = rebuilt
        stateProblem = nil
        try commit()
        try removeUnknownTrees()
        return DoctorReport(problems: problems, verifiedVersions: verified, repaired: true)
    }

    // MARK: state and recovery

    /// Replaces state.json (temp → fsync → rename → fsync(dir)) with a new generation.
    private func commit() throws(StoreError) {
        state.generation += 1
        do {
            try AtomicFile.write(try ManifestCoding.encode(state), to: layout.state)
            GenerationFile.publish(layout, state.generation)
        } catch let e as FileSystemError {
            throw .io(e)
        } catch {
            throw .corruptState(detail: "cannot encode the state: \(error)")
        }
    }

    private func knownPackage(_ text: String) throws(StoreError) -> PackageID {
        guard let id = PackageID(text) else { throw .badID(text) }
        guard state.packages[id.rawValue]?.active != nil else { throw .unknownPackage(text) }
        return id
    }

    /// Removes trees and lists that the state does not name (unless a live session pins them):
    /// an install interrupted after its rename but before its state write, or a deletion
    /// interrupted after its state write.
    private func removeUnknownTrees() throws(StoreError) {
        for (id, version) in try Self.installedTrees(layout) where !state[id].has(version) {
            if Pins.isPinned(layout, id, version) { continue }
            options.logger.notice("removing a version the state does not know (interrupted install or deletion)", metadata: ["version": "\(id)@\(version)"])
            try removeTree(id, version)
        }
        for (id, version) in Self.listFiles(layout) where !state[id].has(version) && !AtomicFile.exists(layout.tree(id, version)) {
            _ = unlink(layout.list(id, version).string)
        }
    }

    /// Every `packages/<id>/<version>` directory with a valid id and version name; anything else
    /// there is reported by name and left alone.
    static func installedTrees(_ layout: SandboxLayout) throws(StoreError) -> [(PackageID, SemanticVersion)] {
        var out: [(PackageID, SemanticVersion)] = []
        let ids = (try? FileManager.default.contentsOfDirectory(atPath: layout.packages.string)) ?? []
        for idName in ids.sorted() {
            guard let id = PackageID(idName) else { continue }
            let versions = (try? FileManager.default.contentsOfDirectory(atPath: layout.packages.appending(idName).string)) ?? []
            for v in versions.sorted() {
                guard let version = SemanticVersion(v), version.description == v else { continue }
                out.append((id, version))
            }
        }
        return out
    }

    static func listFiles(_ layout: SandboxLayout) -> [(PackageID, SemanticVersion)] {
        var out: [(PackageID, SemanticVersion)] = []
        let ids = (try? FileManager.default.contentsOfDirectory(atPath: layout.lists.string)) ?? []
        for idName in ids {
            guard let id = PackageID(idName) else { continue }
            let files = (try? FileManager.default.contentsOfDirectory(atPath: layout.lists.appending(idName).string)) ?? []
            for f in files where f.hasSuffix(".json") {
                if let v = SemanticVersion(String(f.dropLast(5))) { out.append((id, v)) }
            }
        }
        return out
    }

    private static func emptyDirectory(_ dir: FilePath) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: dir.string)) ?? []
        for n in names { try? FileManager.default.removeItem(atPath: dir.appending(n).string) }
    }

    /// Removes the temporary files of interrupted atomic writes (state.json and file lists).
    private static func removeTemporaryStateFiles(_ layout: SandboxLayout) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: layout.root.string)) ?? []
        for n in names where n.hasPrefix(".state.json.tmp-") { _ = unlink(layout.root.appending(n).string) }
        let ids = (try? FileManager.default.contentsOfDirectory(atPath: layout.lists.string)) ?? []
        for id in ids {
            let dir = layout.lists.appending(id)
            let files = (try? FileManager.default.contentsOfDirectory(atPath: dir.string)) ?? []
            for f in files where f.hasPrefix(".") && f.contains(".tmp-") { _ = unlink(dir.appending(f).string) }
        }
    }
}

/// Runs a file-system step, mapping its error into `StoreError.io`.
func io<T>(_ body: () throws -> T) throws(StoreError) -> T {
    do {
        return try body()
    } catch let e as FileSystemError {
        throw .io(e)
    } catch let e as StoreError {
        throw e
    } catch {
        throw .io(FileSystemError("file operation", FilePath("."), .ioError))
    }
}
