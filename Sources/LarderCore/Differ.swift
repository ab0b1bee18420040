import Foundation

/// Plans a sync: pure, no I/O. Given the verified index, the sandbox state, the device context
/// and the file lists already fetched, it decides per package what to do and why.
package enum Differ {
    /// Weight of one HTTP request in bytes when comparing fetch methods: a request costs a
    /// round trip and headers, so many small objects can lose to one bundle.
    package static let requestWeight: Int64 = 16 << 10

    /// The plan, in a stable order: removals, rollbacks, then installs and updates in dependency
    /// order, then skips. `fileLists` holds the file list of each candidate release (fetched and
    /// verified against the index by the caller); a candidate without one is skipped with
    /// `file-list-needed` so the caller can fetch it and plan again. `localContents` are the
    /// SHA-256s of every file already in the sandbox.
    package static func plan(
        index: RepositoryIndex, state: SandboxState, context: ClientContext,
        fileLists: [PackageID: FileList] = [:], localContents: Set<SHA256Digest> = [],
        deltas: [PackageID: ResolvedDelta] = [:]
    ) -> Plan {
        let entries = Dictionary(
            index.packages.filter { $0.channel == context.channel }.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a }
        )
        var actions = removals(index: index, state: state)
        var candidates: [PackageID: PlanAction] = [:]
        let installing = installSet(entries, state: state, context: context)
        for id in entries.keys.sorted() {
            guard let e = entries[id] else { continue }
            candidates[id] = candidate(
                e, state: state[id], context: context, fileList: fileLists[id], localContents: localContents,
                delta: deltas[id], wanted: installing.contains(id))
        }
        actions += otherChannelSkips(index: index, state: state, entries: entries, context: context)
        dropUnsatisfiedDependencies(&candidates, entries: entries, state: state)
        let changing = Set(candidates.values.filter { $0.kind == .install || $0.kind == .update }.map(\.id))
        for (id, g) in groups(changing, entries: entries) { candidates[id]?.group = g.sorted() }

        // Order: rollbacks, then changes with dependencies first, then skips.
        actions += candidates.values.filter { $0.kind == .rollback }.sorted { $0.id < $1.id }
        var placed: Set<PackageID> = []
        func place(_ id: PackageID, _ seen: Set<PackageID>) {
            guard !placed.contains(id), !seen.contains(id), let a = candidates[id], changing.contains(id) else {
                return
            }
            for dep in entries[id]?.dependencies ?? [] { place(dep.id, seen.union([id])) }
            placed.insert(id)
            actions.append(a)
        }
        // Higher install priority first (downloads start in this order), then by id.
        let priority = { (id: PackageID) in entries[id]?.install?.priority ?? 0 }
        for id in changing.sorted(by: { (priority($0), $1) > (priority($1), $0) }) { place(id, []) }
        actions += candidates.values.filter { $0.kind == .skip }.sorted { $0.id < $1.id }
        return Plan(actions: actions)
    }

    /// The packages of this channel a sync installs or updates: every eager one, every one held
    /// here, the on-demand ones asked for (or, in a preload, whose hint allows the network), and
    /// — transitively — whatever those depend on. An
    /// on-demand package outside it is skipped without its file list being fetched, so that an
    /// index of thousands of them costs a device about what those it holds cost.
    static func installSet(
        _ entries: [PackageID: PackageEntry], state: SandboxState, context: ClientContext
    ) -> Set<PackageID> {
        var out: Set<PackageID> = []
        var frontier: [PackageID] = []
        for (id, e) in entries
        where !e.isOnDemand || state[id].active != nil || context.wanted.contains(id)
            || context.preload.map({ e.install?.allowsPreload(on: $0) == true }) == true
        {
            out.insert(id)
            frontier.append(id)
        }
        while let id = frontier.popLast() {
            for d in entries[id]?.dependencies ?? [] where out.insert(d.id).inserted { frontier.append(d.id) }
        }
        return out
    }

    /// Packages installed here but gone from the index (on every channel).
    static func removals(index: RepositoryIndex, state: SandboxState) -> [PlanAction] {
        var actions: [PlanAction] = []
        let published = Set(index.packages.map(\.id))
        for key in state.packages.keys.sorted() {
            guard let id = PackageID(key), let pkg = state.packages[key], let active = pkg.active else { continue }
            if !published.contains(id) {
                actions.append(
                    PlanAction(
                        kind: .remove, id: id, from: active, to: nil, cost: nil, skip: nil,
                        reason: "\(id) is no longer in the index", group: [id]))
            }
        }
        return actions
    }

    /// What to do about one package the index lists on this device's channel, before
    /// dependencies are considered: roll back off a revoked version, skip (with the reason), or
    /// install / update by the cheaper method.
    static func candidate(
        _ e: PackageEntry, state pkg: PackageState, context: ClientContext, fileList: FileList?,
        localContents: Set<SHA256Digest>, delta: ResolvedDelta? = nil, wanted: Bool = true
    ) -> PlanAction {
        let id = e.id
        func skip(_ r: SkipReason, _ text: String) -> PlanAction {
            PlanAction(
                kind: .skip, id: id, from: pkg.active, to: e.version, cost: nil, skip: r, reason: text, group: [id])
        }
        // Revocation: roll back off a revoked active version when something good is on disk.
        if let active = pkg.active, e.revoked.contains(active) {
            let good = pkg.versions.map(\.version).filter {
                $0 != active && !e.revoked.contains($0) && !pkg.hasFailed($0)
            }
            if let t = pkg.fallback.flatMap({ good.contains($0) ? $0 : nil }) ?? good.max() {
                return PlanAction(
                    kind: .rollback, id: id, from: active, to: t, cost: nil, skip: nil,
                    reason: "\(active) is revoked; back to \(t)", group: [id])
            }
            // Nothing to go back to: an install of a newer good release below may still help.
        }
        if pkg.active == e.version { return skip(.unchanged, "\(e.version) is active") }
        if pkg.active == nil, !wanted {
            return skip(.onDemand, "installed on demand: at first use, or by `larder fetch \(id)`")
        }
        if e.revoked.contains(e.version) { return skip(.revoked, "\(e.version) is revoked") }
        if pkg.hasFailed(e.version) {
            return skip(.previouslyFailed, "\(e.version) was rolled back off on this device")
        }
        if let min = e.minClientVersion, context.appVersion < min {
            return skip(.clientTooOld, "\(e.version) needs app \(min), this is \(context.appVersion)")
        }
        if let active = pkg.active, e.version < active, !e.revoked.contains(active) {
            return skip(.olderThanActive, "\(e.version) is older than the active \(active)")
        }
        if !e.rollout.includes(deviceID: context.deviceID, id: id, version: e.version) {
            return skip(.notInRollout, "this device is not in the \(e.rollout.percent)% rollout of \(e.version)")
        }
        guard let list = fileList, list.version == e.version else {
            return skip(.fileListNeeded, "the file list of \(e.version) is needed to plan")
        }
        let usable = delta.flatMap { $0.from == pkg.active && $0.to == e.version ? $0 : nil }
        let cost = choose(list: list, bundleSize: e.bundle.size, localContents: localContents, delta: usable)
        let kind: PlanAction.Kind = pkg.active == nil ? .install : .update
        return PlanAction(
            kind: kind, id: id, from: pkg.active, to: e.version, cost: cost, skip: nil,
            reason: kind == .install ? "new package" : "\(pkg.active.map(\.description) ?? "-") → \(e.version)",
            group: [id])
    }

    /// Packages published only on other channels and not installed here: skipped, saying so.
    static func otherChannelSkips(
        index: RepositoryIndex, state: SandboxState, entries: [PackageID: PackageEntry], context: ClientContext
    ) -> [PlanAction] {
        let otherChannel = Set(index.packages.map(\.id)).subtracting(entries.keys)
        let firstEntry = Dictionary(index.packages.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        return otherChannel.sorted().filter { entries[$0] == nil && state.packages[$0.rawValue]?.active == nil }.map {
            id in
            let e = firstEntry[id]
            return PlanAction(
                kind: .skip, id: id, from: nil, to: e?.version, cost: nil, skip: .otherChannel,
                reason:
                    "published on channel \(e.map { "\($0.channel)" } ?? "?"), this device follows \(context.channel)",
                group: [id]
            )
        }
    }

    /// Skips every install or update whose dependency will not be satisfied, until nothing
    /// changes (a skip can leave another package's dependency unsatisfied).
    static func dropUnsatisfiedDependencies(
        _ candidates: inout [PackageID: PlanAction], entries: [PackageID: PackageEntry], state: SandboxState
    ) {
        var changed = true
        while changed {
            changed = false
            for id in candidates.keys.sorted() {
                guard let a = candidates[id], a.kind == .install || a.kind == .update, let e = entries[id] else {
                    continue
                }
                for dep in e.dependencies {
                    let resulting =
                        candidates[dep.id].flatMap { c in
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
    }

    /// The dependency group of each changing package: the changing packages connected to it
    /// through dependencies in either direction, which must activate together.
    static func groups(
        _ changing: Set<PackageID>, entries: [PackageID: PackageEntry]
    ) -> [PackageID: Set<PackageID>] {
        // The edges among changing packages, both directions, built once: a group is a connected
        // component (linear in packages and dependencies; asking every package for its
        // dependents in turn was quadratic, and dominated a first sync of 10,000 packages).
        var neighbours: [PackageID: [PackageID]] = [:]
        for id in changing {
            for d in entries[id]?.dependencies ?? [] where changing.contains(d.id) && d.id != id {
                neighbours[id, default: []].append(d.id)
                neighbours[d.id, default: []].append(id)
            }
        }
        var groups: [PackageID: Set<PackageID>] = [:]
        for id in changing where groups[id] == nil {
            var g: Set<PackageID> = [id]
            var frontier = [id]
            while let x = frontier.popLast() {
                for n in neighbours[x] ?? [] where g.insert(n).inserted { frontier.append(n) }
            }
            for member in g { groups[member] = g }
        }
        return groups
    }

    /// The cheapest way to get `list`: every content already local → `local`; else the least of
    /// objects for the missing contents (their compressed sizes where the list gives them), the
    /// delta (its patch file, in one request, when it patches a missing content from one held
    /// here, and an object for each of the rest) and the bundle, each request weighing `requestWeight` bytes. Ties go to the
    /// delta, then objects.
    package static func choose(
        list: FileList, bundleSize: Int64, localContents: Set<SHA256Digest>, delta: ResolvedDelta? = nil
    ) -> FetchCost {
        var missing: [SHA256Digest: FileEntry] = [:]
        var reused = 0
        for f in list.files {
            if localContents.contains(f.sha256) { reused += 1 } else { missing[f.sha256] = f }
        }
        if missing.isEmpty {
            return FetchCost(method: .local, bytes: 0, requests: 0, reused: reused, bundleBytes: bundleSize)
        }
        let objectBytes = missing.values.reduce(0) { $0 + $1.objectCost }
        var alternatives = [FetchAlternative(method: .objects, bytes: objectBytes, requests: missing.count)]
        if let delta {
            let patches = Dictionary(delta.patches.map { ($0.target, $0) }, uniquingKeysWith: { a, _ in a })
            var bytes: Int64 = 0
            var requests = 0
            var patching = false
            for (digest, f) in missing {
                if let p = patches[digest], localContents.contains(p.base) {
                    patching = true
                } else {
                    bytes += f.objectCost
                    requests += 1
                }
            }
            // The patch file is fetched whole, in one request, when any of its patches is used.
            if patching, let file = delta.patchFile {
                bytes += file.size
                requests += 1
            }
            alternatives.insert(FetchAlternative(method: .delta, bytes: bytes, requests: requests), at: 0)
        }
        alternatives.append(FetchAlternative(method: .bundle, bytes: bundleSize, requests: 1))
        let weighed = { (a: FetchAlternative) in a.bytes + Int64(a.requests) * requestWeight }
        var best = alternatives[0]
        for a in alternatives.dropFirst() where weighed(a) < weighed(best) { best = a }
        return FetchCost(
            method: best.method, bytes: best.bytes, requests: best.requests,
            reused: best.method == .bundle ? 0 : reused,
            bundleBytes: bundleSize, alternatives: alternatives)
    }
}
