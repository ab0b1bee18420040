import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import SystemPackage

extension Sandbox {
    // MARK: health

    /// The app confirms that the active version of `id` works.
    package func confirm(id: PackageID) throws(StoreError) -> HealthOutcome {
        try requireWritable()
        let id = try knownPackage(id)
        var pkg = state[id]
        pkg.confirm(at: now)
        state[id] = pkg
        try commit()
        return outcome(id, from: nil, to: nil)
    }

    /// Counts a failure of the active version of `id` (a missing file, a crash, a page that did
    /// not load); a pending version with too many failures is rolled back automatically.
    package func reportFailure(id: PackageID, reason: String) throws(StoreError) -> HealthOutcome {
        try requireWritable()
        let id = try knownPackage(id)
        var pkg = state[id]
        let from = pkg.active
        let to = pkg.recordFailure(reason, policy: options.healthPolicy, at: now)
        state[id] = pkg
        try commit()
        if let to, let from { reportRollback(id, from: from, to: to, cause: "health") }
        return outcome(id, from: to == nil ? nil : from, to: to)
    }

    /// Applies a page-health verdict reached about `activation`: when that activation is still
    /// the current one, healthy confirms a pending version and failed records the failure with
    /// its reason and rolls a pending version back to its fallback at once. A verdict about an
    /// activation that is no longer current (a sync or rollback happened since the page loaded)
    /// changes nothing. Writes the state only when something changed.
    package func recordPageHealth(
        _ verdict: HealthVerdict, for activation: ActivationRef, facts: PageFacts = .none
    ) throws(StoreError) -> PageHealthOutcome {
        try requireWritable()
        var pkg = state[activation.package]
        guard let current = pkg.activationRef(activation.package), current == activation else {
            let now = state[activation.package].activationRef(activation.package)
            return PageHealthOutcome(
                activation: activation, verdict: verdict,
                effect: .stale(current: now.map { "\($0)" } ?? "no active version"))
        }
        if verdict == .healthy, pkg.health == .confirmed {
            return PageHealthOutcome(activation: activation, verdict: verdict, effect: .unchanged)
        }
        let to = pkg.recordPageHealth(verdict, at: now)
        state[activation.package] = pkg
        try commit()
        if case .failed = verdict {
            reportTelemetry { ctx in
                [
                    TelemetryEvent(
                        .healthFailed, package: activation.package, version: activation.version, channel: ctx.channel,
                        reason: facts.failure ?? "not-ready", at: now)
                ]
            }
            if let to { reportRollback(activation.package, from: activation.version, to: to, cause: "health") }
        }
        let effect: PageHealthOutcome.Effect =
            switch verdict {
            case .healthy: .confirmed
            case .failed: to.map { .rolledBack(to: $0.description) } ?? .failureRecorded
            }
        return PageHealthOutcome(activation: activation, verdict: verdict, effect: effect)
    }

    /// Counts an app launch for every pending package; one still unconfirmed after too many
    /// launches is rolled back automatically.
    package func beginLaunch() throws(StoreError) -> [HealthOutcome] {
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
        // Launched again and again without confirming: a crash loop.
        for r in results {
            if let id = PackageID(r.id), let from = r.rolledBackFrom.flatMap(SemanticVersion.init),
                let to = r.rolledBackTo.flatMap(SemanticVersion.init)
            {
                reportRollback(id, from: from, to: to, cause: "crash-loop")
            }
        }
        return results
    }

    func outcome(_ id: PackageID, from: SemanticVersion?, to: SemanticVersion?) -> HealthOutcome {
        let pkg = state[id]
        return HealthOutcome(
            id: id.rawValue, active: pkg.active?.description, health: pkg.health,
            rolledBackTo: to?.description, rolledBackFrom: from?.description)
    }

    // MARK: rollback

    /// Activates the fallback of `id`, or `version` when it is on disk. The version left is
    /// recorded as failed (never installed again automatically).
    /// `cause` is what telemetry reports (`manual`, or `revoked` for a sync's).
    package func rollback(
        id: PackageID, to version: SemanticVersion?, reason: String = "rolled back by the operator",
        cause: String = "manual"
    ) throws(StoreError) -> RollbackReport {
        try requireWritable()
        let id = try knownPackage(id)
        var pkg = state[id]
        let target: SemanticVersion
        if let v = version {
            guard pkg.has(v) else { throw .notInstalled(id: id.rawValue, version: v.description) }
            target = v
        } else {
            guard let f = pkg.fallback, pkg.has(f) else { throw .noFallback(id: id.rawValue) }
            target = f
        }
        let from = pkg.rollBack(to: target, reason: reason, at: now)
        state[id] = pkg
        try commit()
        if let from { reportRollback(id, from: from, to: target, cause: cause) }
        return RollbackReport(id: id.rawValue, from: from?.description, to: target.description)
    }

    // MARK: telemetry

    /// Records events in the sandbox's telemetry spool, when the device reports (format §19).
    package func reportTelemetry(_ make: (TelemetrySpool.Context) -> [TelemetryEvent]) {
        guard readOnly == nil else { return }
        TelemetrySpool(root: layout.root, logger: options.logger).record(now: now, make)
    }

    /// A `rolled-back` event: the device left `from` for `to`.
    func reportRollback(_ id: PackageID, from: SemanticVersion, to: SemanticVersion, cause: String) {
        reportTelemetry { ctx in
            [
                TelemetryEvent(
                    .rolledBack, package: id, version: to, channel: ctx.channel, reason: cause, from: from, at: now)
            ]
        }
    }
}
