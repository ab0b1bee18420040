import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import LarderStore
import Logging
import SystemPackage

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Progress of a sync, for a progress bar or JSON lines.
public enum SyncEvent: Sendable, Equatable {
    /// The index was fetched (`changed` false for a 304 / identical bytes).
    case index(serial: UInt64, changed: Bool)
    /// Bytes arrived for a package; `total` is what the plan expects to fetch for it.
    case bytes(id: String, done: Int64, total: Int64)
    /// A package finished (`outcome` as in the report).
    case package(id: String, outcome: String)
}

/// What happened to one package.
public struct PackageResult: Sendable, Codable, Equatable {
    public var id: String
    /// `install`, `update`, `rollback`, `remove`, `skip`.
    public var action: String
    public var from: String?
    public var to: String?
    /// `objects`, `bundle` or `local` for installs and updates.
    public var method: String?
    public var bytesFetched: Int64
    public var bundleBytes: Int64?
    public var seconds: Double
    /// `done`, `failed` or `skipped`.
    public var outcome: String
    public var reason: String
    /// For a failure: a stable code (`hash-mismatch`, `too-large`, `redirect`, `verification-failed`, …).
    public var code: String?
    /// For a bundle placed: `true` when it was extracted while it downloaded, `false` when the
    /// complete file had to be read again (the download started over, or the streamed read
    /// refused what the complete file's reader then judged).
    public var streamed: Bool? = nil
}

/// A failure with its stable code.
struct Failure: Sendable, Equatable {
    let code: String
    let message: String
    init(_ code: String, _ message: String) {
        self.code = code
        self.message = message
    }
}

/// What a sync did.
public struct SyncReport: Sendable, Codable, Equatable {
    public var serial: UInt64
    /// Whether the index changed since the last sync.
    public var indexChanged: Bool
    public var packages: [PackageResult]
    public var removedByGC: [String]
    /// 0 all done, 2 some packages failed (exit code 1 is a sync that could do nothing).
    public var exitCode: Int32 { packages.contains { $0.outcome == "failed" } ? 2 : 0 }
}

/// Options of one sync.
public struct SyncOptions: Sendable {
    /// Only these packages (all when empty).
    public var packages: [String] = []
    /// Overrides of the config.
    public var appVersion: SemanticVersion?
    public var channel: String?
    public var http = HTTPOptions()
    public var retention = 1
    public var clock: @Sendable () -> Date = { Date() }
    public var progress: (@Sendable (SyncEvent) -> Void)?
    public var logger = Logger(label: "larder.sync")

    /// The defaults.
    public init() {}
}

/// Larder's main job: keep the sandbox in step with the signed repository index.
public struct Syncer: Sendable {
    public let root: FilePath
    public let options: SyncOptions
    let injected: (any Transport)?

    /// A syncer for the sandbox at `root`; `transport` replaces the one the repository URL
    /// implies (tests inject one).
    public init(root: FilePath, options: SyncOptions = SyncOptions(), transport: (any Transport)? = nil) {
        self.root = root
        self.options = options
        self.injected = transport
    }

    static let maxIndexBytes = ManifestCoding.maxDocumentBytes

    /// The repository URL of a document.
    func url(_ base: URL, _ relative: String) -> URL {
        base.appendingPathComponent(relative)
    }

    /// Fetches and verifies the index; records it durably when it is new. Returns the index and
    /// whether it changed.
    func acceptIndex(
        sandbox: Sandbox, config: SyncConfig, transport: any Transport, base: URL, record: Bool = true
    ) async throws(SyncError) -> (RepositoryIndex, Bool) {
        let cacheIndex = sandbox.layout.root.appending("repository-index.json")
        let cacheSig = sandbox.layout.root.appending("repository-index.json.sig")
        let cached = sandbox.state.index != nil && AtomicFile.exists(cacheIndex)
        let doc: FetchedDocument
        do throws(FetchError) {
            doc = try await transport.document(url(base, RepositoryLayout.indexName), etag: cached ? sandbox.state.index?.etag : nil, maxBytes: Self.maxIndexBytes)
        } catch { throw .fetch(error) }
        let trusted = try config.publicKeys()
        var bytes = doc.data
        var fresh = !doc.notModified
        if doc.notModified {
            do { bytes = try AtomicFile.read(cacheIndex) } catch { throw .store(.io(error)) }
        }
        if let acc = sandbox.state.index, fresh, SHA256Digest.of(bytes) == acc.sha256 { fresh = false }
        // The signature is checked over the exact bytes before anything is decoded.
        var sigBytes = Data()
        if fresh {
            do throws(FetchError) {
                sigBytes = try await transport.document(url(base, RepositoryLayout.signatureName), etag: nil, maxBytes: 1 << 16).data
            } catch { throw .fetch(error) }
        } else {
            sigBytes = (try? AtomicFile.read(cacheSig)) ?? Data()
        }
        do {
            let sig = try ManifestCoding.decode(SignatureFile.self, from: sigBytes, document: RepositoryLayout.signatureName)
            try IndexSignature.verify(bytes, signatures: sig, trusted: trusted)
        } catch let e as SigningError {
            throw .signature(e)
        } catch let e as ManifestError {
            throw .signature(.noTrustedSignature(signedBy: [], trusted: trusted.map(\.keyID).sorted() + ["(\(e))"]))
        } catch {
            throw .signature(.noTrustedSignature(signedBy: [], trusted: trusted.map(\.keyID)))
        }
        let index: RepositoryIndex
        do throws(ManifestError) {
            index = try ManifestCoding.decode(RepositoryIndex.self, from: bytes, document: RepositoryLayout.indexName)
        } catch {
            throw .manifest(error)
        }
        let digest = SHA256Digest.of(bytes)
        if let acc = sandbox.state.index {
            if index.serial < acc.serial { throw .rollbackAttack(serial: index.serial, accepted: acc.serial) }
            if index.serial == acc.serial && digest != acc.sha256 { throw .serialReused(serial: index.serial) }
        }
        if index.expires <= options.clock() { throw .expired(ManifestCoding.formatRFC3339(index.expires)) }
        // Key rotation: a verified index may name the keys trusted from now on.
        if fresh && record, let keys = index.keys, !keys.isEmpty, keys != config.trustedKeys {
            let check = SyncConfig(repository: config.repository, trustedKeys: keys, appVersion: config.appVersion, deviceId: config.deviceId)
            _ = try check.publicKeys()
            _ = try config.withKeys(keys, root: root)
            options.logger.notice("trusted keys rotated by the index", metadata: ["keys": "\(keys.map(\.keyId))", "serial": "\(index.serial)"])
        }
        if fresh && record {
            // Durable before anything is acted on: the cache, then the accepted serial.
            do {
                try AtomicFile.write(bytes, to: cacheIndex)
                try AtomicFile.write(sigBytes, to: cacheSig)
            } catch { throw .store(.io(error)) }
            do {
                try sandbox.recordIndex(AcceptedIndex(serial: index.serial, sha256: digest, expires: index.expires, etag: doc.etag, acceptedAt: options.clock()))
            } catch { throw .store(error) }
        } else if record, let acc = sandbox.state.index, doc.etag != nil, doc.etag != acc.etag {
            var updated = acc
            updated.etag = doc.etag
            try? sandbox.recordIndex(updated)
        }
        options.progress?(.index(serial: index.serial, changed: fresh))
        return (index, fresh)
    }

    func context(_ config: SyncConfig) -> ClientContext {
        ClientContext(appVersion: options.appVersion ?? config.appVersion, deviceID: config.deviceId, channel: options.channel ?? config.channel)
    }

    /// Fetches the file lists the plan needs, each checked against the size and SHA-256 the
    /// index declares. Failures are returned per package.
    func fetchLists(
        _ plan: Plan, index: RepositoryIndex, transport: any Transport, base: URL, channel: String
    ) async -> ([PackageID: FileList], [PackageID: Failure]) {
        var lists: [PackageID: FileList] = [:]
        var failures: [PackageID: Failure] = [:]
        for a in plan.actions where a.skip == .fileListNeeded {
            guard let e = index.packages.first(where: { $0.id == a.id && $0.channel == channel }) else { continue }
            do {
                let doc = try await transport.document(url(base, e.files.path), etag: nil, maxBytes: Int(min(e.files.size, Int64(Self.maxIndexBytes))))
                guard Int64(doc.data.count) == e.files.size, SHA256Digest.of(doc.data) == e.files.sha256 else {
                    failures[a.id] = Failure("file-list-mismatch", "\(e.files.path) does not match the size and sha256 the index declares")
                    continue
                }
                let list = try ManifestCoding.decode(FileList.self, from: doc.data, document: e.files.path)
                guard list.id == e.id, list.version == e.version else {
                    failures[a.id] = Failure("file-list-mismatch", "\(e.files.path) describes \(list.id) \(list.version)")
                    continue
                }
                lists[a.id] = list
            } catch let err as FetchError {
                failures[a.id] = Failure(err.code, err.description)
            } catch let err as ManifestError {
                failures[a.id] = Failure("file-list-schema", err.description)
            } catch {
                failures[a.id] = Failure("file-list", "\(error)")
            }
        }
        return (lists, failures)
    }

    /// What both `plan` and `sync` start from: the open sandbox (the caller closes it), the
    /// verified index, and the plan made with the file lists it needed.
    struct Prepared {
        let config: SyncConfig
        let sandbox: Sandbox
        let base: URL
        let transport: any Transport
        let index: RepositoryIndex
        let indexChanged: Bool
        let context: ClientContext
        let lists: [PackageID: FileList]
        let listFailures: [PackageID: Failure]
        let local: [SHA256Digest: FilePath]
        let plan: Plan
    }

    /// Locks and recovers the sandbox, fetches and verifies the index (recording it when
    /// `record`), plans once to learn which file lists are needed, fetches them, and plans again.
    func prepare(record: Bool) async throws(SyncError) -> Prepared {
        let config = try SyncConfig.load(root: root)
        let sandbox: Sandbox
        do { sandbox = try Sandbox.open(root) } catch { throw .store(error) }
        do throws(SyncError) {
            guard let base = URL(string: config.repository) else { throw SyncError.config("bad repository URL") }
            let t = try transportFor(base, config)
            let (index, changed) = try await acceptIndex(sandbox: sandbox, config: config, transport: t, base: base, record: record)
            let ctx = context(config)
            let first = filter(Differ.plan(index: index, state: sandbox.state, context: ctx), index)
            let (lists, failures) = await fetchLists(first, index: index, transport: t, base: base, channel: ctx.channel)
            let local = sandbox.localContents()
            let plan = filter(
                Differ.plan(index: index, state: sandbox.state, context: ctx, fileLists: lists, localContents: Set(local.keys)), index)
            return Prepared(
                config: config, sandbox: sandbox, base: base, transport: t, index: index, indexChanged: changed, context: ctx,
                lists: lists, listFailures: failures, local: local, plan: plan)
        } catch {
            sandbox.close()
            throw error
        }
    }

    /// Plans without changing anything (fetches the index and file lists, records nothing).
    public func plan() async throws(SyncError) -> (Plan, RepositoryIndex) {
        let p = try await prepare(record: false)
        p.sandbox.close()
        return (p.plan, p.index)
    }

    /// Only the named packages — widened to everything they depend on (transitively, from the
    /// index) and to their dependency groups, so that a package is never activated without the
    /// members its plan counted on.
    func filter(_ plan: Plan, _ index: RepositoryIndex) -> Plan {
        guard !options.packages.isEmpty else { return plan }
        var wanted = Set(options.packages)
        var frontier = Array(wanted)
        while let id = frontier.popLast() {
            for e in index.packages where e.id.rawValue == id {
                for d in e.dependencies where wanted.insert(d.id.rawValue).inserted { frontier.append(d.id.rawValue) }
            }
        }
        for a in plan.actions where wanted.contains(a.id.rawValue) { a.group.forEach { wanted.insert($0.rawValue) } }
        return Plan(actions: plan.actions.filter { wanted.contains($0.id.rawValue) })
    }

    func transportFor(_ base: URL, _ config: SyncConfig) throws(SyncError) -> any Transport {
        if let t = injected { return t }
        var http = options.http
        http.allowInsecureHTTP = http.allowInsecureHTTP || config.allowInsecureHTTP
        do { return try transport(for: base, options: http) } catch { throw .fetch(error) }
    }

    /// Syncs: lock, recover, fetch and verify the index, plan, fetch with bounded concurrency,
    /// place and activate (as pending; dependency groups together), gc by retention. One
    /// package's failure neither blocks nor damages another.
    public func sync() async throws(SyncError) -> SyncReport {
        let p = try await prepare(record: true)
        let (config, sandbox, base, t, index, changed, ctx) = (p.config, p.sandbox, p.base, p.transport, p.index, p.indexChanged, p.context)
        let (lists, listFailures, local, plan) = (p.lists, p.listFailures, p.local, p.plan)
        defer { sandbox.close() }
        var results: [PackageResult] = []
        let entries = Dictionary(index.packages.filter { $0.channel == ctx.channel }.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })

        for a in plan.actions {
            let started = Date()
            func result(_ outcome: String, _ reason: String, method: String? = nil, bytes: Int64 = 0, code: String? = nil) -> PackageResult {
                PackageResult(
                    id: a.id.rawValue, action: a.kind.rawValue, from: a.from?.description, to: a.to?.description, method: method,
                    bytesFetched: bytes, bundleBytes: a.cost?.bundleBytes, seconds: Date().timeIntervalSince(started), outcome: outcome,
                    reason: reason, code: code)
            }
            switch a.kind {
            case .remove:
                // After the installs below: their trees may link contents from this package.
                continue
            case .rollback:
                guard let to = a.to else { continue }
                do {
                    _ = try sandbox.rollback(id: a.id.rawValue, to: to.description, reason: "revoked by the repository: \(a.reason)")
                    results.append(result("done", a.reason))
                } catch { results.append(result("failed", error.description, code: error.code)) }
            case .skip:
                if let failure = listFailures[a.id] {
                    results.append(result("failed", "file list: \(failure.message)", code: failure.code))
                } else {
                    results.append(result("skipped", a.reason))
                }
            case .install, .update:
                break
            }
        }

        // Fetch and place every install/update, then activate each dependency group whole.
        let changes = plan.changes.filter { $0.kind == .install || $0.kind == .update }
        var placed: [PackageID: (bytes: Int64, seconds: Double, method: String)] = [:]
        var failed: [PackageID: Failure] = [:]
        let fetched = await download(changes, entries: entries, lists: lists, local: local, sandbox: sandbox, transport: t, base: base, concurrency: max(1, config.concurrency))
        for a in changes {
            guard let list = lists[a.id], let cost = a.cost, let e = entries[a.id] else { continue }
            let started = Date()
            if sandbox.state[a.id].has(e.version) {
                // Placed by an earlier sync whose group did not activate: nothing to fetch or build.
                placed[a.id] = (0, 0, FetchMethod.local.rawValue)
                continue
            }
            if let err = fetched.errors[a.id] {
                failed[a.id] = err
                continue
            }
            do {
                switch cost.method {
                case .bundle:
                    guard let part = fetched.bundles[a.id] else { throw StoreError.fileList("the bundle was not downloaded") }
                    if let staged = fetched.staged[a.id] {
                        _ = try sandbox.install(staged: staged, fileList: list, activate: false)
                    } else {
                        _ = try sandbox.install(bundle: part, id: a.id.rawValue, version: e.version.description, fileList: list, force: false, activate: false)
                    }
                    _ = unlink(part.string)
                case .objects, .local:
                    try assemble(list: list, local: local, objects: fetched.objects, sandbox: sandbox)
                }
                placed[a.id] = (fetched.bytes[a.id] ?? 0, Date().timeIntervalSince(started) + (fetched.seconds[a.id] ?? 0), cost.method.rawValue)
            } catch let err as StoreError {
                failed[a.id] = Failure(err.code, err.description)
            } catch let err as FetchError {
                failed[a.id] = Failure(err.code, err.description)
            } catch let err as GzipError {
                failed[a.id] = Failure("object-corrupt", "an object of \(a.id) \(a.to?.description ?? ""): \(err)")
            } catch {
                failed[a.id] = Failure("io", "\(error)")
            }
        }
        var activated: Set<PackageID> = []
        for a in changes where !activated.contains(a.id) {
            let group = a.group.isEmpty ? [a.id] : a.group
            let members = changes.filter { group.contains($0.id) }
            if let bad = members.first(where: { failed[$0.id] != nil || placed[$0.id] == nil }) {
                for m in members where failed[m.id] == nil {
                    failed[m.id] = Failure("dependency-group", "not activated: \(bad.id), in the same dependency group, failed")
                }
                members.forEach { activated.insert($0.id) }
                continue
            }
            do {
                try sandbox.activate(members.compactMap { m in m.to.map { (m.id, $0) } }, reason: "sync")
                // A revoked version left behind is no fallback: mark it failed.
                for m in members {
                    if let from = m.from, entries[m.id]?.revoked.contains(from) == true {
                        try sandbox.markFailed(id: m.id.rawValue, version: from.description, reason: "revoked by the repository")
                    }
                }
            } catch {
                for m in members { failed[m.id] = Failure(error.code, error.description) }
            }
            members.forEach { activated.insert($0.id) }
        }
        for a in changes {
            let p = placed[a.id]
            var r = PackageResult(
                id: a.id.rawValue, action: a.kind.rawValue, from: a.from?.description, to: a.to?.description,
                method: p?.method ?? a.cost?.method.rawValue, bytesFetched: p?.bytes ?? fetched.bytes[a.id] ?? 0,
                bundleBytes: a.cost?.bundleBytes, seconds: p?.seconds ?? 0,
                outcome: failed[a.id] == nil ? "done" : "failed", reason: failed[a.id]?.message ?? a.reason, code: failed[a.id]?.code)
            if p?.method == FetchMethod.bundle.rawValue { r.streamed = fetched.staged[a.id] != nil }
            results.append(r)
            options.progress?(.package(id: a.id.rawValue, outcome: r.outcome))
        }
        for a in plan.actions where a.kind == .remove {
            let started = Date()
            var r = PackageResult(
                id: a.id.rawValue, action: "remove", from: a.from?.description, to: nil, method: nil, bytesFetched: 0,
                bundleBytes: nil, seconds: 0, outcome: "done", reason: a.reason, code: nil)
            do { _ = try sandbox.removePackage(id: a.id.rawValue, reason: a.reason) } catch {
                r.outcome = "failed"
                r.reason = error.description
                r.code = error.code
            }
            r.seconds = Date().timeIntervalSince(started)
            results.append(r)
        }
        // Downloaded objects go once every placement that might share them is done; partial
        // downloads the current plan would not resume (superseded releases) go too.
        for part in fetched.objects.values { _ = unlink(part.string) }
        // Staged bundles not placed (their version was already on disk) go too.
        for staged in fetched.staged.values { staged.area.discard() }
        pruneDownloads(sandbox.layout.downloads, keep: fetched.resumable)
        var removed: [String] = []
        if let gc = try? sandbox.gc(keep: options.retention) { removed = gc.removed }
        let order = Dictionary(plan.actions.enumerated().map { ($1.id.rawValue, $0) }, uniquingKeysWith: { a, _ in a })
        results.sort { (order[$0.id] ?? 0) < (order[$1.id] ?? 0) }
        return SyncReport(serial: index.serial, indexChanged: changed, packages: results, removedByGC: removed)
    }

    // MARK: fetching

    struct Fetched {
        var bundles: [PackageID: FilePath] = [:]
        /// Bundles extracted while they downloaded, waiting to be checked and placed.
        var staged: [PackageID: StagedBundle] = [:]
        /// Object content digest → downloaded gzip file.
        var objects: [SHA256Digest: FilePath] = [:]
        var bytes: [PackageID: Int64] = [:]
        var seconds: [PackageID: Double] = [:]
        var errors: [PackageID: Failure] = [:]
        /// Partial downloads of this plan that failed and may be resumed next time.
        var resumable: Set<String> = []
    }

    /// Removes everything in `downloads/` but the partial downloads named in `keep` (and their
    /// saved validators).
    func pruneDownloads(_ dir: FilePath, keep: Set<String>) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: dir.string)) ?? []
        for n in names {
            let base = n.hasSuffix(".etag") ? String(n.dropLast(5)) : n
            if !keep.contains(base) { _ = unlink(dir.appending(n).string) }
        }
    }

    enum Job: Sendable {
        /// A bundle, extracted into the staging area while it downloads when there is one.
        case bundle(PackageID, URL, FilePath, Expectation, StagingArea?)
        case object(PackageID, SHA256Digest, URL, FilePath, Expectation)
    }

    /// A finished transfer: its failure, its time, and for a bundle what the extraction that
    /// followed it produced.
    struct Transfer: Sendable {
        let job: Job
        let failure: Failure?
        let seconds: Double
        let extraction: Result<StagedBundle, StoreError>?
    }

    /// Extracts a bundle into `area` on a thread of its own, reading the part file as the
    /// download writes it (see `GrowingPart`); the thread blocks while it waits for bytes, which
    /// no task of the cooperative pool may do.
    static func extract(_ area: StagingArea, following watch: GrowingPart, size: Int64) async -> Result<StagedBundle, StoreError> {
        await withCheckedContinuation { continuation in
            let thread = Thread {
                continuation.resume(returning: Result { () throws(StoreError) in try area.extract(streaming: watch, size: size) })
            }
            thread.name = "larder.extract-stream"
            thread.start()
        }
    }

    /// Downloads bundles and missing objects into `downloads/` with at most `concurrency`
    /// transfers at once; partial files stay for resume.
    func download(
        _ changes: [PlanAction], entries: [PackageID: PackageEntry], lists: [PackageID: FileList],
        local: [SHA256Digest: FilePath], sandbox: Sandbox, transport: any Transport, base: URL, concurrency: Int
    ) async -> Fetched {
        var jobs: [Job] = []
        var seen: Set<SHA256Digest> = []
        let downloads = sandbox.layout.downloads
        for a in changes {
            guard let list = lists[a.id], let cost = a.cost, let e = entries[a.id] else { continue }
            switch cost.method {
            case .bundle:
                let part = downloads.appending("\(e.id)-\(e.version)-\(e.bundle.sha256.hex.prefix(16)).zip.part")
                // Without a staging area the complete file is extracted after the download.
                let area = try? sandbox.makeStagingArea(id: e.id, version: e.version)
                jobs.append(.bundle(a.id, url(base, e.bundle.path), part, Expectation(size: e.bundle.size, limit: e.bundle.size, sha256: e.bundle.sha256), area))
            case .objects:
                for f in list.files where local[f.sha256] == nil && seen.insert(f.sha256).inserted {
                    let part = downloads.appending("object-\(f.sha256.hex).gz.part")
                    // Objects declare no compressed size: gzip of incompressible data grows by a
                    // few bytes per 16 KiB block, so this bound is generous but firm.
                    let limit = f.size + f.size / 64 + 1024
                    jobs.append(.object(a.id, f.sha256, url(base, RepositoryLayout.objectPath(f.sha256)), part, Expectation(size: nil, limit: limit, sha256: nil)))
                }
            case .local:
                break
            }
        }
        let progress = options.progress
        let totals = Dictionary(changes.map { ($0.id.rawValue, $0.cost?.bytes ?? 0) }, uniquingKeysWith: { a, _ in a })
        let counter = ByteCounter()
        var result = Fetched()
        await withTaskGroup(of: Transfer.self) { group in
            var next = 0
            func launch() {
                guard next < jobs.count else { return }
                let job = jobs[next]
                next += 1
                group.addTask {
                    let started = Date()
                    let (id, u, part, exp, area): (PackageID, URL, FilePath, Expectation, StagingArea?) = switch job {
                    case .bundle(let i, let u, let p, let e, let a): (i, u, p, e, a)
                    case .object(let i, _, let u, let p, let e): (i, u, p, e, nil)
                    }
                    let watch = area.map { _ in GrowingPart(part) }
                    async let extraction: Result<StagedBundle, StoreError>? = {
                        guard let area, let watch else { return nil }
                        return await Self.extract(area, following: watch, size: exp.size ?? exp.limit)
                    }()
                    var failure: Failure?
                    do throws(FetchError) {
                        try await transport.download(u, to: part, expecting: exp, progress: { n in
                            let done = counter.add(id.rawValue, n)
                            progress?(.bytes(id: id.rawValue, done: done, total: totals[id.rawValue] ?? 0))
                        }, watch: watch)
                        watch?.transportReturned()
                    } catch {
                        failure = Failure(error.code, error.description)
                        watch?.fail(error.description)
                    }
                    let seconds = Date().timeIntervalSince(started)
                    return Transfer(job: job, failure: failure, seconds: seconds, extraction: await extraction)
                }
            }
            for _ in 0..<concurrency { launch() }
            for await done in group {
                switch done.job {
                case .bundle(let id, _, let part, _, let area):
                    if let e = done.failure {
                        result.errors[id] = e
                        result.resumable.insert(part.lastComponent?.string ?? "")
                    } else {
                        result.bundles[id] = part
                    }
                    switch done.extraction {
                    case .success(let staged) where done.failure == nil:
                        result.staged[id] = staged
                    case .failure(let error) where done.failure == nil:
                        // The complete file is read again, and its verdict is the one reported.
                        options.logger.info("extraction while downloading failed; reading the complete bundle", metadata: ["id": "\(id)", "error": "\(error)"])
                        area?.discard()
                    default:
                        area?.discard()
                    }
                    result.seconds[id, default: 0] += done.seconds
                case .object(let id, let digest, _, let part, _):
                    if let e = done.failure {
                        result.errors[id] = result.errors[id] ?? e
                        result.resumable.insert(part.lastComponent?.string ?? "")
                    } else {
                        result.objects[digest] = part
                    }
                    result.seconds[id, default: 0] = max(result.seconds[id, default: 0], done.seconds)
                }
                launch()
            }
        }
        for a in changes { result.bytes[a.id] = counter.value(a.id.rawValue) }
        return result
    }

    /// Builds a version's tree in staging from contents already on disk (hard links, else
    /// copies) and downloaded objects (inflated while hashed), then installs it (verified file
    /// by file, not activated).
    func assemble(list: FileList, local: [SHA256Digest: FilePath], objects: [SHA256Digest: FilePath], sandbox: Sandbox) throws {
        let stage = try sandbox.makeStagingDirectory("\(list.id)@\(list.version)")
        let tree = stage.appending("tree")
        for f in list.files {
            let target = tree.appending(f.path.string)
            try AtomicFile.makeDirectories(target.removingLastComponent())
            if let source = local[f.sha256] {
                if link(source.string, target.string) != 0 {
                    try FileManager.default.copyItem(atPath: source.string, toPath: target.string)
                }
            } else if let gz = objects[f.sha256] {
                try inflate(gz, to: target, expecting: f)
            } else {
                throw StoreError.verification(id: list.id.rawValue, version: list.version.description, problems: ["\(f.path): no source for its content"])
            }
        }
        _ = try sandbox.installAssembled(stagingDirectory: stage, list: list, activate: false)
    }

    /// Inflates a downloaded object into `target`, checking size and SHA-256 while writing.
    func inflate(_ gz: FilePath, to target: FilePath, expecting f: FileEntry) throws {
        let input = try FileDescriptor.open(gz, .readOnly)
        defer { try? input.close() }
        let output = try FileDescriptor.open(target, .writeOnly, options: [.create, .exclusiveCreate], permissions: [.ownerReadWrite, .groupRead, .otherRead])
        defer { try? output.close() }
        let inflater = try Gzip.Inflater(limit: f.size)
        var hasher = SHA256Stream()
        var buffer = [UInt8](repeating: 0, count: 256 << 10)
        while true {
            let n = try buffer.withUnsafeMutableBytes { try input.read(into: $0) }
            if n == 0 { break }
            try buffer.withUnsafeBytes { raw in
                try inflater.feed(UnsafeRawBufferPointer(rebasing: raw[0..<n])) { chunk in
                    hasher.update(chunk)
                    _ = try output.writeAll(chunk)
                }
            }
        }
        try inflater.drain { chunk in
            hasher.update(chunk)
            _ = try output.writeAll(chunk)
        }
        guard inflater.isFinished else { throw GzipError.truncated }
        let got = hasher.finish()
        guard hasher.count == f.size, got == f.sha256 else {
            _ = unlink(gz.string)
            throw FetchError.hashMismatch(url: RepositoryLayout.objectPath(f.sha256), expected: f.sha256, got: got)
        }
    }
}

/// Bytes per package across concurrent transfers.
final class ByteCounter: @unchecked Sendable {
    // @unchecked: `counts` is guarded by `lock`.
    private let lock = NSLock()
    private var counts: [String: Int64] = [:]

    func add(_ id: String, _ n: Int64) -> Int64 {
        lock.lock()
        defer { lock.unlock() }
        counts[id, default: 0] += n
        return counts[id] ?? 0
    }

    func value(_ id: String) -> Int64 {
        lock.lock()
        defer { lock.unlock() }
        return counts[id] ?? 0
    }
}
