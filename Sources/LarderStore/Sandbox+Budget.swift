import Foundation
import LarderCore
import LarderFileSystem
import Synchronization
import SystemPackage

/// When a package was last used: `usage/<id>`'s modification time, touched by the process that
/// serves the package's files at most once a minute per package (`UsageRecorder`) — never a
/// write per request, and never the state file. A package never served since it was installed
/// counts from its newest installation.
package final class UsageRecorder: Sendable {
    let layout: SandboxLayout
    /// How long after a touch the next use of the same package is not written.
    let interval: TimeInterval
    /// When each package was last touched by this recorder.
    private let touched = Mutex<[PackageID: Date]>([:])

    /// A recorder for the sandbox at `root`.
    package init(root: FilePath, interval: TimeInterval = 60) {
        layout = SandboxLayout(root: root)
        self.interval = interval
    }

    /// Notes a use of `id` now: one `utimensat` (or the file's creation) at most every `interval`.
    package func note(_ id: PackageID, at now: Date = Date()) {
        let due = touched.withLock { touched in
            if let last = touched[id], now.timeIntervalSince(last) < interval { return false }
            touched[id] = now
            return true
        }
        guard due else { return }
        UsageRecorder.touch(layout, id, at: now)
    }

    static func touch(_ layout: SandboxLayout, _ id: PackageID, at now: Date) {
        let path = layout.usage(id)
        let seconds = now.timeIntervalSince1970
        let time = FileTime(
            seconds: Int64(seconds.rounded(.down)),
            nanoseconds: Int32(((seconds - seconds.rounded(.down)) * 1e9).rounded(.down)))
        if (try? SystemCalls.setTimes(path, accessed: time, modified: time)) != nil { return }
        try? AtomicFile.makeDirectories(layout.usage)
        if let fd = try? SystemCalls.open(path, .writeOnly, options: [.create]) {
            try? SystemCalls.close(fd, path: path)
            try? SystemCalls.setTimes(path, accessed: time, modified: time)
        }
    }

    /// The last recorded use of `id`, if any.
    package static func lastUse(_ layout: SandboxLayout, _ id: PackageID) -> Date? {
        guard let st = try? SystemCalls.stat(layout.usage(id)) else { return nil }
        let t = st.modificationTime
        return Date(timeIntervalSince1970: Double(t.seconds) + Double(t.nanoseconds) / 1e9)
    }
}

/// What keeping the sandbox within its disk budget did.
public struct BudgetReport: Codable, Sendable, Equatable {
    /// The budget, bytes.
    public var budget: Int64
    /// Bytes the packages' versions held before.
    public var before: Int64
    /// Bytes they hold after.
    public var after: Int64
    /// Packages evicted, least recently used first.
    public var evicted: [String]
    /// On-demand packages that could not be evicted because a session pins one of their versions.
    public var keptPinned: [String]
}

extension Sandbox {
    /// Bytes each installed package's versions hold (their installed sizes).
    package func bytesOnDisk() -> [PackageID: Int64] {
        var out: [PackageID: Int64] = [:]
        for (key, pkg) in state.packages {
            guard let id = PackageID(key) else { continue }
            out[id] = pkg.versions.reduce(0) { $0 + $1.size }
        }
        return out
    }

    /// The last use of each package: its usage file, else its newest installation.
    package func lastUse(_ id: PackageID) -> Date? {
        UsageRecorder.lastUse(layout, id) ?? state.packages[id.rawValue]?.versions.map(\.installedAt).max()
    }

    /// Keeps the packages within `budget` bytes by evicting on-demand packages (`onDemand`),
    /// least recently used first: each is forgotten and its trees deleted as a package that left
    /// the index is (the state without it written first, then the trees through `trash/`: a
    /// crash leaves it installed or gone, never half). Eager packages are never evicted, nor a
    /// package a live session pins (an open page), nor any in `keep` (the one being fetched).
    package func enforceBudget(
        _ budget: Int64, onDemand: Set<PackageID>, keep: Set<PackageID> = []
    ) throws(StoreError) -> BudgetReport {
        let sizes = bytesOnDisk()
        let before = sizes.values.reduce(0, +)
        var report = BudgetReport(budget: budget, before: before, after: before, evicted: [], keptPinned: [])
        guard before > budget else { return report }
        var candidates: [(PackageID, Date)] = []
        for id in onDemand.subtracting(keep) {
            guard let pkg = state.packages[id.rawValue] else { continue }
            if pkg.versions.contains(where: { Pins.isPinned(layout, id, $0.version) }) {
                report.keptPinned.append(id.rawValue)
                continue
            }
            candidates.append((id, lastUse(id) ?? .distantPast))
        }
        candidates.sort { ($0.1, $0.0) < ($1.1, $1.0) }
        var total = before
        var victims: [PackageID] = []
        for (id, _) in candidates where total > budget {
            victims.append(id)
            total -= sizes[id] ?? 0
        }
        report.keptPinned.sort()
        guard !victims.isEmpty else { return report }
        let versions = Dictionary(uniqueKeysWithValues: victims.map { ($0, state.packages[$0.rawValue]?.active) })
        let outcome = try removePackages(victims)
        for id in victims where outcome.failed[id.rawValue] == nil {
            report.evicted.append(id.rawValue)
            try? SystemCalls.unlink(layout.usage(id))
            // The package's own directories, now empty (a pinned version left behind keeps them).
            try? SystemCalls.rmdir(layout.packages.joined(id.rawValue))
            try? SystemCalls.rmdir(layout.lists.joined(id.rawValue))
        }
        report.after = bytesOnDisk().values.reduce(0, +)
        let evicted = victims.filter { outcome.failed[$0.rawValue] == nil }
        reportTelemetry { ctx in
            evicted.compactMap { id in
                versions[id].flatMap { v in
                    v.map {
                        TelemetryEvent(
                            .evicted, package: id, version: $0, channel: ctx.channel, reason: "budget",
                            bytes: sizes[id],
                            at: now)
                    }
                }
            }
        }
        return report
    }

    /// The on-demand packages of the accepted index (on every channel), read from disk.
    package func onDemandPackages() -> Set<PackageID> {
        guard let index = layout.servingIndex() else { return [] }
        return Set(index.packages.filter(\.onDemand).map(\.id))
    }
}

extension StatusReport {
    /// The report with each package's install policy (from the accepted index at `root`), last
    /// use and the config's disk budget: what a person weighing the budget wants to see.
    package func withUsage(root: FilePath) -> StatusReport {
        let layout = SandboxLayout(root: root)
        var out = self
        var modes: [String: String] = [:]
        // The serving view of the index (each entry's settings only): status stays cheap at
        // thousands of packages, as the resolver's snapshot does.
        if let index = layout.servingIndex() {
            for e in index.packages { modes[e.id.rawValue] = e.onDemand ? "on-demand" : "eager" }
        }
        for i in out.packages.indices {
            let p = out.packages[i]
            out.packages[i].install = modes[p.id]
            out.packages[i].lastUse =
                PackageID(p.id).flatMap { UsageRecorder.lastUse(layout, $0) } ?? p.versions.map(\.installedAt).max()
        }
        out.diskBudget =
            (try? ManifestCoding.decode(
                DiskBudgetProbe.self, from: AtomicFile.read(layout.config), document: "config.json"))?.diskBudget
        return out
    }
}

/// Only the disk budget of `config.json`.
private struct DiskBudgetProbe: Decodable { var diskBudget: Int64? }
