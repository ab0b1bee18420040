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
    // @unchecked: `inner` and `opener` (not Sendable) are the opening thread's; `current`, `offset` the reader's; the rest in `shared`.
    let inner: any ArchiveByteSource
    let opener: SegmentedSeal.Opener
    /// The opened zip, written as it is handed on.
    package let output: FilePath
    /// How far opening may run ahead of the reader.
    static let ahead = 4 << 20
    /// What the opening thread and the reader hand each other.
    private let shared = Waitable(Shared())
    private struct Shared {
        var queue: [Data] = []
        var head = 0
        var queued = 0
        var failure: (any Error)?
        var cancelled = false
        /// `complete()` was called: what is opened after is written, not queued.
        var draining = false
        var running = true
    }
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
        shared.update { [outcome] s in
            s.failure = outcome
            s.running = false
        }
    }

    /// Whether `stop()` was called.
    private var stopped: Bool { shared.withLock { $0.cancelled } }

    /// Queues an opened segment, waiting while the reader is `ahead` bytes behind; false once stopped.
    private func enqueue(_ segment: Data) -> Bool {
        shared.wait { s -> Bool? in
            guard s.queued < Self.ahead || s.cancelled || s.draining else { return nil }
            if s.cancelled { return false }
            if s.draining { return true }
            s.queue.append(segment)
            s.queued += segment.count
            return true
        }
    }

    package func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        guard let base = buffer.baseAddress else { return 0 }
        var done = 0
        while done < buffer.count {
            if offset == current.count {
                // Waits only when nothing at all has been handed back yet.
                let waits = done == 0
                let next = shared.wait { s -> Result<Data?, any Error>? in
                    if s.head < s.queue.count {
                        let segment = s.queue[s.head]
                        s.head += 1
                        s.queued -= segment.count
                        if s.head > 64 {
                            s.queue.removeFirst(s.head)
                            s.head = 0
                        }
                        return .success(segment)
                    }
                    if s.running && waits { return nil }
                    if let failed = s.failure, waits { return .failure(failed) }
                    return .success(nil)
                }
                guard let segment = try next.get() else { return done }
                current = segment
                offset = 0
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
        shared.update { s in
            s.draining = true
            s.queue = []
            s.head = 0
            s.queued = 0
        }
        let failed = shared.wait { s -> (any Error)?? in s.running ? nil : .some(s.failure) }
        if let failed { throw failed }
        return output
    }

    /// Stops the opening thread and waits for it (after a read that failed or stopped early:
    /// the transfer has returned, so the thread's reads do not wait long).
    package func stop() {
        shared.update { $0.cancelled = true }
        shared.wait { $0.running ? nil : true }
    }
}
