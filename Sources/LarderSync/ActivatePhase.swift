import Foundation
import LarderCore
import LarderStore

/// The activate phase: each dependency group of releases made active together, or not at all
/// when a member failed, as pending (page health confirms it); then the packages that left the
/// index forgotten. It runs inside the placement's batch (`Syncer.placeAndActivate`), so that the
/// placements and activations of a sync are one durable state write.
struct ActivatePhase {
    let sandbox: Sandbox

    /// Activates each dependency group of `releases` whole, or not at all when a member failed
    /// or was not placed; a revoked version left behind is marked failed so it is never the
    /// fallback.
    func run(_ releases: inout [Release]) {
        var activated: Set<PackageID> = []
        let at = releases.positions
        for r in releases where !activated.contains(r.id) {
            guard let a = r.action else { continue }
            let group = a.group.isEmpty ? [a.id] : a.group
            // The group's releases, in plan order.
            let members = group.compactMap { at[$0] }.sorted()
            activated.formUnion(members.map { releases[$0].id })
            if let bad = members.first(where: { releases[$0].failure != nil || releases[$0].placement == nil }) {
                let badID = releases[bad].id
                for m in members where releases[m].failure == nil {
                    releases[m].failure = .dependencyGroup(member: badID)
                }
                continue
            }
            do throws(StoreError) {
                try sandbox.activate(
                    members.compactMap { m in releases[m].action?.to.map { (releases[m].id, $0) } }, reason: "sync")
                for m in members {
                    if let from = releases[m].action?.from, releases[m].entry.revoked.contains(from) {
                        try sandbox.markFailed(id: releases[m].id, version: from, reason: "revoked by the repository")
                    }
                }
            } catch {
                for m in members { releases[m].failure = .store(error) }
            }
        }
    }

    /// Forgets the packages that left the index (their trees go like gc deletes them), with one
    /// state write for all of them.
    func remove(_ plan: Plan) -> [PackageResult] {
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
}
