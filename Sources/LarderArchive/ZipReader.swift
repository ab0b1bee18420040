import CArchive
import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

/// The strict zip reader shared by `pack` (self-check), `verify` and the device's install.
///
/// It registers the zip format only and accepts regular files and directories only. Names must
/// be UTF-8 and pass `RelativePath`'s rules (a leading `./`, as bsdtar writes, is dropped);
/// duplicates, case/normalisation collisions and file/directory conflicts are refused. Sizes are
/// counted by this code, never trusted from headers: a file longer or shorter than its declared
/// size, more than `limits` allow, or a compression ratio over the limit stops the read. Any
/// libarchive warning is an error.
package struct ZipReader: Sendable {
    /// The bounds applied.
    package var limits: TreeLimits
    /// Whether libarchive checks each entry's CRC-32. Turn it off only when every file's SHA-256
    /// is checked against a trusted list afterwards (install with a signed file list): the CRC
    /// then adds a second pass over the data and no protection.
    package var checkCRC = true
    /// Hash on a second thread while the first inflates (and the consumer writes).
    package var parallelHashing = ProcessInfo.processInfo.activeProcessorCount > 1
    /// When a complete archive on disk read into a `ConcurrentArchiveConsumer` is inflated by
    /// several threads at once (see `ReadParallelism`); a streamed read always uses one.
    package var parallelism = ReadParallelism.automatic
    /// The files the caller expects (its file list, sorted by path), a hint for memory only,
    /// never a check: a streamed read sizes its listing by their count (at most
    /// `limits.maxFiles`) instead of growing it by doubling, and a name equal (byte for byte) to
    /// one of their paths shares that path's storage instead of holding a second copy — 2 MB
    /// for a 21,488-file bundle. A read of a complete archive sizes the listing from the central
    /// directory.
    package var expected: [FileEntry] = []

    /// Creates a reader with the given bounds.
    package init(limits: TreeLimits = .standard) {
        self.limits = limits
    }

    /// Validates the archive at `path` without keeping its contents.
    package func validate(_ path: FilePath) throws(ArchiveError) -> ArchiveListing {
        var consumer = ValidatingConsumer()
        return try self.read(path, into: &consumer)
    }

    /// Reads and validates the archive at `path`, handing every entry to `consumer`.
    package func read<C: ArchiveConsumer>(_ path: FilePath, into consumer: inout C) throws(ArchiveError)
        -> ArchiveListing
    {
        let (fd, archiveSize) = try Self.openArchive(path)
        defer { try? SystemCalls.close(fd, path: path) }
        // One interpretation only, checked on the descriptor libarchive then reads.
        let sizes = try Self.checkStructure(fd, archiveSize, path)
        return try readSequentially(fd, archiveSize, path, entries: sizes.count, into: &consumer)
    }

    /// Reads and validates the archive at `path`, handing every entry to `consumer` — on
    /// several threads when `parallelism` says the archive is worth it, each with a consumer of
    /// its own (`ConcurrentArchiveConsumer.makeWorker()`). The listing, and the error of an
    /// archive that is refused, are the ones the read on one thread gives (`readConcurrently`).
    package func read<C: ConcurrentArchiveConsumer>(_ path: FilePath, into consumer: inout C) throws(ArchiveError)
        -> ArchiveListing
    {
        let (fd, archiveSize) = try Self.openArchive(path)
        defer { try? SystemCalls.close(fd, path: path) }
        let sizes = try Self.checkStructure(fd, archiveSize, path)
        let workers = parallelism.workers(forArchiveBytes: archiveSize, entries: sizes.count)
        if workers > 1,
            let listing = try readConcurrently(
                fd, archiveSize, path, workers: workers, sizes: sizes, into: &consumer)
        {
            return listing
        }
        return try readSequentially(fd, archiveSize, path, entries: sizes.count, into: &consumer)
    }

    /// The read on one thread (two with `parallelHashing`) of an archive whose structure is
    /// checked, from its first byte.
    private func readSequentially<C: ArchiveConsumer>(
        _ fd: FileDescriptor, _ archiveSize: Int64, _ path: FilePath, entries: Int, into consumer: inout C
    ) throws(ArchiveError) -> ArchiveListing {
        let result: Result<ArchiveListing, ArchiveError> = withUTF8Locale {
            guard let a = archive_read_new() else { return .failure(.unreadable(detail: "out of memory")) }
            defer { archive_read_free(a) }
            archive_read_support_format_zip(a)
            if let problem = setOptions(a) { return .failure(problem) }
            guard (try? SystemCalls.seek(fd, to: 0, path: path)) == 0,
                archive_read_open_fd(a, fd.rawValue, 1 << 20) == LA.ok
            else {
                return .failure(.unreadable(detail: LA.message(a)))
            }
            var state = ReadState(limits: limits, archiveSize: archiveSize, expectedFiles: entries)
            return consume(a, &state, into: &consumer)
        }
        return try result.get()
    }

    /// Reads an archive while it is still arriving (a download in progress): entries are
    /// validated and handed to `consumer` in the order of their local headers, as `source`
    /// delivers bytes. `size` is the archive's declared size (it bounds the compression ratio).
    ///
    /// A streamed read sees only local headers, so once the entries are read this waits for
    /// `source.complete()` and then checks the complete file as `read(_:into:)` does before it
    /// starts — the structure check — and also that the entries read are exactly the central
    /// directory's, in the same order. An archive with a hidden entry between others, or one
    /// whose local headers tell another story, is refused here, before anything is used.
    package func read<C: ArchiveConsumer>(
        streaming source: some ArchiveByteSource, size: Int64, into consumer: inout C
    ) throws(ArchiveError) -> ArchiveListing {
        let context = StreamContext(source)
        var state = ReadState(limits: limits, archiveSize: size, expectedFiles: expected.count)
        state.expected = expected
        let result: Result<ArchiveListing, ArchiveError> = withUTF8Locale {
            guard let a = archive_read_new() else { return .failure(.unreadable(detail: "out of memory")) }
            defer { archive_read_free(a) }
            archive_read_support_format_zip_streamable(a)
            if let problem = setOptions(a) { return .failure(problem) }
            let client = Unmanaged.passUnretained(context).toOpaque()
            guard archive_read_open(a, client, nil, streamRead, nil) == LA.ok else {
                return .failure(context.failure ?? .unreadable(detail: LA.message(a)))
            }
            // Bytes arrive at the network's pace: smaller batches keep memory down at no cost.
            let read = consume(a, &state, into: &consumer, batchBytes: 256 << 10)
            // libarchive may take a failed read for the end of the archive: the source knows.
            if let cause = context.failure { return .failure(cause) }
            return read
        }
        let listing = try result.get()
        let seen = state.seen
        // The read's names and claims go before the central directory is read (the peak of a
        // 20,000-entry bundle's sync).
        state = ReadState(limits: limits, archiveSize: size)
        let path: FilePath
        do { path = try source.complete() } catch { throw .unreadable(detail: "the archive did not arrive: \(error)") }
        let central = try headers(of: path, expecting: seen)
        guard central.digest == seen.digest, central.count == seen.count else {
            let first =
                central.firstDifference.map { "entry \($0.index + 1) is \($0.description) in the central directory" }
                ?? "\(seen.count) entries where the central directory has \(central.count)"
            throw .structure(
                code: "archive-stream-mismatch",
                message: "the local headers disagree with the central directory: \(first)")
        }
        return listing
    }

    /// The account of every entry of a complete archive as the central directory describes it,
    /// after the structure check and the rules on types, without reading any file's data. Names
    /// are not checked again: the account is compared with a streamed read's, which checked them
    /// (`expected`, to name the first entry where the two part).
    func headers(of path: FilePath, expecting expected: EntryAccount) throws(ArchiveError) -> EntryAccount {
        let (fd, archiveSize) = try Self.openArchive(path)
        defer { try? SystemCalls.close(fd, path: path) }
        _ = try Self.checkStructure(fd, archiveSize, path)
        let result: Result<EntryAccount, ArchiveError> = withUTF8Locale {
            guard let a = archive_read_new() else { return .failure(.unreadable(detail: "out of memory")) }
            defer { archive_read_free(a) }
            archive_read_support_format_zip_seekable(a)
            guard archive_read_open_fd(a, fd.rawValue, 1 << 16) == LA.ok else {
                return .failure(.unreadable(detail: LA.message(a)))
            }
            var state = ReadState(limits: limits, archiveSize: archiveSize)
            state.headersOnly = true
            state.seen = EntryAccount(expecting: expected)
            var sink = DirectSink(consumer: ValidatingConsumer())
            do throws(ArchiveError) { try state.run(a, &sink) } catch { return .failure(error) }
            return .success(state.seen)
        }
        return try result.get()
    }

    /// Opens an archive that must be a regular file (not a link, FIFO or device): its
    /// descriptor and size.
    private static func openArchive(_ path: FilePath) throws(ArchiveError) -> (FileDescriptor, Int64) {
        let fd: FileDescriptor
        do { fd = try SystemCalls.open(path, .readOnly, options: [.noFollow, .nonBlocking]) } catch { throw .io(error) }
        let status: FileStatus
        do { status = try SystemCalls.fstat(fd, path: path) } catch {
            try? SystemCalls.close(fd, path: path)
            throw .io(error)
        }
        guard status.kind == .regular else {
            try? SystemCalls.close(fd, path: path)
            throw .unreadable(detail: "\(path) is not a regular file")
        }
        return (fd, status.size)
    }

    /// The structure check (`ZipStructure`), its problems as the reader's errors; returns the
    /// entries' uncompressed sizes in local-header order.
    private static func checkStructure(
        _ fd: FileDescriptor, _ size: Int64, _ path: FilePath
    ) throws(ArchiveError) -> [UInt64] {
        do { return try ZipStructure.check(fd: fd, size: size, path: path) } catch {
            if let io = error.io { throw .io(io) }
            if let entry = error.entry { throw entry }
            throw .structure(code: error.code, message: error.message)
        }
    }

    /// Applies the reader's options to a fresh archive handle.
    func setOptions(_ a: OpaquePointer) -> ArchiveError? {
        if !checkCRC, archive_read_set_format_option(a, "zip", "ignorecrc32", "1") != LA.ok {
            return .libarchive(entry: nil, message: LA.message(a))
        }
        return nil
    }

    /// Runs the read loop over an opened archive, hashing inline or on a second thread.
    private func consume<C: ArchiveConsumer>(
        _ a: OpaquePointer, _ state: inout ReadState, into consumer: inout C, batchBytes: Int = 256 << 10
    ) -> Result<ArchiveListing, ArchiveError> {
        if parallelHashing {
            var sink = PipelineSink(ConsumerPipeline(consumer: consumer, batchBytes: batchBytes))
            do throws(ArchiveError) {
                try state.run(a, &sink)
                let (c, digests) = try sink.pipeline.finish()
                consumer = c
                return .success(state.takeListing(digests: digests))
            } catch {
                consumer = sink.pipeline.cancel()
                return .failure(error)
            }
        } else {
            var sink = DirectSink(consumer: consumer)
            defer { consumer = sink.consumer }
            do throws(ArchiveError) {
                try state.run(a, &sink)
            } catch {
                return .failure(error)
            }
            return .success(state.takeListing(digests: sink.digests))
        }
    }
}
