import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import Logging
import SystemPackage

/// Pack: a tree checked, staged as a new version (bundle, file list, objects, deltas) and placed,
/// then published with a newly signed index.
extension Publisher {
    /// Packs `request.source` as a new version into `request.repository`.
    package func pack(_ request: PackRequest) throws(PublishError) -> PackReport {
        let reports = try pack(batch: [request])
        guard let report = reports.first else { throw .emptyTree(request.source.string) }
        return report
    }

    /// Packs several versions into one repository under one newly signed index (one serial): a
    /// release of many packages at once, whose cost does not grow with the number of packages
    /// already published. Every request must name the same repository (a programming error
    /// otherwise). Each is checked as `pack(_:)` checks one, against the index as the earlier
    /// requests of the batch leave it; nothing becomes visible unless all are packed.
    package func pack(batch requests: [PackRequest]) throws(PublishError) -> [PackReport] {
        guard let repository = requests.first?.repository else { return [] }
        precondition(requests.allSatisfy { $0.repository == repository }, "a batch packs into one repository")
        // 1. Everything that can be refused without touching the disk.
        var valid: [ValidatedRequest] = []
        for r in requests { valid.append(try Self.validate(r)) }

        // 2. The repository as it stands (completing an interrupted publication first), under
        // the publishers' lock.
        let layout = RepositoryLayout(root: repository)
        try io { () throws(FileSystemError) in try AtomicFile.makeDirectories(layout.root) }
        let lock = try publishLock(layout)
        defer { lock.unlock() }
        let (loaded, target) = try openTarget(layout)
        var index = loaded ?? RepositoryIndex(serial: 0, expires: now(), packages: [])
        if let team = target.team, let root = target.delegated?.root {
            for v in valid { try requireOwned(v.id, by: team, root) }
        }
        var staged: [StagedVersion] = []
        var placed = 0
        defer { for s in staged.dropFirst(placed) { try? SystemCalls.removeTree(s.staging) } }
        // Left by an interrupted pack (ours are made below, under the lock).
        for id in Set(valid.map(\.id.rawValue)) { removeStaleStaging(in: layout.packages.joined(id)) }
        for (request, v) in zip(requests, valid) {
            try checkNew(v, channel: request.channel, in: index, layout)
            let previous = index.packages.first { $0.id == v.id && $0.channel == request.channel }
            // 3–5. The version assembled under a temporary name, the objects it needs, and the
            // deltas to it from the last versions on its channel.
            let s = try stage(
                request, v, layout,
                bases: deltaBases(
                    previous, count: request.deltaBases, layout, keys: request.recipientKeys,
                    clear: request.encryptTo.isEmpty),
                previous: previous)
            staged.append(s)
            // 6. The new index entry.
            var entry = PackageEntry(
                id: v.id, version: v.version, routes: v.routes, entry: v.entry.string,
                spaFallback: request.spaFallback, policy: request.policy, bundle: s.bundle, files: s.fileList,
                minClientVersion: v.minClientVersion, channel: request.channel,
                rollout: rollout(request, salt: request.rolloutSalt ?? "\(v.id)@\(v.version)"),
                mandatory: request.mandatory, revoked: previous?.revoked ?? [], dependencies: v.dependencies)
            entry.filesGzip = s.filesGzip
            entry.encryption = s.encryption
            entry.install = request.install
            entry.corsOrigins = request.corsOrigins
            entry.networkHosts = request.networkHosts
            entry.deltas = s.deltaRefs.isEmpty ? nil : s.deltaRefs
            index.packages.removeAll { $0.id == v.id && $0.channel == request.channel }
            index.packages.append(entry)
        }
        // The index's own member: later packs keep it unless told.
        if let change = requests.first(where: { $0.telemetry != nil })?.telemetry {
            if let repo = target.delegated, indexSigners(repo.root) == nil {
                throw .delegationSetup("the telemetry endpoint is a member of the composed index: give --index-key")
            }
            index.telemetry = change.settings
        }
        // Checked against the rules before anything becomes visible.
        if let issue = IndexRules.issues(index).first { throw .indexRule(issue) }

        // 7. Move each version into place (fails if it appeared meanwhile), then sign the index.
        for s in staged {
            try io { () throws(FileSystemError) in try AtomicFile.syncDirectory(s.staging) }
            do { try SystemCalls.rename(s.staging, to: s.versionDir) } catch {
                if error.errno == .directoryNotEmpty || error.errno == .fileExists {
                    throw .versionExists(id: s.id.rawValue, version: s.version.description)
                }
                throw .io(error)
            }
            placed += 1
            try io { () throws(FileSystemError) in
                try AtomicFile.syncDirectory(s.versionDir.parentPath)
            }
        }
        let (published, part) = try publishChange(
            &index, target, layout, ttl: requests.map(\.timeToLive).min() ?? 30 * 24 * 3600)
        return zip(requests, staged).map { request, s in
            logger.debug(
                "packed",
                metadata: [
                    "id": "\(s.id)", "version": "\(s.version)", "serial": "\(published.serial)",
                    "objectsWritten": "\(s.objects.written)",
                ])
            return PackReport(
                id: s.id.rawValue, version: s.version.description, channel: request.channel,
                serial: published.serial, expires: published.expires, bundle: s.bundle, fileList: s.fileList,
                fileCount: s.fileCount, totalSize: s.totalSize, objectsWritten: s.objects.written,
                objectsReused: s.objects.reused, objectBytesWritten: s.objects.bytes,
                signedBy: key.publicKey.keyID, filesGzip: s.filesGzip, deltas: s.deltas,
                encryptedTo: s.encryption?.recipients.map(\.keyId), part: part)
        }
    }

    /// Refuses a version that exists, or that is not above the newest on its channel.
    func checkNew(_ v: ValidatedRequest, channel: Channel, in index: RepositoryIndex, _ layout: RepositoryLayout)
        throws(PublishError)
    {
        let versionRel = RepositoryLayout.versionPath(v.id, v.version)
        if AtomicFile.exists(layout.resolve(versionRel))
            || index.packages.contains(where: { $0.id == v.id && $0.version == v.version })
        {
            throw .versionExists(id: v.id.rawValue, version: v.version.description)
        }
        if let existing = index.packages.first(where: { $0.id == v.id && $0.channel == channel }),
            !(v.version > existing.version)
        {
            throw .versionNotNewer(
                id: v.id.rawValue, version: v.version.description, newest: existing.version.description,
                channel: channel.rawValue)
        }
    }

    /// A version assembled under a temporary name, not yet visible.
    struct StagedVersion {
        let id: PackageID
        let version: SemanticVersion
        let staging: FilePath
        let versionDir: FilePath
        let bundle: BlobRef
        let fileList: BlobRef
        let fileCount: Int
        let totalSize: Int64
        let objects: (written: Int, reused: Int, bytes: Int64)
        let filesGzip: BlobRef?
        let deltas: [DeltaReport]
        let deltaRefs: [DeltaRef]
        let encryption: Encryption?
    }

    /// The versions to make deltas from: the one the new version replaces on its channel, then
    /// the bases of that one's deltas (its own recent predecessors), newest first, none revoked,
    /// each with its file list in the repository; at most `count`. An encrypted version is a
    /// base only when one of `keys` opens its content key (its list and objects are read with it),
    /// and never for a version in the `clear`: a clear delta from a sealed base would show anyone
    /// the base's file names (`remove`) and, patch by patch, its contents (manifests §16).
    func deltaBases(
        _ previous: PackageEntry?, count: Int, _ layout: RepositoryLayout, keys: [RecipientKey] = [],
        clear: Bool = false
    ) -> [DeltaBase] {
        guard let previous, count > 0 else { return [] }
        var versions = [previous.version] + (previous.deltas ?? []).map(\.from)
        versions = versions.filter { !previous.revoked.contains($0) }
        var seen: Set<SemanticVersion> = []
        var bases: [DeltaBase] = []
        for v in versions where seen.insert(v).inserted && bases.count < count {
            if clear, AtomicFile.exists(layout.resolve(RepositoryLayout.sealedListPath(previous.id, v))) {
                logger.notice(
                    "no delta to a version in the clear from an encrypted one (it would reveal the base)",
                    metadata: ["version": "\(v)"])
                continue
            }
            // The version in the index is read by its wrapping there (it may have been rewrapped).
            let wrapping = v == previous.version ? previous.encryption : nil
            if let base = readBase(previous.id, v, layout, keys: keys, wrapping: wrapping) { bases.append(base) }
        }
        return bases
    }

    /// The list of `id`@`v` in the repository and the pipeline its objects are read with; nil
    /// when it cannot be read (or is encrypted and no key of `keys` opens it).
    func readBase(
        _ id: PackageID, _ v: SemanticVersion, _ layout: RepositoryLayout, keys: [RecipientKey],
        wrapping: Encryption? = nil
    ) -> DeltaBase? {
        let sealedList = layout.resolve(RepositoryLayout.sealedListPath(id, v))
        guard AtomicFile.exists(sealedList) else {
            let path = layout.resolve(RepositoryLayout.fileListPath(id, v))
            guard let data = try? AtomicFile.read(path),
                let list = try? ManifestCoding.decode(FileList.self, from: data, document: path.string)
            else { return nil }
            return DeltaBase(list: list, pipeline: pipeline)
        }
        let entry = PackageEntry(
            id: id, version: v, bundle: BlobRef(path: "", size: 0, sha256: SHA256Digest.of(Data())),
            files: BlobRef(path: "", size: 0, sha256: SHA256Digest.of(Data())))
        guard !keys.isEmpty,
            let encryption = wrapping
                ?? (try? AtomicFile.read(layout.resolve(RepositoryLayout.encryptionPath(id, v)))).flatMap({
                    try? ManifestCoding.decode(Encryption.self, from: $0, document: "encryption.json")
                }),
            let sealed = try? pipeline.sealed(for: entry, encryption, keys: keys),
            let stored = try? AtomicFile.read(sealedList),
            let json = try? sealed.decodeDocument(stored, limit: Int64(ManifestCoding.maxDocumentBytes)),
            let list = try? ManifestCoding.decode(FileList.self, from: json, document: sealedList.string),
            list.id == id, list.version == v
        else {
            logger.info("no delta from an encrypted version no recipient key opens", metadata: ["version": "\(v)"])
            return nil
        }
        return DeltaBase(list: list, pipeline: sealed)
    }

    /// Scans the tree, writes the bundle and its file list into a staging directory beside the
    /// version's place, checks the bundle with the device's reader, and writes the objects the
    /// repository lacks. The staging directory is removed on failure.
    func stage(
        _ request: PackRequest, _ v: ValidatedRequest, _ layout: RepositoryLayout, bases: [DeltaBase] = [],
        previous: PackageEntry? = nil
    )
        throws(PublishError) -> StagedVersion
    {
        let tree = try SourceTree.scan(request.source, limits: request.limits)
        guard tree.files.contains(where: { $0.path == v.entry }) else { throw .entryMissing(v.entry.string) }
        let packageDir = layout.packages.joined(v.id.rawValue)
        try io { () throws(FileSystemError) in try AtomicFile.makeDirectories(packageDir) }
        let staging = packageDir.joined(".\(v.version).staging-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try io { () throws(FileSystemError) in try AtomicFile.makeDirectories(staging) }
        var finished = false
        defer { if !finished { try? SystemCalls.removeTree(staging) } }
        if !request.encryptTo.isEmpty {
            let s = try stageSealed(
                request, v, tree, staging: staging, layout: layout, bases: bases, previous: previous)
            finished = true
            return s
        }

        let bundleFile = staging.joined("bundle.zip")
        let fileList = try writeBundle(request, v, tree, to: bundleFile, pipeline: pipeline)
        // Objects the repository lacks (content-addressed, so writing one is idempotent); the list
        // then says each object's size, for a device to weigh objects by what they cost.
        let objects = try writeObjects(fileList, sources: tree.files.map(\.source), layout: layout)
        var listed = fileList
        for i in listed.files.indices { listed.files[i].packed = objects.packed[listed.files[i].sha256] }
        let (fileListRef, gzipRef) = try writeFileLists(listed, v, staging: staging)
        let bundleRef = BlobRef(
            path: RepositoryLayout.bundlePath(v.id, v.version), size: try fileSize(bundleFile),
            sha256: try digest(of: bundleFile))
        let builder = DeltaBuilder(
            layout: layout, target: listed, targetRef: fileListRef,
            sources: Dictionary(
                zip(fileList.files.map(\.sha256), tree.files.map(\.source)), uniquingKeysWith: { a, _ in a }),
            staging: staging, pipeline: pipeline)
        var deltas: [DeltaReport] = []
        var deltaRefs: [DeltaRef] = []
        for base in bases {
            let (ref, report) = try builder.build(from: base)
            deltaRefs.append(ref)
            deltas.append(report)
        }
        finished = true
        return StagedVersion(
            id: v.id, version: v.version, staging: staging,
            versionDir: layout.resolve(RepositoryLayout.versionPath(v.id, v.version)), bundle: bundleRef,
            fileList: fileListRef, fileCount: fileList.files.count, totalSize: fileList.totalSize,
            objects: (objects.written, objects.reused, objects.bytes), filesGzip: gzipRef, deltas: deltas,
            deltaRefs: deltaRefs, encryption: nil)
    }

    /// Writes a clear version's file list into `staging` as `files.json` and `files.json.gz`;
    /// returns the references the index names them by.
    func writeFileLists(
        _ listed: FileList, _ v: ValidatedRequest, staging: FilePath
    ) throws(PublishError) -> (list: BlobRef, gzip: BlobRef) {
        let fileListData = try encode(listed)
        try io { () throws(FileSystemError) in try AtomicFile.write(fileListData, to: staging.joined("files.json")) }
        let gzipped: Data
        do { gzipped = try pipeline.encodeDocument(fileListData) } catch {
            throw .compression(path: "files.json", detail: "\(error)")
        }
        try io { () throws(FileSystemError) in try AtomicFile.write(gzipped, to: staging.joined("files.json.gz")) }
        let list = BlobRef(
            path: RepositoryLayout.fileListPath(v.id, v.version), size: Int64(fileListData.count),
            sha256: SHA256Digest.of(fileListData))
        let gzip = BlobRef(
            path: RepositoryLayout.fileListGzipPath(v.id, v.version), size: Int64(gzipped.count),
            sha256: SHA256Digest.of(gzipped))
        return (list, gzip)
    }

    /// Writes the tree as a bundle at `output` with `pipeline` and checks it with the device's
    /// reader (what we publish, a device can install); returns the version's list.
    func writeBundle(
        _ request: PackRequest, _ v: ValidatedRequest, _ tree: SourceTree, to output: FilePath, pipeline: BytePipeline
    ) throws(PublishError) -> FileList {
        let written: [FileEntry]
        do { written = try pipeline.writeBundle(tree.files, to: output) } catch { throw .archive(error) }
        let fileList = FileList(id: v.id, version: v.version, files: written)
        let listing: ArchiveListing
        do {
            listing = try pipeline.withZip(of: output, limit: request.limits.maxTotalBytes) {
                (zip) throws(ArchiveError) in try ZipReader(limits: request.limits).validate(zip)
            }
        } catch { throw .archive(error) }
        guard listing.files == fileList.files else { throw .changedWhilePacking(path: request.source.string) }
        return fileList
    }

    /// A pack request's values, parsed and checked.
    struct ValidatedRequest {
        let id: PackageID
        let version: SemanticVersion
        /// The routes in normalised form (the signed index has one spelling per prefix).
        let routes: [String]
        let minClientVersion: SemanticVersion?
        let dependencies: [Dependency]
        let entry: RelativePath
    }

    /// Everything in a request that can be refused without touching the disk.
    static func validate(_ request: PackRequest) throws(PublishError) -> ValidatedRequest {
        guard let id = PackageID(request.id) else { throw .badID(request.id) }
        guard let version = SemanticVersion(request.version) else { throw .badVersion(request.version) }
        guard request.channel.isValid else { throw .badChannel(request.channel.rawValue) }
        guard !request.pad || !request.encryptTo.isEmpty else { throw .padWithoutEncryption }
        var routes: [String] = []
        for r in request.routes {
            guard let prefix = RoutePrefix(r) else { throw .badRoute(r, reason: RoutePrefix.problem(r) ?? "invalid") }
            routes.append(prefix.description)
        }
        guard (0...100).contains(request.rolloutPercent) else { throw .badRollout(request.rolloutPercent) }
        if let steps = request.rolloutSteps,
            let why = RolloutSchedule(start: Date(), every: request.rolloutEvery, steps: steps).problem
        {
            throw .rollout(code: "bad-rollout", detail: why)
        }
        var minClient: SemanticVersion?
        if let m = request.minClientVersion {
            guard let v = SemanticVersion(m) else { throw .badVersion(m) }
            minClient = v
        }
        let dependencies = try request.dependencies.map { text throws(PublishError) -> Dependency in
            guard let at = text.firstIndex(of: "@"), let depID = PackageID(String(text[..<at])),
                let range = VersionRange(String(text[text.index(after: at)...]))
            else { throw .badDependency(text) }
            return Dependency(id: depID, range: range)
        }
        let entryPath: RelativePath
        switch RelativePath.validate(request.entry, limits: request.limits) {
        case .success(let p): entryPath = p
        case .failure(let problem): throw .badName(path: request.entry, problem: problem)
        }
        return ValidatedRequest(
            id: id, version: version, routes: routes, minClientVersion: minClient, dependencies: dependencies,
            entry: entryPath)
    }

    /// Writes the gzip object of every content of `fileList` the repository lacks (each checked
    /// against the list as it is compressed: a source that changed meanwhile is refused).
    func writeObjects(
        _ fileList: FileList, sources: [FilePath], layout: RepositoryLayout
    ) throws(PublishError) -> (written: Int, reused: Int, bytes: Int64, packed: [SHA256Digest: Int64]) {
        var written = 0
        var reused = 0
        var bytes: Int64 = 0
        var packed: [SHA256Digest: Int64] = [:]
        var seen: Set<SHA256Digest> = []
        for (file, source) in zip(fileList.files, sources) where seen.insert(file.sha256).inserted {
            let objectPath = layout.resolve(RepositoryLayout.objectPath(file.sha256))
            if AtomicFile.exists(objectPath) {
                reused += 1
                packed[file.sha256] = try fileSize(objectPath)
                continue
            }
            try io { () throws(FileSystemError) in try AtomicFile.makeDirectories(objectPath.parentPath) }
            let result: EncodedBlob
            do { result = try pipeline.encodeObject(file: source, to: objectPath) } catch {
                if case .io(let e) = error { throw .io(e) }
                throw .compression(path: source.string, detail: error.description)
            }
            guard result.size == file.size, result.sha256 == file.sha256 else {
                try? SystemCalls.unlink(objectPath)
                throw .changedWhilePacking(path: file.path.string)
            }
            written += 1
            bytes += result.storedSize
            packed[file.sha256] = result.storedSize
        }
        return (written, reused, bytes, packed)
    }
}
