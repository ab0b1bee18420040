import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

/// A sealed bundle opened while it arrives: a thread of its own reads the sealed bytes from
/// `inner` (a download being written), opens each segment once it is complete — authenticated
/// before any of its bytes is handed on — writes the zip's bytes to `output` (which
/// `complete()` returns: the reader checks the complete zip there) and queues them for the
/// archive reader, at most `ahead` bytes in front of it. Opening runs beside extraction, not on
/// its thread.
package final class SealedByteSource: ArchiveByteSource, @unchecked Sendable {
    // @unchecked: the queue and the opening thread's outcome are guarded by `condition`; `current`
    // and `offset` are used by the one reading thread.
    let inner: any ArchiveByteSource
    let opener: SegmentedSeal.Opener
    /// The opened zip, written as it is handed on.
    package let output: FilePath
    /// How far opening may run ahead of the reader.
    static let ahead = 4 << 20
    private let condition = NSCondition()
    private var queue: [Data] = []
    private var head = 0
    private var queued = 0
    private var failure: (any Error)?
    private var cancelled = false
    /// `complete()` was called: what is opened after is written, not queued.
    private var draining = false
    private var running = false
    private var current = Data()
    private var offset = 0

    /// A source opening what `inner` delivers with `pipeline`'s bundle seal; nil when the
    /// pipeline's bundles are not sealed over their zip.
    package init?(_ inner: any ArchiveByteSource, pipeline: BytePipeline, output: FilePath) {
        guard let sealed = pipeline.bundle as? SealedCodec, sealed.inner is StoredCodec,
            let fd = try? SystemCalls.open(output, .writeOnly, options: [.create, .truncate])
        else { return nil }
        self.inner = inner
        opener = sealed.makeOpener()
        self.output = output
        running = true
        BlockingWork.start("larder.open-sealed") { [self] in self.open(into: fd) }
    }

    /// The opening thread: reads, opens, writes and queues until the end, a failure or `stop()`.
    private func open(into fd: FileDescriptor) {
        var outcome: (any Error)?
        let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 << 10, alignment: 16)
        defer { chunk.deallocate() }
        do {
            while true {
                let n = try inner.read(into: chunk)
                var segments: [Data] = []
                do {
                    if n == 0 {
                        try opener.finish { segments.append($0) }
                    } else {
                        try opener.feed(UnsafeRawBufferPointer(rebasing: chunk[0..<n])) { segments.append($0) }
                    }
                } catch {
                    throw ArchiveError.unreadable(detail: "the sealed bundle does not open: \(error)")
                }
                for segment in segments where !segment.isEmpty {
                    try segment.withUnsafeBytes { try SystemCalls.writeAll(fd, $0, path: output) }
                    guard enqueue(segment) else { break }
                }
                if n == 0 || stopped { break }
            }
        } catch {
            outcome = error
        }
        do { try SystemCalls.close(fd, path: output) } catch { outcome = outcome ?? error }
        condition.lock()
        failure = outcome
        running = false
        condition.broadcast()
        condition.unlock()
    }

    /// Whether `stop()` was called.
    private var stopped: Bool {
        condition.lock()
        defer { condition.unlock() }
        return cancelled
    }

    /// Queues an opened segment, waiting while the reader is `ahead` bytes behind; false once stopped.
    private func enqueue(_ segment: Data) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while queued >= Self.ahead, !cancelled, !draining { condition.wait() }
        if cancelled { return false }
        if draining { return true }
        queue.append(segment)
        queued += segment.count
        condition.broadcast()
        return true
    }

    package func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        guard let base = buffer.baseAddress else { return 0 }
        var done = 0
        while done < buffer.count {
            if offset == current.count {
                condition.lock()
                // Waits only when nothing at all has been handed back yet.
                while head == queue.count, running, done == 0 { condition.wait() }
                if head < queue.count {
                    current = queue[head]
                    head += 1
                    queued -= current.count
                    if head > 64 {
                        queue.removeFirst(head)
                        head = 0
                    }
                    condition.broadcast()
                    condition.unlock()
                    offset = 0
                } else {
                    let failed = failure
                    condition.unlock()
                    if let failed, done == 0 { throw failed }
                    return done
                }
            }
            let k = min(buffer.count - done, current.count - offset)
            current.withUnsafeBytes { raw in
                if let from = raw.baseAddress { (base + done).copyMemory(from: from + offset, byteCount: k) }
            }
            offset += k
            done += k
        }
        return done
    }

    package func complete() throws -> FilePath {
        _ = try inner.complete()
        // The reader may stop before the end (it reads the central directory from the file):
        // the rest is opened into the file only.
        condition.lock()
        draining = true
        queue = []
        head = 0
        queued = 0
        condition.broadcast()
        while running { condition.wait() }
        let failed = failure
        condition.unlock()
        if let failed { throw failed }
        return output
    }

    /// Stops the opening thread and waits for it (after a read that failed or stopped early:
    /// the transfer has returned, so the thread's reads do not wait long).
    package func stop() {
        condition.lock()
        cancelled = true
        condition.broadcast()
        while running { condition.wait() }
        condition.unlock()
    }
}
