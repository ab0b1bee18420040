import Foundation
import LarderArchive
import LarderCore
import LarderFetch
import LarderFileSystem
import SystemPackage

/// How a release's blobs are stored, decided once per release (`decide`): in the clear, with the
/// sync's own pipeline, or sealed with the release's content key (manifests §16). Everything that
/// differs between the two — the signed list that names the release's files, what a delta
/// manifest leads to, how each download is checked and opened — is asked of this value, so the
/// phases never ask which codec a pipeline holds, and one loop serves both.
struct ReleaseEncoding: Sendable {
    /// The sync's own pipeline: how a blob in the clear is stored.
    let base: BytePipeline
    /// The pipeline the release's blobs are decoded with: `base`, or `base` sealed with the
    /// release's content key.
    let pipeline: BytePipeline
    /// The release's encryption, when it is sealed.
    private let encryption: Encryption?

    /// A list fetched for a release: the list, the verified bytes it was decoded from, and the
    /// bytes it cost on the wire.
    typealias FetchedList = (list: FileList, bytes: Data, wire: Int64)

    /// Blobs in the clear, stored as `base` says.
    static func clear(_ base: BytePipeline) -> ReleaseEncoding {
        ReleaseEncoding(base: base, pipeline: base, encryption: nil)
    }

    /// How `entry`'s blobs are stored: in the clear, or sealed with its content key, unwrapped
    /// with one of the device's recipient `keys` (nothing of a sealed release is fetched without
    /// it: a missing or wrong key is the release's failure).
    static func decide(_ entry: PackageEntry, base: BytePipeline, keys: [RecipientKey]) -> Result<
        ReleaseEncoding, PackageFailure
    > {
        guard let encryption = entry.encryption else { return .success(.clear(base)) }
        guard encryption.scheme == Encryption.scheme else { return .failure(.encryptionScheme(encryption.scheme)) }
        guard !keys.isEmpty else { return .failure(.recipientKeyMissing) }
        do throws(SealError) {
            let sealed = try base.sealed(for: entry, encryption, keys: keys)
            return .success(ReleaseEncoding(base: base, pipeline: sealed, encryption: encryption))
        } catch {
            if case .wrongKey(let id) = error { return .failure(.recipientKeyWrong(keyId: id)) }
            return .failure(.notRecipient(have: keys.map(\.keyId)))
        }
    }

    // MARK: the list

    /// The release's file list, fetched and checked against what the index signs. In the clear:
    /// the gzipped list when the index names one (its decompressed bytes checked against the
    /// list's size and SHA-256), else — or when that fails — the list itself. Sealed: the sealed
    /// list, checked, opened, and every content named by its sealed object.
    func fetchList(_ e: PackageEntry, in scope: SyncScope) async -> Result<FetchedList, PackageFailure> {
        guard let encryption else { return await fetchClearList(e, in: scope) }
        let ref = encryption.files
        let stored: Data
        do throws(FetchError) { stored = try await scope.document(ref) } catch { return .failure(.fetch(error)) }
        guard ref.matches(stored) else {
            return .failure(.fileListMismatch("\(ref.path) does not match the size and sha256 the index declares"))
        }
        let data: Data
        do { data = try pipeline.decodeDocument(stored, limit: Int64(Syncer.maxIndexBytes)) } catch {
            return .failure(.sealed("\(ref.path): \(error)"))
        }
        let list: FileList
        switch Self.decodeList(e, data) {
        case .success(let l): list = l
        case .failure(let f): return .failure(f)
        }
        if let f = list.files.first(where: { $0.sealed == nil || $0.packed == nil }) {
            return .failure(.fileListMismatch("\(ref.path): \(f.path) names no sealed object"))
        }
        return .success((list, data, Int64(stored.count)))
    }

    private func fetchClearList(_ e: PackageEntry, in scope: SyncScope) async -> Result<FetchedList, PackageFailure> {
        var wire: Int64 = 0
        if let gz = e.filesGzip {
            do throws(FetchError) {
                let stored = try await scope.document(gz)
                wire += Int64(stored.count)
                if gz.matches(stored),
                    let data = try? pipeline.decodeDocument(stored, limit: e.files.size, exact: true),
                    e.files.matches(data)
                {
                    return Self.decodeList(e, data).map { ($0, data, wire) }
                }
                scope.logger.info(
                    "the gzipped file list does not match; fetching the list", metadata: ["id": "\(e.id)"])
            } catch {
                scope.logger.info(
                    "the gzipped file list could not be fetched; fetching the list",
                    metadata: ["id": "\(e.id)", "error": "\(error)"])
            }
        }
        let data: Data
        do throws(FetchError) { data = try await scope.document(e.files) } catch { return .failure(.fetch(error)) }
        wire += Int64(data.count)
        guard e.files.matches(data) else {
            return .failure(.fileListMismatch("\(e.files.path) does not match the size and sha256 the index declares"))
        }
        return Self.decodeList(e, data).map { ($0, data, wire) }
    }

    /// `data` decoded as `e`'s file list, which must describe `e`.
    static func decodeList(_ e: PackageEntry, _ data: Data) -> Result<FileList, PackageFailure> {
        let list: FileList
        do { list = try ManifestCoding.decode(FileList.self, from: data, document: e.files.path) } catch {
            return .failure(.fileListSchema(error))
        }
        guard list.id == e.id, list.version == e.version else {
            return .failure(.fileListMismatch("\(e.files.path) describes \(list.id) \(list.version)"))
        }
        return .success(list)
    }

    // MARK: deltas

    /// Whether a delta manifest whose list is `files` leads to this release's list: in the clear
    /// the index's list; sealed, the opened list, named at the sealed list's path.
    func deltaLeads(to files: BlobRef, of e: PackageEntry) -> Bool {
        guard let encryption else { return files == e.files }
        return files.path == encryption.files.path
    }

    /// `manifest` resolved against the active version's list (sealed, the manifest names only
    /// the objects the delta fetches).
    func resolve(_ manifest: DeltaManifest, from current: FileList) -> Result<ResolvedDelta, DeltaError> {
        manifest.resolve(from: current, sealed: encryption != nil)
    }

    /// The bytes a delta manifest's list digest signs, of a list built from it (`encoded`): the
    /// list; sealed, the list without its objects' names and sizes.
    func signedBytes(of list: FileList, encoded: Data) throws -> Data {
        encryption == nil ? encoded : try ManifestCoding.encode(list.contentOnly)
    }

    /// Whether the release's list names the stored object of `f` (a sealed list built from a
    /// delta names only the objects the delta fetches; the sealed list names them all).
    func names(_ f: FileEntry) -> Bool { encryption == nil || f.sealed != nil }

    // MARK: downloads

    /// What the download of `f`'s object must be: its stored size when the list gives one
    /// (exact), else the bound of `base`; sealed, also its sealed bytes' SHA-256, checked before
    /// it is opened.
    func objectExpectation(_ f: FileEntry) -> Expectation {
        Expectation(
            size: f.packed, limit: f.packed ?? base.storedBound(.object, contentSize: f.size),
            sha256: encryption == nil ? nil : f.sealed)
    }

    /// Whether a bundle can be extracted while it downloads (a sealed one is opened on the way).
    var streamsBundles: Bool { base.streamsBundles }

    /// For a sealed bundle extracted while it downloads: what opens its segments as they arrive
    /// from `watch`, writing the opened zip to `output`; nil in the clear.
    func opening(_ watch: GrowingPart, output: FilePath) -> SealedByteSource? {
        encryption == nil ? nil : SealedByteSource(watch, pipeline: pipeline, output: output)
    }

    /// A downloaded blob whose stored bytes were checked: sealed, opened beside its part
    /// (`<part>.open`, returned), an object with its content's digest (its key is derived from
    /// it); in the clear nil (the part is read as it is). A sealed blob that does not open is
    /// deleted, not resumed.
    func open(_ kind: BlobKind, content: SHA256Digest?, part: FilePath, limit: Int64, name: String) -> Result<
        FilePath?, PackageFailure
    > {
        guard encryption != nil else { return .success(nil) }
        let p = kind == .object ? content.map { pipeline.forObject($0) } ?? pipeline : pipeline
        let out = FilePath(part.string + ".open")
        do throws(BlobError) {
            try p.unseal(kind, part, to: out, limit: limit)
            return .success(out)
        } catch {
            try? SystemCalls.unlink(part)
            if case .io(let e) = error { return .failure(.store(.io(e))) }
            return .failure(.sealed("\(name): \(error)"))
        }
    }
}
