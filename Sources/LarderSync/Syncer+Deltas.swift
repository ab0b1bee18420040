import Foundation
import LarderArchive
import LarderCore
import LarderFetch
import LarderFileSystem
import LarderStore
import SystemPackage

/// Updates by delta: each patch downloaded is applied to the content the device holds (memory:
/// the base, the patch and one 64 KiB chunk), and the result checked against its SHA-256 before
/// it is linked into the new tree. A patch that fails — not fetched, damaged, its base missing or
/// altered on disk, a result with another hash — falls back to its content's object; when an
/// object fails too, the package falls back to its bundle. The report says which.
extension Syncer {
    /// Applies the patches of every update by delta, fetches what fell back, and returns what
    /// each delta did. A package that must fall back to its bundle has its action's method set
    /// to `bundle` in `changes`, and its bundle fetched.
    func applyDeltas(
        _ changes: inout [PlanAction], fetched: inout Fetched, prepared p: Prepared, entries: [PackageID: PackageEntry]
    ) async -> [PackageID: DeltaResult] {
        var fallbacks: [PackageID: [DeltaFallback]] = [:]
        var applied: [PackageID: (count: Int, bytes: Int64)] = [:]
        var objectJobs: [Job] = []
        for a in changes where a.cost?.method == .delta {
            guard let manifest = p.deltas[a.id], let list = p.lists[a.id] else { continue }
            let needed = Set(list.files.map(\.sha256)).subtracting(p.local.keys)
            let entryOf = Dictionary(list.files.map { ($0.sha256, $0) }, uniquingKeysWith: { x, _ in x })
            var covered: Set<SHA256Digest> = []
            for patch in manifest.patches where needed.contains(patch.target) && covered.insert(patch.target).inserted {
                let reason: String?
                if let base = p.local[patch.base], let part = fetched.patches[patch.target] {
                    reason = Self.apply(
                        patch, part: part, base: base, to: p.sandbox.layout.appliedContent(patch.target))
                    try? SystemCalls.unlink(part)
                } else if let failure = fetched.patchFailures[patch.target] {
                    reason = "the patch could not be fetched: \(failure.description)"
                } else if fetched.patches[patch.target] == nil {
                    // Planned as an object (the base is not held here).
                    continue
                } else {
                    reason = "its base content is not in the sandbox"
                }
                if let reason {
                    fallbacks[a.id, default: []].append(
                        DeltaFallback(content: patch.target, reason: reason, to: .object))
                    if fetched.objects[patch.target] == nil, let f = entryOf[patch.target] {
                        objectJobs.append(objectJob(a.id, f, sandbox: p.sandbox, base: p.base))
                    }
                } else {
                    fetched.applied[patch.target] = p.sandbox.layout.appliedContent(patch.target)
                    applied[a.id, default: (0, 0)].count += 1
                    applied[a.id, default: (0, 0)].bytes += patch.patch.size
                }
            }
        }
        if !objectJobs.isEmpty {
            var more = Fetched()
            more.bytes = fetched.bytes
            await run(
                objectJobs, totals: changes, transport: p.transport, concurrency: max(1, p.config.concurrency),
                into: &more)
            fetched.objects.merge(more.objects) { x, _ in x }
            fetched.bytes = more.bytes
            fetched.resumable.formUnion(more.resumable)
            // An object that failed too: that package falls back to its bundle.
            var bundleJobs: [Job] = []
            for (i, a) in changes.enumerated() where more.errors[a.id] != nil {
                guard let e = entries[a.id] else { continue }
                let missing = (fallbacks[a.id] ?? []).filter { fetched.objects[$0.content] == nil }
                fallbacks[a.id] = (fallbacks[a.id] ?? []).map { f in
                    fetched.objects[f.content] == nil
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
                        expected, nil))
            }
            if !bundleJobs.isEmpty {
                var bundles = Fetched()
                bundles.bytes = fetched.bytes
                await run(bundleJobs, totals: changes, transport: p.transport, concurrency: 1, into: &bundles)
                fetched.bundles.merge(bundles.bundles) { x, _ in x }
                fetched.bytes = bundles.bytes
                for (id, e) in bundles.errors { fetched.errors[id] = e }
                fetched.resumable.formUnion(bundles.resumable)
            }
        }
        var results: [PackageID: DeltaResult] = [:]
        for a in changes where p.deltas[a.id] != nil || p.deltaNotes[a.id] != nil {
            let got = applied[a.id] ?? (0, 0)
            let spent = (fetched.bytes[a.id] ?? 0) + (p.metadataBytes[a.id] ?? 0)
            results[a.id] = DeltaResult(
                patchesApplied: got.count, patchBytes: got.bytes,
                bytesSaved: max(0, (a.cost?.bundleBytes ?? 0) - spent),
                fallbacks: fallbacks[a.id] ?? [],
                unused: p.deltaNotes[a.id]
                    ?? (a.cost?.method == .delta ? nil : "the plan chose \(a.cost?.method.rawValue ?? "-")"))
        }
        return results
    }

    /// Applies one patch to the content at `base`, writing the result to `output` and checking
    /// its size and SHA-256; returns why it failed (the output then removed), or nil.
    static func apply(_ patch: PatchRef, part: FilePath, base: FilePath, to output: FilePath) -> String? {
        guard patch.size <= BinaryPatch.maxFileSize else { return "the content is larger than patches are applied for" }
        let baseData: Data
        let patchData: Data
        do {
            baseData = try AtomicFile.read(base, limit: Int(BinaryPatch.maxFileSize))
            patchData = try AtomicFile.read(part, limit: Int(patch.patch.size))
        } catch {
            return "reading the base or the patch failed: \(error)"
        }
        guard SHA256Digest.of(baseData) == patch.base else {
            return "the base content on disk is not the one the patch applies to (altered or damaged)"
        }
        try? SystemCalls.unlink(output)
        let fd: FileDescriptor
        do { fd = try SystemCalls.open(output, .writeOnly, options: [.create, .exclusiveCreate]) } catch {
            return "\(output): \(error)"
        }
        var hasher = SHA256Stream()
        var failure: String?
        do throws(PatchError) {
            try BinaryPatch.apply(patch: patchData, base: baseData, limit: patch.size) { chunk in
                hasher.update(chunk)
                try SystemCalls.writeAll(fd, chunk, path: output)
            }
        } catch {
            failure = "the patch did not apply: \(error)"
        }
        try? SystemCalls.close(fd, path: output)
        if failure == nil {
            let (count, digest) = (hasher.count, hasher.finish())
            if count != patch.size || digest != patch.target {
                failure =
                    "the patch's result is not the content it promises (\(count) bytes, sha256 \(digest.hex.prefix(12))…)"
            }
        }
        if failure != nil { try? SystemCalls.unlink(output) }
        return failure
    }
}
