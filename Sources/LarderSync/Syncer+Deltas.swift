import Foundation
import LarderArchive
import LarderCore
import LarderFetch
import LarderFileSystem
import LarderStore
import SystemPackage

/// Updates by delta: each patch of the delta's patch file is applied to the content the device holds (memory:
/// the base, the patch and one 64 KiB chunk), and the result checked against its SHA-256 before
/// it is linked into the new tree. A patch that fails — not fetched, damaged, its base missing or
/// altered on disk, a result with another hash — falls back to its content's object; when an
/// object fails too, the package falls back to its bundle. The report says which.
extension Syncer {
    /// What the patches of a sync's deltas came to: per package, the contents that fell back and
    /// the patches applied; and the objects the fallbacks need fetched.
    struct PatchOutcome {
        var fallbacks: [PackageID: [DeltaFallback]] = [:]
        var applied: [PackageID: (count: Int, bytes: Int64)] = [:]
        var objectJobs: [Job] = []
        /// Contents of encrypted versions that fell back to an object the delta does not name:
        /// their names are read from the sealed list, fetched then.
        var unnamed: [PackageID: [FileEntry]] = [:]
    }

    /// Applies the patches of every update by delta, fetches what fell back, and returns what
    /// each delta did. A package that must fall back to its bundle has its action's method set
    /// to `bundle` in `changes`, and its bundle fetched.
    func applyDeltas(
        _ changes: inout [PlanAction], fetched: inout Fetched, prepared p: Prepared, entries: [PackageID: PackageEntry]
    ) async -> [PackageID: DeltaResult] {
        var outcome = PatchOutcome()
        for a in changes where a.cost?.method == .delta {
            guard let manifest = p.deltas[a.id], let list = p.lists[a.id] else { continue }
            applyPatches(of: a.id, manifest, list, fetched: &fetched, prepared: p, into: &outcome)
        }
        if !outcome.objectJobs.isEmpty || !outcome.unnamed.isEmpty {
            await fetchFallbacks(&changes, outcome: &outcome, fetched: &fetched, prepared: p, entries: entries)
        }
        var results: [PackageID: DeltaResult] = [:]
        for a in changes where p.deltas[a.id] != nil || p.deltaNotes[a.id] != nil {
            let got = outcome.applied[a.id] ?? (0, 0)
            let spent = fetched[a.id].bytes + (p.metadataBytes[a.id] ?? 0)
            results[a.id] = DeltaResult(
                patchesApplied: got.count, patchBytes: got.bytes,
                bytesSaved: max(0, (a.cost?.bundleBytes ?? 0) - spent),
                fallbacks: outcome.fallbacks[a.id] ?? [],
                unused: p.deltaNotes[a.id]
                    ?? (a.cost?.method == .delta ? nil : "the plan chose \(a.cost?.method.rawValue ?? "-")"))
        }
        return results
    }

    /// Applies the patches of one package's delta whose targets the sandbox lacks, each read from
    /// the delta's patch file; a patch that fails falls back to its content's object (queued in
    /// `outcome.objectJobs`). The patch file is removed once every patch is applied.
    func applyPatches(
        of id: PackageID, _ delta: ResolvedDelta, _ list: FileList, fetched: inout Fetched, prepared p: Prepared,
        into outcome: inout PatchOutcome
    ) {
        let needed = Set(list.files.map(\.sha256)).subtracting(p.local.keys)
        let entryOf = Dictionary(list.files.map { ($0.sha256, $0) }, uniquingKeysWith: { x, _ in x })
        let file = delta.patchFile.map { fetched[content: $0.sha256] } ?? ContentProgress()
        var covered: Set<SHA256Digest> = []
        for patch in delta.patches where needed.contains(patch.target) && covered.insert(patch.target).inserted {
            // A patch whose base is not held here was planned as an object.
            guard let base = p.local[patch.base] else { continue }
            let reason: String
            if let part = file.patch {
                guard
                    let why = apply(
                        patch, part: part, base: base, to: p.sandbox.layout.appliedContent(patch.target),
                        pipeline: p.sealed[id] ?? options.pipeline)
                else {
                    fetched[content: patch.target].applied = p.sandbox.layout.appliedContent(patch.target)
                    outcome.applied[id, default: (0, 0)].count += 1
                    outcome.applied[id, default: (0, 0)].bytes += patch.length
                    continue
                }
                reason = why
            } else if let failure = file.patchFailure {
                reason = "the patch file could not be fetched: \(failure.description)"
            } else {
                continue
            }
            outcome.fallbacks[id, default: []].append(DeltaFallback(content: patch.target, reason: reason, to: .object))
            if fetched[content: patch.target].object == nil, let f = entryOf[patch.target] {
                if p.sealed[id] != nil, f.sealed == nil {
                    outcome.unnamed[id, default: []].append(f)
                } else {
                    outcome.objectJobs.append(objectJob(id, f, sandbox: p.sandbox, base: p.base, sealed: p.sealed[id]))
                }
            }
        }
        if let part = file.patch { try? SystemCalls.unlink(part) }
    }

    /// The objects an encrypted delta's failed patches fall back to, named from the sealed list
    /// (the delta does not name them) and added to `outcome`'s jobs; returns the packages whose
    /// sealed list failed (they fall back to their bundle) and the bytes each list cost.
    func nameSealedFallbacks(
        _ outcome: inout PatchOutcome, prepared p: Prepared, entries: [PackageID: PackageEntry]
    ) async -> (failed: Set<PackageID>, wire: [PackageID: Int64]) {
        var unnamedFailed: Set<PackageID> = []
        var listWire: [PackageID: Int64] = [:]
        for (id, contents) in outcome.unnamed {
            guard let e = entries[id], let encryption = e.encryption, let pipeline = p.sealed[id] else { continue }
            switch await fetchSealedList(e, encryption, pipeline: pipeline, transport: p.transport, base: p.base) {
            case .success(let (named, _, wire)):
                listWire[id] = wire
                let byContent = Dictionary(named.files.map { ($0.sha256, $0) }, uniquingKeysWith: { a, _ in a })
                for f in contents {
                    outcome.objectJobs.append(
                        objectJob(id, byContent[f.sha256] ?? f, sandbox: p.sandbox, base: p.base, sealed: pipeline))
                }
            case .failure(let failure):
                options.logger.info(
                    "the sealed list for the delta's fallback objects failed",
                    metadata: ["id": "\(id)", "error": "\(failure.description)"])
                unnamedFailed.insert(id)
            }
        }
        return (unnamedFailed, listWire)
    }

    /// Fetches the objects the failed patches fell back to; a package one of whose objects fails
    /// too falls back to its bundle, fetched here.
    func fetchFallbacks(
        _ changes: inout [PlanAction], outcome: inout PatchOutcome, fetched: inout Fetched, prepared p: Prepared,
        entries: [PackageID: PackageEntry]
    ) async {
        let (unnamedFailed, listWire) = await nameSealedFallbacks(&outcome, prepared: p, entries: entries)
        // A separate account, so that a fallback object's failure is not yet the package's.
        var more = Fetched()
        for (id, progress) in fetched.packages { more[id].bytes = progress.bytes }
        await run(
            outcome.objectJobs, totals: changes, transport: p.transport, concurrency: max(1, p.config.concurrency),
            into: &more)
        for (digest, content) in more.contents {
            if let object = content.object, fetched[content: digest].object == nil {
                fetched[content: digest].object = object
            }
        }
        for (id, progress) in more.packages { fetched[id].bytes = progress.bytes }
        for (id, wire) in listWire { fetched[id].bytes += wire }
        fetched.resumable.formUnion(more.resumable)
        // An object that failed too (or could not be named): that package falls back to its bundle.
        var bundleJobs: [Job] = []
        for (i, a) in changes.enumerated() where more[a.id].error != nil || unnamedFailed.contains(a.id) {
            guard let e = entries[a.id] else { continue }
            let missing = (outcome.fallbacks[a.id] ?? []).filter { fetched[content: $0.content].object == nil }
            outcome.fallbacks[a.id] = (outcome.fallbacks[a.id] ?? []).map { f in
                fetched[content: f.content].object == nil
                    ? DeltaFallback(content: f.content, reason: f.reason, to: .bundle) : f
            }
            options.logger.info(
                "the delta's fallback objects failed; fetching the bundle",
                metadata: ["id": "\(a.id)", "contents": "\(missing.count)"])
            changes[i].cost?.method = .bundle
            let expected = Expectation(size: e.bundle.size, limit: e.bundle.size, sha256: e.bundle.sha256)
            bundleJobs.append(
                .bundle(
                    a.id, url(p.base, e.bundle.path),
                    p.sandbox.layout.bundlePart(e.id, e.version, sha256: e.bundle.sha256),
                    expected, nil, p.sealed[a.id]))
        }
        guard !bundleJobs.isEmpty else { return }
        var bundles = Fetched()
        for (id, progress) in fetched.packages { bundles[id].bytes = progress.bytes }
        await run(bundleJobs, totals: changes, transport: p.transport, concurrency: 1, into: &bundles)
        for (id, progress) in bundles.packages {
            fetched[id].bytes = progress.bytes
            if let part = progress.bundle, fetched[id].bundle == nil { fetched[id].bundle = part }
            if let e = progress.error { fetched[id].error = e }
        }
        fetched.resumable.formUnion(bundles.resumable)
    }

    /// Applies one patch (read from the patch file at `part`) to the content at `base` through
    /// the byte pipeline, writing the result to `output` (checked against the patch's size and
    /// SHA-256); returns why it failed (the output then removed), or nil. `pipeline`: an
    /// encrypted version's, whose patches are sealed one by one.
    func apply(_ patch: PatchRef, part: FilePath, base: FilePath, to output: FilePath, pipeline: BytePipeline)
        -> String?
    {
        do throws(BlobError) {
            try pipeline.placePatched(patch, patchFile: part, base: base, at: output)
            return nil
        } catch {
            return error.description
        }
    }
}
