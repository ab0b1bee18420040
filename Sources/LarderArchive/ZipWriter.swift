import CArchive
import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

/// Writes zip bundles deterministically through libarchive: entries in the order given (callers
/// pass them sorted by path bytes), files only (directories are implied), no modification time,
/// mode 0644, uid/gid 0, UTF-8 names flagged as such, deflate for text and `store` for formats
/// that are already compressed. The same tree gives the same bytes, on any machine, in any time
/// zone.
///
/// Entries carry no modification time: libarchive would write a set time into the DOS field in
/// the process's local time zone (so bytes would differ between zones) and into an extended
/// timestamp. With none set it writes the zip epoch, 1980-01-01 00:00:00, and no extended field,
/// whatever the zone — without the process's `TZ` being touched.
package enum ZipWriter {
    /// Extensions whose contents are already compressed; deflating them again wastes time.
    /// WebAssembly is not one of them: a `.wasm` module deflates to a third or so of its size
    /// (storing gradio's 31.7 MB of modules made its bundle 2.2× Info-ZIP's).
    static let storedExtensions: Set<String> = [
        "png", "jpg", "jpeg", "gif", "webp", "avif", "woff", "woff2", "mp3", "mp4", "m4a", "webm", "ogg", "zip", "gz",
        "br",
    ]

    /// Writes `files` (archive path, source file) to `output` atomically and returns each file's
    /// size and SHA-256, computed from the bytes written. A source that changes size while being
    /// read fails the write.
    package static func write(
        _ files: [(path: RelativePath, source: FilePath)], to output: FilePath
    ) throws(ArchiveError) -> [FileEntry] {
        var entries: [FileEntry] = []
        do {
            try AtomicFile.replace(output, wrapping: { $0 as any Error }) { fd, temp in
                entries = try withUTF8Locale { try writeArchive(files, to: BlockSink(fd: fd, path: temp)) }
            }
        } catch let e as ArchiveError {
            throw e
        } catch let e as FileSystemError {
            throw .io(e)
        } catch {
            // The writer throws only the two types above; anything else is named, not generalised.
            throw .libarchive(entry: nil, message: "\(output): \(error)")
        }
        return entries
    }

    private static func writeArchive(
        _ files: [(path: RelativePath, source: FilePath)], to sink: BlockSink
    ) throws -> [FileEntry] {
        guard let a = archive_write_new() else { throw ArchiveError.unreadable(detail: "out of memory") }
        defer { archive_write_free(a) }
        func check(_ r: Int32, _ entry: String?) throws {
            // A failed write of ours explains a libarchive failure better than its message.
            if let failure = sink.failure { throw failure }
            if r != LA.ok { throw ArchiveError.libarchive(entry: entry, message: LA.message(a)) }
        }
        try check(archive_write_set_format_zip(a), nil)
        try check(archive_write_set_options(a, "zip:hdrcharset=UTF-8"), nil)
        // Write as libarchive produces it, block by block, to our descriptor through the funnel.
        try check(archive_write_set_bytes_in_last_block(a, 1), nil)
        // `sink` outlives `a`: the caller holds it for this whole call (archive_write_free included).
        try check(archive_write_open(a, Unmanaged.passUnretained(sink).toOpaque(), nil, writeBlock, nil), nil)
        guard let entry = archive_entry_new() else { throw ArchiveError.unreadable(detail: "out of memory") }
        defer { archive_entry_free(entry) }
        var written: [FileEntry] = []
        written.reserveCapacity(files.count)
        var buffer = [UInt8](repeating: 0, count: 256 << 10)
        for (path, source) in files {
            let src = try SystemCalls.open(source, .readOnly, options: [.noFollow])
            defer { try? SystemCalls.close(src, path: source) }
            let size = try SystemCalls.fstat(src, path: source).size
            setHeader(entry, path: path, size: size)
            if storedExtensions.contains(path.pathExtension) {
                try check(archive_write_zip_set_compression_store(a), path.string)
            } else {
                try check(archive_write_zip_set_compression_deflate(a), path.string)
            }
            try check(archive_write_header(a, entry), path.string)
            var hasher = SHA256Stream()
            var count: Int64 = 0
            while true {
                let n = try SystemCalls.read(src, into: &buffer, path: source)
                if n == 0 { break }
                count += Int64(n)
                if count > size { break }
                try buffer.withUnsafeBytes { raw in
                    let chunk = UnsafeRawBufferPointer(rebasing: raw[0..<n])
                    hasher.update(chunk)
                    let w = archive_write_data(a, chunk.baseAddress, n)
                    if w != n { try check(ARCHIVE_FATAL, path.string) }
                }
            }
            guard count == size else {
                throw ArchiveError.sizeMismatch(entry: path.string, declared: size, actual: count)
            }
            try check(archive_write_finish_entry(a), path.string)
            written.append(FileEntry(path: path, size: size, sha256: hasher.finish()))
        }
        try check(archive_write_close(a), nil)
        return written
    }

    /// The header every entry gets, whoever packs: a regular file, mode 0644, owner 0, no time.
    private static func setHeader(_ entry: OpaquePointer, path: RelativePath, size: Int64) {
        archive_entry_clear(entry)
        archive_entry_set_pathname_utf8(entry, path.string)
        archive_entry_set_filetype(entry, LA.regular)
        archive_entry_set_perm(entry, 0o644)
        archive_entry_set_size(entry, size)
        archive_entry_unset_mtime(entry)
        archive_entry_set_uid(entry, 0)
        archive_entry_set_gid(entry, 0)
    }
}

/// Where libarchive's blocks go: the archive's descriptor, written through the funnel, and the
/// first failure (libarchive keeps only a message).
private final class BlockSink {
    let fd: FileDescriptor
    let path: FilePath
    var failure: FileSystemError?

    init(fd: FileDescriptor, path: FilePath) {
        self.fd = fd
        self.path = path
    }
}

/// libarchive's `archive_write_callback`.
private typealias WriteCallback =
    @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, UnsafeRawPointer?, Int) -> la_ssize_t

/// libarchive's write callback over a `BlockSink`: all of the block, or -1.
private let writeBlock: WriteCallback = { _, client, buffer, length in
    guard let client else { return -1 }
    let sink = Unmanaged<BlockSink>.fromOpaque(client).takeUnretainedValue()
    do throws(FileSystemError) {
        try SystemCalls.writeAll(sink.fd, UnsafeRawBufferPointer(start: buffer, count: length), path: sink.path)
        return la_ssize_t(length)
    } catch {
        if sink.failure == nil { sink.failure = error }
        return -1
    }
}
