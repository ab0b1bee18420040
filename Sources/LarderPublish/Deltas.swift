import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import SystemPackage

/// What making one delta did (`pack --json` lists one per base version).
package struct DeltaReport: Sendable, Codable, Equatable {
    /// The base version.
    package var from: String
    /// The manifest written.
    package var manifest: BlobRef
    /// Contents of the new version the base holds (linked on the device).
    package var linked: Int
    /// Contents made by a patch, and the patches' bytes.
    package var patches: Int
    /// The patches' total size.
    package var patchBytes: Int64
    /// Contents left to fetch as objects, and their objects' bytes.
    package var objects: Int
    /// The objects' total (compressed) size.
    package var objectBytes: Int64
    /// What the same contents would cost as objects (compressed): the patches' saving is the difference.
    package var objectBytesWithoutPatches: Int64
    /// For each base-selection rule, how many patches it found (the smallest of the candidates tried).
    package var rules: [String: Int]
    /// Candidate patches made while choosing.
    package var tried: Int
    /// Seconds spent.
    package var seconds: Double
}

/// Makes the delta from one earlier version to the version being packed: every base content is
/// sketched (`ContentSketch`) and indexed; for each content the base lacks, up to three base
/// contents proposed by `BaseSelection` — the same path and those holding most of its bytes —
/// are tried with a fast patch (zstd level 3), the smallest is made again at level 19, and kept
/// when it is smaller than the content's object. The work is bounded per release: each content
/// of both versions is read and sketched once, at most three trial patches and one final patch
/// are made per new content, and no file over `BinaryPatch.maxFileSize` is patched. The
/// patches go end to end into one patch file in `patches/` (content-addressed, written once),
/// the manifest to the new version's staging directory.
/// A version a delta starts from: its list and how its objects are read.
struct DeltaBase {
    let list: FileList
    let pipeline: BytePipeline
}

struct DeltaBuilder {
    let layout: RepositoryLayout
    /// The new version's list (with object sizes) and its reference.
    let target: FileList
    let targetRef: BlobRef
    /// Where each content of the new version can be read.
    let sources: [SHA256Digest: FilePath]
    /// The new version's staging directory.
    let staging: FilePath
    /// How patches, objects and the manifest are encoded.
    let pipeline: BytePipeline

    /// A delta from `base` (its list, and the pipeline its objects are read with: the standard
    /// one, or the base's sealed one when it is encrypted).
    func build(from base: DeltaBase) throws(PublishError) -> (DeltaRef, DeltaReport) {
        let started = Date()
        let basePipeline = base.pipeline
        let base = base.list
        let fail = { (detail: String) in PublishError.delta(from: base.version.description, detail: detail) }
        let held = Set(base.files.map(\.sha256))
        let (remove, changed) = DeltaManifest.changes(from: base, to: target, sealed: pipeline.deltaNamesContentsOnly)
        var upsert = changed
        // Contents are named by position: in `upsert` (targets, objects) and in the base's list.
        let targetAt = Dictionary(upsert.enumerated().map { ($1.sha256, $0) }, uniquingKeysWith: { a, _ in a })
        let baseAt = Dictionary(base.files.enumerated().map { ($1.sha256, $0) }, uniquingKeysWith: { a, _ in a })
        var patches: [DeltaPatch] = []
        var patchFile = Data()
        var objects: [Int] = []
        var seen: Set<SHA256Digest> = []
        var rules: [String: Int] = [:]
        var tried = 0
        var patchBytes: Int64 = 0
        var objectBytes: Int64 = 0
        var withoutPatches: Int64 = 0
        var baseCache: [SHA256Digest: Data] = [:]
        // Every base content that could be patched from, sketched once (read from its object).
        let (contents, index) = try BaseSelection.index(base) { (f: FileEntry) throws(PublishError) -> ContentSketch? in
            guard f.size <= BinaryPatch.maxFileSize else { return nil }
            return ContentSketch(try readBase(f, basePipeline, fail))
        }
        let names = BaseSelection.Names(base)
        for f in target.files where !held.contains(f.sha256) && seen.insert(f.sha256).inserted {
            withoutPatches += f.objectCost
            guard let position = targetAt[f.sha256] else {
                throw fail("\(f.path) is new but not among the list's changes")
            }
            guard f.size <= BinaryPatch.maxFileSize, let source = sources[f.sha256] else {
                objects.append(position)
                objectBytes += f.objectCost
                continue
            }
            let content: Data
            do { content = try AtomicFile.read(source, limit: Int(BinaryPatch.maxFileSize)) } catch {
                throw fail("\(source): \(error)")
            }
            guard SHA256Digest.of(content) == f.sha256 else { throw .changedWhilePacking(path: f.path.string) }
            let candidates = BaseSelection.candidates(
                for: f, sketch: ContentSketch(content), in: names, contents: contents, index: index)
            guard !candidates.isEmpty else {
                objects.append(position)
                objectBytes += f.objectCost
                continue
            }
            // Rank the candidates with a fast patch; make the winner's at level 19.
            var best: (entry: FileEntry, rule: BaseSelection.Rule, size: Int)?
            for (candidate, rule) in candidates {
                let bytes = try baseContent(candidate, basePipeline, &baseCache, fail)
                let trial: Data
                do { trial = try pipeline.makePatch(base: bytes, target: content, level: 3) } catch {
                    throw fail("\(f.path): \(error)")
                }
                tried += 1
                if best == nil || trial.count < best?.size ?? Int.max { best = (candidate, rule, trial.count) }
            }
            guard let winner = best else { continue }
            let patch: Data
            do {
                patch = try pipeline.makePatch(
                    base: try baseContent(winner.entry, basePipeline, &baseCache, fail), target: content, level: 19)
            } catch let e as PublishError {
                throw e
            } catch {
                throw fail("\(f.path): \(error)")
            }
            guard Int64(patch.count) < f.objectCost, let from = baseAt[winner.entry.sha256] else {
                objects.append(position)
                objectBytes += f.objectCost
                continue
            }
            patches.append(DeltaPatch(target: position, base: from, length: Int64(patch.count)))
            patchFile.append(patch)
            patchBytes += Int64(patch.count)
            rules[winner.rule.rawValue, default: 0] += 1
        }
        if pipeline.deltaNamesContentsOnly {
            // Only the objects the device fetches are named (their sealed digests and sizes).
            let named = Dictionary(target.files.map { ($0.path, $0) }, uniquingKeysWith: { a, _ in a })
            for o in objects { upsert[o] = named[upsert[o].path] ?? upsert[o] }
        }
        // The patch file is published as the pipeline stores it (sealed once, whole, when encrypted).
        var fileRef: BlobRef?
        if !patches.isEmpty {
            let stored: Data
            do { stored = try pipeline.encodePatchFile(patchFile) } catch {
                throw fail("sealing the patch file: \(error)")
            }
            fileRef = try writePatch(stored)
        }
        let manifest = DeltaManifest(
            id: target.id, from: base.version, to: target.version, files: targetRef, remove: remove, upsert: upsert,
            patchFile: fileRef, patches: patches, objects: objects)
        // Every byte a device fetches counts: the manifest is published gzipped.
        let data: Data
        do { data = try pipeline.encodeDocument(ManifestCoding.encode(manifest)) } catch {
            throw fail("encoding the manifest: \(error)")
        }
        let file = staging.joined("deltas").joined(pipeline.deltaManifestName(from: base.version))
        try io { () throws(FileSystemError) in
            try AtomicFile.makeDirectories(file.parentPath)
            try AtomicFile.write(data, to: file)
        }
        let ref = BlobRef(
            path: pipeline.deltaManifestPath(target.id, from: base.version, to: target.version),
            size: Int64(data.count), sha256: SHA256Digest.of(data))
        let linked = Set(target.files.map(\.sha256)).intersection(held).count
        let report = DeltaReport(
            from: base.version.description, manifest: ref, linked: linked, patches: patches.count,
            patchBytes: patchBytes, objects: objects.count, objectBytes: objectBytes,
            objectBytesWithoutPatches: withoutPatches, rules: rules, tried: tried,
            seconds: Date().timeIntervalSince(started))
        return (DeltaRef(from: base.version, manifest: ref), report)
    }

    /// A content of the base version, read from its object (and checked), through `cache`.
    func baseContent(
        _ f: FileEntry, _ basePipeline: BytePipeline, _ cache: inout [SHA256Digest: Data],
        _ fail: (String) -> PublishError
    ) throws(PublishError) -> Data {
        if let d = cache[f.sha256] { return d }
        let data = try readBase(f, basePipeline, fail)
        // A few bases are tried for many targets; keep the cache small.
        if cache.count > 64 { cache.removeAll() }
        cache[f.sha256] = data
        return data
    }

    /// A content of the base version, read from its object and checked.
    func readBase(_ f: FileEntry, _ basePipeline: BytePipeline, _ fail: (String) -> PublishError) throws(PublishError)
        -> Data
    {
        let path = layout.resolve(RepositoryLayout.objectPath(f.objectName))
        let data: Data
        do { data = try basePipeline.forObject(f.sha256).decodeObject(file: path, limit: f.size) } catch {
            throw fail("the object of \(f.path) (\(f.sha256.hex.prefix(12))…): \(error)")
        }
        guard data.count == f.size, SHA256Digest.of(data) == f.sha256 else {
            throw fail("the object of \(f.path) does not hold its content")
        }
        return data
    }

    /// Writes a delta's patch file under its own SHA-256 unless it is there already.
    func writePatch(_ patch: Data) throws(PublishError) -> BlobRef {
        let digest = SHA256Digest.of(patch)
        let rel = RepositoryLayout.patchPath(digest)
        let path = layout.resolve(rel)
        if !AtomicFile.exists(path) {
            try io { () throws(FileSystemError) in
                try AtomicFile.makeDirectories(path.parentPath)
                try AtomicFile.write(patch, to: path)
            }
        }
        return BlobRef(path: rel, size: Int64(patch.count), sha256: digest)
    }
}
