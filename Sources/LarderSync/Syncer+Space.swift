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
    /// The changes that fit, and a failed result for each one that does not.
    func checkSpace(_ changes: [PlanAction], prepared p: Prepared) -> (fit: [PlanAction], refused: [PackageResult]) {
        guard !changes.isEmpty, let available = options.availableSpace(p.sandbox.layout.root) else {
            return (changes, [])
        }
        var written: Set<SHA256Digest> = []
        var need: [PackageID: (download: Int64, write: Int64)] = [:]
        for a in changes {
            guard let list = p.lists[a.id] else { continue }
            var write: Int64 = 0
            for f in list.files where p.local[f.sha256] == nil && written.insert(f.sha256).inserted { write += f.size }
            need[a.id] = (a.cost?.bytes ?? 0, write)
        }
        var total: Int64 = 0
        var refused: Set<PackageID> = []
        var failures: [PackageID: PackageFailure] = [:]
        for a in changes where !refused.contains(a.id) {
            let group = a.group.isEmpty ? [a.id] : a.group
            let n = group.reduce(Int64(0)) { $0 + (need[$1].map { $0.download + $0.write } ?? 0) }
            let after = total + n
            let reserve = Int64((Double(after) * options.freeSpaceReserve).rounded(.up))
            if after + reserve <= available {
                total = after
                continue
            }
            for id in group {
                refused.insert(id)
                let (download, write) = need[id] ?? (0, 0)
                failures[id] = .noSpace(
                    download: download, write: write, reserve: reserve, available: available,
                    path: p.sandbox.layout.root.string)
            }
        }
        guard !refused.isEmpty else { return (changes, []) }
        let started = Date()
        let results = changes.filter { refused.contains($0.id) }.map { a in
            let failure = failures[a.id] ?? .noSpace(download: 0, write: 0, reserve: 0, available: available, path: "")
            options.logger.notice(
                "not enough free space; not fetched", metadata: ["id": "\(a.id)", "reason": "\(failure)"])
            return result(a, started: started, .failed, failure.description, failure: failure)
        }
        return (changes.filter { !refused.contains($0.id) }, results)
    }
}

extension Syncer {
    /// With a disk budget in the config: evicts on-demand packages, least recently used first,
    /// until the sandbox is within it — never one this sync installed or updated (`keep`), an
    /// eager one, or one a session pins. A failure is logged; the sync's outcome stands.
    func enforceBudget(_ p: Prepared, entries: [PackageID: PackageEntry], keep: Set<PackageID>) -> BudgetReport? {
        guard let budget = p.config.diskBudget else { return nil }
        let onDemand = Set(entries.values.filter(\.isOnDemand).map(\.id))
        do throws(StoreError) {
            let report = try p.sandbox.enforceBudget(budget, onDemand: onDemand, keep: keep)
            if !report.evicted.isEmpty {
                options.logger.info(
                    "evicted to stay within the disk budget",
                    metadata: ["evicted": "\(report.evicted)", "bytes": "\(report.after) of \(budget)"])
            }
            return report
        } catch {
            options.logger.warning("keeping within the disk budget failed", metadata: ["error": "\(error)"])
            return nil
        }
    }
}

extension Syncer {
    /// An install of one on-demand package now, as `larder fetch ID` does (a sync of that
    /// package and what it depends on), for fetch at first use: nil when it is installed, else
    /// why not (the failure's code and message).
    public static func installer(root: FilePath, options: SyncOptions) -> @Sendable (PackageID) async -> String? {
        { id in
            var o = options
            o.packages = [id]
            o.fetching = [id]
            do throws(SyncError) {
                let report = try await Syncer(root: root, options: o).sync()
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
