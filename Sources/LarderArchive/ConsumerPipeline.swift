import Foundation
import LarderCore

/// Runs an archive consumer and the SHA-256 of every file on a second thread, while the
/// reader's thread only inflates. Entries and chunks are copied into batches of at most
/// `batchBytes`; at most `depth` batches wait, so memory stays bounded (`depth × batchBytes`)
/// however large the archive. The worker calls the consumer in archive order; its first error
/// stops the pipeline and is reported by `check()` / `finish()`.
final class ConsumerPipeline<C: ArchiveConsumer>: @unchecked Sendable {
    // @unchecked: the consumer (not Sendable) moves to the worker and back: `filling` is the reader's alone, the rest in `shared`.
    // The worker keeps the consumer, the hasher and the digests in locals while it runs and
    // writes them back with `shared` locked as it ends (the `done` handshake): no field of this
    // generic class is written outside the lock, which ThreadSanitizer, whose debug-build view of
    // a generic class's fields is the object as a whole, needs to see.
    private enum Op {
        case directory(RelativePath)
        case begin(RelativePath, Int64?)
        case chunk(start: Int, count: Int)
        case end(RelativePath, Int64)
    }
    private struct Batch {
        var bytes: [UInt8] = []
        var ops: [Op] = []
    }

    private let batchBytes: Int
    private let depth: Int
    /// What the reader's thread and the worker hand each other.
    private let shared = Waitable(Shared())
    private struct Shared {
        var queue: [Batch] = []
        var spare: [[UInt8]] = []
        var closed = false
        var done = false
        var failure: (entry: String, error: any Error)?
    }
    private var filling = Batch()
    private var consumer: C
    private var digests: [SHA256Digest] = []

    init(consumer: C, batchBytes: Int = 1 << 20, depth: Int = 4) {
        self.consumer = consumer
        self.batchBytes = batchBytes
        self.depth = depth
        filling.bytes.reserveCapacity(batchBytes)
        BlockingWork.start("larder.extract") { [self] in self.work() }
    }

    /// A directory entry.
    func directory(_ path: RelativePath) throws(ArchiveError) {
        filling.ops.append(.directory(path))
        try flushIfFull()
    }

    /// A file starts.
    func beginFile(_ path: RelativePath, declaredSize: Int64?) throws(ArchiveError) {
        filling.ops.append(.begin(path, declaredSize))
        try flushIfFull()
    }

    /// The next chunk of the current file.
    func append(_ chunk: UnsafeRawBufferPointer) throws(ArchiveError) {
        var offset = 0
        while offset < chunk.count {
            let room = batchBytes - filling.bytes.count
            if room == 0 {
                try flush()
                continue
            }
            let n = min(room, chunk.count - offset)
            let start = filling.bytes.count
            filling.bytes.append(contentsOf: UnsafeRawBufferPointer(rebasing: chunk[offset..<offset + n]))
            filling.ops.append(.chunk(start: start, count: n))
            offset += n
        }
    }

    /// The current file ends.
    func endFile(_ path: RelativePath, size: Int64) throws(ArchiveError) {
        filling.ops.append(.end(path, size))
        try flushIfFull()
    }

    private func flushIfFull() throws(ArchiveError) {
        if filling.ops.count >= 8192 { try flush() }
    }

    private func flush() throws(ArchiveError) {
        let depth = self.depth
        let ready = shared.wait { s -> Result<[UInt8], ArchiveError>? in
            if let f = s.failure { return .failure(.sink(entry: f.entry, detail: "\(f.error)")) }
            guard s.queue.count < depth else { return nil }
            return .success(s.spare.popLast() ?? [])
        }
        var next = Batch()
        next.bytes = try ready.get()
        next.bytes.removeAll(keepingCapacity: true)
        next.bytes.reserveCapacity(batchBytes)
        let full = filling
        filling = next
        shared.update { $0.queue.append(full) }
    }

    private func work() {
        var current = ""
        var consumer = self.consumer
        var hasher = SHA256Stream()
        var digests: [SHA256Digest] = []
        /// Hands the consumer and the digests back and tells `join()` the worker is done.
        func end(_ failure: (entry: String, error: any Error)?) {
            shared.update { s in
                if let failure {
                    s.failure = failure
                    s.queue.removeAll()
                }
                self.consumer = consumer
                self.digests = digests
                s.done = true
            }
        }
        while true {
            let next = shared.update { s -> Batch?? in
                if s.queue.isEmpty && !s.closed { return nil }
                if s.queue.isEmpty || s.failure != nil { return .some(nil) }
                return .some(s.queue.removeFirst())
            }
            guard let next else {
                shared.wait { s in s.queue.isEmpty && !s.closed ? nil : true }
                continue
            }
            guard let batch = next else { return end(nil) }
            do {
                try batch.bytes.withUnsafeBytes { raw in
                    for op in batch.ops {
                        switch op {
                        case .directory(let p):
                            current = p.string
                            try consumer.directory(p)
                        case .begin(let p, let declared):
                            current = p.string
                            try consumer.beginFile(p, declaredSize: declared)
                        case .chunk(let start, let count):
                            let chunk = UnsafeRawBufferPointer(rebasing: raw[start..<start + count])
                            hasher.update(chunk)
                            try consumer.write(chunk)
                        case .end(let p, let size):
                            digests.append(hasher.finish())
                            hasher = SHA256Stream()
                            try consumer.endFile(p, size: size)
                        }
                    }
                }
            } catch {
                return end((current, error))
            }
            let depth = self.depth
            shared.withLock { s in
                if s.spare.count < depth { s.spare.append(batch.bytes) }
            }
        }
    }

    private func join() {
        shared.update { $0.closed = true }
        shared.wait { $0.done ? true : nil }
    }

    /// Waits for the worker, then returns the consumer (as the worker left it) and one digest
    /// per file in archive order; throws the worker's first error.
    func finish() throws(ArchiveError) -> (consumer: C, digests: [SHA256Digest]) {
        try flush()
        join()
        if let f = shared.withLock({ $0.failure }) { throw .sink(entry: f.entry, detail: "\(f.error)") }
        return (consumer, digests)
    }

    /// Stops the worker after a failed read and returns the consumer.
    func cancel() -> C {
        shared.withLock { $0.queue.removeAll() }
        join()
        return consumer
    }
}
