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

/// The fetch phase: what each release's method needs downloaded — its bundle, or each content
/// the sandbox lacks once, by object or by its delta's patch file — with at most the config's
/// concurrency of transfers at once, resuming partial downloads, each checked as it streams; a
/// bundle is extracted into staging while it downloads where the encoding allows.
struct FetchPhase {
    let scope: SyncScope
    /// The contents the sandbox holds, where.
    let local: [SHA256Digest: FilePath]

    /// What the downloads came to for the contents, shared by every release that needs them,
    /// and the partial downloads worth resuming.
    struct Contents {
        var byDigest: [SHA256Digest: Content] = [:]
        /// Partial downloads of this plan that failed and may be resumed next time.
        var resumable: Set<String> = []

        /// The progress of content `digest`.
        subscript(digest: SHA256Digest) -> Content {
            get { byDigest[digest] ?? Content() }
            set { byDigest[digest] = newValue }
        }

        /// Downloaded objects by content digest.
        var objects: [SHA256Digest: FilePath] { byDigest.compactMapValues(\.object) }
        /// Contents made by patches by digest.
        var applied: [SHA256Digest: FilePath] { byDigest.compactMapValues(\.applied) }
    }

    /// What the downloads came to for one content.
    struct Content {
        /// The downloaded object.
        var object: FilePath?
        /// For a delta's patch file (named by its own digest): the downloaded file.
        var patch: FilePath?
        /// Why the patch file could not be fetched (the delta's contents fall back to objects).
        var patchFailure: PackageFailure?
        /// The content made by its patch, checked, in `downloads/`.
        var applied: FilePath?
    }

    /// One transfer: a blob of a release, where it goes, what it must be.
    struct Job: Sendable {
        enum Blob: Sendable {
            /// The bundle, extracted into the staging area while it downloads when there is one.
            case bundle(StagingArea?)
            /// An object, by content digest.
            case object(SHA256Digest)
            /// A delta's patch file, by its own digest.
            case patch(SHA256Digest)
        }
        let id: PackageID
        let blob: Blob
        let url: URL
        let part: FilePath
        let expected: Expectation
        /// How the release's blobs are opened once checked.
        let encoding: ReleaseEncoding
    }

    /// A finished transfer: its failure, its time, and for a bundle what the extraction that
    /// followed it produced.
    struct Transfer: Sendable {
        let job: Job
        let failure: PackageFailure?
        let seconds: Double
        let extraction: Result<StagedBundle, StoreError>?
        /// A sealed download opened: what the rest of the sync reads instead of the part.
        var opened: FilePath? = nil
    }

    /// Downloads what `releases` need, recording each release's download in it.
    func run(_ releases: inout [Release]) async -> Contents {
        var contents = Contents()
        await transfer(jobs(releases), into: &releases, contents: &contents)
        return contents
    }

    /// The transfers `releases` need, by the method each one's plan chose: a bundle each (with a
    /// staging area to extract into while it downloads, when the encoding allows and one can be
    /// made), or each missing content once, by patch or object.
    func jobs(_ releases: [Release]) -> [Job] {
        var jobs: [Job] = []
        var seen: Set<SHA256Digest> = []
        for r in releases {
            guard let list = r.list, let method = r.method else { continue }
            switch method {
            case .bundle:
                // Without a staging area the complete file is extracted after the download.
                let area =
                    r.encoding.streamsBundles
                    ? try? scope.sandbox.makeStagingArea(id: r.id, version: r.entry.version, expected: list.files)
                    : nil
                jobs.append(bundleJob(r, area: area))
            case .objects, .delta:
                let (objects, patched) = Self.sources(list, method, delta: r.delta, local: local, seen: &seen)
                for f in objects { jobs.append(objectJob(r, f)) }
                // The patch file, whole and in one request (resumed like a bundle).
                if patched > 0, let file = r.delta?.patchFile {
                    let expected = Expectation(size: file.size, limit: file.size, sha256: file.sha256)
                    let job = Job(
                        id: r.id, blob: .patch(file.sha256), url: scope.url(file.path),
                        part: scope.sandbox.layout.patchPart(file.sha256), expected: expected, encoding: r.encoding)
                    jobs.insert(job, at: 0)
                }
            case .local:
                break
            }
        }
        return jobs
    }

    /// The download of release `r`'s bundle.
    func bundleJob(_ r: Release, area: StagingArea?) -> Job {
        let e = r.entry
        return Job(
            id: r.id, blob: .bundle(area), url: scope.url(e.bundle.path),
            part: scope.sandbox.layout.bundlePart(e.id, e.version, sha256: e.bundle.sha256),
            expected: Expectation(size: e.bundle.size, limit: e.bundle.size, sha256: e.bundle.sha256),
            encoding: r.encoding)
    }

    /// The download of `f`'s object for release `r` (a sealed one named and checked by its
    /// sealed bytes, then opened).
    func objectJob(_ r: Release, _ f: FileEntry) -> Job {
        Job(
            id: r.id, blob: .object(f.sha256), url: scope.url(RepositoryLayout.objectPath(f.objectName)),
            part: scope.sandbox.layout.objectPart(f.objectName), expected: r.encoding.objectExpectation(f),
            encoding: r.encoding)
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

    /// Runs `jobs` with at most the config's concurrency at once (`concurrency` to override),
    /// recording each into `releases` (bytes added to what each counted before) and `contents`.
    func transfer(
        _ jobs: [Job], into releases: inout [Release], contents: inout Contents, concurrency: Int? = nil
    ) async {
        let progress = scope.setup.progress
        let transport = scope.transport
        let totals = Dictionary(
            releases.map { ($0.id.rawValue, $0.action?.cost?.bytes ?? 0) }, uniquingKeysWith: { a, _ in a })
        let counter = ByteCounter()
        for r in releases { _ = counter.add(r.id.rawValue, r.download.bytes) }
        let at = releases.positions
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
            for _ in 0..<max(1, concurrency ?? scope.config.concurrency) { launch() }
            for await done in group {
                if let i = at[done.job.id] { record(done, into: &releases[i], contents: &contents) }
                launch()
            }
        }
        for i in releases.indices { releases[i].download.bytes = counter.value(releases[i].id.rawValue) }
    }

    /// Runs one transfer; a bundle's extraction follows the part file as it grows, a sealed one
    /// opened on the way.
    static func transfer(
        _ job: Job, transport: any Transport, progress: @escaping @Sendable (PackageID, Int64) -> Void
    ) async -> Transfer {
        let started = Date()
        let (part, exp) = (job.part, job.expected)
        let area: StagingArea? = if case .bundle(let a) = job.blob { a } else { nil }
        let watch = area.map { _ in GrowingPart(part) }
        let opening = watch.flatMap { job.encoding.opening($0, output: FilePath(part.string + ".open")) }
        async let extraction: Result<StagedBundle, StoreError>? = {
            guard let area, let watch else { return nil }
            if let opening { return await extract(area, following: opening, size: exp.size ?? exp.limit) }
            return await extract(area, following: watch, size: exp.size ?? exp.limit)
        }()
        var failure: PackageFailure?
        do throws(FetchError) {
            try await transport.download(
                job.url, to: part, expecting: exp, progress: { n in progress(job.id, n) }, watch: watch)
            watch?.transportReturned()
        } catch {
            failure = .fetch(error)
            watch?.fail(error.description)
        }
        let extracted = await extraction
        // Whatever the extraction's end, the thread opening the bundle is done before its file is used.
        opening?.stop()
        var opened: FilePath?
        if failure != nil, let opening {
            // What opened before the transfer failed goes (the staging area with it, `record`).
            try? SystemCalls.unlink(opening.output)
        } else if failure == nil, let opening, case .success = extracted {
            opened = opening.output
        } else if failure == nil {
            let (kind, content): (BlobKind, SHA256Digest?) =
                switch job.blob {
                case .bundle: (.bundle, nil)
                case .object(let digest): (.object, digest)
                case .patch: (.patch, nil)
                }
            switch job.encoding.open(
                kind, content: content, part: part, limit: exp.limit, name: job.url.lastPathComponent)
            {
            case .success(let out): opened = out
            case .failure(let f): failure = f
            }
        }
        return Transfer(
            job: job, failure: failure, seconds: Date().timeIntervalSince(started), extraction: extracted,
            opened: opened)
    }

    /// Extracts a bundle into `area` on a thread of its own, reading the part file as the
    /// download writes it (see `GrowingPart`); the thread blocks while it waits for bytes, which
    /// no task of the cooperative pool may do.
    static func extract(
        _ area: StagingArea, following watch: some ArchiveByteSource & Sendable, size: Int64
    ) async -> Result<StagedBundle, StoreError> {
        await withCheckedContinuation { continuation in
            BlockingWork.start("larder.extract-stream") {
                continuation.resume(
                    returning: Result { () throws(StoreError) in try area.extract(streaming: watch, size: size) })
            }
        }
    }

    /// Files a finished transfer's outcome into its release: the part file, or the failure and
    /// the part to resume.
    func record(_ done: Transfer, into r: inout Release, contents: inout Contents) {
        let part = done.job.part
        switch done.job.blob {
        case .bundle(let area):
            if let e = done.failure {
                r.download.error = e
                contents.resumable.insert(part.lastComponent?.string ?? "")
            } else {
                r.download.bundle = done.opened ?? part
            }
            switch done.extraction {
            case .success(let staged) where done.failure == nil:
                r.download.staged = staged
            case .failure(let error) where done.failure == nil:
                // The complete file is read again, and its verdict is the one reported.
                scope.logger.info(
                    "extraction while downloading failed; reading the complete bundle",
                    metadata: ["id": "\(r.id)", "error": "\(error)"])
                area?.discard()
            default:
                area?.discard()
            }
            r.download.seconds += done.seconds
        case .object(let digest):
            if let e = done.failure {
                r.download.error = r.download.error ?? e
                contents.resumable.insert(part.lastComponent?.string ?? "")
            } else {
                contents[digest].object = done.opened ?? part
            }
            r.download.seconds = max(r.download.seconds, done.seconds)
        case .patch(let file):
            // A patch file that cannot be fetched is not the release's failure: its contents
            // fall back to their objects.
            if let e = done.failure {
                contents[file].patchFailure = e
                contents.resumable.insert(part.lastComponent?.string ?? "")
            } else {
                contents[file].patch = done.opened ?? part
            }
            r.download.seconds = max(r.download.seconds, done.seconds)
        }
    }

    /// Removes everything in `downloads/` but the partial downloads named in `keep` (and their
    /// saved validators).
    static func pruneDownloads(_ dir: FilePath, keep: Set<String>) {
        for entry in (try? SystemCalls.listDirectory(dir)) ?? [] {
            let n = entry.string
            let base = n.hasSuffix(".etag") ? String(n.dropLast(5)) : n
            if !keep.contains(base) { try? SystemCalls.unlink(dir.joined(entry.name)) }
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
