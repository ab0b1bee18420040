import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import SystemPackage

extension Sandbox {
    // MARK: install

    /// Installs a bundle as `version` of `id` and activates it (pending, the previous active
    /// version kept as fallback). The bundle is extracted into a fresh staging directory, hashing
    /// while writing; every file is checked against `fileList` (size, SHA-256, nothing missing,
    /// nothing extra) — without a list the bundle itself is trusted and its computed list is
    /// recorded. A version already on disk is re-activated without extracting.
    package func install(
        bundle: FilePath, id: PackageID, version: SemanticVersion, fileList: FileList? = nil, force: Bool = false
    ) throws(StoreError) -> InstallReport {
        try install(bundle: bundle, id: id, version: version, fileList: fileList, force: force, activate: true)
    }

    /// As `install(bundle:id:version:fileList:force:)`; with `activate: false` the version is only
    /// placed and recorded, to be activated later with others (`activate(_:)`).
    package func install(
        bundle: FilePath, id: PackageID, version: SemanticVersion, fileList: FileList?, force: Bool, activate: Bool
    ) throws(StoreError) -> InstallReport {
        try requireWritable()
        return try install(id: id, version: version, fileList: fileList, force: force, activate: activate) {
            () throws(StoreError) in
            // With a file list every SHA-256 is checked against it, which makes the CRC redundant.
            try extractStaged(bundle: bundle, id: id, version: version, checkCRC: fileList == nil)
        }
    }

    /// The bundle extracted into a fresh staging area, which is discarded if the extraction fails.
    func extractStaged(bundle: FilePath, id: PackageID, version: SemanticVersion, checkCRC: Bool) throws(StoreError)
        -> StagedBundle
    {
        let area = try makeStagingArea(id: id, version: version)
        do throws(StoreError) {
            return try area.extract(bundle: bundle, checkCRC: checkCRC)
        } catch {
            area.discard()
            throw error
        }
    }

    /// As `install(bundle:id:version:fileList:force:)` with the list still decoding (`pending`):
    /// the bundle is extracted meanwhile — a 21,488-file list takes about 170 ms to decode, which
    /// the extraction otherwise waited for — then checked against the list as usual; the list's
    /// bytes are kept as its file (`provideListBytes`). A version already on disk or marked
    /// failed waits for the list first, as without one (on disk, nothing is placed and the bytes
    /// are not written). A list that does not decode fails the
    /// install (`StoreError.fileList`, before an extraction's own error) with nothing placed.
    package func install(
        bundle: FilePath, id: PackageID, version: SemanticVersion, pending: PendingFileList, force: Bool
    ) throws(StoreError) -> InstallReport {
        try requireWritable()
        func list() throws(StoreError) -> FileList {
            switch pending.result {
            case .success(let list): return list
            case .failure(let error): throw .fileList("\(error)")
            }
        }
        // The list's bytes become its file if its version is placed, and go if it is not.
        func placing(_ list: FileList, _ install: () throws(StoreError) -> InstallReport) throws(StoreError)
            -> InstallReport
        {
            provideListBytes(pending.bytes, for: list)
            defer { discardStagedList(list) }
            return try install()
        }
        let pkg = state[id]
        if pkg.has(version) || pkg.failed.contains(where: { $0.version == version }) {
            let known = try list()
            let again: () throws(StoreError) -> InstallReport = { () throws(StoreError) in
                try self.install(
                    bundle: bundle, id: id, version: version, fileList: known, force: force, activate: true)
            }
            // On disk: checked and re-activated, nothing placed, so the bytes are not written.
            if pkg.has(version) && AtomicFile.isDirectory(layout.tree(id, version)) { return try again() }
            return try placing(known, again)
        }
        let staged: StagedBundle
        do throws(StoreError) {
            // Every SHA-256 is checked against the list (or nothing is placed), so no CRC.
            staged = try extractStaged(bundle: bundle, id: id, version: version, checkCRC: false)
        } catch {
            _ = try list()
            throw error
        }
        defer { staged.area.discard() }
        let known = try list()
        return try placing(known) { () throws(StoreError) in
            try install(id: id, version: version, fileList: known, force: force, activate: true) {
                () throws(StoreError) in staged
            }
        }
    }

    /// Installs a bundle already extracted into a staging area (by `StagingArea.extract`, on any
    /// thread): its listing is checked against `fileList` like a bundle's, and it is placed; with
    /// `activate`, activated as pending. The staging area is consumed either way.
    package func install(staged: StagedBundle, fileList: FileList, activate: Bool) throws(StoreError) -> InstallReport {
        defer { staged.area.discard() }
        try requireWritable()
        return try install(
            id: staged.area.id, version: staged.area.version, fileList: fileList, force: false, activate: activate
        ) {
            () throws(StoreError) in staged
        }
    }

    /// A fresh staging area for one version (see `StagingArea`): a directory under `staging/`
    /// that nothing else shares, removed by the next recovery if abandoned.
    package func makeStagingArea(id: PackageID, version: SemanticVersion, expected: [FileEntry] = []) throws(StoreError)
        -> StagingArea
    {
        try requireWritable()
        var area = StagingArea(
            id: id, version: version, directory: layout.newStagingDirectory(id, version), limits: options.limits)
        area.expected = expected
        area.pipeline = options.pipeline
        try io { () throws(FileSystemError) in try AtomicFile.makeDirectories(area.tree) }
        return area
    }

    /// The install of both kinds: the state's checks (a failed version, a vanished tree, a
    /// version already on disk), then `stage` for the extracted tree, checked against the list
    /// and placed.
    func install(
        id: PackageID, version: SemanticVersion, fileList: FileList?, force: Bool, activate: Bool,
        stage: () throws(StoreError) -> StagedBundle
    ) throws(StoreError) -> InstallReport {
        if let list = fileList, list.id != id || list.version != version {
            throw .fileList("it describes \(list.id) \(list.version), not \(id) \(version)")
        }
        var pkg = state[id]
        var changed = try clearFailedMark(&pkg, id: id, version: version, force: force)
        let previous = pkg.active
        let target = layout.tree(id, version)
        changed = forgetVanishedTree(&pkg, version: version, target: target) || changed
        if let existing = pkg.versions.first(where: { $0.version == version }) {
            // Already on disk: checked against the list when one is given, activated if asked.
            if let list = fileList {
                let problems = TreeCheck.problems(tree: target, list: list)
                if !problems.isEmpty {
                    throw .verification(
                        id: id.rawValue, version: version.description, problems: problems.map(\.description))
                }
            }
            let activated = activate && pkg.active != version
            if activated { pkg.activate(version, reason: "installed again (already on disk)", at: now) }
            if changed || activated {
                state[id] = pkg
                try commit()
            }
            return InstallReport(
                id: id.rawValue, version: version.description, outcome: activated ? .activated : .unchanged,
                previous: previous?.description, fallback: pkg.fallback?.description, fileCount: existing.fileCount,
                size: existing.size, verifiedAgainstFileList: fileList != nil)
        }

        // Changes made above (a failed mark cleared, a vanished tree forgotten) are committed
        // with the placement below.
        if changed { state[id] = pkg }

        let (staged, list) = try verifiedStage(id: id, version: version, fileList: fileList, stage: stage)
        defer { staged.area.discard() }
        // Placed and activated in one state write: a crash before it leaves a tree the state
        // does not name, which the next open removes.
        let record = try place(
            tree: staged.area.tree, id: id, version: version, list: list, trusted: fileList == nil,
            commitState: !activate)
        pkg = state[id]
        if activate {
            pkg.activate(version, at: now)
            state[id] = pkg
            try commit()
        }
        options.logger.debug(
            "installed", metadata: ["id": "\(id)", "version": "\(version)", "files": "\(list.files.count)"])
        return InstallReport(
            id: id.rawValue, version: version.description, outcome: activate ? .installed : .placed,
            previous: previous?.description,
            fallback: pkg.fallback?.description, fileCount: record.fileCount, size: record.size,
            verifiedAgainstFileList: fileList != nil)
    }

    /// Extracted into a directory nothing else shares and made durable, then verified against
    /// `fileList` (or, without one, taken as it is); the staging area is discarded on failure.
    func verifiedStage(
        id: PackageID, version: SemanticVersion, fileList: FileList?, stage: () throws(StoreError) -> StagedBundle
    ) throws(StoreError) -> (StagedBundle, FileList) {
        let staged = try stage()
        let list = fileList ?? FileList(id: id, version: version, files: staged.listing.files)
        let problems = Self.compare(staged.listing.files, list)
        if !problems.isEmpty {
            staged.area.discard()
            throw .verification(id: id.rawValue, version: version.description, problems: problems)
        }
        return (staged, list)
    }

    /// A version that failed before is installed again only with `force`, which clears its mark;
    /// returns whether `pkg` changed.
    func clearFailedMark(_ pkg: inout PackageState, id: PackageID, version: SemanticVersion, force: Bool)
        throws(StoreError) -> Bool
    {
        guard let failed = pkg.failed.first(where: { $0.version == version }) else { return false }
        guard force else {
            throw .previouslyFailed(id: id.rawValue, version: version.description, reason: failed.reason)
        }
        pkg.failed.removeAll { $0.version == version }
        pkg.record(
            HistoryEntry(
                event: .unfail, version: version, reason: "installed with --force (was: \(failed.reason))", at: now))
        return true
    }

    /// The state names a tree that is gone: it is forgotten and installed afresh. Returns whether
    /// `pkg` changed.
    func forgetVanishedTree(_ pkg: inout PackageState, version: SemanticVersion, target: FilePath) -> Bool {
        guard pkg.has(version), !AtomicFile.isDirectory(target) else { return false }
        pkg.versions.removeAll { $0.version == version }
        if pkg.active == version { pkg.active = nil }
        if pkg.fallback == version { pkg.fallback = nil }
        pkg.record(HistoryEntry(event: .forget, version: version, reason: "its tree was missing from disk", at: now))
        return true
    }

    /// Moves a verified, durable tree into `packages/<id>/<version>` with its list, and records
    /// it in the state (not active). The list is written first, then the tree renamed, then the
    /// state that names both — unless `commitState` is false: the caller then changes the state
    /// further and writes it once (the record is in memory only until then).
    func place(
        tree: FilePath, id: PackageID, version: SemanticVersion, list: FileList, trusted: Bool,
        commitState: Bool = true
    ) throws(StoreError) -> InstalledVersion {
        let listPath = layout.list(id, version)
        let target = layout.tree(id, version)
        // Unknown to the durable state until a state write names it.
        unsettled.insert(TreeName(id: id, version: version))
        try io { () throws(FileSystemError) in try AtomicFile.makeDirectories(listPath.parentPath) }
        if let staged = stagedLists.removeValue(forKey: "\(id)@\(version)"), AtomicFile.exists(staged) {
            // The bytes the list was decoded from, already durable under staging/.
            try io { () throws(FileSystemError) in try SystemCalls.rename(staged, to: listPath) }
            try io { () throws(FileSystemError) in try AtomicFile.syncDirectory(listPath.parentPath) }
        } else {
            let listData = try encoded(list, "file list")
            try io { () throws(FileSystemError) in try AtomicFile.write(listData, to: listPath) }
        }
        try io { () throws(FileSystemError) in try AtomicFile.makeDirectories(target.parentPath) }
        if AtomicFile.exists(target) {
            // A copy the state does not name, left by an interrupted operation and kept because a
            // session pinned it.
            if Pins.isPinned(layout, id, version) {
                try? SystemCalls.unlink(listPath)
                throw .versionBusy(id: id.rawValue, version: version.description)
            }
            try removeTree(id, version, keepList: true)
        }
        do throws(FileSystemError) { try SystemCalls.rename(tree, to: target) } catch {
            try? SystemCalls.unlink(listPath)
            throw .io(error)
        }
        try io { () throws(FileSystemError) in try AtomicFile.syncDirectory(target.parentPath) }
        var pkg = state[id]
        let record = InstalledVersion(
            version: version, fileCount: list.files.count, size: list.totalSize, installedAt: now)
        pkg.versions.removeAll { $0.version == version }
        pkg.versions.append(record)
        pkg.record(
            HistoryEntry(
                event: .install, version: version,
                reason: trusted ? "bundle trusted (no file list)" : "verified against its file list", at: now))
        state[id] = pkg
        if commitState { try commit() }
        return record
    }

    /// Installs a tree assembled in `area` (by `StagingArea.assemble`): it is checked file by
    /// file against `list` (size, SHA-256, nothing missing or extra), made durable, and placed;
    /// with `activate`, activated as pending. The staging area is consumed either way.
    package func install(assembled area: StagingArea, list: FileList, activate: Bool) throws(StoreError)
        -> InstalledVersion
    {
        defer { area.discard() }
        try requireWritable()
        let tree = area.tree
        let problems = TreeCheck.problems(tree: tree, list: list)
        if !problems.isEmpty {
            throw .verification(
                id: list.id.rawValue, version: list.version.description, problems: problems.map(\.description))
        }
        let dir = try io { () throws(FileSystemError) in try SystemCalls.open(tree, .readOnly, options: [.directory]) }
        defer { try? SystemCalls.close(dir, path: tree) }
        if SystemCalls.syncsWholeFileSystem {
            try io { () throws(FileSystemError) in try SystemCalls.syncfs(dir, path: tree) }
        } else {
            // Elsewhere: each file, then each directory (assembled trees are small updates).
            for f in list.files {
                let path = tree.joined(f.path.string)
                guard let fd = try? SystemCalls.open(path, .readOnly) else { continue }
                defer { try? SystemCalls.close(fd, path: path) }
                try io { () throws(FileSystemError) in try SystemCalls.fsync(fd, path: path) }
            }
            try io { () throws(FileSystemError) in try SystemCalls.fsync(dir, path: tree) }
        }
        let record = try place(tree: tree, id: list.id, version: list.version, list: list, trusted: false)
        if activate { try self.activate([(list.id, list.version)]) }
        return record
    }

}
