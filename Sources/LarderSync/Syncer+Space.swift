import Foundation
import LarderCore
import LarderStore
import SystemPackage

/// Room on the disk before anything is fetched: each install or update, in plan order, needs
/// what it downloads and what it writes (the contents the sandbox lacks), and the file system
/// must keep `freeSpaceReserve` times the sync's total free besides. A package that does not fit
/// — with its whole dependency group — is refused with the figures (`no-space`) before any byte
/// of it is written; smaller ones after it may still fit.
extension Syncer {
    /// The releases that fit, and a failed result for each one that does not.
    func checkSpace(_ releases: [Release], scope: SyncScope, local: [SHA256Digest: FilePath]) -> (
        fit: [Release], refused: [PackageResult]
    ) {
        guard !releases.isEmpty, let available = setup.availableSpace(scope.sandbox.layout.root) else {
            return (releases, [])
        }
        var written: Set<SHA256Digest> = []
        var need: [PackageID: (download: Int64, write: Int64)] = [:]
        for r in releases {
            guard let list = r.list else { continue }
            var write: Int64 = 0
            for f in list.files where local[f.sha256] == nil && written.insert(f.sha256).inserted { write += f.size }
            need[r.id] = (r.action?.cost?.bytes ?? 0, write)
        }
        var total: Int64 = 0
        var refused: [PackageID: PackageFailure] = [:]
        for r in releases where refused[r.id] == nil {
            guard let a = r.action else { continue }
            let group = a.group.isEmpty ? [a.id] : a.group
            let n = group.reduce(Int64(0)) { $0 + (need[$1].map { $0.download + $0.write } ?? 0) }
            let after = total + n
            let reserve = Int64((Double(after) * setup.freeSpaceReserve).rounded(.up))
            if after + reserve <= available {
                total = after
                continue
            }
            for id in group {
                let (download, write) = need[id] ?? (0, 0)
                refused[id] = .noSpace(
                    download: download, write: write, reserve: reserve, available: available,
                    path: scope.sandbox.layout.root.string)
            }
        }
        guard !refused.isEmpty else { return (releases, []) }
        let started = Date()
        let results = releases.compactMap { r -> PackageResult? in
            guard let failure = refused[r.id], let a = r.action else { return nil }
            setup.logger.notice(
                "not enough free space; not fetched", metadata: ["id": "\(a.id)", "reason": "\(failure)"])
            return result(a, started: started, .failed, failure.description, failure: failure)
        }
        return (releases.filter { refused[$0.id] == nil }, results)
    }
}

extension Syncer {
    /// With a disk budget in the config: evicts on-demand packages, least recently used first,
    /// until the sandbox is within it — never one this sync installed or updated (`keep`), an
    /// eager one, or one a session pins. A failure is logged; the sync's outcome stands.
    func enforceBudget(_ p: Prepared, keep: Set<PackageID>) -> BudgetReport? {
        guard let budget = p.scope.config.diskBudget else { return nil }
        let onDemand = Set(p.index.entries(on: p.context.channel).values.filter(\.isOnDemand).map(\.id))
        do throws(StoreError) {
            let report = try p.scope.sandbox.enforceBudget(budget, onDemand: onDemand, keep: keep)
            if !report.evicted.isEmpty {
                setup.logger.info(
                    "evicted to stay within the disk budget",
                    metadata: ["evicted": "\(report.evicted)", "bytes": "\(report.after) of \(budget)"])
            }
            return report
        } catch {
            setup.logger.warning("keeping within the disk budget failed", metadata: ["error": "\(error)"])
            return nil
        }
    }
}

extension Syncer {
    /// An install of one on-demand package now, as `larder fetch ID` does (a sync of that
    /// package and what it depends on), for fetch at first use: nil when it is installed, else
    /// why not (the failure's code and message).
    package static func installer(root: FilePath, setup: SyncSetup) -> @Sendable (PackageID) async -> String? {
        { id in
            do throws(SyncError) {
                let report = try await Syncer(root: root, setup: setup).sync(
                    SyncRequest(packages: [id], fetching: [id]))
                guard let r = report.packages.first(where: { $0.id == id.rawValue }) else {
                    return "\(id) is not in the index on this channel"
                }
                return r.outcome == .failed ? "[\(r.code ?? "failed")] \(r.reason)" : nil
            } catch {
                return "[\(error.code)] \(error.description)"
            }
        }
    }
}
