import Foundation
import LarderArchive
import LarderCore
import LarderFetch
import LarderFileSystem
import LarderStore
import SystemPackage

/// The plan phase: the differ's plan (`Differ` in LarderCore, pure), then a `Release` for each
/// package the plan needs a file list for — its encoding decided, its list built from a delta of
/// the active version or else fetched as its encoding names it — and the plan again with those
/// lists, which costs each install or update and chooses how it is fetched.
struct PlanPhase {
    let scope: SyncScope
    let index: RepositoryIndex
    let context: ClientContext

    /// What the phase hands on: the plan, and the releases it sought a list for (each install or
    /// update of the plan among them, with its action).
    struct Outcome {
        let plan: Plan
        var releases: [PackageID: Release]
        /// The contents the sandbox holds, where (read only when some list was fetched).
        let local: [SHA256Digest: FilePath]
    }

    /// Plans. With `record`, a sync's plan: the sealed releases whose delta does not name every
    /// object the plan fetches get their sealed list, and each list's verified bytes go to the
    /// sandbox's staging now (see `Sandbox.provideListBytes`), so no copy is held meanwhile.
    func run(record: Bool) async -> Outcome {
        let sandbox = scope.sandbox
        let entries = index.entries(on: context.channel)
        let first = filter(Differ.plan(index: index, state: sandbox.state, context: context))
        var releases: [PackageID: Release] = [:]
        for a in first.actions where a.skip == .fileListNeeded {
            guard let e = entries[a.id] else { continue }
            releases[a.id] = await seekList(e)
        }
        // The contents already held matter only to releases with a list (to cost them, fetch what
        // is missing and assemble): a sync with nothing new does not read every installed list.
        let local = releases.values.contains { $0.list != nil } ? sandbox.localContents() : [:]
        var plan = replan(first, releases, local: local)
        if record {
            if await nameObjects(plan, &releases, local: local) { plan = replan(first, releases, local: local) }
            for (id, r) in releases {
                guard let list = r.list, let bytes = r.listBytes else { continue }
                sandbox.provideListBytes(bytes, for: list)
                releases[id]?.listBytes = nil
            }
        }
        for a in plan.actions where a.kind == .install || a.kind == .update {
            guard let e = entries[a.id] else { continue }
            releases[a.id, default: Release(e, encoding: .clear(scope.setup.pipeline))].action = a
        }
        return Outcome(plan: plan, releases: releases, local: local)
    }

    /// The plan made with the lists of `releases`; without any, the first plan (the same inputs).
    func replan(_ first: Plan, _ releases: [PackageID: Release], local: [SHA256Digest: FilePath]) -> Plan {
        let lists = releases.compactMapValues(\.list)
        guard !lists.isEmpty else { return first }
        return filter(
            Differ.plan(
                index: index, state: scope.sandbox.state, context: context, fileLists: lists,
                localContents: Set(local.keys), deltas: releases.compactMapValues(\.delta)))
    }

    /// Only the named packages — widened to everything they depend on (transitively, from the
    /// index) and to their dependency groups, so that a package is never activated without the
    /// members its plan counted on.
    func filter(_ plan: Plan) -> Plan {
        guard !scope.request.packages.isEmpty else { return plan }
        var wanted = Set(scope.request.packages)
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

    /// The release of `e` with its encoding decided and its list: built from a delta manifest of
    /// the active version when the index offers one and it checks out (nothing else is fetched),
    /// else fetched as the encoding names it. A key or list that fails is the release's failure.
    func seekList(_ e: PackageEntry) async -> Release {
        var r = Release(e, encoding: .clear(scope.setup.pipeline))
        switch ReleaseEncoding.decide(e, base: scope.setup.pipeline, keys: scope.setup.recipientKeys) {
        case .success(let encoding): r.encoding = encoding
        case .failure(let f):
            r.failure = f
            return r
        }
        if let active = scope.sandbox.state[e.id].active, let ref = e.delta(from: active) {
            switch await listFromDelta(r, ref, active: active) {
            case .success(let (list, bytes, delta, wire)):
                r.take(list, bytes: bytes, wire: wire)
                r.delta = delta
                return r
            case .failure(let why):
                r.deltaNote = why.description
                scope.logger.info(
                    "the delta is not usable; fetching the file list", metadata: ["id": "\(e.id)", "reason": "\(why)"])
            }
        }
        switch await r.encoding.fetchList(e, in: scope) {
        case .success(let got): r.take(got.list, bytes: got.bytes, wire: got.wire)
        case .failure(let f): r.failure = f
        }
        return r
    }

    /// The list of release `r` from the delta manifest `ref` and the active version's list,
    /// checked against the list the index signs; with the delta resolved and the bytes it cost.
    func listFromDelta(_ r: Release, _ ref: DeltaRef, active: SemanticVersion) async -> Result<
        (FileList, Data, ResolvedDelta, Int64), DeltaError
    > {
        let e = r.entry
        let manifest: DeltaManifest
        let current: FileList
        let wire: Int64
        switch await fetchDelta(r, ref, active: active) {
        case .success(let got): (manifest, current, wire) = got
        case .failure(let why): return .failure(why)
        }
        guard r.encoding.deltaLeads(to: manifest.files, of: e) else {
            return .failure(DeltaError("\(ref.manifest.path) leads to another list than the index's"))
        }
        let delta: ResolvedDelta
        switch r.encoding.resolve(manifest, from: current) {
        case .success(let d): delta = d
        case .failure(let why): return .failure(why)
        }
        let rebuilt = delta.list
        let bytes: Data
        let checked: Data
        do {
            bytes = try ManifestCoding.encode(rebuilt)
            checked = try r.encoding.signedBytes(of: rebuilt, encoded: bytes)
        } catch {
            return .failure(DeltaError("the rebuilt list cannot be encoded: \(error)"))
        }
        guard manifest.files.matches(checked) else {
            return .failure(DeltaError("the list built from the delta is not the signed list of \(e.version)"))
        }
        if let gap = delta.covers(rebuilt, holding: Set(current.files.map(\.sha256))) { return .failure(gap) }
        return .success((rebuilt, bytes, delta, wire))
    }

    /// The delta manifest `ref` (decoded with the release's pipeline), checked to lead from
    /// `active` to the release, with the active version's list and the bytes it cost on the wire.
    func fetchDelta(_ r: Release, _ ref: DeltaRef, active: SemanticVersion) async -> Result<
        (DeltaManifest, FileList, Int64), DeltaError
    > {
        let e = r.entry
        let stored: Data
        do throws(FetchError) { stored = try await scope.document(ref.manifest) } catch {
            return .failure(DeltaError("\(ref.manifest.path): \(error)"))
        }
        guard ref.manifest.matches(stored) else {
            return .failure(DeltaError("\(ref.manifest.path) does not match the size and sha256 the index declares"))
        }
        let manifest: DeltaManifest
        do {
            let json = try r.encoding.pipeline.decodeDocument(stored, limit: Int64(Syncer.maxIndexBytes))
            manifest = try ManifestCoding.decode(DeltaManifest.self, from: json, document: ref.manifest.path)
        } catch {
            return .failure(DeltaError("\(ref.manifest.path): \(error)"))
        }
        guard manifest.id == e.id, manifest.from == active, manifest.to == e.version else {
            return .failure(DeltaError("\(ref.manifest.path) is not the delta \(e.id)@\(active) → \(e.version)"))
        }
        let current: FileList
        do {
            let data = try AtomicFile.read(scope.sandbox.layout.list(e.id, active))
            current = try ManifestCoding.decode(FileList.self, from: data, document: "the list of \(active)")
        } catch {
            return .failure(DeltaError("the list of the active \(active) cannot be read: \(error)"))
        }
        return .success((manifest, current, Int64(stored.count)))
    }

    /// Names the objects the plan fetches of each release whose list was built from a delta
    /// that does not name them all (a sealed delta names only the objects it fetches, manifests
    /// §16): the list the release's encoding names is fetched and replaces the built one.
    /// Returns whether such a list failed (its release then has no list, and the plan must be
    /// made again).
    func nameObjects(_ plan: Plan, _ releases: inout [PackageID: Release], local: [SHA256Digest: FilePath]) async
        -> Bool
    {
        var failed = false
        for a in plan.changes {
            guard let method = a.cost?.method, method == .objects || method == .delta, var r = releases[a.id],
                let delta = r.delta, let list = r.list
            else { continue }
            var seen: Set<SHA256Digest> = []
            let objects = FetchPhase.sources(list, method, delta: delta, local: local, seen: &seen).objects
            guard objects.contains(where: { !r.encoding.names($0) }) else { continue }
            switch await r.encoding.fetchList(r.entry, in: scope) {
            case .success(let got):
                r.take(got.list, bytes: got.bytes, wire: got.wire)
            case .failure(let f):
                r.list = nil
                r.listBytes = nil
                r.failure = f
                failed = true
            }
            releases[a.id] = r
        }
        return failed
    }
}

extension RepositoryIndex {
    /// The entries on `channel`, by package (the first of an id, as the differ reads them).
    func entries(on channel: Channel) -> [PackageID: PackageEntry] {
        Dictionary(packages.filter { $0.channel == channel }.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
    }
}
