import Foundation

/// The format version of delta manifests: 2 since deltas carry their patches in one file and
/// name contents by position (manifests §15); a device reading an older or newer manifest does
/// not use the delta (it fetches the list, then objects or the bundle).
package let deltaSchemaVersion = 2

/// One patch of a delta, as the manifest names it: which content it makes (a position in the
/// manifest's `upsert`), which content of `from` it applies to (a position in `from`'s file
/// list) and its length in the delta's patch file, where it starts where the one before it ends.
package struct DeltaPatch: Codable, Sendable, Equatable {
    /// The entry of `upsert` whose content the patch makes.
    package var target: Int
    /// The entry of `from`'s list whose content the patch applies to.
    package var base: Int
    /// The patch's length in bytes in the patch file.
    package var length: Int64

    /// Creates one.
    package init(target: Int, base: Int, length: Int64) {
        self.target = target
        self.base = base
        self.length = length
    }

    enum CodingKeys: String, CodingKey { case target, base, length }

    /// Decodes one, refusing a negative position and a length that is not positive.
    package init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        target = try c.decode(Int.self, forKey: .target)
        base = try c.decode(Int.self, forKey: .base)
        length = try c.decode(Int64.self, forKey: .length)
        guard target >= 0, base >= 0 else {
            throw DecodingError.dataCorruptedError(forKey: .base, in: c, debugDescription: "a position is negative")
        }
        guard length > 0 else {
            throw DecodingError.dataCorruptedError(forKey: .length, in: c, debugDescription: "a patch has no bytes")
        }
    }
}

/// A patch of a delta once its positions are read against the lists: the content it makes, the
/// content it applies to, and where it lies in the delta's patch file.
package struct PatchRef: Sendable, Equatable {
    /// SHA-256 of the content the patch makes.
    package var target: SHA256Digest
    /// Its size in bytes.
    package var size: Int64
    /// SHA-256 of the content of the old version the patch applies to.
    package var base: SHA256Digest
    /// Where the patch (a stored zstd patch-from frame) starts in the patch file.
    package var offset: Int64
    /// Its length there.
    package var length: Int64

    /// Creates one.
    package init(target: SHA256Digest, size: Int64, base: SHA256Digest, offset: Int64, length: Int64) {
        self.target = target
        self.size = size
        self.base = base
        self.offset = offset
        self.length = length
    }
}

/// `packages/<id>/<to>/deltas/<from>.json.gz` (gzipped JSON): how a device holding `from` gets `to` — the file
/// list's changes (so the device builds `to`'s list from `from`'s and checks it against the
/// signed one instead of downloading it), the patches that make contents `from` lacks out of
/// contents it holds (all in one patch file: one request, resumable, one digest), and the
/// contents left to fetch as objects. Every other content of `to` is one `from` holds already:
/// it is linked. Contents are named by position in `upsert` and in `from`'s list, not by digest:
/// a small release's metadata costs well under its patches.
package struct DeltaManifest: Codable, Sendable, Equatable, RepositoryDocument, SchemaVersioned {
    /// The document's format version; `ManifestCoding.decode` refuses any but `deltaSchemaVersion`.
    package var schemaVersion: Int
    /// The package.
    package var id: PackageID
    /// The version the delta starts from.
    package var from: SemanticVersion
    /// The version it leads to.
    package var to: SemanticVersion
    /// `to`'s file list as the index names it: the list rebuilt from `from`'s must be these bytes.
    /// An encrypted version's: the opened list's contents (its entries without `sealed` and
    /// `packed`, `FileList.contentOnly`), at the sealed list's path.
    package var files: BlobRef
    /// Paths of `from` that `to` does not have (dropped).
    package var remove: [RelativePath]
    /// Entries of `to`'s list that are new or differ from `from`'s, exactly as `to`'s list has them
    /// (an encrypted version's: without `sealed` and `packed`, but for the entries `objects` names).
    package var upsert: [FileEntry]
    /// The patches end to end (`patches/<aa>/<sha256>`); absent when there are none.
    package var patchFile: BlobRef?
    /// Contents of `to` that `from` lacks, each made by a patch from a content `from` holds, in
    /// the order they lie in `patchFile`.
    package var patches: [DeltaPatch]
    /// Contents of `to` that `from` lacks and no patch makes, fetched as objects: entries of `upsert`.
    package var objects: [Int]

    package static var supportedSchemaVersion: Int { deltaSchemaVersion }

    /// Creates one.
    package init(
        schemaVersion: Int = deltaSchemaVersion, id: PackageID, from: SemanticVersion, to: SemanticVersion,
        files: BlobRef, remove: [RelativePath], upsert: [FileEntry], patchFile: BlobRef? = nil,
        patches: [DeltaPatch] = [], objects: [Int] = []
    ) {
        self.schemaVersion = schemaVersion
        self.id = id
        self.from = from
        self.to = to
        self.files = files
        self.remove = remove
        self.upsert = upsert
        self.patchFile = patchFile
        self.patches = patches
        self.objects = objects
    }

    /// The list changes from `old` to `new`: what `new` drops and what it adds or changes.
    /// `sealed` (an encrypted version's delta): entries are compared, and given, without their
    /// objects' names and sizes (`FileEntry.contentOnly`); the publisher names the objects a
    /// device fetches afterwards.
    package static func changes(from old: FileList, to new: FileList, sealed: Bool = false) -> (
        remove: [RelativePath], upsert: [FileEntry]
    ) {
        let form = { (f: FileEntry) in sealed ? f.contentOnly : f }
        let before = Dictionary(old.files.map { ($0.path, form($0)) }, uniquingKeysWith: { a, _ in a })
        let after = Set(new.files.map(\.path))
        let remove = old.files.map(\.path).filter { !after.contains($0) }
        let upsert = new.files.map(form).filter { before[$0.path] != $0 }
        return (remove, upsert)
    }

    /// `to`'s file list built from `from`'s: drop `remove` and the paths `upsert` replaces, add
    /// `upsert`. The caller checks the encoded result against `files` (size and SHA-256).
    /// `sealed`: `from`'s entries are taken without their objects' names and sizes (a name is
    /// the sealed form under one version's key; only `upsert` names objects of `to`).
    package func rebuild(from list: FileList, sealed: Bool = false) -> Result<FileList, DeltaError> {
        guard list.id == id, list.version == from else {
            return .failure(DeltaError("the manifest is from \(id)@\(from), the list is \(list.id)@\(list.version)"))
        }
        let have = Set(list.files.map(\.path))
        if let missing = remove.first(where: { !have.contains($0) }) {
            return .failure(DeltaError("it removes \(missing), which \(id)@\(from) does not have"))
        }
        let replaced = Set(remove).union(upsert.map(\.path))
        let kept = list.files.filter { !replaced.contains($0.path) }
        return .success(FileList(id: id, version: to, files: (sealed ? kept.map(\.contentOnly) : kept) + upsert))
    }

    /// The delta read against `from`'s verified list: `to`'s list rebuilt (the caller checks its
    /// bytes against `files`), each patch with the digests its positions name and its place in
    /// the patch file, and the objects' digests. Fails on a position outside its list, a patch
    /// of no length, or patches whose lengths do not add up to the patch file's size (`sealed`:
    /// to its size opened, the patch file of an encrypted version being sealed once, whole).
    package func resolve(from list: FileList, sealed: Bool = false) -> Result<ResolvedDelta, DeltaError> {
        let rebuilt: FileList
        switch rebuild(from: list, sealed: sealed) {
        case .success(let l): rebuilt = l
        case .failure(let why): return .failure(why)
        }
        var refs: [PatchRef] = []
        refs.reserveCapacity(patches.count)
        var offset: Int64 = 0
        for (i, p) in patches.enumerated() {
            guard upsert.indices.contains(p.target) else {
                return .failure(DeltaError("patch \(i) makes entry \(p.target) of upsert, which has \(upsert.count)"))
            }
            guard list.files.indices.contains(p.base) else {
                return .failure(
                    DeltaError(
                        "patch \(i) applies to entry \(p.base) of \(id)@\(from)'s list, which has \(list.files.count)"))
            }
            guard p.length > 0, p.length <= (patchFile?.size ?? 0) - offset else {
                return .failure(DeltaError("patch \(i)'s length \(p.length) does not fit in the patch file"))
            }
            let t = upsert[p.target]
            refs.append(
                PatchRef(
                    target: t.sha256, size: t.size, base: list.files[p.base].sha256, offset: offset, length: p.length))
            offset += p.length
        }
        // A sealed patch file is its patches sealed, padded to a Padmé size or not (`pack --pad`).
        if let file = patchFile,
            sealed
                ? file.size != SegmentedSeal.sealedSize(offset) && file.size != SegmentedSeal.paddedSealedSize(offset)
                : file.size != offset
        {
            return .failure(
                DeltaError(
                    "the patches' lengths add up to \(offset) bytes, the patch file has \(file.size)"
                        + (sealed ? " (sealed)" : "")))
        }
        var digests: [SHA256Digest] = []
        digests.reserveCapacity(objects.count)
        for o in objects {
            guard upsert.indices.contains(o) else {
                return .failure(DeltaError("an object names entry \(o) of upsert, which has \(upsert.count)"))
            }
            if sealed, upsert[o].sealed == nil || upsert[o].packed == nil {
                return .failure(DeltaError("\(upsert[o].path) is fetched as an object but names no sealed object"))
            }
            digests.append(upsert[o].sha256)
        }
        return .success(ResolvedDelta(manifest: self, list: rebuilt, patches: refs, objects: digests))
    }
}

/// A delta read against the list of the version it starts from (`DeltaManifest.resolve`).
package struct ResolvedDelta: Sendable, Equatable {
    /// The manifest.
    package let manifest: DeltaManifest
    /// `to`'s list as rebuilt from `from`'s (not yet checked against the signed list).
    package let list: FileList
    /// The patches, with their digests and places in the patch file.
    package let patches: [PatchRef]
    /// The contents fetched as objects.
    package let objects: [SHA256Digest]

    /// Creates one.
    package init(manifest: DeltaManifest, list: FileList, patches: [PatchRef], objects: [SHA256Digest]) {
        self.manifest = manifest
        self.list = list
        self.patches = patches
        self.objects = objects
    }

    /// The patch file.
    package var patchFile: BlobRef? { manifest.patchFile }
    /// The version the delta starts from.
    package var from: SemanticVersion { manifest.from }
    /// The version it leads to.
    package var to: SemanticVersion { manifest.to }

    /// Checks that every content of `list` (the rebuilt target) is one `from` holds, a patch's
    /// target or an object, and that each patch's base is one `from` holds.
    package func covers(_ list: FileList, holding old: Set<SHA256Digest>) -> DeltaError? {
        let patched = Set(patches.map(\.target))
        let fetched = Set(objects)
        for f in list.files where !old.contains(f.sha256) && !patched.contains(f.sha256) && !fetched.contains(f.sha256)
        {
            return DeltaError("no source for \(f.path) (\(f.sha256.hex.prefix(12))…): not held, patched or fetched")
        }
        if let p = patches.first(where: { !old.contains($0.base) }) {
            return DeltaError(
                "the patch to \(p.target.hex.prefix(12))… applies to a content \(manifest.id)@\(manifest.from) does not hold"
            )
        }
        return nil
    }
}

/// Why a delta manifest cannot be used.
package struct DeltaError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What was wrong.
    package let description: String
    /// Creates one.
    package init(_ description: String) { self.description = description }
}
