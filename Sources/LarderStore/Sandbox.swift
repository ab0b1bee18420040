import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import Logging
import SystemPackage

/// A sandbox opened for writing: holds the writer lock until `close()`, and has recovered from
/// any interrupted operation when `open` returns.
///
/// Invariants kept here: a version's tree is extracted into a fresh staging directory, verified
/// file by file, made durable, and only then renamed into `packages/`; `state.json` is the one
/// source of truth, replaced atomically; a tree is deleted only after the state that no longer
/// needs it is durable, by renaming it into `trash/` first.
package final class Sandbox {
    /// Options for opening.
    package struct Options: Sendable {
        /// How long a writer waits for another writer's lock.
        package var lockTimeout: Double = 10
        /// The thresholds of the automatic rollback (3 failures, 3 unconfirmed launches by default).
        package var healthPolicy: HealthPolicy = .standard
        /// The bounds the archive reader enforces on a bundle being installed.
        package var limits: TreeLimits = .standard
        /// Open even when state.json is unreadable (for `doctor`).
        package var allowCorruptState = false
        /// The time written into state.json, rounded down to whole seconds; tests inject one.
        package var clock: @Sendable () -> Date = { Date() }
        /// Where the store logs what it does (recovery, installs).
        package var logger = Logger(label: "larder.store")
        /// Told of every state write, for a resolver of the same process (see `ServingHandoff`).
        package var handoff: ServingHandoff?
        /// How stored blobs are decoded (`BytePipeline.standard`: format version 1).
        package var pipeline: BytePipeline = .standard

        /// The defaults.
        package init() {}
    }

    /// The paths of the sandbox's files and directories.
    package let layout: SandboxLayout
    /// The state as last written.
    package internal(set) var state: SandboxState
    /// Set when state.json could not be read (only with `allowCorruptState`).
    package internal(set) var stateProblem: String?
    let options: Options
    var lock: FileLock?
    /// Set inside `batched`: `commit()` only notes that the state changed.
    var deferringCommits = false
    /// A state change waits for the commit that ends the batch.
    var uncommitted = false
    /// File lists waiting under `staging/` as the bytes they were decoded from, by
    /// `id@version` (see `provideListBytes`).
    var stagedLists: [String: FilePath] = [:]
    /// Encodes state.json again only for the packages changed since the last write.
    let stateEncoder = StateEncoder()
    /// Set once `removeUnknownTrees` has listed the whole sandbox through this handle.
    var scanned = false
    /// Versions whose tree or list this handle may have left on disk unknown to the state since
    /// that scan (see `settleTrees`).
    var unsettled: Set<TreeName> = []
    /// Set while the last state write failed: state.json may hold the state it was writing, so
    /// nothing is removed for being unknown to the state in memory until a write succeeds.
    var diskStateUnknown = false

    /// Set when the sandbox lies on a read-only file system: it was opened for reading only (no
    /// lock, no recovery), and every change fails with this error.
    package internal(set) var readOnly: FileSystemError?

    private init(layout: SandboxLayout, state: SandboxState, options: Options, lock: FileLock?) {
        self.layout = layout
        self.state = state
        self.options = options
        self.lock = lock
    }

    /// Opens (creating it if needed) the sandbox at `root` for writing: takes the lock, then
    /// recovers — empties `staging/` and `trash/`, removes trees and lists the state does not
    /// know (an install or deletion interrupted before or after its state write), and reads
    /// `state.json`.
    package static func open(_ root: FilePath, options: Options = Options()) throws(StoreError) -> Sandbox {
        let layout = SandboxLayout(root: root)
        try io { () throws(FileSystemError) in try AtomicFile.makeDirectories(root) }
        var lock: FileLock?
        var readOnly: FileSystemError?
        do { lock = try FileLock(path: layout.lock, timeout: options.lockTimeout) } catch {
            switch error {
            case .locked(let pid, let waited): throw .locked(holderPID: pid, waitedSeconds: waited)
            // On a read-only file system no writer can change the sandbox under us: it opens for
            // reading (status, resolve, doctor work), and every change fails naming the mount.
            case .io(let e) where e.errno == .readOnlyFileSystem: readOnly = e
            case .io(let e): throw .io(e)
            }
        }
        if readOnly == nil {
            let dirs = [
                layout.packages, layout.lists, layout.staging, layout.downloads, layout.trash, layout.pins,
                layout.usage,
            ]
            try io { () throws(FileSystemError) in try AtomicFile.makeDirectories(dirs) }
            emptyDirectory(layout.staging)
            emptyDirectory(layout.trash)
            removeTemporaryStateFiles(layout)
        }
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
        if problem != nil, let word = GenerationFile.read(layout) {
            // A state rebuilt from nothing (doctor) goes on from the last generation published:
            // generations only grow, so no reader takes a new state for one it has seen.
            state.generation = max(state.generation, word)
        }
        let sandbox = Sandbox(layout: layout, state: state, options: options, lock: lock)
        sandbox.stateProblem = problem
        sandbox.readOnly = readOnly
        guard readOnly == nil else { return sandbox }
        if problem == nil { try sandbox.removeUnknownTrees() }
        // A writer that died between its state write and its generation write left readers a
        // stale number; publishing it again here makes them notice.
        GenerationFile.publish(layout, state.generation)
        return sandbox
    }

    /// Releases the lock. The sandbox must not be used afterwards.
    package func close() {
        lock?.unlock()
        lock = nil
    }

    deinit { close() }

    /// The clock, in whole seconds (as state.json stores it).
    var now: Date { Date(timeIntervalSince1970: options.clock().timeIntervalSince1970.rounded(.down)) }

    /// Refuses to change anything through a closed handle or over an unreadable state.
    func requireWritable() throws(StoreError) {
        if let e = readOnly { throw .io(e) }
        guard lock != nil else { throw .closed }
        if let p = stateProblem { throw .corruptState(detail: p) }
    }

    // MARK: state and recovery

    /// Replaces state.json (temp → fsync → rename → fsync(dir)) with a new generation; inside
    /// `batched`, only notes the change for the batch's one commit.
    func commit() throws(StoreError) {
        if deferringCommits {
            uncommitted = true
            return
        }
        state.generation += 1
        let data: Data
        do { data = try stateEncoder.encode(state) } catch {
            throw .encoding(document: "state.json", detail: "\(error)")
        }
        // Until the write succeeds, which state state.json holds is not known (a rename can
        // reach the disk before a failed directory sync).
        diskStateUnknown = true
        try io { () throws(FileSystemError) in try AtomicFile.write(data, to: layout.state) }
        diskStateUnknown = false
        GenerationFile.publish(layout, state.generation)
        options.handoff?.wroteState(state, layout)
    }

    /// Runs `body` (a phase of a sync acting on many packages) with one durable state write for
    /// all the changes it makes, instead of one per change: the state grows with the number of
    /// packages, so a write per package made a sync quadratic. Crash-consistent all the same:
    /// trees placed in the batch are unknown to the durable state until the batch's commit, so a
    /// crash before it leaves every package on its old version (recovery removes those trees).
    /// When the commit fails, the state in memory goes back to what is durable and the error is
    /// thrown; the caller treats every change of the batch as not made.
    package func batched(_ body: () -> Void) throws(StoreError) {
        precondition(!deferringCommits, "batches do not nest")
        let durable = state
        deferringCommits = true
        body()
        deferringCommits = false
        guard uncommitted else { return }
        uncommitted = false
        do throws(StoreError) { try commit() } catch {
            // The generation the failed write used stays taken: the write may have reached the
            // disk (a rename made before a failed directory sync), and a generation names one
            // state only.
            let attempted = state.generation
            state = durable
            state.generation = max(durable.generation, attempted)
            throw error
        }
    }

    /// Hands over the exact bytes `list` was decoded from (a sync's download, verified against
    /// the signed index, or the file `install --files` read). They are written under `staging/`
    /// at once (so the caller need not keep them), and when that version is placed they become
    /// its file list under `lists/` as they are, instead of the list being encoded again — for
    /// 20,000 files that encoding held some 17 MB at once, the peak of an install. Best effort:
    /// without them the list is encoded as before.
    package func provideListBytes(_ data: Data, for list: FileList) {
        let path = layout.stagedList(list.id, list.version)
        do { try AtomicFile.write(data, to: path) } catch { return }
        stagedLists["\(list.id)@\(list.version)"] = path
    }

    /// Removes the bytes handed over by `provideListBytes` for `list` unless its version was placed
    /// with them.
    func discardStagedList(_ list: FileList) {
        if let path = stagedLists.removeValue(forKey: "\(list.id)@\(list.version)") { try? SystemCalls.unlink(path) }
    }

    /// Removes the file lists handed over by `provideListBytes` whose version was not placed (a
    /// package that failed); the next open would remove them anyway.
    package func discardStagedLists() {
        for path in stagedLists.values { try? SystemCalls.unlink(path) }
        stagedLists = [:]
    }

    func knownPackage(_ text: String) throws(StoreError) -> PackageID {
        guard let id = PackageID(text) else { throw .badID(text) }
        return try knownPackage(id)
    }

    func knownPackage(_ id: PackageID) throws(StoreError) -> PackageID {
        guard state.packages[id.rawValue]?.active != nil else { throw .unknownPackage(id.rawValue) }
        return id
    }

    /// Removes trees and lists that the state does not name (unless a live session pins them):
    /// an install interrupted after its rename but before its state write, or a deletion
    /// interrupted after its state write.
    func removeUnknownTrees() throws(StoreError) {
        var complete = true
        for (id, version) in try Self.installedTrees(layout, complete: &complete) where !state[id].has(version) {
            if Pins.isPinned(layout, id, version) {
                unsettled.insert(TreeName(id: id, version: version))
                continue
            }
            try removeUnknown(id, version)
        }
        for (id, version) in Self.listFiles(layout, complete: &complete)
        where !state[id].has(version) && !AtomicFile.exists(layout.tree(id, version)) {
            try? SystemCalls.unlink(layout.list(id, version))
        }
        // A directory that could not be listed leaves the next gc to list everything again.
        scanned = complete
    }

    /// What `removeUnknownTrees` does, for the trees this handle may have left unknown since its
    /// full scan (`unsettled`): a version placed whose state write failed, a version forgotten
    /// while a session pinned it. Every other tree on disk was known to the state at that scan,
    /// and only this handle, holding the lock, has changed the sandbox since — so gc, which ends
    /// every sync, need not list every package's directory again (20,000 directory reads at
    /// 10,000 packages, 6 % of a one-package update).
    func settleTrees() throws(StoreError) {
        // After a failed state write the file may name what memory does not: the next open
        // decides, from the file.
        guard !diskStateUnknown else { return }
        guard scanned else { return try removeUnknownTrees() }
        for name in unsettled {
            if state[name.id].has(name.version) {
                unsettled.remove(name)
                continue
            }
            if Pins.isPinned(layout, name.id, name.version) { continue }
            try removeUnknown(name.id, name.version)
            unsettled.remove(name)
        }
    }

    /// Removes a version the state does not name: its tree (saying so) and its list.
    private func removeUnknown(_ id: PackageID, _ version: SemanticVersion) throws(StoreError) {
        if AtomicFile.exists(layout.tree(id, version)) {
            options.logger.notice(
                "removing a version the state does not know (interrupted install or deletion)",
                metadata: ["version": "\(id)@\(version)"])
        }
        try removeTree(id, version)
    }

    /// The names in `dir` (none when it cannot be listed: recovery and listing are best effort,
    /// and a missing directory is simply empty).
    static func names(_ dir: FilePath) -> [String] {
        var complete = true
        return names(dir, complete: &complete)
    }

    /// The names in `dir`; `complete` becomes false when it cannot be listed (a missing
    /// directory is empty).
    static func names(_ dir: FilePath, complete: inout Bool) -> [String] {
        do { return try SystemCalls.listDirectory(dir).map(\.string) } catch {
            if AtomicFile.exists(dir) { complete = false }
            return []
        }
    }

    /// Every `packages/<id>/<version>` directory with a valid id and version name; anything else
    /// there is left alone.
    static func installedTrees(_ layout: SandboxLayout) throws(StoreError) -> [(PackageID, SemanticVersion)] {
        var complete = true
        return try installedTrees(layout, complete: &complete)
    }

    /// `installedTrees`, with `complete` false when a directory could not be listed.
    static func installedTrees(_ layout: SandboxLayout, complete: inout Bool) throws(StoreError) -> [(
        PackageID, SemanticVersion
    )] {
        var out: [(PackageID, SemanticVersion)] = []
        for idName in names(layout.packages, complete: &complete).sorted() {
            guard let id = PackageID(idName) else { continue }
            for v in names(layout.packages.joined(idName), complete: &complete).sorted() {
                guard let version = SemanticVersion(v), version.description == v else { continue }
                out.append((id, version))
            }
        }
        return out
    }

    /// Every `lists/<id>/<version>.json` with a valid id and version name.
    static func listFiles(_ layout: SandboxLayout, complete: inout Bool) -> [(PackageID, SemanticVersion)] {
        var out: [(PackageID, SemanticVersion)] = []
        for idName in names(layout.lists, complete: &complete) {
            guard let id = PackageID(idName) else { continue }
            for f in names(layout.lists.joined(idName), complete: &complete) where f.hasSuffix(".json") {
                if let v = SemanticVersion(String(f.dropLast(5))) { out.append((id, v)) }
            }
        }
        return out
    }

    /// Removes everything inside `dir` (never following a link out of it).
    static func emptyDirectory(_ dir: FilePath) {
        for entry in (try? SystemCalls.listDirectory(dir)) ?? [] {
            try? SystemCalls.removeTree(dir.joined(entry.name))
        }
    }

    /// Removes the temporary files of interrupted atomic writes (state.json, last-sync.json and
    /// file lists).
    static func removeTemporaryStateFiles(_ layout: SandboxLayout) {
        for n in names(layout.root) where n.hasPrefix(".state.json.tmp-") || n.hasPrefix(".last-sync.json.tmp-") {
            try? SystemCalls.unlink(layout.root.joined(n))
        }
        for id in names(layout.lists) {
            let dir = layout.lists.joined(id)
            for f in names(dir) where f.hasPrefix(".") && f.contains(".tmp-") {
                try? SystemCalls.unlink(dir.joined(f))
            }
        }
    }
}

/// Runs a file-system step, mapping its error into `StoreError.io`.
func io<T>(_ body: () throws(FileSystemError) -> T) throws(StoreError) -> T {
    do {
        return try body()
    } catch {
        throw .io(error)
    }
}

/// Encodes a document the store writes (state, file lists, config), in the canonical form.
func encoded<T: Encodable>(_ value: T, _ document: String) throws(StoreError) -> Data {
    do {
        return try ManifestCoding.encode(value)
    } catch {
        throw .encoding(document: document, detail: "\(error)")
    }
}

/// A version's name under `packages/` and `lists/`.
struct TreeName: Hashable {
    let id: PackageID
    let version: SemanticVersion
}
