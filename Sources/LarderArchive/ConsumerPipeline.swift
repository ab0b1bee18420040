import Foundation
import LarderCore

/// Runs an archive consumer and the SHA-256 of every file on a second thread, while the
/// reader's thread only inflates. Entries and chunks are copied into batches of at most
/// `batchBytes`; at most `depth` batches wait, so memory stays bounded (`depth × batchBytes`)
/// however large the archive. The worker calls the consumer in archive order; its first error
/// stops the pipeline and is reported by `check()` / `finish()`.
final class ConsumerPipeline<C: ArchiveConsumer>: @unchecked Sendable {
    // @unchecked: every stored property but `filling` (the reader's thread's alone) is accessed
    // only with `condition` locked. The worker keeps the consumer, the hasher and the digests in
    // locals while it runs and hands them back under the lock as it ends (the `done` handshake):
    // no field of this generic class is written outside the lock, which ThreadSanitizer, whose
    // debug-build view of a generic class's fields is the object as a whole, needs to see.
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
    private let condition = NSCondition()
    private var queue: [Batch] = []
    private var spare: [[UInt8]] = []
    private var closed = false
    private var done = false
    private var failure: (entry: String, error: any Error)?
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
        condition.lock()
        while queue.count >= depth && failure == nil { condition.wait() }
        if let f = failure {
            condition.unlock()
            throw .sink(entry: f.entry, detail: "\(f.error)")
        }
        queue.append(filling)
        var next = Batch()
        next.bytes = spare.popLast() ?? []
        next.bytes.removeAll(keepingCapacity: true)
        next.bytes.reserveCapacity(batchBytes)
        filling = next
        condition.broadcast()
        condition.unlock()
    }

    private func work() {
        var current = ""
        condition.lock()
        var consumer = self.consumer
        condition.unlock()
        var hasher = SHA256Stream()
        var digests: [SHA256Digest] = []
        while true {
            condition.lock()
            while queue.isEmpty && !closed { condition.wait() }
            if queue.isEmpty || failure != nil {
                self.consumer = consumer
                self.digests = digests
                done = true
                condition.broadcast()
                condition.unlock()
                return
            }
            let batch = queue.removeFirst()
            condition.broadcast()
            condition.unlock()
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
                condition.lock()
                failure = (current, error)
                queue.removeAll()
                self.consumer = consumer
                self.digests = digests
                done = true
                condition.broadcast()
                condition.unlock()
                return
            }
            condition.lock()
            if spare.count < depth { spare.append(batch.bytes) }
            condition.unlock()
        }
    }

    private func join() {
        condition.lock()
        closed = true
        condition.broadcast()
        while !done { condition.wait() }
        condition.unlock()
    }

    /// Waits for the worker, then returns the consumer (as the worker left it) and one digest
    /// per file in archive order; throws the worker's first error.
    func finish() throws(ArchiveError) -> (consumer: C, digests: [SHA256Digest]) {
        try flush()
        join()
        condition.lock()
        defer { condition.unlock() }
        if let f = failure { throw .sink(entry: f.entry, detail: "\(f.error)") }
        return (consumer, digests)
    }

    /// Stops the worker after a failed read and returns the consumer.
    func cancel() -> C {
        condition.lock()
        queue.removeAll()
        condition.unlock()
        join()
        condition.lock()
        defer { condition.unlock() }
        return consumer
    }
}
