import CArchive
import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

/// Archive bytes that arrive over time, such as a download being written to disk.
package protocol ArchiveByteSource: AnyObject {
    /// Copies the next bytes into `buffer`, waiting until some have arrived; returns 0 at the end
    /// of the archive. Throws when the bytes will never come (the transfer failed or restarted).
    func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int
    /// Waits until the whole archive is on disk and verified (size and SHA-256 of the
    /// transfer), and returns its path; throws when it never will be.
    func complete() throws -> FilePath
}

/// What libarchive's read callback needs: the source, a buffer that outlives each call, and
/// the source's error (libarchive keeps only its own message).
final class StreamContext {
    let source: any ArchiveByteSource
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
    var failure: ArchiveError?

    init(_ source: any ArchiveByteSource) { self.source = source }
    deinit { buffer.deallocate() }
}

/// libarchive's read callback over a `StreamContext`.
let streamRead:
    @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, UnsafeMutablePointer<UnsafeRawPointer?>?) -> la_ssize_t =
        {
            _, client, out in
            guard let client, let out else { return -1 }
            let context = Unmanaged<StreamContext>.fromOpaque(client).takeUnretainedValue()
            do {
                let n = try context.source.read(into: context.buffer)
                out.pointee = UnsafeRawPointer(context.buffer.baseAddress)
                return la_ssize_t(n)
            } catch let error as ArchiveError {
                context.failure = error
            } catch {
                context.failure = .unreadable(detail: "the archive stopped arriving: \(error)")
            }
            return -1
        }
