import Foundation
import LarderArchive
import LarderCore
import LarderFetch
import LarderFileSystem
import LarderStore
import Synchronization
import SystemPackage

// The streamed extraction reads a download's part file as it grows: `GrowingPart` (Fetch) has
// exactly the methods the archive reader's byte source needs. The conformance lives here, where
// both modules meet, so that neither depends on the other.
extension GrowingPart: ArchiveByteSource {}

/// Download scheduling: what a plan needs fetched, at most `concurrency` transfers at once, each
/// bundle extracted into staging while it downloads.
extension Syncer {
    /// What the downloads of a sync came to for one package.
    struct PackageProgress {
        /// The bundle downloaded (its part file), when the package goes by bundle.
        var bundle: FilePath?
        /// The bundle extracted while it downloaded, waiting to be checked and placed.
        var staged: StagedBundle?
        /// Bytes fetched for the package.
        var bytes: Int64 = 0
        /// Seconds its transfers took (a bundle's summed, objects' and patches' longest).
        var seconds: Double = 0
        /// Why the package's downloads failed.
        var error: PackageFailure?
    }

    /// What the downloads came to for one content, shared by every package that needs it.
    struct ContentProgress {
        /// The downloaded object.
        var object: FilePath?
        /// For a delta's patch file (named by its own digest): the downloaded file.
        var patch: FilePath?
        /// Why the patch file could not be fetched (the delta's contents fall back to objects).
        var patchFailure: PackageFailure?
        /// The content made by its patch, checked, in `downloads/`.
        var applied: FilePath?
    }

    /// A sync's downloads: one value per package and one per content.
    struct Fetched {
        var packages: [PackageID: PackageProgress] = [:]
        var contents: [SHA256Digest: ContentProgress] = [:]
        /// Partial downloads of this plan that failed and may be resumed next time.
        var resumable: Set<String> = []

        /// The progress of package `id` (empty when nothing was fetched for it).
        subscript(id: PackageID) -> PackageProgress {
            get { packages[id] ?? PackageProgress() }
            set { packages[id] = newValue }
        }

        /// The progress of content `digest`.
        subscript(content digest: SHA256Digest) -> ContentProgress {
            get { contents[digest] ?? ContentProgress() }
            set { contents[digest] = newValue }
        }

        /// Downloaded objects by content digest.
        var objects: [SHA256Digest: FilePath] { contents.compactMapValues(\.object) }
        /// Contents made by patches by digest.
        var applied: [SHA256Digest: FilePath] { contents.compactMapValues(\.applied) }
    }

    /// Removes everything in `downloads/` but the partial downloads named in `keep` (and their
    /// saved validators).
    func pruneDownloads(_ dir: FilePath, keep: Set<String>) {
        for entry in (try? SystemCalls.listDirectory(dir)) ?? [] {
            let n = entry.string
            let base = n.hasSuffix(".etag") ? String(n.dropLast(5)) : n
            if !keep.contains(base) { try? SystemCalls.unlink(dir.joined(entry.name)) }
        }
    }

    enum Job: Sendable {
        /// A bundle, extracted into the staging area while it downloads when there is one; an
        /// encrypted version's is unsealed with its pipeline once checked.
        case bundle(PackageID, URL, FilePath, Expectation, StagingArea?, BytePipeline?)
        /// An object, by content digest; an encrypted version's is unsealed once checked.
        case object(PackageID, SHA256Digest, URL, FilePath, Expectation, BytePipeline?)
        /// A delta's patch file (its own digest names it in `Fetched.contents`); an encrypted
        /// version's is unsealed, whole, once checked.
        case patch(PackageID, SHA256Digest, URL, FilePath, Expectation, BytePipeline?)
    }

    /// A finished transfer: its failure, its time, and for a bundle what the extraction that
    /// followed it produced.
    struct Transfer: Sendable {
        let job: Job
        let failure: PackageFailure?
        let seconds: Double
        let extraction: Result<StagedBundle, StoreError>?
        /// An encrypted version's download unsealed: what the rest of the sync reads instead.
        var opened: FilePath? = nil
    }

    /// Extracts a bundle into `area` on a thread of its own, reading the part file as the
    /// download writes it (see `GrowingPart`); the thread blocks while it waits for bytes, which
    /// no task of the cooperative pool may do.
    static func extract(
        _ area: StagingArea, following watch: some ArchiveByteSource & Sendable, size: Int64
    ) async -> Result<
        StagedBundle, StoreError
    > {
        await withCheckedContinuation { continuation in
            BlockingWork.start("larder.extract-stream") {
                continuation.resume(
                    returning: Result { () throws(StoreError) in try area.extract(streaming: watch, size: size) })
            }
        }
    }

    /// Downloads bundles and missing objects into `downloads/` with at most `concurrency`
    /// transfers at once; partial files stay for resume.
    func download(
        _ changes: [PlanAction], entries: [PackageID: PackageEntry], lists: [PackageID: FileList],
        local: [SHA256Digest: FilePath], sandbox: Sandbox, transport: any Transport, base: URL, concurrency: Int,
        deltas: [PackageID: ResolvedDelta] = [:], sealed: [PackageID: BytePipeline] = [:]
    ) async -> Fetched {
        let jobs = self.jobs(
            changes, entries: entries, lists: lists, local: local, sandbox: sandbox, base: base, deltas: deltas,
            sealed: sealed)
        var result = Fetched()
        await run(jobs, totals: changes, transport: transport, concurrency: concurrency, into: &result)
        return result
    }

    /// Runs `jobs` with at most `concurrency` at once, recording each into `result` (bytes
    /// added to what it counted before).
    func run(
        _ jobs: [Job], totals changes: [PlanAction], transport: any Transport, concurrency: Int,
        into result: inout Fetched
    ) async {
        let progress = options.progress
        let totals = Dictionary(changes.map { ($0.id.rawValue, $0.cost?.bytes ?? 0) }, uniquingKeysWith: { a, _ in a })
        let counter = ByteCounter()
        for (id, p) in result.packages { _ = counter.add(id.rawValue, p.bytes) }
        await withTaskGroup(of: Transfer.self) { group in
            var next = 0
            func launch() {
                guard next < jobs.count else { return }
                let job = jobs[next]
                next += 1
                group.addTask {
                    await Self.transfer(job, transport: transport) { id, n in
                        let done = counter.add(id.rawValue, n)
                        progress?(.bytes(id: id.rawValue, done: done, total: totals[id.rawValue] ?? 0))
                    }
                }
            }
            for _ in 0..<concurrency { launch() }
            for await done in group {
                record(done, into: &result)
                launch()
            }
        }
        for a in changes { result[a.id].bytes = counter.value(a.id.rawValue) }
    }

    /// The transfers a set of changes needs, by the method its plan chose: a bundle each (with a
    /// staging area to extract into while it downloads, when the pipeline's bundles can be read
    /// as they arrive and one can be made), or each missing content once, by patch or object.
    func jobs(
        _ changes: [PlanAction], entries: [PackageID: PackageEntry], lists: [PackageID: FileList],
        local: [SHA256Digest: FilePath], sandbox: Sandbox, base: URL, deltas: [PackageID: ResolvedDelta] = [:],
        sealed: [PackageID: BytePipeline] = [:]
    ) -> [Job] {
        var jobs: [Job] = []
        var seen: Set<SHA256Digest> = []
        for a in changes {
            guard let list = lists[a.id], let cost = a.cost, let e = entries[a.id] else { continue }
            switch cost.method {
            case .bundle:
                let part = sandbox.layout.bundlePart(e.id, e.version, sha256: e.bundle.sha256)
                // Without a staging area the complete file is extracted after the download.
                // A sealed bundle is opened as it arrives (`SealedByteSource`) and extracted too.
                let area =
                    options.pipeline.streamsBundles
                    ? try? sandbox.makeStagingArea(id: e.id, version: e.version, expected: list.files) : nil
                let expected = Expectation(size: e.bundle.size, limit: e.bundle.size, sha256: e.bundle.sha256)
                jobs.append(.bundle(a.id, url(base, e.bundle.path), part, expected, area, sealed[a.id]))
            case .objects, .delta:
                let (objects, patched) = Self.sources(list, cost.method, delta: deltas[a.id], local: local, seen: &seen)
                for f in objects {
                    jobs.append(objectJob(a.id, f, sandbox: sandbox, base: base, sealed: sealed[a.id]))
                }
                // The patch file, whole and in one request (resumed like a bundle).
                if patched > 0, let file = deltas[a.id]?.patchFile {
                    let expected = Expectation(size: file.size, limit: file.size, sha256: file.sha256)
                    jobs.insert(
                        .patch(
                            a.id, file.sha256, url(base, file.path), sandbox.layout.patchPart(file.sha256), expected,
                            sealed[a.id]),
                        at: 0)
                }
            case .local:
                break
            }
        }
        return jobs
    }

    /// How the contents of `list` the sandbox lacks (and `seen` does not hold: once each) are
    /// made under `method`: the entries fetched as objects — all of them by `objects`; by
    /// `delta`, those no patch of `delta` makes from a content held here — and how many are patched.
    static func sources(
        _ list: FileList, _ method: FetchMethod, delta: ResolvedDelta?, local: [SHA256Digest: FilePath],
        seen: inout Set<SHA256Digest>
    ) -> (objects: [FileEntry], patched: Int) {
        let patches =
            method == .delta
            ? Dictionary((delta?.patches ?? []).map { ($0.target, $0.base) }, uniquingKeysWith: { x, _ in x }) : [:]
        var objects: [FileEntry] = []
        var patched = 0
        for f in list.files where local[f.sha256] == nil && seen.insert(f.sha256).inserted {
            if let base = patches[f.sha256], local[base] != nil {
                patched += 1
            } else {
                objects.append(f)
            }
        }
        return (objects, patched)
    }

    /// The download of `f`'s object. An encrypted version's is named by its sealed bytes'
    /// SHA-256, which the download checks before the object is opened.
    func objectJob(_ id: PackageID, _ f: FileEntry, sandbox: Sandbox, base: URL, sealed: BytePipeline? = nil) -> Job {
        // The list's object size, when it gives one, is exact; else the pipeline's bound.
        let expected = Expectation(
            size: f.packed, limit: f.packed ?? options.pipeline.storedBound(.object, contentSize: f.size),
            sha256: sealed == nil ? nil : f.sealed)
        return .object(
            id, f.sha256, url(base, RepositoryLayout.objectPath(f.objectName)), sandbox.layout.objectPart(f.objectName),
            expected, sealed)
    }

    /// Runs one transfer; a bundle's extraction follows the part file as it grows.
    static func transfer(
        _ job: Job, transport: any Transport, progress: @escaping @Sendable (PackageID, Int64) -> Void
    ) async -> Transfer {
        let started = Date()
        let (id, u, part, exp, area, sealed): (PackageID, URL, FilePath, Expectation, StagingArea?, BytePipeline?) =
            switch job {
            case .bundle(let i, let u, let p, let e, let a, let s): (i, u, p, e, a, s)
            case .object(let i, _, let u, let p, let e, let s): (i, u, p, e, nil, s)
            case .patch(let i, _, let u, let p, let e, let s): (i, u, p, e, nil, s)
            }
        let watch = area.map { _ in GrowingPart(part) }
        // A sealed bundle is opened segment by segment as it arrives, and extracted from that.
        let opening = watch.flatMap { w in
            sealed.flatMap { SealedByteSource(w, pipeline: $0, output: FilePath(part.string + ".open")) }
        }
        async let extraction: Result<StagedBundle, StoreError>? = {
            guard let area, let watch else { return nil }
            if let opening { return await extract(area, following: opening, size: exp.size ?? exp.limit) }
            return await extract(area, following: watch, size: exp.size ?? exp.limit)
        }()
        var failure: PackageFailure?
        do throws(FetchError) {
            try await transport.download(u, to: part, expecting: exp, progress: { n in progress(id, n) }, watch: watch)
            watch?.transportReturned()
        } catch {
            failure = .fetch(error)
            watch?.fail(error.description)
        }
        let extracted = await extraction
        // Whatever the extraction's end, the thread opening the bundle is done before its file is used.
        opening?.stop()
        // An encrypted version's blob, its sealed bytes checked, is opened beside its part (a
        // bundle extracted as it arrived was opened on the way).
        var opened: FilePath?
        if failure != nil, let opening {
            // What opened before the transfer failed goes (the staging area with it, `record`).
            try? SystemCalls.unlink(opening.output)
        } else if failure == nil, let opening, case .success = extracted {
            opened = opening.output
        } else if failure == nil, let sealed {
            switch unseal(job, part, with: sealed, limit: exp.limit, url: u) {
            case .success(let out): opened = out
            case .failure(let f): failure = f
            }
        }
        let seconds = Date().timeIntervalSince(started)
        return Transfer(job: job, failure: failure, seconds: seconds, extraction: extracted, opened: opened)
    }

    /// Opens a downloaded sealed blob beside its part (`<part>.open`), its sealed bytes already
    /// checked by the transfer; an object opens with its content's digest (its key is derived
    /// from it). A blob that does not open is deleted, not resumed.
    static func unseal(
        _ job: Job, _ part: FilePath, with sealed: BytePipeline, limit: Int64, url: URL
    ) -> Result<FilePath, PackageFailure> {
        let (kind, pipeline): (BlobKind, BytePipeline) =
            switch job {
            case .object(_, let digest, _, _, _, _): (.object, sealed.forObject(digest))
            case .patch: (.patch, sealed)
            case .bundle: (.bundle, sealed)
            }
        let out = FilePath(part.string + ".open")
        do throws(BlobError) {
            try pipeline.unseal(kind, part, to: out, limit: limit)
            return .success(out)
        } catch {
            try? SystemCalls.unlink(part)
            if case .io(let e) = error { return .failure(.store(.io(e))) }
            return .failure(.sealed("\(url.lastPathComponent): \(error)"))
        }
    }

    /// Files a finished transfer's outcome: the part file, or the failure and the part to resume.
    func record(_ done: Transfer, into result: inout Fetched) {
        switch done.job {
        case .bundle(let id, _, let part, _, let area, _):
            if let e = done.failure {
                result[id].error = e
                result.resumable.insert(part.lastComponent?.string ?? "")
            } else {
                result[id].bundle = done.opened ?? part
            }
            switch done.extraction {
            case .success(let staged) where done.failure == nil:
                result[id].staged = staged
            case .failure(let error) where done.failure == nil:
                // The complete file is read again, and its verdict is the one reported.
                options.logger.info(
                    "extraction while downloading failed; reading the complete bundle",
                    metadata: ["id": "\(id)", "error": "\(error)"])
                area?.discard()
            default:
                area?.discard()
            }
            result[id].seconds += done.seconds
        case .object(let id, let digest, _, let part, _, _):
            if let e = done.failure {
                result[id].error = result[id].error ?? e
                result.resumable.insert(part.lastComponent?.string ?? "")
            } else {
                result[content: digest].object = done.opened ?? part
            }
            result[id].seconds = max(result[id].seconds, done.seconds)
        case .patch(let id, let file, _, let part, _, _):
            // A patch file that cannot be fetched is not the package's failure: its contents
            // fall back to their objects.
            if let e = done.failure {
                result[content: file].patchFailure = e
                result.resumable.insert(part.lastComponent?.string ?? "")
            } else {
                result[content: file].patch = done.opened ?? part
            }
            result[id].seconds = max(result[id].seconds, done.seconds)
        }
    }

}

/// Bytes per package across concurrent transfers.
final class ByteCounter: Sendable {
    private let counts = Mutex<[String: Int64]>([:])

    func add(_ id: String, _ n: Int64) -> Int64 {
        counts.withLock { counts in
            counts[id, default: 0] += n
            return counts[id] ?? 0
        }
    }

    func value(_ id: String) -> Int64 { counts.withLock { $0[id] ?? 0 } }
}
