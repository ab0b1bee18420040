import Foundation
import LarderCore
import LarderFileSystem
import Synchronization
import SystemPackage

/// A download's `.part` file seen from both ends: the transport reports what it has written
/// (through `PartFile`), and an extraction reads the bytes as they land, waiting for more — so a
/// bundle is extracted while it downloads, from the page cache, with no copy held in memory.
///
/// The part file stays the one record of the transfer (it is what Range resume continues). A
/// reader can only move forward: when the transport has to start the file over after bytes were
/// read (the server ignored the Range, the content failed its hash), the reader is told the
/// stream is abandoned, and the caller falls back to reading the complete file.
package final class GrowingPart: Sendable {
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
    /// What the transport has reported, and how far the reader has claimed.
    private let progress = Waitable(Progress())
    /// The reader's file and position (one reading thread: the lock is uncontended).
    private let reader = Mutex<(fd: FileDescriptor?, offset: Int64)>((nil, 0))

    private struct Progress {
        var available: Int64 = 0
        var consumed: Int64 = 0
        var phase = Phase.running
    }

    /// Follows the part file at `path` (which the transport creates).
    package init(_ path: FilePath) {
        self.path = path
    }

    deinit {
        if let fd = reader.withLock({ $0.fd }) { try? SystemCalls.close(fd, path: path) }
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

    private func update(_ body: (inout Progress) -> Void) {
        progress.update(body)
    }

    // MARK: the reader's side

    /// Reads the next bytes, waiting for them: 0 at the end, `Abandoned` if the transfer failed or restarted.
    package func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        guard let base = buffer.baseAddress else { return 0 }
        return try reader.withLock { reader throws(Abandoned) -> Int in
            let offset = reader.offset
            let (n, state) = progress.wait { p -> (Int, Phase)? in
                guard p.available > offset || p.phase != .running else { return nil }
                let n = Int(min(Int64(buffer.count), p.available - offset))
                // Claimed before reading, so that a restart meanwhile is seen as one.
                if n > 0 { p.consumed = offset + Int64(n) }
                return (n, p.phase)
            }
            try Self.check(state)
            if n <= 0 { return 0 }
            let file: FileDescriptor
            if let fd = reader.fd {
                file = fd
            } else {
                do throws(FileSystemError) {
                    file = try SystemCalls.open(path, .readOnly, options: [.noFollow])
                } catch {
                    throw Abandoned(description: error.description)
                }
                reader.fd = file
            }
            var done = 0
            while done < n {
                let r: Int
                do throws(FileSystemError) {
                    r = try SystemCalls.pread(
                        file, into: UnsafeMutableRawBufferPointer(start: base + done, count: n - done),
                        at: offset + Int64(done), path: path)
                } catch {
                    throw Abandoned(description: error.description)
                }
                guard r > 0 else {
                    throw Abandoned(description: "\(path): the bytes the download reported are not there")
                }
                done += r
            }
            // Bytes read across a restart may mix two contents.
            let after = progress.withLock { $0.phase }
            if after == .restarted { try Self.check(after) }
            reader.offset += Int64(n)
            return n
        }
    }

    private static func check(_ phase: Phase) throws(Abandoned) {
        switch phase {
        case .failed(let reason): throw Abandoned(description: reason)
        case .restarted: throw Abandoned(description: "the download started over")
        case .running, .complete: return
        }
    }

    /// Waits for the transfer to end: the path when the file is complete, else throws `Abandoned`.
    package func complete() throws -> FilePath {
        try Self.check(progress.wait { $0.phase == .running ? nil : $0.phase })
        return path
    }
}
