import CArchive
import Dispatch
import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

/// When the reader of a complete archive on disk spreads the inflating over several threads.
///
/// Each thread — a worker — opens a libarchive handle of its own on the archive's descriptor and
/// inflates, hashes and hands to its own consumer a share of the entries; a worker skips the
/// entries of other shares by their headers (libarchive seeks over their data by the central
/// directory, it does not inflate it). Every rule is still checked, and a refused archive gives
/// the error a read on one thread gives (see `ZipReader.readConcurrently`). Planning costs one
/// pass over the headers and each worker one more, which pays on larger archives only.
package struct ReadParallelism: Sendable, Equatable {
    /// The most worker threads (1: one thread inflates).
    package var maxWorkers: Int
    /// The smallest archive, in bytes on disk, read by several workers.
    package var minimumArchiveBytes: Int64
    /// The most entries an archive read by several workers may hold. Every libarchive handle
    /// keeps its own copy of the central directory (a few hundred bytes per entry), and a shared
    /// read opens one per worker plus one for the pass over the headers: a 21,488-entry bundle
    /// read by two workers peaked at 65 MiB against 52 on one thread.
    package var maximumEntries: Int

    /// Creates a policy.
    package init(maxWorkers: Int, minimumArchiveBytes: Int64, maximumEntries: Int = .max) {
        self.maxWorkers = maxWorkers
        self.minimumArchiveBytes = minimumArchiveBytes
        self.maximumEntries = maximumEntries
    }

    /// One worker per processor, at most 4, for archives of 512 KiB or more (on 2 CPUs, a
    /// 400 KB bundle installs as fast either way; a 1.2 MB one 8 % faster, a 2.4 MB one 13 %)
    /// and of at most 4,096 entries (the memory bound above; beyond it the read is on one thread,
    /// which installs the 21,488-file tree in about 0.64× bsdtar's time all the same).
    package static let automatic = ReadParallelism(
        maxWorkers: min(max(ProcessInfo.processInfo.activeProcessorCount, 1), 4), minimumArchiveBytes: 512 << 10,
        maximumEntries: 4096)

    /// One thread inflates (`ZipReader.parallelHashing` may still hash on a second).
    package static let sequential = ReadParallelism(maxWorkers: 1, minimumArchiveBytes: .max)

    /// How many workers read an archive of `bytes` bytes holding `entries` entries (1: the read
    /// on one thread).
    func workers(forArchiveBytes bytes: Int64, entries: Int = 0) -> Int {
        bytes >= minimumArchiveBytes && entries <= maximumEntries ? max(maxWorkers, 1) : 1
    }
}

/// An `ArchiveConsumer` whose work can be shared among threads: the reader asks it for one
/// worker per thread, hands each worker a share of the entries — in archive order within the
/// share, while other workers handle the entries between them at the same time — and gives
/// every worker back through `absorb`, whether the read succeeded or not.
///
/// Each worker sees `ArchiveConsumer`'s calls in its usual order for each of its files. Workers
/// run at once, so what they share (a destination directory) must bear that: two workers may
/// create the same parent directory at the same moment, for instance. Names are validated and
/// claimed before any worker starts, so no two workers are ever given the same path.
package protocol ConcurrentArchiveConsumer: ArchiveConsumer, Sendable {
    /// A consumer for one more thread, handing entries to where this one does.
    func makeWorker() -> Self
    /// Takes back a worker made by `makeWorker()` once its thread is done with it; after a
    /// failed read it may have stopped in the middle of a file.
    mutating func absorb(_ worker: Self)
}

extension ValidatingConsumer: ConcurrentArchiveConsumer {
    /// Another consumer that keeps nothing.
    package func makeWorker() -> ValidatingConsumer { self }
    /// Nothing to take back.
    package mutating func absorb(_ worker: ValidatingConsumer) {}
}

extension ZipReader {
    /// Reads the archive open as `fd` (its structure checked; `sizes`: its entries' uncompressed
    /// sizes in local-header order) with `workers` threads, handing entries to workers of
    /// `consumer`; nil when libarchive would not read it by its central directory (it then reads
    /// it as a stream: a long archive comment hides the end record from its search) — nothing
    /// has been handed to `consumer` then, and the caller reads the archive on one thread.
    ///
    /// The calling thread makes one pass over the headers that applies, in archive order, every
    /// rule that needs no data — the entry count, names, types, claims, the file count, declared
    /// sizes against the per-file and total limits — and publishes each entry it admits with its
    /// declared size and the total of the files before it. The size rules during the read use
    /// that total exactly as the read on one thread uses its running total: a file that holds
    /// more or less than it declares is refused, so up to the first refused entry the two totals
    /// are the same. The pass stops at the first header it refuses.
    ///
    /// Meanwhile each worker reads every header with a handle of its own and the data of its own
    /// entries only — shared out before the pass by the central directory's sizes, longest first
    /// to the least loaded worker — each once the pass has admitted it. A worker stops at its
    /// first failure, and at any entry after an entry that failed. The read fails with the error
    /// of the earliest entry that fails, of its data in a worker or of its header in the pass:
    /// the entry and the error at which the read on one thread stops.
    func readConcurrently<C: ConcurrentArchiveConsumer>(
        _ fd: FileDescriptor, _ archiveSize: Int64, _ path: FilePath, workers: Int, sizes: [UInt64],
        into consumer: inout C
    ) throws(ArchiveError) -> ArchiveListing? {
        let source = ArchiveSource(fd: fd, path: path, size: archiveSize)
        let opened = withUTF8Locale { openByCentralDirectory(source) }
        guard let a = opened else {
            if let failure = source.failure { throw .io(failure) }
            return nil
        }
        defer { archive_read_free(a) }
        let owners = Self.owners(sizes: sizes, workers: workers)
        let shared = SharedRead<C>(workers: workers)
        for w in 0..<workers {
            let worker = consumer.makeWorker()
            BlockingWork.start("larder.inflate") { [self] in
                var worker = worker
                let digests = work(
                    as: w, owners: owners, shared: shared, fd: fd, path: path, size: archiveSize, worker: &worker)
                shared.workerEnded(w, worker: worker, digests: digests)
            }
        }
        var state = ReadState(limits: limits, archiveSize: archiveSize)
        var surveyed = withUTF8Locale { state.survey(a, publishingTo: shared) }
        if let failure = source.failure {
            // A failed read ends the pass, refused or not (libarchive may take it for the end).
            surveyed.refusal = EntryFailure(index: surveyed.refusal?.index ?? .max, error: .io(failure))
        }
        shared.surveyEnded()
        let outcomes = shared.waitForWorkers()
        var digests = [SHA256Digest?](repeating: nil, count: state.files.count)
        for outcome in outcomes {
            guard let outcome else { continue }
            consumer.absorb(outcome.worker)
            for (ordinal, digest) in outcome.digests where ordinal < digests.count { digests[ordinal] = digest }
        }
        if let first = shared.firstFailure, surveyed.refusal.map({ first.index < $0.index }) ?? true {
            throw first.error
        }
        if let refusal = surveyed.refusal { throw refusal.error }
        if state.files.isEmpty { throw .empty }
        var files = state.files
        for i in files.indices {
            guard let digest = digests[i] else {
                throw .unreadable(detail: "internal error: \(quoted(files[i].path.string)) was not read")
            }
            files[i].sha256 = digest
        }
        return ArchiveListing(files: files.sorted { $0.path < $1.path }, directories: state.directories)
    }

    /// A libarchive handle that reads `source` by the zip central directory (the reader libarchive
    /// chooses for a seekable zip whose end record it finds), with this reader's options; nil
    /// when libarchive would not read it that way.
    private func openByCentralDirectory(_ source: ArchiveSource) -> OpaquePointer? {
        guard let a = archive_read_new() else { return nil }
        archive_read_support_format_zip_seekable(a)
        guard setOptions(a) == nil,
            archive_read_set_read_callback(a, sourceRead) == LA.ok,
            archive_read_set_skip_callback(a, sourceSkip) == LA.ok,
            archive_read_set_seek_callback(a, sourceSeek) == LA.ok,
            archive_read_set_callback_data(a, Unmanaged.passUnretained(source).toOpaque()) == LA.ok,
            archive_read_open1(a) == LA.ok
        else {
            archive_read_free(a)
            return nil
        }
        return a
    }

    /// The worker of each entry, by its index: entries shared out by cost (the size the central
    /// directory states, plus a fixed cost per entry for its header, its creation and its
    /// hash), longest first, each to the least loaded worker.
    static func owners(sizes: [UInt64], workers: Int) -> [Int] {
        let perEntry: UInt64 = 16 << 10
        let costs = sizes.map { perEntry + min($0, 1 << 40) }
        let order = costs.indices.sorted { costs[$0] != costs[$1] ? costs[$0] > costs[$1] : $0 < $1 }
        var load = [UInt64](repeating: 0, count: workers)
        var owners = [Int](repeating: 0, count: costs.count)
        for index in order {
            var least = 0
            for w in 1..<workers where load[w] < load[least] { least = w }
            owners[index] = least
            load[least] += costs[index]
        }
        return owners
    }

    /// Worker `me`: its own handle on the archive, every header read in order, the data of its
    /// own entries only (by `owners`; worker 0 takes any entry past their end), each once the
    /// pass over the headers has admitted it. Returns the digest of each file it read, by the
    /// file's position among the files; reports its first failure to `shared`.
    private func work<C: ConcurrentArchiveConsumer>(
        as me: Int, owners: [Int], shared: SharedRead<C>, fd: FileDescriptor, path: FilePath, size: Int64,
        worker: inout C
    ) -> [(ordinal: Int, digest: SHA256Digest)] {
        withUTF8Locale {
            var sink = DirectSink(consumer: worker)
            defer { worker = sink.consumer }
            var digests: [(ordinal: Int, digest: SHA256Digest)] = []
            var mine = owners.indices.filter { owners[$0] == me }
            if me == 0 { mine.append(owners.count) }
            guard !mine.isEmpty else { return digests }
            let source = ArchiveSource(fd: fd, path: path, size: size)
            guard let a = openByCentralDirectory(source) else {
                let error =
                    source.failure.map { ArchiveError.io($0) } ?? .unreadable(detail: "it could not be opened again")
                shared.fail(EntryFailure(index: mine[0], error: error))
                return digests
            }
            defer { archive_read_free(a) }
            var next = 0
            var position = 0
            var entryPointer: OpaquePointer?
            while position < mine.count {
                // Worker 0 goes on past the central directory's count until the end.
                let index = mine[position]
                if position == mine.count - 1, me == 0, index >= owners.count { mine.append(index + 1) }
                position += 1
                var at = index
                do throws(ArchiveError) {
                    while next <= index {
                        at = next
                        let r = archive_read_next_header(a, &entryPointer)
                        if r == LA.eof {
                            // The end: where the pass ends too (no entry of this worker's is
                            // left), unless the archive changed.
                            if case .stop = shared.admitted(next) { return digests }
                            throw ArchiveError.libarchive(entry: nil, message: Self.changed)
                        }
                        guard r == LA.ok, entryPointer != nil else {
                            let rawName = entryPointer.flatMap { archive_entry_pathname($0) }.map {
                                String(cString: $0)
                            }
                            throw .libarchive(entry: rawName, message: LA.message(a))
                        }
                        next += 1
                    }
                    at = index
                    let planned: ReadPlan.Entry
                    switch shared.admitted(index) {
                    case .stop: return digests
                    case .skip: continue
                    case .read(let entry): planned = entry
                    }
                    guard let entry = entryPointer else { throw .libarchive(entry: nil, message: Self.changed) }
                    let type = archive_entry_filetype(entry)
                    if let file = planned.file {
                        guard type == LA.regular, archive_entry_size_is_set(entry) != 0,
                            archive_entry_size(entry) == file.size
                        else { throw .libarchive(entry: planned.path.string, message: Self.changed) }
                        _ = try ReadState.copyData(
                            a, planned.path, declared: file.size, totalBefore: file.totalBefore, limits: limits,
                            archiveSize: size, &sink)
                        if let digest = sink.digests.popLast() { digests.append((file.ordinal, digest)) }
                    } else {
                        guard type == LA.directory else {
                            throw .libarchive(entry: planned.path.string, message: Self.changed)
                        }
                        try sink.directory(planned.path)
                    }
                } catch {
                    shared.fail(EntryFailure(index: at, error: source.failure.map { ArchiveError.io($0) } ?? error))
                    return digests
                }
            }
            return digests
        }
    }

    /// What a worker reports when the archive no longer matches the pass over its headers (it
    /// changed on disk meanwhile).
    private static let changed = "the archive changed while it was read"
}

/// An entry admitted by the pass over the headers of a read shared among workers.
struct ReadPlan {
    /// One entry to hand to a consumer (a directory or a file).
    struct Entry: Sendable {
        /// Its name, validated and claimed.
        let path: RelativePath
        /// For a file: its declared size, the total size of the files before it, and its
        /// position among the files; nil for a directory.
        let file: (size: Int64, totalBefore: Int64, ordinal: Int)?
    }
    /// The first header refused, if one was: its entry's index and the error.
    var refusal: EntryFailure?
}

/// A libarchive client over an archive's descriptor that reads with `pread` at an offset of its
/// own: several handles read one descriptor at once — the very file whose structure was checked,
/// not whatever its path names by then.
final class ArchiveSource {
    let fd: FileDescriptor
    let path: FilePath
    /// The archive's size when it was opened (`SEEK_END` counts from it).
    let size: Int64
    var offset: Int64 = 0
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 << 10, alignment: 16)
    /// The read that failed, if one did (libarchive keeps only its own message).
    var failure: FileSystemError?

    init(fd: FileDescriptor, path: FilePath, size: Int64) {
        self.fd = fd
        self.path = path
        self.size = size
    }
    deinit { buffer.deallocate() }
}

/// libarchive's read callback over an `ArchiveSource`: the next block, 0 at the end.
private let sourceRead:
    @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, UnsafeMutablePointer<UnsafeRawPointer?>?) -> la_ssize_t =
        { _, client, out in
            guard let client, let out else { return -1 }
            let source = Unmanaged<ArchiveSource>.fromOpaque(client).takeUnretainedValue()
            let want = Int(min(Int64(source.buffer.count), max(source.size - source.offset, 0)))
            if want == 0 { return 0 }
            do throws(FileSystemError) {
                let n = try SystemCalls.pread(
                    source.fd, into: UnsafeMutableRawBufferPointer(rebasing: source.buffer[0..<want]),
                    at: source.offset, path: source.path)
                source.offset += Int64(n)
                out.pointee = UnsafeRawPointer(source.buffer.baseAddress)
                return la_ssize_t(n)
            } catch {
                source.failure = error
                return -1
            }
        }

/// libarchive's skip callback over an `ArchiveSource`: moves the offset, as `lseek` would.
private let sourceSkip: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, la_int64_t) -> la_int64_t = {
    _, client, request in
    guard let client, request > 0 else { return 0 }
    let source = Unmanaged<ArchiveSource>.fromOpaque(client).takeUnretainedValue()
    let (target, overflow) = source.offset.addingReportingOverflow(request)
    guard !overflow else { return 0 }
    source.offset = target
    return request
}

/// libarchive's seek callback over an `ArchiveSource`, as `lseek` on the descriptor would.
private let sourceSeek: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, la_int64_t, Int32) -> la_int64_t = {
    _, client, offset, whence in
    guard let client else { return la_int64_t(ARCHIVE_FATAL) }
    let source = Unmanaged<ArchiveSource>.fromOpaque(client).takeUnretainedValue()
    let base: Int64
    switch whence {
    case SEEK_SET: base = 0
    case SEEK_CUR: base = source.offset
    case SEEK_END: base = source.size
    default: return la_int64_t(ARCHIVE_FATAL)
    }
    let (target, overflow) = base.addingReportingOverflow(offset)
    guard !overflow, target >= 0 else { return la_int64_t(ARCHIVE_FATAL) }
    source.offset = target
    return target
}
