import Foundation
import LarderArchive
import LarderCore
import LarderFetch
import LarderStore
import SystemPackage

/// Encrypted versions (manifests §16): the content key unwrapped with one of the device's
/// recipient keys before anything is fetched, then the list: built from a delta manifest as for
/// a version in the clear, else the sealed list fetched, checked against its signed digest,
/// opened and decoded. Every later download of the version is checked against
/// its sealed digest first and opened after (`Syncer.transfer`).
extension Syncer {
    /// The byte pipeline of the encrypted version `e`: its content key, unwrapped.
    func sealedPipeline(_ e: PackageEntry, _ encryption: Encryption) -> Result<BytePipeline, PackageFailure> {
        guard encryption.scheme == Encryption.scheme else { return .failure(.encryptionScheme(encryption.scheme)) }
        guard !options.recipientKeys.isEmpty else { return .failure(.recipientKeyMissing) }
        do throws(SealError) {
            return .success(try options.pipeline.sealed(for: e, encryption, keys: options.recipientKeys))
        } catch {
            if case .wrongKey(let id) = error { return .failure(.recipientKeyWrong(keyId: id)) }
            return .failure(.notRecipient(have: options.recipientKeys.map(\.keyId)))
        }
    }

    /// The list of the encrypted version `e` opened with `pipeline`, with its bytes (the opened
    /// JSON) and the bytes it cost on the wire.
    func fetchSealedList(
        _ e: PackageEntry, _ encryption: Encryption, pipeline: BytePipeline, transport: any Transport, base: URL
    ) async -> Result<(FileList, Data, Int64), PackageFailure> {
        let ref = encryption.files
        let doc: FetchedDocument
        do throws(FetchError) {
            doc = try await transport.document(
                url(base, ref.path), etag: nil, maxBytes: Int(min(ref.size, Int64(Self.maxIndexBytes))))
        } catch {
            return .failure(.fetch(error))
        }
        guard Int64(doc.data.count) == ref.size, SHA256Digest.of(doc.data) == ref.sha256 else {
            return .failure(.fileListMismatch("\(ref.path) does not match the size and sha256 the index declares"))
        }
        let data: Data
        do { data = try pipeline.decodeDocument(doc.data, limit: Int64(Self.maxIndexBytes)) } catch {
            return .failure(.sealed("\(ref.path): \(error)"))
        }
        let list: FileList
        switch decodeList(e, data) {
        case .success(let l): list = l
        case .failure(let f): return .failure(f)
        }
        // Every content of an encrypted version is fetched by its sealed name.
        if let f = list.files.first(where: { $0.sealed == nil || $0.packed == nil }) {
            return .failure(.fileListMismatch("\(ref.path): \(f.path) names no sealed object"))
        }
        return .success((list, data, Int64(doc.data.count)))
    }

    /// Names the objects the plan fetches of each encrypted version whose list was built from a
    /// delta, which names only the objects the delta fetches (manifests §16): when the plan
    /// fetches one it does not name — its method is `objects`, or a patch's base is not held
    /// here — the sealed list is fetched, checked and opened, and replaces the built list.
    /// Returns the packages whose sealed list failed (their lists removed from `out`).
    func nameObjects(
        _ plan: Plan, _ out: inout Lists, entries: [PackageID: PackageEntry], local: [SHA256Digest: FilePath],
        transport: any Transport, base: URL
    ) async -> Set<PackageID> {
        var failed: Set<PackageID> = []
        for a in plan.changes {
            guard let method = a.cost?.method, method == .objects || method == .delta,
                let delta = out.deltas[a.id], let list = out.lists[a.id],
                let pipeline = out.sealed[a.id], let e = entries[a.id], let encryption = e.encryption
            else { continue }
            var seen: Set<SHA256Digest> = []
            let objects = Self.sources(list, method, delta: delta, local: local, seen: &seen).objects
            guard objects.contains(where: { $0.sealed == nil }) else { continue }
            switch await fetchSealedList(e, encryption, pipeline: pipeline, transport: transport, base: base) {
            case .success(let (named, bytes, wire)):
                out.take(a.id, named, bytes, wire: wire)
            case .failure(let failure):
                out.lists[a.id] = nil
                out.bytes[a.id] = nil
                out.failures[a.id] = failure
                failed.insert(a.id)
            }
        }
        return failed
    }
}
