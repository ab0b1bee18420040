import CArchive
import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

/// An entry's failure, by its index among the archive's entries.
struct EntryFailure: Sendable {
    /// The entry's index among the archive's entries.
    let index: Int
    /// What went wrong.
    let error: ArchiveError
}

/// What the pass over the headers and the workers of a shared read tell each other: the entries
/// admitted so far, the earliest failure, and each worker's outcome.
final class SharedRead<C: ConcurrentArchiveConsumer>: Sendable {
    /// What a worker is to do with an entry.
    enum Decision {
        /// Hand it to the consumer as planned.
        case read(ReadPlan.Entry)
        /// Nothing to hand (the archive root).
        case skip
        /// Stop: the pass ended before the entry, or an earlier entry failed.
        case stop
    }

    private struct Shared {
        /// Every entry the pass has decided, by index (nil: nothing to hand).
        var admittedEntries: [ReadPlan.Entry?] = []
        var surveyDone = false
        var failure: EntryFailure?
        var outcomes: [(worker: C, digests: [(ordinal: Int, digest: SHA256Digest)])?]
        var running: Int
    }

    private let shared: Waitable<Shared>

    init(workers: Int) {
        shared = Waitable(Shared(outcomes: Array(repeating: nil, count: workers), running: workers))
    }

    /// The pass admitted these entries, in index order after those before.
    func admit(_ entries: [ReadPlan.Entry?]) {
        shared.update { $0.admittedEntries.append(contentsOf: entries) }
    }

    /// The pass is over: no more entries will be admitted.
    func surveyEnded() {
        shared.update { $0.surveyDone = true }
    }

    /// What to do with the entry at `index`, waiting until the pass has decided it.
    func admitted(_ index: Int) -> Decision {
        shared.wait { s -> Decision? in
            if let failure = s.failure, failure.index < index { return .stop }
            if index < s.admittedEntries.count { return s.admittedEntries[index].map { .read($0) } ?? .skip }
            if s.surveyDone { return .stop }
            return nil
        }
    }

    /// Whether an entry before `index` has failed (the pass need not go on).
    func failed(before index: Int) -> Bool {
        shared.withLock { s in s.failure.map { $0.index < index } ?? false }
    }

    /// Records a failure, kept unless an earlier entry's is.
    func fail(_ new: EntryFailure) {
        shared.update { s in
            if s.failure.map({ new.index < $0.index }) ?? true { s.failure = new }
        }
    }

    /// The earliest failure recorded.
    var firstFailure: EntryFailure? { shared.withLock { $0.failure } }

    /// Worker `w` is done: its consumer and digests.
    func workerEnded(_ w: Int, worker: C, digests: [(ordinal: Int, digest: SHA256Digest)]) {
        shared.update { s in
            s.outcomes[w] = (worker, digests)
            s.running -= 1
        }
    }

    /// Waits for every worker; their outcomes.
    func waitForWorkers() -> [(worker: C, digests: [(ordinal: Int, digest: SHA256Digest)])?] {
        shared.wait { s in s.running > 0 ? nil : s.outcomes }
    }
}

extension ReadState {
    /// The pass over the headers of a shared read (see `ZipReader.readConcurrently`): every rule
    /// that needs no data, in archive order, each admitted entry published to `shared` (in
    /// batches), up to the first header refused, which is returned.
    ///
    /// A file whose declared size is negative is published and ends the pass: its data cannot
    /// match it, so its read fails and no later entry matters. A file without a declared size
    /// ends the pass refused — libarchive's reader of the central directory always states one,
    /// and the files after it could not be given the total before them.
    mutating func survey<C>(_ a: OpaquePointer, publishingTo shared: SharedRead<C>) -> ReadPlan {
        var plan = ReadPlan()
        var batch: [ReadPlan.Entry?] = []
        batch.reserveCapacity(64)
        var index = -1
        do throws(ArchiveError) {
            reading: while true {
                index += 1
                if batch.count >= 64 {
                    shared.admit(batch)
                    batch.removeAll(keepingCapacity: true)
                    if shared.failed(before: index) { break reading }
                }
                switch try admitNext(a) {
                case .end: break reading
                case .skipped: batch.append(nil)
                case .directory(let path):
                    batch.append(ReadPlan.Entry(path: path, file: nil))
                    directories.append(path)
                case .file(let path, let entry, _):
                    guard archive_entry_size_is_set(entry) != 0 else {
                        throw .unreadable(detail: "internal error: no size stated for \(quoted(path.string))")
                    }
                    let size = archive_entry_size(entry)
                    try checkBeforeData(path, declared: size)
                    batch.append(ReadPlan.Entry(path: path, file: (size, total, files.count)))
                    files.append(FileEntry(path: path, size: size, sha256: Self.placeholder))
                    if size < 0 { break reading }
                    total += size
                }
            }
        } catch {
            plan.refusal = EntryFailure(index: index, error: error)
        }
        shared.admit(batch)
        return plan
    }
}
