import Foundation
import LarderCore
import LarderFileSystem
import LarderStore
import Synchronization

/// Fetch at first use: the resolver's callers (the gateway, the web-view driver,
/// `OfflinePackages`) ask it, for a URL no installed package serves, whether an on-demand package
/// of the accepted index routes it; if so they wait for `ensure`, which installs the package
/// once however many requests wait on it, and answer the request from the new snapshot — or,
/// after `deadline`, as the package's policy says (the network, or an error page). A request is
/// never left hanging.
public final class FirstUse: Sendable {

    /// How one first use ended.
    public enum Outcome: Sendable, Equatable, CustomStringConvertible {
        /// Installed (by this wait or one before it), in `seconds`.
        case installed(seconds: Double)
        /// The install failed; why.
        case failed(String)
        /// Not installed within the deadline (the install goes on).
        case timedOut(seconds: Double)

        /// `installed in 120 ms`, `not installed: why`, `not installed within 10000 ms (still fetching)`.
        public var description: String {
            switch self {
            case .installed(let s): "installed in \(Int((s * 1000).rounded())) ms"
            case .failed(let why): "not installed: \(why)"
            case .timedOut(let s): "not installed within \(Int((s * 1000).rounded())) ms (still fetching)"
            }
        }
    }

    /// Installs one on-demand package now (a sync of it: `larder fetch`); nil when it is
    /// installed, else why not.
    public typealias Install = @Sendable (PackageID) async -> String?

    /// The resolver whose snapshots tell what is installed and what the index offers.
    public let resolver: Resolver
    /// How long a request waits for an install before it is answered without it.
    public let deadline: Duration
    /// Told of every install this object started, when it ends (for events and log lines).
    public let onInstall: (@Sendable (PackageID, Outcome) -> Void)?
    let install: Install
    /// The installs under way, by package.
    private let inFlight = Mutex<[PackageID: Task<(String?, Double), Never>]>([:])
    /// The catalog table made for a snapshot, and the sharded catalog's rows for the accepted
    /// index file they were read from.
    private let catalogs = Mutex(Catalogs())

    private struct Catalogs {
        var table: (snapshot: ObjectIdentifier, table: RouteTable, settings: [PackageID: ServingSettings])?
        var file: (FileIdentity?, [ServingSettings])?
    }

    /// First use over `resolver`, installing with `install`; a request waits at most `deadline`.
    public init(
        resolver: Resolver, deadline: Duration = .seconds(10),
        onInstall: (@Sendable (PackageID, Outcome) -> Void)? = nil,
        install: @escaping Install
    ) {
        self.resolver = resolver
        self.deadline = deadline
        self.onInstall = onInstall
        self.install = install
    }

    /// The on-demand package of this device's channel that routes `url` and is not installed
    /// here, with its policy; nil when there is none.
    package func package(for url: String) -> (id: PackageID, policy: Policy)? {
        let snap = resolver.snapshot()
        let (table, settings) = catalog(of: snap)
        guard let id = table.routedPackage(url), let s = settings[id] else { return nil }
        return (id, s.policy)
    }

    /// The route table of the on-demand packages `snap`'s index offers and its state lacks, kept
    /// while the snapshot is the same.
    private func catalog(of snap: Snapshot) -> (RouteTable, [PackageID: ServingSettings]) {
        let key = ObjectIdentifier(snap)
        if let c = catalogs.withLock({ $0.table }), c.snapshot == key { return (c.table, c.settings) }
        var settings: [PackageID: ServingSettings] = [:]
        var routed: [RoutedPackage] = []
        for s in snap.settings.values where s.onDemand && snap.versions[s.id]?.active == nil {
            settings[s.id] = s
            // No files: the table only says which package a URL belongs to.
            routed.append(RoutedPackage(id: s.id, version: SemanticVersion(0, 0, 0), settings: s))
        }
        // A sharded index's packages whose shards this device has not read: from its catalog.
        for s in catalogRows() where s.channel == snap.channel && snap.settings[s.id.rawValue] == nil {
            settings[s.id] = s
            routed.append(RoutedPackage(id: s.id, version: SemanticVersion(0, 0, 0), settings: s))
        }
        let table = RouteTable(packages: routed)
        catalogs.withLock { $0.table = (key, table, settings) }
        return (table, settings)
    }

    /// The accepted sharded index's catalog rows, read again only when the accepted index file
    /// changed (a new catalog comes with a new index).
    private func catalogRows() -> [ServingSettings] {
        let identity = FileIdentity(resolver.layout.acceptedIndex)
        if let (known, rows) = catalogs.withLock({ $0.file }), known == identity { return rows }
        let rows = identity == nil ? [] : resolver.layout.catalogSettings()
        catalogs.withLock { $0.file = (identity, rows) }
        return rows
    }

    /// Installs `id` unless an install of it is under way (then waits for that one), waiting at
    /// most `deadline`.
    public func ensure(_ id: PackageID) async -> Outcome {
        let started = ContinuousClock.now
        let install = self.install
        let (task, isNew) = inFlight.withLock { inFlight -> (Task<(String?, Double), Never>, Bool) in
            if let t = inFlight[id] { return (t, false) }
            let t = Task<(String?, Double), Never> {
                let begun = ContinuousClock.now
                let why = await install(id)
                return (why, Self.seconds(ContinuousClock.now - begun))
            }
            inFlight[id] = t
            return (t, true)
        }
        if isNew {
            let onInstall = self.onInstall
            Task {
                let (why, seconds) = await task.value
                _ = self.inFlight.withLock { $0.removeValue(forKey: id) }
                onInstall?(id, why.map { .failed($0) } ?? .installed(seconds: seconds))
            }
        }
        // Whichever comes first: the install's end or the deadline. (A task group would wait for
        // the install at its end: awaiting another task's value does not heed cancellation.)
        let deadline = self.deadline
        let result: (String?, Double)? = await withCheckedContinuation { continuation in
            let answered = Mutex(false)
            let answer = { @Sendable (value: (String?, Double)?) in
                if answered.withLock({ done in
                    defer { done = true }
                    return !done
                }) {
                    continuation.resume(returning: value)
                }
            }
            Task { answer(await task.value) }
            // The deadline on a dispatch timer, not a sleeping task: a busy cooperative pool
            // must not make a request wait past its deadline for a thread to notice it.
            let (whole, fraction) = deadline.components
            let seconds = Double(whole) + Double(fraction) / 1e18
            DispatchQueue.global().asyncAfter(deadline: .now() + max(0, seconds)) { answer(nil) }
        }
        guard let (why, _) = result else { return .timedOut(seconds: Self.seconds(ContinuousClock.now - started)) }
        if let why { return .failed(why) }
        _ = try? resolver.reload()
        return .installed(seconds: Self.seconds(ContinuousClock.now - started))
    }

    /// The answer for a request of a local-only on-demand package that is not installed in time
    /// (503, a line saying why).
    public static func unavailable(_ id: PackageID, _ outcome: Outcome) -> LoadResponse {
        let text = Data("\(id) is on demand and \(outcome)\n".utf8)
        return LoadResponse(
            status: 503,
            headers: [
                ("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", "\(text.count)"),
                ("Cache-Control", "no-store"), ("Retry-After", "1"),
            ],
            outcome: .notFound(reason: "\(id) is on demand and \(outcome)"), body: .bytes(text))
    }

    static func seconds(_ d: Duration) -> Double {
        Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }
}
