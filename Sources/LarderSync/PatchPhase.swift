import Foundation
import LarderArchive
import LarderCore
import LarderFetch
import LarderFileSystem
import LarderStore
import SystemPackage

/// The patch phase, after the fetch: each patch of a release's delta is applied to the content
/// the device holds (memory: the base, the patch and one 64 KiB chunk), and the result checked
/// against its SHA-256 before it is linked into the new tree. A patch that fails — not fetched,
/// damaged, its base missing or altered on disk, a result with another hash — falls back to its
/// content's object; when an object fails too, the release falls back to its bundle. The same
/// loop serves sealed releases: what differs is asked of the release's encoding.
struct PatchPhase {
    let fetch: FetchPhase

    var scope: SyncScope { fetch.scope }

    /// What the patches came to, per release.
    struct Outcome {
        var fallbacks: [DeltaFallback] = []
        var applied = 0
        var appliedBytes: Int64 = 0
        /// The objects its fallbacks need fetched.
        var objects: [FileEntry] = []
        /// Fallback contents whose objects the release's list does not name (a sealed delta's):
        /// named from the list its encoding names, fetched then.
        var unnamed: [FileEntry] = []
    }

    /// Applies the patches of every release updated by delta, fetches what fell back, and
    /// records in each release what its delta did. A release that must fall back to its bundle
    /// has its method set to `bundle`, and its bundle fetched.
    func run(_ releases: inout [Release], contents: inout FetchPhase.Contents) async {
        var outcomes = releases.map { _ in Outcome() }
        for i in releases.indices where releases[i].method == .delta {
            guard let delta = releases[i].delta, let list = releases[i].list else { continue }
            outcomes[i] = applyPatches(of: releases[i], delta, list, contents: &contents)
        }
        if outcomes.contains(where: { !$0.objects.isEmpty || !$0.unnamed.isEmpty }) {
            await fetchFallbacks(&releases, &outcomes, contents: &contents)
        }
        for (i, r) in releases.enumerated() where r.delta != nil || r.deltaNote != nil {
            let o = outcomes[i]
            let spent = r.download.bytes + (r.metadataBytes ?? 0)
            releases[i].deltaResult = DeltaResult(
                patchesApplied: o.applied, patchBytes: o.appliedBytes,
                bytesSaved: max(0, (r.action?.cost?.bundleBytes ?? 0) - spent), fallbacks: o.fallbacks,
                unused: r.deltaNote ?? (r.method == .delta ? nil : "the plan chose \(r.method?.rawValue ?? "-")"))
        }
    }

    /// Applies the patches of release `r`'s delta whose targets the sandbox lacks, each read from
    /// the delta's patch file; a patch that fails falls back to its content's object. The patch
    /// file is removed once every patch is applied.
    func applyPatches(
        of r: Release, _ delta: ResolvedDelta, _ list: FileList, contents: inout FetchPhase.Contents
    ) -> Outcome {
        var out = Outcome()
        let local = fetch.local
        let layout = scope.sandbox.layout
        let needed = Set(list.files.map(\.sha256)).subtracting(local.keys)
        let entryOf = Dictionary(list.files.map { ($0.sha256, $0) }, uniquingKeysWith: { x, _ in x })
        let file = delta.patchFile.map { contents[$0.sha256] } ?? FetchPhase.Content()
        var covered: Set<SHA256Digest> = []
        for patch in delta.patches where needed.contains(patch.target) && covered.insert(patch.target).inserted {
            // A patch whose base is not held here was planned as an object.
            guard let base = local[patch.base] else { continue }
            let reason: String
            if let part = file.patch {
                let output = layout.appliedContent(patch.target)
                do throws(BlobError) {
                    try r.encoding.pipeline.placePatched(patch, patchFile: part, base: base, at: output)
                    contents[patch.target].applied = output
                    out.applied += 1
                    out.appliedBytes += patch.length
                    continue
                } catch {
                    reason = error.description
                }
            } else if let failure = file.patchFailure {
                reason = "the patch file could not be fetched: \(failure.description)"
            } else {
                continue
            }
            out.fallbacks.append(DeltaFallback(content: patch.target, reason: reason, to: .object))
            if contents[patch.target].object == nil, let f = entryOf[patch.target] {
                if r.encoding.names(f) { out.objects.append(f) } else { out.unnamed.append(f) }
            }
        }
        if let part = file.patch { try? SystemCalls.unlink(part) }
        return out
    }

    /// Fetches the objects the failed patches fell back to (naming first those the release's
    /// list does not name); a release one of whose objects fails too falls back to its bundle,
    /// fetched here.
    func fetchFallbacks(
        _ releases: inout [Release], _ outcomes: inout [Outcome], contents: inout FetchPhase.Contents
    ) async {
        var jobs: [FetchPhase.Job] = []
        var unnamedFailed: Set<PackageID> = []
        var listWire: [Int: Int64] = [:]
        for (i, r) in releases.enumerated() {
            var objects = outcomes[i].objects
            if !outcomes[i].unnamed.isEmpty {
                switch await r.encoding.fetchList(r.entry, in: scope) {
                case .success(let got):
                    listWire[i] = got.wire
                    let named = Dictionary(got.list.files.map { ($0.sha256, $0) }, uniquingKeysWith: { a, _ in a })
                    objects += outcomes[i].unnamed.map { named[$0.sha256] ?? $0 }
                case .failure(let failure):
                    scope.logger.info(
                        "the list naming the delta's fallback objects failed",
                        metadata: ["id": "\(r.id)", "error": "\(failure.description)"])
                    unnamedFailed.insert(r.id)
                }
            }
            jobs += objects.map { fetch.objectJob(r, $0) }
        }
        // A separate account, so that a fallback object's failure is not yet the release's.
        var more = releases.map(\.separateAccount)
        var found = FetchPhase.Contents()
        await fetch.transfer(jobs, into: &more, contents: &found)
        for (digest, content) in found.byDigest {
            if let object = content.object, contents[digest].object == nil { contents[digest].object = object }
        }
        contents.resumable.formUnion(found.resumable)
        for i in releases.indices { releases[i].download.bytes = more[i].download.bytes + (listWire[i] ?? 0) }
        let failed = Set(more.filter { $0.download.error != nil }.map(\.id)).union(unnamedFailed)
        await fallBackToBundles(failed, &releases, &outcomes, contents: &contents)
    }

    /// The releases in `failed` (an object failed too, or could not be named) fall back to
    /// their bundles, fetched one at a time.
    func fallBackToBundles(
        _ failed: Set<PackageID>, _ releases: inout [Release], _ outcomes: inout [Outcome],
        contents: inout FetchPhase.Contents
    ) async {
        var bundleJobs: [FetchPhase.Job] = []
        for i in releases.indices where failed.contains(releases[i].id) {
            let missing = outcomes[i].fallbacks.filter { contents[$0.content].object == nil }
            outcomes[i].fallbacks = outcomes[i].fallbacks.map { f in
                contents[f.content].object == nil ? DeltaFallback(content: f.content, reason: f.reason, to: .bundle) : f
            }
            scope.logger.info(
                "the delta's fallback objects failed; fetching the bundle",
                metadata: ["id": "\(releases[i].id)", "contents": "\(missing.count)"])
            releases[i].action?.cost?.method = .bundle
            bundleJobs.append(fetch.bundleJob(releases[i], area: nil))
        }
        guard !bundleJobs.isEmpty else { return }
        var bundles = releases.map(\.separateAccount)
        await fetch.transfer(bundleJobs, into: &bundles, contents: &contents, concurrency: 1)
        for i in releases.indices {
            releases[i].download.bytes = bundles[i].download.bytes
            if let part = bundles[i].download.bundle, releases[i].download.bundle == nil {
                releases[i].download.bundle = part
            }
            if let e = bundles[i].download.error { releases[i].download.error = e }
        }
    }
}
