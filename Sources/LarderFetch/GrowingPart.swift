import Foundation
import LarderFileSystem
import SystemPackage

/// A download's `.part` file seen from both ends: the transport reports what it has written
/// (through `PartFile`), and an extraction reads the bytes as they land, waiting for more — so a
/// bundle is extracted while it downloads, from the page cache, with no copy held in memory.
///
/// The part file stays the one record of the transfer (it is what Range resume continues). A
/// reader can only move forward: when the transport has to start the file over after bytes were
/// read (the server ignored the Range, the content failed its hash), the reader is told the
/// stream is abandoned, and the caller falls back to reading the complete file.
package final class GrowingPart: @unchecked Sendable {
    // @unchecked: `available`, `consumed` and `phase` are guarded by `condition`; `fd` and
    // `offset` are used only by the one reading thread.
    enum Phase: Equatable {
        case running
        case complete
        case failed(String)
        case restarted
    }

    /// Why the stream ended without the complete archive.
    package struct Abandoned: Error, CustomStringConvertible {
        /// Why: the transfer's failure, a restart, or a read error naming the path.
        package let description: String
    }

    /// The part file followed.
    package let path: FilePath
    private let condition = NSCondition()
    private var available: Int64 = 0
    private var consumed: Int64 = 0
    private var phase = Phase.running
    private var fd: FileDescriptor?
    private var offset: Int64 = 0

    /// Follows the part file at `path` (which the transport creates).
    package init(_ path: FilePath) {
        self.path = path
    }

    deinit {
        if let fd { try? SystemCalls.close(fd, path: path) }
    }

    // MARK: the transport's side

    /// The file holds `bytes` valid bytes from its start.
    package func advance(to bytes: Int64) {
        update { if $0.phase == .running { $0.available = max($0.available, bytes) } }
    }

    /// The file was cut back to empty; a reader that has already read from it cannot go on.
    package func restart() {
        update {
            if $0.consumed > 0, $0.phase == .running { $0.phase = .restarted }
            if $0.phase == .running { $0.available = 0 }
        }
    }

    /// The file is complete: its size and SHA-256 are the expected ones.
    package func completed() {
        update { if $0.phase == .running { $0.phase = .complete } }
    }

    /// The transfer gave up.
    package func fail(_ reason: String) {
        update { if $0.phase == .running || $0.phase == .complete { $0.phase = .failed(reason) } }
    }

    /// The transport returned successfully: a reader still waiting is let go (a transport that
    /// does not report its bytes leaves the complete file to be read afterwards).
    package func transportReturned() {
        update { if $0.phase == .running { $0.phase = .failed("the transport did not report the bytes it wrote") } }
    }

    private func update(_ body: (GrowingPart) -> Void) {
        condition.lock()
        body(self)
        condition.broadcast()
        condition.unlock()
    }

    // MARK: the reader's side

    /// Reads the next bytes, waiting for them: 0 at the end, `Abandoned` if the transfer failed or restarted.
    package func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        guard let base = buffer.baseAddress else { return 0 }
        condition.lock()
        while available <= offset, phase == .running { condition.wait() }
        let n = Int(min(Int64(buffer.count), available - offset))
        // Claimed before reading, so that a restart meanwhile is seen as one.
        if n > 0 { consumed = offset + Int64(n) }
        let state = phase
        condition.unlock()
        try Self.check(state)
        if n <= 0 { return 0 }
        let file: FileDescriptor
        if let fd {
            file = fd
        } else {
            do { file = try SystemCalls.open(path, .readOnly, options: [.noFollow]) } catch {
                throw Abandoned(description: error.description)
            }
            fd = file
        }
        var done = 0
        while done < n {
            let r: Int
            do {
                r = try SystemCalls.pread(
                    file, into: UnsafeMutableRawBufferPointer(start: base + done, count: n - done),
                    at: offset + Int64(done), path: path)
            } catch {
                throw Abandoned(description: error.description)
            }
            guard r > 0 else { throw Abandoned(description: "\(path): the bytes the download reported are not there") }
            done += r
        }
        condition.lock()
        let after = phase
        condition.unlock()
        // Bytes read across a restart may mix two contents.
        if after == .restarted { try Self.check(after) }
        offset += Int64(n)
        return n
    }

    private static func check(_ phase: Phase) throws {
        switch phase {
        case .failed(let reason): throw Abandoned(description: reason)
        case .restarted: throw Abandoned(description: "the download started over")
        case .running, .complete: return
        }
    }

    /// Waits for the transfer to end: the path when the file is complete, else throws `Abandoned`.
    package func complete() throws -> FilePath {
        condition.lock()
        while phase == .running { condition.wait() }
        let state = phase
        condition.unlock()
        try Self.check(state)
        return path
    }
}
