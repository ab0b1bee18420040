import Foundation
import LarderCore
import LarderStore
import SystemPackage

/// One package's new release as a sync carries it from the plan to its activation: its signed
/// entry, how its blobs are encoded, its file list and the delta it may come by, what its
/// downloads came to, where it was placed and how it ended. Each phase reads this one value and
/// fills in its part (`docs/architecture.md`, "Where a release goes, phase by phase").
struct Release {
    /// Its signed entry in the index, on this device's channel.
    let entry: PackageEntry
    /// How its blobs are stored: in the clear or sealed, decided once, before its list is fetched.
    var encoding: ReleaseEncoding
    /// What the plan made of it (install or update, versions, method, dependency group); nil
    /// until the plan made with its list names it.
    var action: PlanAction?
    /// Its file list, once fetched or built from a delta.
    var list: FileList?
    /// The verified bytes `list` was decoded from, until they are handed to the sandbox.
    var listBytes: Data?
    /// The delta manifest `list` was built from (an update by delta).
    var delta: ResolvedDelta?
    /// Why the delta the index offered was not used (the list came another way).
    var deltaNote: String?
    /// Bytes its list, gzipped list or delta manifest cost on the wire (nil: none was fetched).
    var metadataBytes: Int64?
    /// What its downloads came to.
    var download = Download()
    /// What its delta did, once its patches were applied.
    var deltaResult: DeltaResult?
    /// How it was placed on disk.
    var placement: Placement?
    /// Why it failed: its key or list, the room, a download, placing, activating, or its group.
    var failure: PackageFailure?

    /// A release of `entry`, in the clear until its encoding is decided.
    init(_ entry: PackageEntry, encoding: ReleaseEncoding) {
        self.entry = entry
        self.encoding = encoding
    }

    /// The package.
    var id: PackageID { entry.id }

    /// How its files are fetched, as the plan (or a fallback to the bundle) chose.
    var method: FetchMethod? { action?.cost?.method }

    /// Takes `list` (with the verified bytes it was decoded from) and what it cost on the wire.
    mutating func take(_ list: FileList, bytes: Data, wire: Int64) {
        self.list = list
        listBytes = bytes
        metadataBytes = (metadataBytes ?? 0) + wire
    }

    /// This release with a download account of its own that starts from its bytes so far: what
    /// a later transfer adds (its failure above all) is not yet the release's.
    var separateAccount: Release {
        var r = self
        r.download = Download(bytes: download.bytes)
        return r
    }

    /// What the downloads of one release came to.
    struct Download {
        /// The bundle downloaded (its part file, or the part opened), when it goes by bundle.
        var bundle: FilePath?
        /// The bundle extracted while it downloaded, waiting to be checked and placed.
        var staged: StagedBundle?
        /// Bytes fetched for it.
        var bytes: Int64 = 0
        /// Seconds its transfers took (a bundle's summed, objects' and patches' longest).
        var seconds: Double = 0
        /// Why its downloads failed.
        var error: PackageFailure?
    }

    /// What placing it took.
    struct Placement {
        let bytes: Int64
        let seconds: Double
        let method: FetchMethod
    }

    /// Its line in the report, once the sync is through with it.
    func result() -> PackageResult? {
        guard let a = action else { return nil }
        let done = placement
        var r = PackageResult(
            id: a.id.rawValue, action: a.kind, from: a.from?.description, to: a.to?.description,
            method: done?.method ?? a.cost?.method, bytesFetched: done?.bytes ?? download.bytes,
            bundleBytes: a.cost?.bundleBytes, seconds: done?.seconds ?? 0,
            outcome: failure == nil ? .done : .failed, reason: failure?.description ?? a.reason, code: failure?.code)
        if done?.method == .bundle { r.streamed = download.staged != nil }
        r.metadataBytes = metadataBytes
        r.delta = deltaResult
        return r
    }
}

extension [Release] {
    /// Where each release is, by package.
    var positions: [PackageID: Int] {
        Dictionary(enumerated().map { ($1.id, $0) }, uniquingKeysWith: { a, _ in a })
    }
}
