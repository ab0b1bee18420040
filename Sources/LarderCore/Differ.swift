import Foundation

/// What the device brings to planning: who it is and what it runs.
public struct ClientContext: Sendable, Equatable {
    /// The app's own version, compared with `minClientVersion`.
    public var appVersion: SemanticVersion
    /// A random id made once per sandbox; it decides rollout buckets.
    public var deviceID: String
    /// The release channel this device follows.
    public var channel: String

    /// Creates a context.
    public init(appVersion: SemanticVersion, deviceID: String, channel: String = Channel.default) {
        self.appVersion = appVersion
        self.deviceID = deviceID
        self.channel = channel
    }
}


extension Rollout {
    /// The device's bucket for this release, 0..<100: the first 8 bytes of
    /// SHA-256(deviceID ‖ 0 ‖ id ‖ 0 ‖ version ‖ 0 ‖ salt), big-endian, modulo 100.
    public static func bucket(deviceID: String, id: PackageID, version: SemanticVersion, salt: String) -> Int {
        var input = Data(deviceID.utf8)
        for part in [id.rawValue, version.description, salt] {
            input.append(0)
            input.append(contentsOf: part.utf8)
        }
        let d = SHA256Digest.of(input).bytes
        var n: UInt64 = 0
        for b in d.prefix(8) { n = n << 8 | UInt64(b) }
        return Int(n % 100)
    }

    /// Whether the device is in this release's rollout.
    public func includes(deviceID: String, id: PackageID, version: SemanticVersion) -> Bool {
        percent >= 100 || Rollout.bucket(deviceID: deviceID, id: id, version: version, salt: salt) < percent
    }
}

/// How a version's files would be fetched.
public enum FetchMethod: String, Codable, Sendable, Equatable, CaseIterable {
    /// Only the contents the sandbox lacks, one object each.
    case objects
    /// The whole bundle.
    case bundle
    /// Nothing to fetch: every content is already in the sandbox.
    case local
}

/// The cost of getting a version one way, compared by `Differ.choose`.
public struct FetchCost: Codable, Sendable, Equatable {
    /// How the files would come: the missing objects, the whole bundle, or nothing to fetch.
    public var method: FetchMethod
    /// Bytes to download (for objects, the uncompressed size of the missing contents: an
    /// upper bound, since objects are gzip-compressed).
    public var bytes: Int64
    /// HTTP requests.
    public var requests: Int
    /// Files already in the sandbox (linked or copied instead of fetched).
    public var reused: Int
    /// The full bundle's size, for comparison.
    public var bundleBytes: Int64

    /// Creates a cost.
    public init(method: FetchMethod, bytes: Int64, requests: Int, reused: Int, bundleBytes: Int64) {
        self.method = method
        self.bytes = bytes
        self.requests = requests
        self.reused = reused
        self.bundleBytes = bundleBytes
    }
}

/// Why a package is left as it is.
public enum SkipReason: String, Codable, Sendable, Equatable {
    case unchanged
    case notInRollout = "not-in-rollout"
    case clientTooOld = "client-too-old"
    case otherChannel = "other-channel"
    case previouslyFailed = "previously-failed"
    case revoked
    case olderThanActive = "older-than-active"
    case dependencyUnavailable = "dependency-unavailable"
    case fileListNeeded = "file-list-needed"
}

/// One step of a plan.
public struct PlanAction: Codable, Sendable, Equatable {
    /// `install`, `update`, `rollback`, `remove` or `skip`.
    public var kind: Kind
    /// The package the action is about.
    public var id: PackageID
    /// The version active now (for update, rollback, remove, skip).
    public var from: SemanticVersion?
    /// The version the action leads to (install, update, rollback), or the index's version (skip).
    public var to: SemanticVersion?
    /// How the files would be fetched (install, update).
    public var cost: FetchCost?
    /// Why the package is left as it is (set for `skip` only).
    public var skip: SkipReason?
    /// Why, in a sentence.
    public var reason: String
    /// Packages that must be activated together with this one (its dependency group).
    public var group: [PackageID]

    /// The kinds of action.
    public enum Kind: String, Codable, Sendable, Equatable, CaseIterable {
        case install, update, rollback, remove, skip
    }
}

/// The ordered result of planning.
public struct Plan: Codable, Sendable, Equatable {
    /// Every action, skips included, in the stable order `Differ.plan` gives them.
    public var actions: [PlanAction]

    /// Creates a plan.
    public init(actions: [PlanAction]) { self.actions = actions }

    /// Actions that change something.
    public var changes: [PlanAction] { actions.filter { $0.kind != .skip } }
}

/// Plans a sync: pure, no I/O. Given the verified index, the sandbox state, the device context
/// and the file lists already fetched, it decides per package what to do and why.
public enum Differ {
    /// Weight of one HTTP request in bytes when comparing fetch methods: a request costs a
    /// round trip and headers, so many small objects can lose to one bundle.
    public static let requestWeight: Int64 = 16 << 10

    /// The plan, in a stable order: removals, rollbacks, then installs and updates in dependency
    /// order, then skips. `fileLists` holds the file list of each candidate release (fetched and
    /// verified against the index by the caller); a candidate without one is skipped with
    /// `file-list-needed` so the caller can fetch it and plan again. `localContents` are the
    /// SHA-256s of every file already in the sandbox.
    public static func plan(
        index: RepositoryIndex, state: SandboxState, context: ClientContext,
        fileLists: [PackageID: FileList] = [:], localContents: Set<SHA256Digest> = []
    ) -> Plan {
        var actions: [PlanAction] = []
        let entries = Dictionary(
            index.packages.filter { $0.channel == context.channel }.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        let otherChannel = Set(index.packages.map(\.id)).subtracting(entries.keys)

        // Packages installed here but gone from the index (on every channel).
        for key in state.packages.keys.sorted() {
            guard let id = PackageID(key), let pkg = state.packages[key], let active = pkg.active else { continue }
            if !index.packages.contains(where: { $0.id == id }) {
                actions.append(PlanAction(
                    kind: .remove, id: id, from: active, to: nil, cost: nil, skip: nil,
                    reason: "\(id) is no longer in the index", group: [id]))
            }
        }

        var candidates: [PackageID: PlanAction] = [:]
        for id in entries.keys.sorted() {
            guard let e = entries[id] else { continue }
            let pkg = state[id]
            func skip(_ r: SkipReason, _ text: String) {
                candidates[id] = PlanAction(kind: .skip, id: id, from: pkg.active, to: e.version, cost: nil, skip: r, reason: text, group: [id])
            }
            // Revocation: roll back off a revoked active version when something good is on disk.
            if let active = pkg.active, e.revoked.contains(active) {
                let good = pkg.versions.map(\.version).filter { $0 != active && !e.revoked.contains($0) && !pkg.hasFailed($0) }
                let target = pkg.fallback.flatMap { good.contains($0) ? $0 : nil } ?? good.max()
                if let t = target {
                    candidates[id] = PlanAction(
                        kind: .rollback, id: id, from: active, to: t, cost: nil, skip: nil,
                        reason: "\(active) is revoked; back to \(t)", group: [id])
                    continue
                }
                // Nothing to go back to: an install of a newer good release below may still help.
            }
            if pkg.active == e.version { skip(.unchanged, "\(e.version) is active"); continue }
            if e.revoked.contains(e.version) { skip(.revoked, "\(e.version) is revoked"); continue }
            if pkg.hasFailed(e.version) { skip(.previouslyFailed, "\(e.version) was rolled back off on this device"); continue }
            if let min = e.minClientVersion, context.appVersion < min {
                skip(.clientTooOld, "\(e.version) needs app \(min), this is \(context.appVersion)")
                continue
            }
            if let active = pkg.active, e.version < active, !(pkg.active.map { e.revoked.contains($0) } ?? false) {
                skip(.olderThanActive, "\(e.version) is older than the active \(active)")
                continue
            }
            if !e.rollout.includes(deviceID: context.deviceID, id: id, version: e.version) {
                skip(.notInRollout, "this device is not in the \(e.rollout.percent)% rollout of \(e.version)")
                continue
            }
            guard let list = fileLists[id], list.version == e.version else {
                skip(.fileListNeeded, "the file list of \(e.version) is needed to plan")
                continue
            }
            let cost = choose(list: list, bundleSize: e.bundle.size, localContents: localContents)
            let kind: PlanAction.Kind = pkg.active == nil ? .install : .update
            candidates[id] = PlanAction(
                kind: kind, id: id, from: pkg.active, to: e.version, cost: cost, skip: nil,
                reason: kind == .install ? "new package" : "\(pkg.active.map(\.description) ?? "-") → \(e.version)",
                group: [id])
        }
        for id in otherChannel.sorted() where entries[id] == nil && state.packages[id.rawValue]?.active == nil {
            let e = index.packages.first { $0.id == id }
            actions.append(PlanAction(
                kind: .skip, id: id, from: nil, to: e?.version, cost: nil, skip: .otherChannel,
                reason: "published on channel \(e?.channel ?? "?"), this device follows \(context.channel)", group: [id]))
        }

        // Dependencies: an install or update whose dependency will not be satisfied is skipped;
        // packages that depend on each other and change together form one group.
        var changed = true
        while changed {
            changed = false
            for id in candidates.keys.sorted() {
                guard let a = candidates[id], a.kind == .install || a.kind == .update, let e = entries[id] else { continue }
                for dep in e.dependencies {
                    let resulting = candidates[dep.id].flatMap { c in
                        (c.kind == .install || c.kind == .update || c.kind == .rollback) ? c.to : nil
                    } ?? state[dep.id].active
                    if resulting.map({ dep.range.contains($0) }) != true {
                        candidates[id] = PlanAction(
                            kind: .skip, id: id, from: a.from, to: a.to, cost: nil, skip: .dependencyUnavailable,
                            reason: "needs \(dep.id) \(dep.range), which will not be available", group: [id])
                        changed = true
                        break
                    }
                }
            }
        }
        let changing = Set(candidates.values.filter { $0.kind == .install || $0.kind == .update }.map(\.id))
        var groups: [PackageID: Set<PackageID>] = [:]
        for id in changing {
            var g: Set<PackageID> = [id]
            var frontier = [id]
            while let x = frontier.popLast() {
                let neighbours = (entries[x]?.dependencies.map(\.id) ?? [])
                    + changing.filter { y in entries[y]?.dependencies.contains { $0.id == x } ?? false }
                for n in neighbours where changing.contains(n) && g.insert(n).inserted { frontier.append(n) }
            }
            groups[id] = g
        }
        for (id, g) in groups { candidates[id]?.group = g.sorted() }

        // Order: rollbacks, then changes with dependencies first, then skips.
        actions += candidates.values.filter { $0.kind == .rollback }.sorted { $0.id < $1.id }
        var ordered: [PlanAction] = []
        var placed: Set<PackageID> = []
        func place(_ id: PackageID, _ seen: Set<PackageID>) {
            guard !placed.contains(id), !seen.contains(id), let a = candidates[id], changing.contains(id) else { return }
            for dep in entries[id]?.dependencies ?? [] { place(dep.id, seen.union([id])) }
            placed.insert(id)
            ordered.append(a)
        }
        for id in changing.sorted() { place(id, []) }
        actions += ordered
        actions += candidates.values.filter { $0.kind == .skip }.sorted { $0.id < $1.id }
        return Plan(actions: actions)
    }

    /// The cheaper way to get `list`: every content already local → `local`; else objects for
    /// the missing contents when their bytes plus a per-request weight are below the bundle's.
    public static func choose(list: FileList, bundleSize: Int64, localContents: Set<SHA256Digest>) -> FetchCost {
        var missing: [SHA256Digest: Int64] = [:]
        var reused = 0
        for f in list.files {
            if localContents.contains(f.sha256) { reused += 1 } else { missing[f.sha256] = f.size }
        }
        if missing.isEmpty {
            return FetchCost(method: .local, bytes: 0, requests: 0, reused: reused, bundleBytes: bundleSize)
        }
        let bytes = missing.values.reduce(0, +)
        let objectCost = bytes + Int64(missing.count) * requestWeight
        let bundleCost = bundleSize + requestWeight
        if objectCost < bundleCost {
            return FetchCost(method: .objects, bytes: bytes, requests: missing.count, reused: reused, bundleBytes: bundleSize)
        }
        return FetchCost(method: .bundle, bytes: bundleSize, requests: 1, reused: 0, bundleBytes: bundleSize)
    }
}
