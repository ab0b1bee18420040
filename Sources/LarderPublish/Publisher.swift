import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import Logging
import SystemPackage

/// What to pack: the tree, where, and the index fields of the new release.
public struct PackRequest: Sendable {
    /// The directory whose whole tree becomes the version's files.
    public var source: FilePath
    /// The repository root directory; created when missing.
    public var repository: FilePath
    /// The package id, as text (`pack` validates it).
    public var id: String
    /// The SemVer version to publish, as text; it must be above the channel's newest.
    public var version: String
    /// URL prefixes the package serves besides `larder://<id>/`; stored normalised.
    public var routes: [String] = []
    /// The file served for directory URLs, relative to them; it must be in the tree.
    public var entry: String = "index.html"
    /// Whether an extension-less path with no file is answered with the entry file (single-page apps).
    public var spaFallback = false
    /// The release channel the version is published on.
    public var channel: String = Channel.default
    /// The lowest app version that may install the release (SemVer text); `nil` for any.
    public var minClientVersion: String?
    /// The share of devices that install the release, 0...100.
    public var rolloutPercent = 100
    /// Defaults to `<id>@<version>` so that every release draws its own devices.
    public var rolloutSalt: String?
    /// Whether the app should apply the release before showing the package.
    public var mandatory = false
    /// `ID@RANGE` each, e.g. `shared-ui@^1.2.0`.
    public var dependencies: [String] = []
    /// What a path under the routes with no file does, and the prefixes that always pass through.
    public var policy = Policy()
    /// How long the new index stays valid.
    public var timeToLive: TimeInterval = 30 * 24 * 3600
    /// Limits on the tree (files, sizes, path lengths and depth), also applied to the bundle's self-check.
    public var limits: TreeLimits = .standard
    /// Deltas are made to the new version from this many of the package's last versions on its
    /// channel (the one it replaces and the bases of that one's deltas, newest first); 0 makes none.
    public var deltaBases = 3

    /// A request with the required parts; set the rest as needed.
    public init(source: FilePath, repository: FilePath, id: String, version: String) {
        self.source = source
        self.repository = repository
        self.id = id
        self.version = version
    }
}

/// What `pack` did.
public struct PackReport: Sendable, Codable, Equatable {
    /// The package id.
    public var id: String
    /// The version published.
    public var version: String
    /// The channel it was published on.
    public var channel: String
    /// The serial of the newly signed index.
    public var serial: UInt64
    /// When the new index expires: now plus the time to live, in whole seconds.
    public var expires: Date
    /// Where the bundle (`bundle.zip`) is, its size and SHA-256.
    public var bundle: BlobRef
    /// Where the file list (`files.json`) is, its size and SHA-256.
    public var fileList: BlobRef
    /// The number of files in the version.
    public var fileCount: Int
    /// The files' total size in bytes, uncompressed.
    public var totalSize: Int64
    /// Objects written by this pack (contents the repository did not hold yet).
    public var objectsWritten: Int
    /// Objects already present (shared with earlier versions or packages).
    public var objectsReused: Int
    /// Compressed bytes of the objects written by this pack.
    public var objectBytesWritten: Int64
    /// The key id of the publisher's own key (co-signers are not listed).
    public var signedBy: String
    /// The gzip-compressed file list (`files.json.gz`).
    public var filesGzip: BlobRef?
    /// The deltas made to this version, newest base first.
    public var deltas: [DeltaReport] = []
}

/// What `revoke` did.
public struct RevokeReport: Sendable, Codable, Equatable {
    /// The package id.
    public var id: String
    /// The version revoked.
    public var version: String
    /// The serial of the newly signed index.
    public var serial: UInt64
    /// When the new index expires: now plus the time to live, in whole seconds.
    public var expires: Date
    /// The key id of the publisher's own key (co-signers are not listed).
    public var signedBy: String
}

/// Publishes to a static repository directory: packs versions and revokes them, each time
/// writing a newly signed index. Every file is written atomically, a version directory is
/// assembled under a temporary name and renamed into place, and the index pair is published
/// through `.pending` files that the next run completes or discards, so an interrupted run never
/// leaves a repository that verifies with a half-written version.
public struct Publisher: Sendable {
    let key: PrivateKey
    /// Further keys that sign every index this publisher writes (during a key rotation).
    let coSigners: [PrivateKey]
    let now: @Sendable () -> Date
    let logger: Logger
    /// Seconds to wait for another publisher of the same repository.
    public var lockTimeout: Double = 60

    /// A publisher signing with `key` (and `coSigners`); `now` is the clock used for `expires`.
    public init(
        key: PrivateKey, coSigners: [PrivateKey] = [], now: @escaping @Sendable () -> Date = { Date() },
        logger: Logger = Logger(label: "larder.publish")
    ) {
        self.key = key
        self.coSigners = coSigners
        self.now = now
        self.logger = logger
    }

    /// The keys whose signature on the current index this publisher accepts.
    var ownKeys: [PublicKey] { [key.publicKey] + coSigners.map(\.publicKey) }

    /// What `rotateKeys` did.
    public struct RotationReport: Sendable, Codable, Equatable {
        /// The serial of the newly signed index.
        public var serial: UInt64
        /// The key ids of the new trusted set, as published in the index's `keys`.
        public var keys: [String]
        /// The key ids that signed the index: the publisher's key, then its co-signers.
        public var signedBy: [String]
    }

    /// Publishes an index whose `keys` are `newKeys`: devices that verify it with a key they
    /// trust adopt `newKeys` as their trusted set. Sign with the old key and co-sign with the new
    /// one, so that both old and updated devices accept it.
    public func rotateKeys(to newKeys: [PublicKey], repository: FilePath, timeToLive: TimeInterval = 30 * 24 * 3600)
        throws(PublishError) -> RotationReport
    {
        let layout = RepositoryLayout(root: repository)
        let lock = try publishLock(layout)
        defer { lock.unlock() }
        guard var index = try loadIndex(layout) else {
            throw .existingIndexUntrusted(detail: "\(layout.index) does not exist")
        }
        index.keys = newKeys.map { KeyFile(public: $0) }
        let published = try publish(&index, layout, ttl: timeToLive)
        return RotationReport(serial: published.serial, keys: newKeys.map(\.keyID), signedBy: ownKeys.map(\.keyID))
    }

    // MARK: pack

    /// Packs `request.source` as a new version into `request.repository`.
    public func pack(_ request: PackRequest) throws(PublishError) -> PackReport {
        let reports = try pack(batch: [request])
        guard let report = reports.first else { throw .emptyTree(request.source.string) }
        return report
    }

    /// Packs several versions into one repository under one newly signed index (one serial): a
    /// release of many packages at once, whose cost does not grow with the number of packages
    /// already published. Every request must name the same repository (a programming error
    /// otherwise). Each is checked as `pack(_:)` checks one, against the index as the earlier
    /// requests of the batch leave it; nothing becomes visible unless all are packed.
    public func pack(batch requests: [PackRequest]) throws(PublishError) -> [PackReport] {
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
        var index = try loadIndex(layout) ?? RepositoryIndex(serial: 0, expires: now(), packages: [])
        var staged: [StagedVersion] = []
        var placed = 0
        defer { for s in staged.dropFirst(placed) { try? SystemCalls.removeTree(s.staging) } }
        // Left by an interrupted pack (ours are made below, under the lock).
        for id in Set(valid.map(\.id.rawValue)) { removeStaleStaging(in: layout.packages.appending(id)) }
        for (request, v) in zip(requests, valid) {
            try checkNew(v, channel: request.channel, in: index, layout)
            let previous = index.packages.first { $0.id == v.id && $0.channel == request.channel }
            // 3–5. The version assembled under a temporary name, the objects it needs, and the
            // deltas to it from the last versions on its channel.
            let s = try stage(request, v, layout, bases: deltaBases(previous, count: request.deltaBases, layout))
            staged.append(s)
            // 6. The new index entry.
            var entry = PackageEntry(
                id: v.id, version: v.version, routes: v.routes, entry: v.entry.string,
                spaFallback: request.spaFallback, policy: request.policy, bundle: s.bundle, files: s.fileList,
                minClientVersion: v.minClientVersion, channel: request.channel,
                rollout: Rollout(percent: request.rolloutPercent, salt: request.rolloutSalt ?? "\(v.id)@\(v.version)"),
                mandatory: request.mandatory, revoked: previous?.revoked ?? [], dependencies: v.dependencies)
            entry.filesGzip = s.filesGzip
            entry.deltas = s.deltaRefs.isEmpty ? nil : s.deltaRefs
            index.packages.removeAll { $0.id == v.id && $0.channel == request.channel }
            index.packages.append(entry)
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
                try AtomicFile.syncDirectory(s.versionDir.removingLastComponent())
            }
        }
        let published = try publish(&index, layout, ttl: requests.map(\.timeToLive).min() ?? 30 * 24 * 3600)
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
                signedBy: key.publicKey.keyID, filesGzip: s.filesGzip, deltas: s.deltas)
        }
    }

    /// Refuses a version that exists, or that is not above the newest on its channel.
    func checkNew(_ v: ValidatedRequest, channel: String, in index: RepositoryIndex, _ layout: RepositoryLayout)
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
                channel: channel)
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
        let filesGzip: BlobRef
        let deltas: [DeltaReport]
        let deltaRefs: [DeltaRef]
    }

    /// The versions to make deltas from: the one the new version replaces on its channel, then
    /// the bases of that one's deltas (its own recent predecessors), newest first, none revoked,
    /// each with its file list in the repository; at most `count`.
    func deltaBases(_ previous: PackageEntry?, count: Int, _ layout: RepositoryLayout) -> [FileList] {
        guard let previous, count > 0 else { return [] }
        var versions = [previous.version] + (previous.deltas ?? []).map(\.from)
        versions = versions.filter { !previous.revoked.contains($0) }
        var seen: Set<SemanticVersion> = []
        var lists: [FileList] = []
        for v in versions where seen.insert(v).inserted && lists.count < count {
            let path = layout.resolve(RepositoryLayout.fileListPath(previous.id, v))
            guard let data = try? AtomicFile.read(path),
                let list = try? ManifestCoding.decode(FileList.self, from: data, document: path.string)
            else { continue }
            lists.append(list)
        }
        return lists
    }

    /// Scans the tree, writes the bundle and its file list into a staging directory beside the
    /// version's place, checks the bundle with the device's reader, and writes the objects the
    /// repository lacks. The staging directory is removed on failure.
    func stage(_ request: PackRequest, _ v: ValidatedRequest, _ layout: RepositoryLayout, bases: [FileList] = [])
        throws(PublishError) -> StagedVersion
    {
        let tree = try SourceTree.scan(request.source, limits: request.limits)
        guard tree.files.contains(where: { $0.path == v.entry }) else { throw .entryMissing(v.entry.string) }
        let packageDir = layout.packages.appending(v.id.rawValue)
        try io { () throws(FileSystemError) in try AtomicFile.makeDirectories(packageDir) }
        let staging = packageDir.appending(".\(v.version).staging-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try io { () throws(FileSystemError) in try AtomicFile.makeDirectories(staging) }
        var finished = false
        defer { if !finished { try? SystemCalls.removeTree(staging) } }

        let bundleFile = staging.appending("bundle.zip")
        let written: [FileEntry]
        do { written = try ZipWriter.write(tree.files, to: bundleFile) } catch { throw .archive(error) }
        let fileList = FileList(id: v.id, version: v.version, files: written)
        // Self-check with the device's reader: what we publish, a device can install.
        let listing: ArchiveListing
        do { listing = try ZipReader(limits: request.limits).validate(bundleFile) } catch { throw .archive(error) }
        guard listing.files == fileList.files else {
            throw .changedWhilePacking(path: request.source.string)
        }
        // Objects the repository lacks (content-addressed, so writing one is idempotent); the list
        // then says each object's size, for a device to weigh objects by what they cost.
        let objects = try writeObjects(fileList, sources: tree.files.map(\.source), layout: layout)
        var listed = fileList
        for i in listed.files.indices { listed.files[i].packed = objects.packed[listed.files[i].sha256] }
        let fileListData = try encode(listed)
        try io { () throws(FileSystemError) in try AtomicFile.write(fileListData, to: staging.appending("files.json")) }
        let gzipped: Data
        do { gzipped = try Gzip.compress(fileListData) } catch {
            throw .compression(path: "files.json", detail: "\(error)")
        }
        try io { () throws(FileSystemError) in try AtomicFile.write(gzipped, to: staging.appending("files.json.gz")) }
        let bundleRef = BlobRef(
            path: RepositoryLayout.bundlePath(v.id, v.version), size: try fileSize(bundleFile),
            sha256: try digest(of: bundleFile))
        let fileListRef = BlobRef(
            path: RepositoryLayout.fileListPath(v.id, v.version), size: Int64(fileListData.count),
            sha256: SHA256Digest.of(fileListData))
        let gzipRef = BlobRef(
            path: RepositoryLayout.fileListGzipPath(v.id, v.version), size: Int64(gzipped.count),
            sha256: SHA256Digest.of(gzipped))
        let builder = DeltaBuilder(
            layout: layout, target: listed, targetRef: fileListRef,
            sources: Dictionary(
                zip(fileList.files.map(\.sha256), tree.files.map(\.source)), uniquingKeysWith: { a, _ in a }),
            staging: staging)
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
            deltaRefs: deltaRefs)
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
        guard Channel.isValid(request.channel) else { throw .badChannel(request.channel) }
        var routes: [String] = []
        for r in request.routes {
            guard let prefix = RoutePrefix(r) else { throw .badRoute(r, reason: RoutePrefix.problem(r) ?? "invalid") }
            routes.append(prefix.description)
        }
        guard (0...100).contains(request.rolloutPercent) else { throw .badRollout(request.rolloutPercent) }
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
            try io { () throws(FileSystemError) in try AtomicFile.makeDirectories(objectPath.removingLastComponent()) }
            let result: (size: Int64, sha256: SHA256Digest, compressedSize: Int64)
            do { result = try Gzip.compressFile(source, to: objectPath) } catch {
                if case .io(let e) = error { throw .io(e) }
                throw .compression(path: source.string, detail: error.description)
            }
            guard result.size == file.size, result.sha256 == file.sha256 else {
                try? SystemCalls.unlink(objectPath)
                throw .changedWhilePacking(path: file.path.string)
            }
            written += 1
            bytes += result.compressedSize
            packed[file.sha256] = result.compressedSize
        }
        return (written, reused, bytes, packed)
    }

    // MARK: revoke

    /// Marks `version` of `id` revoked in a newly signed index: devices running it roll back off
    /// it and no device installs it again.
    public func revoke(
        id idText: String, version versionText: String, repository: FilePath,
        timeToLive: TimeInterval = 30 * 24 * 3600
    ) throws(PublishError) -> RevokeReport {
        guard let id = PackageID(idText) else { throw .badID(idText) }
        guard let version = SemanticVersion(versionText) else { throw .badVersion(versionText) }
        let layout = RepositoryLayout(root: repository)
        let lock = try publishLock(layout)
        defer { lock.unlock() }
        guard var index = try loadIndex(layout) else {
            throw .existingIndexUntrusted(detail: "\(layout.index) does not exist")
        }
        let entries = index.packages.indices.filter { index.packages[$0].id == id }
        let published = AtomicFile.isDirectory(layout.resolve(RepositoryLayout.versionPath(id, version)))
        guard !entries.isEmpty, published else { throw .unknownVersion(id: id.rawValue, version: version.description) }
        guard entries.contains(where: { !index.packages[$0].revoked.contains(version) }) else {
            throw .alreadyRevoked(id: id.rawValue, version: version.description)
        }
        for i in entries where !index.packages[i].revoked.contains(version) {
            index.packages[i].revoked.append(version)
            index.packages[i].revoked.sort()
        }
        let result = try publish(&index, layout, ttl: timeToLive)
        return RevokeReport(
            id: id.rawValue, version: version.description, serial: result.serial, expires: result.expires,
            signedBy: key.publicKey.keyID)
    }

    // MARK: the index pair

    /// Reads the current index, first completing or discarding a half-published pair. The index
    /// must be signed by this publisher's key; `nil` for a repository with no index yet.
    func loadIndex(_ layout: RepositoryLayout) throws(PublishError) -> RepositoryIndex? {
        let trusted = ownKeys
        try recoverPending(layout, trusted: trusted)
        guard AtomicFile.exists(layout.index) else {
            if AtomicFile.exists(layout.signature) {
                throw .existingIndexUntrusted(detail: "\(layout.signature) exists without \(layout.index)")
            }
            return nil
        }
        let bytes = try io { () throws(FileSystemError) in try AtomicFile.read(layout.index) }
        let sigBytes = try io { () throws(FileSystemError) in try AtomicFile.read(layout.signature) }
        do {
            let sig = try ManifestCoding.decode(
                SignatureFile.self, from: sigBytes, document: RepositoryLayout.signatureName)
            try IndexSignature.verify(bytes, signatures: sig, trusted: trusted)
            return try ManifestCoding.decode(RepositoryIndex.self, from: bytes, document: RepositoryLayout.indexName)
        } catch let e as SigningError {
            throw .existingIndexUntrusted(detail: e.description)
        } catch let e as ManifestError {
            throw .existingIndexUntrusted(detail: e.description)
        } catch {
            throw .existingIndexUntrusted(detail: "\(error)")
        }
    }

    /// Completes a publication interrupted between writing the pending pair and renaming it, when
    /// the pending index verifies; otherwise discards the pending files.
    func recoverPending(_ layout: RepositoryLayout, trusted: [PublicKey]) throws(PublishError) {
        guard AtomicFile.exists(layout.pendingIndex) else {
            try? SystemCalls.unlink(layout.pendingSignature)
            return
        }
        let sigPath = AtomicFile.exists(layout.pendingSignature) ? layout.pendingSignature : layout.signature
        var valid = false
        if let bytes = try? AtomicFile.read(layout.pendingIndex), let sigBytes = try? AtomicFile.read(sigPath),
            let sig = try? ManifestCoding.decode(SignatureFile.self, from: sigBytes, document: "signature"),
            (try? IndexSignature.verify(bytes, signatures: sig, trusted: trusted)) != nil,
            (try? ManifestCoding.decode(RepositoryIndex.self, from: bytes, document: "index")) != nil
        {
            valid = true
        }
        logger.notice(
            "found an interrupted publication",
            metadata: [
                "repository": "\(layout.root)",
                "action": "\(valid ? "completing it" : "discarding it (does not verify)")",
            ])
        if valid {
            if sigPath == layout.pendingSignature {
                try renameDurably(layout.pendingSignature, layout.signature, in: layout.root)
            }
            try renameDurably(layout.pendingIndex, layout.index, in: layout.root)
        } else {
            try? SystemCalls.unlink(layout.pendingSignature)
            try? SystemCalls.unlink(layout.pendingIndex)
            try io { () throws(FileSystemError) in try AtomicFile.syncDirectory(layout.root) }
        }
    }

    /// Bumps the serial and expiry, signs, and publishes the pair: both written as `.pending`
    /// files, then the signature renamed into place, then the index.
    func publish(_ index: inout RepositoryIndex, _ layout: RepositoryLayout, ttl: TimeInterval) throws(PublishError)
        -> RepositoryIndex
    {
        guard index.serial < UInt64.max else { throw .serialExhausted }
        index.serial += 1
        index.expires = Date(timeIntervalSince1970: (now().timeIntervalSince1970 + ttl).rounded(.down))
        index.packages.sort { ($0.id, $0.channel) < ($1.id, $1.channel) }
        if let issue = IndexRules.issues(index).first { throw .indexRule(issue) }
        let bytes = try encode(index)
        let sig: SignatureFile
        do { sig = try IndexSignature.sign(bytes, with: [key] + coSigners) } catch {
            throw .signing(.badKeyFile(path: "(signing key)", detail: "\(error)"))
        }
        let sigBytes = try encode(sig)
        // The immutable copy the signature names, before the pair that names it: a device whose
        // cache pairs this signature with another index fetches it.
        try writeIndexCopy(bytes, layout)
        try io { () throws(FileSystemError) in try AtomicFile.write(sigBytes, to: layout.pendingSignature) }
        try io { () throws(FileSystemError) in try AtomicFile.write(bytes, to: layout.pendingIndex) }
        try renameDurably(layout.pendingSignature, layout.signature, in: layout.root)
        try renameDurably(layout.pendingIndex, layout.index, in: layout.root)
        return index
    }

    private func renameDurably(_ from: FilePath, _ to: FilePath, in dir: FilePath) throws(PublishError) {
        do { try SystemCalls.rename(from, to: to) } catch { throw .io(error) }
        try io { () throws(FileSystemError) in try AtomicFile.syncDirectory(dir) }
    }

    /// The publishers' lock of a repository (`.larder-publish.lock`): one pack, revoke or
    /// rotate-key at a time, so serials never collide and no staging directory in use is removed.
    private func publishLock(_ layout: RepositoryLayout) throws(PublishError) -> FileLock {
        do { return try FileLock(path: layout.root.appending(".larder-publish.lock"), timeout: lockTimeout) } catch {
            switch error {
            case .locked(let pid, _): throw .busy(holderPID: pid)
            case .io(let e): throw .io(e)
            }
        }
    }

    /// How many publications' index copies `indexes/` keeps: a device needs the copy only while
    /// an edge still serves that publication's signature (minutes).
    public static let keptIndexCopies = 8

    /// Writes `indexes/<sha256>.json` durably, and removes the copies of all but the last
    /// `keptIndexCopies` publications (oldest modification first).
    private func writeIndexCopy(_ bytes: Data, _ layout: RepositoryLayout) throws(PublishError) {
        let copy = layout.resolve(RepositoryLayout.indexCopyPath(SHA256Digest.of(bytes)))
        try io { () throws(FileSystemError) in
            try AtomicFile.makeDirectories(layout.indexes)
            try AtomicFile.write(bytes, to: copy)
        }
        guard let names = try? SystemCalls.listDirectory(layout.indexes) else { return }
        let copies = names.filter { $0.name.string.hasSuffix(".json") }.map { layout.indexes.appending($0.name) }
        guard copies.count > Self.keptIndexCopies else { return }
        let dated = copies.map { ($0, (try? SystemCalls.stat($0))?.modificationTime ?? FileTime(seconds: 0)) }
        for (path, _) in dated.sorted(by: { $0.1 > $1.1 }).dropFirst(Self.keptIndexCopies) where path != copy {
            try? SystemCalls.unlink(path)
        }
    }

    private func removeStaleStaging(in dir: FilePath) {
        guard let entries = try? SystemCalls.listDirectory(dir) else { return }
        for entry in entries where entry.string.hasPrefix(".") && entry.string.contains(".staging-") {
            let path = dir.appending(entry.name)
            logger.notice("removing a staging directory left by an interrupted pack", metadata: ["path": "\(path)"])
            try? SystemCalls.removeTree(path)
        }
    }

    private func encode<T: Encodable>(_ value: T) throws(PublishError) -> Data {
        do { return try ManifestCoding.encode(value) } catch {
            throw .manifest(.malformed(document: "\(T.self)", detail: "\(error)"))
        }
    }
}

/// Runs a file-system step, mapping its error into `PublishError.io`.
func io<T>(_ body: () throws(FileSystemError) -> T) throws(PublishError) -> T {
    do {
        return try body()
    } catch {
        throw .io(error)
    }
}

/// The size of a file.
func fileSize(_ path: FilePath) throws(PublishError) -> Int64 {
    do { return try SystemCalls.stat(path).size } catch { throw .io(error) }
}

/// The SHA-256 of a file, streamed.
func digest(of path: FilePath) throws(PublishError) -> SHA256Digest {
    try io { () throws(FileSystemError) -> SHA256Digest in
        let fd = try SystemCalls.open(path, .readOnly)
        defer { try? SystemCalls.close(fd, path: path) }
        var hasher = SHA256Stream()
        var buffer = [UInt8](repeating: 0, count: 256 << 10)
        while true {
            let n = try SystemCalls.read(fd, into: &buffer, path: path)
            if n == 0 { break }
            buffer.withUnsafeBytes { hasher.update(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
        }
        return hasher.finish()
    }
}
