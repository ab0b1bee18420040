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
/// A sync carries each install or update as one `Release` through phases, each a small type in a
/// file of its own: accept the index (`Syncer+Index.swift`), `PlanPhase`, the room check
/// (`Syncer+Space.swift`), `FetchPhase`, `PatchPhase`, `StagePhase` and `ActivatePhase` (one
/// durable state write for both, `placeAndActivate`), then removal, clean-up and gc here
/// (docs/architecture.md, "Where a release goes, phase by phase"). What the app sets once is its
/// `SyncSetup`; what one sync asks, a `SyncRequest`.
public struct Syncer: Sendable {
    /// The sandbox directory.
    package let root: FilePath
    /// What the app set once: engine, limits, keys, clock, progress.
    package let setup: SyncSetup
    /// What the sync under way asks (set by `sync(_:)` for its call).
    var request = SyncRequest()
    let injected: (any Transport)?

    /// A syncer for the sandbox at `root`, fetching over the transport the repository URL calls
    /// for (`file://`, or http(s) over `setup.engine`).
    public init(root: FilePath, setup: SyncSetup) {
        self.init(root: root, setup: setup, transport: nil)
    }

    /// A syncer for the sandbox at `root`; `transport` replaces the one the repository URL
    /// implies (tests inject one).
    package init(root: FilePath, setup: SyncSetup, transport: (any Transport)?) {
        self.root = root
        self.setup = setup
        self.injected = transport
    }

    /// The repository URL of a document.
    func url(_ base: URL, _ relative: String) -> URL {
        base.appendingPathComponent(relative)
    }

    func context(_ config: SyncConfig) -> ClientContext {
        ClientContext(
            appVersion: request.appVersion ?? config.appVersion, deviceID: config.deviceId,
            channel: request.channel ?? config.channel, wanted: Set(request.fetching), preload: request.preload)
    }

    /// What both `plan` and `sync` start from: the open sandbox (the caller closes it) in its
    /// scope, the verified index, the plan, and the releases it sought a file list for.
    struct Prepared {
        let scope: SyncScope
        let index: RepositoryIndex
        let indexChanged: Bool
        let context: ClientContext
        let plan: Plan
        /// The releases the plan sought a list for, by package (each install or update among them).
        let releases: [PackageID: Release]
        /// The contents the sandbox holds, where.
        let local: [SHA256Digest: FilePath]
        /// When a schedule of this channel next moves a share (format §20): a plan made now is
        /// the plan only until then.
        var scheduleChange: Date? = nil
    }

    /// Locks and recovers the sandbox, fetches and verifies the index (recording it when
    /// `record`), then the plan phase.
    func prepare(record: Bool, prefetchedSignature: Data? = nil) async throws(SyncError) -> Prepared {
        let config: SyncConfig
        do { config = try SyncConfig.load(root: root) } catch { throw .config(error) }
        let sandbox = try await openWaiting()
        do throws(SyncError) {
            guard let base = URL(string: config.repository) else {
                throw SyncError.config(.invalid("bad repository URL"))
            }
            let t = try transportFor(base, config)
            let (accepted, changed) = try await acceptIndex(
                sandbox: sandbox, config: config, transport: t, base: base, record: record,
                prefetchedSignature: prefetchedSignature)
            // Planned with the shares in effect now: each schedule's step, the holds applied
            // (format §20). What was verified and recorded is the index as signed.
            let now = setup.clock()
            let index = accepted.effective(at: now)
            let scope = SyncScope(
                setup: setup, request: request, config: config, sandbox: sandbox, transport: t, base: base)
            let ctx = context(config)
            let planned = await PlanPhase(scope: scope, index: index, context: ctx).run(record: record)
            return Prepared(
                scope: scope, index: index, indexChanged: changed, context: ctx, plan: planned.plan,
                releases: planned.releases, local: planned.local,
                scheduleChange: accepted.nextScheduleChange(after: now, channel: ctx.channel))
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
        o.handoff = setup.handoff
        o.pipeline = setup.pipeline
        let start = Date()
        while true {
            do { return try Sandbox.open(root, options: o) } catch {
                guard case .locked(let holder, _) = error else { throw .store(error) }
                let waited = Date().timeIntervalSince(start)
                if waited >= setup.lockTimeout {
                    throw .store(.locked(holderPID: holder, waitedSeconds: (waited * 10).rounded() / 10))
                }
                try? await Task.sleep(for: .milliseconds(20))
            }
        }
    }

    /// Plans `request` without changing anything (fetches the index and file lists, records
    /// nothing): what `sync` with `dryRun` reports, with each way of fetching weighed.
    package func plan(_ request: SyncRequest = SyncRequest()) async throws(SyncError) -> (Plan, RepositoryIndex) {
        var run = self
        run.request = request
        let p = try await run.prepare(record: false)
        p.scope.sandbox.close()
        return (p.plan, p.index)
    }

    func transportFor(_ base: URL, _ config: SyncConfig) throws(SyncError) -> any Transport {
        if let t = injected { return t }
        var http = setup.http
        http.allowInsecureHTTP = http.allowInsecureHTTP || config.allowInsecureHTTP
        // As many connections to the repository as transfers at once (HTTP/2 needs only one).
        http.connectionsPerHost = max(1, config.concurrency)
        do { return try transport(for: base, options: http, stack: setup.engine) } catch { throw .fetch(error) }
    }

    /// Syncs what `request` asks (by default every package): lock, recover, fetch and verify
    /// the index, plan, fetch with bounded concurrency, place and activate (as pending;
    /// dependency groups together), gc by retention. One package's failure neither blocks nor
    /// damages another. With `dryRun`, only plans: the report's `plan` says what a sync would do,
    /// and nothing is applied or recorded.
    public func sync(_ request: SyncRequest = SyncRequest()) async throws(SyncError) -> SyncReport {
        var run = self
        run.request = request
        guard request.dryRun else {
            let report = try await run.apply()
            // An up-to-date sync's report lists no package: adoption (`checked`) comes from the state.
            if report.upToDate { run.reportTelemetry(report, releases: [:]) }
            return report
        }
        let (plan, index) = try await run.plan(request)
        var report = SyncReport(serial: index.serial, indexChanged: false, packages: [], removedByGC: [])
        report.plan = plan
        return report
    }

    /// The sync proper: each install or update is one `Release`, handed from phase to phase
    /// (docs/architecture.md).
    func apply() async throws(SyncError) -> SyncReport {
        var prefetched: Data?
        switch try await checkNoChange() {
        case .upToDate(let report): return report
        case .changed(let signature): prefetched = signature
        case .notChecked: break
        }
        let p = try await prepare(record: true, prefetchedSignature: prefetched)
        let sandbox = p.scope.sandbox
        defer { sandbox.close() }
        var results = applyRollbacksAndSkips(p)
        let planned = p.plan.changes.compactMap { a in
            a.kind == .install || a.kind == .update ? p.releases[a.id] : nil
        }
        let (fit, refused) = checkSpace(planned, scope: p.scope, local: p.local)
        var releases = fit
        results += refused
        let fetch = FetchPhase(scope: p.scope, local: p.local)
        var contents = await fetch.run(&releases)
        await PatchPhase(fetch: fetch).run(&releases, contents: &contents)
        placeAndActivate(&releases, prepared: p, contents: contents)
        for r in releases {
            guard let result = r.result() else { continue }
            results.append(result)
            setup.progress?(.package(id: result.id, outcome: result.outcome))
        }
        // After the installs: their trees may link contents from a package that is removed.
        results += ActivatePhase(sandbox: sandbox).remove(p.plan)
        let removed = cleanUp(releases, contents: contents, sandbox: sandbox)
        let budget = enforceBudget(p, keep: Set(releases.map(\.id)))
        let order = Dictionary(
            p.plan.actions.enumerated().map { ($1.id.rawValue, $0) }, uniquingKeysWith: { a, _ in a })
        results.sort { (order[$0.id] ?? 0) < (order[$1.id] ?? 0) }
        var report = SyncReport(
            serial: p.index.serial, indexChanged: p.indexChanged, packages: results, removedByGC: removed)
        report.budget = budget
        recordSettled(report, sandbox: sandbox, config: p.scope.config, until: p.scheduleChange)
        reportTelemetry(report, releases: p.releases)
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
                    _ = try p.scope.sandbox.rollback(
                        id: a.id, to: to, reason: "revoked by the repository: \(a.reason)", cause: "revoked")
                    results.append(result(a, started: started, .done, a.reason))
                } catch {
                    results.append(result(a, started: started, .failed, error.description, failure: .store(error)))
                }
            case .skip:
                if let failure = p.releases[a.id]?.failure {
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

    /// The stage and activate phases in one batch: every fetched release placed on disk
    /// (`StagePhase`), then each dependency group activated whole, or not at all when a member
    /// failed (`ActivatePhase`) — with one durable state write for the whole batch (see
    /// `Sandbox.batched`). Crash-consistent: the trees placed are unknown to the durable state
    /// until that write (recovery removes them), and the write makes every placement and
    /// activation at once, so a crash leaves each package on its old version or its new one. A
    /// version placed whose group did not activate stays recorded as placed, for the next sync to
    /// activate without fetching it again.
    func placeAndActivate(_ releases: inout [Release], prepared p: Prepared, contents: FetchPhase.Contents) {
        let sandbox = p.scope.sandbox
        var staged = releases
        do throws(StoreError) {
            try sandbox.batched {
                StagePhase(sandbox: sandbox, local: p.local).run(&staged, contents: contents)
                ActivatePhase(sandbox: sandbox).run(&staged)
            }
            releases = staged
        } catch {
            // Nothing of the batch is durable: neither the placements nor the activations.
            for i in releases.indices {
                releases[i].failure = staged[i].placement == nil ? staged[i].failure : .store(error)
            }
        }
    }

    /// Deletes downloaded objects once every placement that might share them is done, staged
    /// bundles not placed (their version was already on disk), and partial downloads the
    /// current plan would not resume (superseded releases); then gc by retention. Returns what
    /// gc removed.
    func cleanUp(_ releases: [Release], contents: FetchPhase.Contents, sandbox: Sandbox) -> [String] {
        for content in contents.byDigest.values {
            for file in [content.object, content.applied, content.patch].compactMap({ $0 }) {
                try? SystemCalls.unlink(file)
            }
        }
        for staged in releases.compactMap(\.download.staged) { staged.area.discard() }
        sandbox.discardStagedLists()
        FetchPhase.pruneDownloads(sandbox.layout.downloads, keep: contents.resumable)
        // Retention is housekeeping: a failure here leaves more versions on disk, never fewer.
        return (try? sandbox.gc(keep: setup.retention))?.removed ?? []
    }
}
