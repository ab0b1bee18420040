import Foundation
import LarderArchive
import LarderCore
import LarderFetch
import LarderFileSystem
import LarderStore
import Logging
import SystemPackage

/// Larder's main job: keep the sandbox in step with the signed repository index.
///
/// A sync runs in phases, each in its own place: `prepare` (lock, recover, accept the index —
/// `Syncer+Index.swift` — plan, fetch file lists, plan again), `download`
/// (`Syncer+Downloads.swift`), then here: place each version, activate each dependency group
/// whole, remove what left the index, and clean up.
public struct Syncer: Sendable {
    /// The sandbox directory.
    public let root: FilePath
    /// The options of this sync.
    public let options: SyncOptions
    let injected: (any Transport)?

    /// A syncer for the sandbox at `root`, fetching over the transport the repository URL calls
    /// for (`file://`, or http(s) over `options.stack`).
    public init(root: FilePath, options: SyncOptions = SyncOptions()) {
        self.init(root: root, options: options, transport: nil)
    }

    /// A syncer for the sandbox at `root`; `transport` replaces the one the repository URL
    /// implies (tests inject one).
    package init(root: FilePath, options: SyncOptions = SyncOptions(), transport: (any Transport)?) {
        self.root = root
        self.options = options
        self.injected = transport
    }

    /// The repository URL of a document.
    func url(_ base: URL, _ relative: String) -> URL {
        base.appendingPathComponent(relative)
    }

    func context(_ config: SyncConfig) -> ClientContext {
        ClientContext(
            appVersion: options.appVersion ?? config.appVersion, deviceID: config.deviceId,
            channel: options.channel.map(Channel.init(rawValue:)) ?? config.channel, wanted: Set(options.fetching),
            preload: options.preload)
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
        let listFailures: [PackageID: PackageFailure]
        let local: [SHA256Digest: FilePath]
        let plan: Plan
        /// The delta manifests the lists were rebuilt from, by package.
        var deltas: [PackageID: ResolvedDelta] = [:]
        /// Bytes the lists (or manifests) cost on the wire, by package.
        var metadataBytes: [PackageID: Int64] = [:]
        /// Why an offered delta was not used, by package.
        var deltaNotes: [PackageID: String] = [:]
        /// The byte pipelines of encrypted versions, by package.
        var sealed: [PackageID: BytePipeline] = [:]
    }

    /// Locks and recovers the sandbox, fetches and verifies the index (recording it when
    /// `record`), plans once to learn which file lists are needed, fetches them, and plans again.
    func prepare(record: Bool, prefetchedSignature: Data? = nil) async throws(SyncError) -> Prepared {
        let config: SyncConfig
        do { config = try SyncConfig.load(root: root) } catch { throw .config(error) }
        let sandbox: Sandbox
        sandbox = try await openWaiting()
        do throws(SyncError) {
            guard let base = URL(string: config.repository) else {
                throw SyncError.config(.invalid("bad repository URL"))
            }
            let t = try transportFor(base, config)
            let (index, changed) = try await acceptIndex(
                sandbox: sandbox, config: config, transport: t, base: base, record: record,
                prefetchedSignature: prefetchedSignature)
            let ctx = context(config)
            let first = filter(Differ.plan(index: index, state: sandbox.state, context: ctx), index)
            var fetchedLists = await fetchLists(
                first, index: index, transport: t, base: base, channel: ctx.channel, sandbox: sandbox)
            // The contents already held matter only to versions whose file list was fetched (to
            // cost them, fetch what is missing and assemble); a sync with nothing new does not
            // read every installed version's list.
            let local = fetchedLists.lists.isEmpty ? [:] : sandbox.localContents()
            let replan = { (lists: Lists) in
                // Without a fetched list the second plan would have the first one's inputs.
                lists.lists.isEmpty
                    ? first
                    : self.filter(
                        Differ.plan(
                            index: index, state: sandbox.state, context: ctx, fileLists: lists.lists,
                            localContents: Set(local.keys), deltas: lists.deltas),
                        index)
            }
            var plan = replan(fetchedLists)
            if record {
                // An encrypted delta names only the objects it fetches; a plan fetching others needs the sealed list.
                let entries = Dictionary(
                    index.packages.filter { $0.channel == ctx.channel }.map { ($0.id, $0) },
                    uniquingKeysWith: { a, _ in a })
                let unnamed = await nameObjects(
                    plan, &fetchedLists, entries: entries, local: local, transport: t, base: base)
                if !unnamed.isEmpty { plan = replan(fetchedLists) }
                // A sync places each list as the verified bytes it was decoded from; they go to
                // staging/ now, so that no copy is held in memory meanwhile.
                for (id, bytes) in fetchedLists.bytes {
                    if let list = fetchedLists.lists[id] { sandbox.provideListBytes(bytes, for: list) }
                }
            }
            let (lists, failures) = (fetchedLists.lists, fetchedLists.failures)
            return Prepared(
                config: config, sandbox: sandbox, base: base, transport: t, index: index, indexChanged: changed,
                context: ctx, lists: lists, listFailures: failures, local: local, plan: plan,
                deltas: fetchedLists.deltas, metadataBytes: fetchedLists.wireBytes, deltaNotes: fetchedLists.deltaNotes,
                sealed: fetchedLists.sealed)
        } catch {
            sandbox.close()
            throw error
        }
    }

    /// Opens the sandbox, waiting up to `lockTimeout` for another writer's lock by suspending
    /// between tries, never by blocking the thread: a sync is async, and a thread of the
    /// cooperative pool held asleep for seconds could be the one the lock holder — another task of
    /// the same process — needs to finish and let go.
    func openWaiting() async throws(SyncError) -> Sandbox {
        var o = Sandbox.Options()
        o.lockTimeout = 0
        o.handoff = options.handoff
        o.pipeline = options.pipeline
        let start = Date()
        while true {
            do { return try Sandbox.open(root, options: o) } catch {
                guard case .locked(let holder, _) = error else { throw .store(error) }
                let waited = Date().timeIntervalSince(start)
                if waited >= options.lockTimeout {
                    throw .store(.locked(holderPID: holder, waitedSeconds: (waited * 10).rounded() / 10))
                }
                try? await Task.sleep(for: .milliseconds(20))
            }
        }
    }

    /// Plans without changing anything (fetches the index and file lists, records nothing).
    package func plan() async throws(SyncError) -> (Plan, RepositoryIndex) {
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
            for e in index.packages where e.id == id {
                for d in e.dependencies where wanted.insert(d.id).inserted { frontier.append(d.id) }
            }
        }
        for a in plan.actions where wanted.contains(a.id) {
            for member in a.group { wanted.insert(member) }
        }
        return Plan(actions: plan.actions.filter { wanted.contains($0.id) })
    }

    func transportFor(_ base: URL, _ config: SyncConfig) throws(SyncError) -> any Transport {
        if let t = injected { return t }
        var http = options.http
        http.allowInsecureHTTP = http.allowInsecureHTTP || config.allowInsecureHTTP
        // As many connections to the repository as transfers at once (HTTP/2 needs only one).
        http.connectionsPerHost = max(1, config.concurrency)
        do { return try transport(for: base, options: http, stack: options.stack) } catch { throw .fetch(error) }
    }

    /// Syncs: lock, recover, fetch and verify the index, plan, fetch with bounded concurrency,
    /// place and activate (as pending; dependency groups together), gc by retention. One
    /// package's failure neither blocks nor damages another.
    public func sync() async throws(SyncError) -> SyncReport {
        var prefetched: Data?
        switch try await checkNoChange() {
        case .upToDate(let report): return report
        case .changed(let signature): prefetched = signature
        case .notChecked: break
        }
        let p = try await prepare(record: true, prefetchedSignature: prefetched)
        defer { p.sandbox.close() }
        let entries = Dictionary(
            p.index.packages.filter { $0.channel == p.context.channel }.map { ($0.id, $0) },
            uniquingKeysWith: { a, _ in a })
        var results = applyRollbacksAndSkips(p)

        // Fetch and place every install/update, then activate each dependency group whole.
        var changes = p.plan.changes.filter { $0.kind == .install || $0.kind == .update }
        let (fit, refused) = checkSpace(changes, prepared: p)
        changes = fit
        results += refused
        var fetched = await download(
            changes, entries: entries, lists: p.lists, local: p.local, sandbox: p.sandbox, transport: p.transport,
            base: p.base, concurrency: max(1, p.config.concurrency), deltas: p.deltas, sealed: p.sealed)
        let deltaResults = await applyDeltas(&changes, fetched: &fetched, prepared: p, entries: entries)
        let (placed, failed) = placeAndActivate(changes, entries: entries, prepared: p, fetched: fetched)
        for a in changes {
            let done = placed[a.id]
            var r = PackageResult(
                id: a.id.rawValue, action: a.kind, from: a.from?.description, to: a.to?.description,
                method: done?.method ?? a.cost?.method, bytesFetched: done?.bytes ?? fetched[a.id].bytes,
                bundleBytes: a.cost?.bundleBytes, seconds: done?.seconds ?? 0,
                outcome: failed[a.id] == nil ? .done : .failed, reason: failed[a.id]?.description ?? a.reason,
                code: failed[a.id]?.code)
            if done?.method == .bundle { r.streamed = fetched[a.id].staged != nil }
            r.metadataBytes = p.metadataBytes[a.id]
            r.delta = deltaResults[a.id]
            results.append(r)
            options.progress?(.package(id: a.id.rawValue, outcome: r.outcome))
        }
        // After the installs: their trees may link contents from a package that is removed.
        results += remove(p.plan, sandbox: p.sandbox)
        let removed = cleanUp(fetched, sandbox: p.sandbox)
        let budget = enforceBudget(p, entries: entries, keep: Set(changes.map(\.id)))
        let order = Dictionary(
            p.plan.actions.enumerated().map { ($1.id.rawValue, $0) }, uniquingKeysWith: { a, _ in a })
        results.sort { (order[$0.id] ?? 0) < (order[$1.id] ?? 0) }
        var report = SyncReport(
            serial: p.index.serial, indexChanged: p.indexChanged, packages: results, removedByGC: removed)
        report.budget = budget
        recordSettled(report, sandbox: p.sandbox, config: p.config)
        return report
    }

    // MARK: phases

    /// A result for `a`, timed from `started`.
    func result(
        _ a: PlanAction, started: Date, _ outcome: PackageOutcome, _ reason: String, failure: PackageFailure? = nil
    ) -> PackageResult {
        PackageResult(
            id: a.id.rawValue, action: a.kind, from: a.from?.description, to: a.to?.description, method: nil,
            bytesFetched: 0, bundleBytes: a.cost?.bundleBytes, seconds: Date().timeIntervalSince(started),
            outcome: outcome, reason: reason, code: failure?.code)
    }

    /// Rollbacks off revoked versions, and skips (with the file-list failures that caused some).
    func applyRollbacksAndSkips(_ p: Prepared) -> [PackageResult] {
        var results: [PackageResult] = []
        for a in p.plan.actions {
            let started = Date()
            switch a.kind {
            case .rollback:
                guard let to = a.to else { continue }
                do throws(StoreError) {
                    _ = try p.sandbox.rollback(id: a.id, to: to, reason: "revoked by the repository: \(a.reason)")
                    results.append(result(a, started: started, .done, a.reason))
                } catch {
                    results.append(result(a, started: started, .failed, error.description, failure: .store(error)))
                }
            case .skip:
                if let failure = p.listFailures[a.id] {
                    results.append(
                        result(a, started: started, .failed, "file list: \(failure.description)", failure: failure))
                } else {
                    results.append(result(a, started: started, .skipped, a.reason))
                }
            case .install, .update, .remove:
                continue
            }
        }
        return results
    }

    /// What placing one version took.
    struct Placement {
        let bytes: Int64
        let seconds: Double
        let method: FetchMethod
    }

    /// Places every fetched version on disk (verified: a bundle from its staged extraction or
    /// its complete file, objects assembled with the contents already held), then activates each
    /// dependency group whole, or not at all when a member failed — with one durable state write
    /// for the whole phase (see `Sandbox.batched`). Crash-consistent: the trees placed are
    /// unknown to the durable state until that write (recovery removes them), and the write
    /// makes every placement and activation at once, so a crash leaves each package on its old
    /// version or its new one. A version placed whose group did not activate stays recorded as
    /// placed, for the next sync to activate without fetching it again.
    func placeAndActivate(
        _ changes: [PlanAction], entries: [PackageID: PackageEntry], prepared p: Prepared, fetched: Fetched
    ) -> ([PackageID: Placement], [PackageID: PackageFailure]) {
        var placed: [PackageID: Placement] = [:]
        var failed: [PackageID: PackageFailure] = [:]
        do throws(StoreError) {
            try p.sandbox.batched {
                placeEach(changes, entries: entries, prepared: p, fetched: fetched, &placed, &failed)
                activateEach(changes, entries: entries, sandbox: p.sandbox, placed: placed, failed: &failed)
            }
        } catch {
            // Nothing of the phase is durable: neither the placements nor the activations.
            for id in placed.keys { failed[id] = .store(error) }
            placed = [:]
        }
        return (placed, failed)
    }

    func placeEach(
        _ changes: [PlanAction], entries: [PackageID: PackageEntry], prepared p: Prepared, fetched: Fetched,
        _ placed: inout [PackageID: Placement], _ failed: inout [PackageID: PackageFailure]
    ) {
        // Contents made by patches are linked like the ones held.
        let applied = fetched.applied
        let sources = applied.isEmpty ? p.local : p.local.merging(applied) { x, _ in x }
        let objects = fetched.objects
        for a in changes {
            guard let list = p.lists[a.id], let cost = a.cost, let e = entries[a.id] else { continue }
            let started = Date()
            if p.sandbox.state[a.id].has(e.version) {
                // Placed by an earlier sync whose group did not activate: nothing to fetch or build.
                placed[a.id] = Placement(bytes: 0, seconds: 0, method: .local)
                continue
            }
            let progress = fetched[a.id]
            if let err = progress.error {
                failed[a.id] = err
                continue
            }
            do throws(StoreError) {
                // What was downloaded says how the version is built: from its bundle, or from
                // contents (held, made by patches, or downloaded as objects).
                if let part = progress.bundle {
                    if let staged = progress.staged {
                        _ = try p.sandbox.install(staged: staged, fileList: list, activate: false)
                    } else {
                        _ = try p.sandbox.install(
                            bundle: part, id: a.id, version: e.version, fileList: list, force: false, activate: false)
                    }
                    try? SystemCalls.unlink(part)
                } else if cost.method == .bundle {
                    throw StoreError.fileList("the bundle was not downloaded")
                } else {
                    let area = try p.sandbox.makeStagingArea(id: list.id, version: list.version)
                    do throws(StoreError) {
                        try area.assemble(list: list, local: sources, objects: objects)
                    } catch {
                        area.discard()
                        throw error
                    }
                    _ = try p.sandbox.install(assembled: area, list: list, activate: false)
                }
                placed[a.id] = Placement(
                    bytes: progress.bytes, seconds: Date().timeIntervalSince(started) + progress.seconds,
                    method: cost.method)
            } catch {
                failed[a.id] = .store(error)
            }
        }
    }

    /// Activates each dependency group whole, or not at all when a member failed; a revoked
    /// version left behind is marked failed so it is never the fallback. Runs inside the
    /// placement's batch.
    func activateEach(
        _ changes: [PlanAction], entries: [PackageID: PackageEntry], sandbox: Sandbox, placed: [PackageID: Placement],
        failed: inout [PackageID: PackageFailure]
    ) {
        var activated: Set<PackageID> = []
        let position = Dictionary(changes.enumerated().map { ($1.id, $0) }, uniquingKeysWith: { a, _ in a })
        for a in changes where !activated.contains(a.id) {
            let group = a.group.isEmpty ? [a.id] : a.group
            // The group's changes, in plan order.
            let members = group.compactMap { position[$0] }.sorted().map { changes[$0] }
            if let bad = members.first(where: { failed[$0.id] != nil || placed[$0.id] == nil }) {
                for m in members where failed[m.id] == nil { failed[m.id] = .dependencyGroup(member: bad.id) }
                activated.formUnion(members.map(\.id))
                continue
            }
            do throws(StoreError) {
                try sandbox.activate(members.compactMap { m in m.to.map { (m.id, $0) } }, reason: "sync")
                for m in members {
                    if let from = m.from, entries[m.id]?.revoked.contains(from) == true {
                        try sandbox.markFailed(id: m.id, version: from, reason: "revoked by the repository")
                    }
                }
            } catch {
                for m in members { failed[m.id] = .store(error) }
            }
            activated.formUnion(members.map(\.id))
        }
    }

    /// Forgets the packages that left the index (their trees go like gc deletes them), with one
    /// state write for all of them.
    func remove(_ plan: Plan, sandbox: Sandbox) -> [PackageResult] {
        let started = Date()
        let removals = plan.actions.filter { $0.kind == .remove }
        guard !removals.isEmpty else { return [] }
        var failed: [String: StoreError] = [:]
        do throws(StoreError) { failed = try sandbox.removePackages(removals.map(\.id)).failed } catch {
            for a in removals { failed[a.id.rawValue] = error }
        }
        let seconds = Date().timeIntervalSince(started) / Double(removals.count)
        return removals.map { a in
            var r = PackageResult(
                id: a.id.rawValue, action: .remove, from: a.from?.description, to: nil, method: nil, bytesFetched: 0,
                bundleBytes: nil, seconds: seconds, outcome: .done, reason: a.reason, code: nil)
            if let error = failed[a.id.rawValue] {
                r.outcome = .failed
                r.reason = error.description
                r.code = error.code
            }
            return r
        }
    }

    /// Deletes downloaded objects once every placement that might share them is done, staged
    /// bundles not placed (their version was already on disk), and partial downloads the
    /// current plan would not resume (superseded releases); then gc by retention. Returns what
    /// gc removed.
    func cleanUp(_ fetched: Fetched, sandbox: Sandbox) -> [String] {
        for content in fetched.contents.values {
            for file in [content.object, content.applied, content.patch].compactMap({ $0 }) {
                try? SystemCalls.unlink(file)
            }
        }
        for staged in fetched.packages.values.compactMap(\.staged) { staged.area.discard() }
        sandbox.discardStagedLists()
        pruneDownloads(sandbox.layout.downloads, keep: fetched.resumable)
        // Retention is housekeeping: a failure here leaves more versions on disk, never fewer.
        return (try? sandbox.gc(keep: options.retention))?.removed ?? []
    }
}
