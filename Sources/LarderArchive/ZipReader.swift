import CArchive
import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

/// Receives the contents of an archive as the hardened reader validates it.
///
/// For each regular file: `beginFile`, any number of `write` calls with consecutive chunks, then
/// `endFile` with the size the reader counted (its SHA-256 is in the listing `read` returns —
/// hashing may run on another thread). Any error thrown stops the read; the reader reports it as
/// `ArchiveError.sink`. Its metatype is `Sendable`: the pipeline calls it on a worker thread.
public protocol ArchiveConsumer: SendableMetatype {
    /// A directory entry (already validated).
    mutating func directory(_ path: RelativePath) throws
    /// A regular file starts; `declaredSize` is the header's size when the archive states one.
    mutating func beginFile(_ path: RelativePath, declaredSize: Int64?) throws
    /// The next chunk of the current file.
    mutating func write(_ chunk: UnsafeRawBufferPointer) throws
    /// The current file is complete and its size matches its header.
    mutating func endFile(_ path: RelativePath, size: Int64) throws
}

extension ArchiveConsumer {
    /// Ignores the directory (default for consumers that only want files).
    public mutating func directory(_ path: RelativePath) throws {}
    /// Ignores the start of a file (default).
    public mutating func beginFile(_ path: RelativePath, declaredSize: Int64?) throws {}
    /// Ignores the chunk (default).
    public mutating func write(_ chunk: UnsafeRawBufferPointer) throws {}
    /// Ignores the end of a file (default).
    public mutating func endFile(_ path: RelativePath, size: Int64) throws {}
}

/// A consumer that keeps nothing: reading with it validates the archive and lists its files.
public struct ValidatingConsumer: ArchiveConsumer, Sendable {
    /// Creates one.
    public init() {}
}

/// What a successful read found.
public struct ArchiveListing: Sendable, Equatable {
    /// Every regular file, sorted by path, with the size and SHA-256 computed while reading.
    public var files: [FileEntry]
    /// Every explicit directory entry.
    public var directories: [RelativePath]
}

/// The strict zip reader shared by `pack` (self-check), `verify` and the device's install.
///
/// It registers the zip format only and accepts regular files and directories only. Names must
/// be UTF-8 and pass `RelativePath`'s rules (a leading `./`, as bsdtar writes, is dropped);
/// duplicates, case/normalisation collisions and file/directory conflicts are refused. Sizes are
/// counted by this code, never trusted from headers: a file longer or shorter than its declared
/// size, more than `limits` allow, or a compression ratio over the limit stops the read. Any
/// libarchive warning is an error.
public struct ZipReader: Sendable {
    /// The bounds applied.
    public var limits: TreeLimits
    /// Whether libarchive checks each entry's CRC-32. Turn it off only when every file's SHA-256
    /// is checked against a trusted list afterwards (install with a signed file list): the CRC
    /// then adds a second pass over the data and no protection.
    public var checkCRC = true
    /// Hash on a second thread while the first inflates (and the consumer writes).
    public var parallelHashing = ProcessInfo.processInfo.activeProcessorCount > 1
    /// When a complete archive on disk read into a `ConcurrentArchiveConsumer` is inflated by
    /// several threads at once (see `ReadParallelism`); a streamed read always uses one.
    public var parallelism = ReadParallelism.automatic
    /// The files the caller expects (its file list, sorted by path), a hint for memory only,
    /// never a check: a streamed read sizes its listing by their count (at most
    /// `limits.maxFiles`) instead of growing it by doubling, and a name equal (byte for byte) to
    /// one of their paths shares that path's storage instead of holding a second copy — 2 MB
    /// for a 21,488-file bundle. A read of a complete archive sizes the listing from the central
    /// directory.
    public var expected: [FileEntry] = []

    /// Creates a reader with the given bounds.
    public init(limits: TreeLimits = .standard) {
        self.limits = limits
    }

    /// Validates the archive at `path` without keeping its contents.
    public func validate(_ path: FilePath) throws(ArchiveError) -> ArchiveListing {
        var consumer = ValidatingConsumer()
        return try self.read(path, into: &consumer)
    }

    /// Reads and validates the archive at `path`, handing every entry to `consumer`.
    public func read<C: ArchiveConsumer>(_ path: FilePath, into consumer: inout C) throws(ArchiveError)
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
    public func read<C: ConcurrentArchiveConsumer>(_ path: FilePath, into consumer: inout C) throws(ArchiveError)
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
    public func read<C: ArchiveConsumer>(
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

/// Archive bytes that arrive over time, such as a download being written to disk.
public protocol ArchiveByteSource: AnyObject {
    /// Copies the next bytes into `buffer`, waiting until some have arrived; returns 0 at the end
    /// of the archive. Throws when the bytes will never come (the transfer failed or restarted).
    func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int
    /// Waits until the whole archive is on disk and verified (size and SHA-256 of the
    /// transfer), and returns its path; throws when it never will be.
    func complete() throws -> FilePath
}

/// What libarchive's read callback needs: the source, a buffer that outlives each call, and
/// the source's error (libarchive keeps only its own message).
private final class StreamContext {
    let source: any ArchiveByteSource
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
    var failure: ArchiveError?

    init(_ source: any ArchiveByteSource) { self.source = source }
    deinit { buffer.deallocate() }
}

/// libarchive's read callback over a `StreamContext`.
private let streamRead:
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

/// Where the read loop sends entries: straight to the consumer (hashing inline), or through a
/// pipeline to a worker thread.
protocol EntrySink {
    mutating func directory(_ path: RelativePath) throws(ArchiveError)
    mutating func beginFile(_ path: RelativePath, declaredSize: Int64?) throws(ArchiveError)
    mutating func write(_ chunk: UnsafeRawBufferPointer, of path: RelativePath) throws(ArchiveError)
    mutating func endFile(_ path: RelativePath, size: Int64) throws(ArchiveError)
}

struct DirectSink<C: ArchiveConsumer>: EntrySink {
    var consumer: C
    var hasher = SHA256Stream()
    var digests: [SHA256Digest] = []

    init(consumer: C) { self.consumer = consumer }

    mutating func directory(_ path: RelativePath) throws(ArchiveError) {
        do { try consumer.directory(path) } catch { throw .sink(entry: path.string, detail: "\(error)") }
    }
    mutating func beginFile(_ path: RelativePath, declaredSize: Int64?) throws(ArchiveError) {
        do { try consumer.beginFile(path, declaredSize: declaredSize) } catch {
            throw .sink(entry: path.string, detail: "\(error)")
        }
    }
    mutating func write(_ chunk: UnsafeRawBufferPointer, of path: RelativePath) throws(ArchiveError) {
        hasher.update(chunk)
        do { try consumer.write(chunk) } catch { throw .sink(entry: path.string, detail: "\(error)") }
    }
    mutating func endFile(_ path: RelativePath, size: Int64) throws(ArchiveError) {
        digests.append(hasher.finish())
        hasher = SHA256Stream()
        do { try consumer.endFile(path, size: size) } catch { throw .sink(entry: path.string, detail: "\(error)") }
    }
}

struct PipelineSink<C: ArchiveConsumer>: EntrySink {
    let pipeline: ConsumerPipeline<C>
    init(_ pipeline: ConsumerPipeline<C>) { self.pipeline = pipeline }

    func directory(_ path: RelativePath) throws(ArchiveError) { try pipeline.directory(path) }
    func beginFile(_ path: RelativePath, declaredSize: Int64?) throws(ArchiveError) {
        try pipeline.beginFile(path, declaredSize: declaredSize)
    }
    func write(_ chunk: UnsafeRawBufferPointer, of path: RelativePath) throws(ArchiveError) {
        try pipeline.append(chunk)
    }
    func endFile(_ path: RelativePath, size: Int64) throws(ArchiveError) { try pipeline.endFile(path, size: size) }
}

/// The entries a read met, in order — each one's stored name, kind and size (read, or declared
/// when only headers are read) — kept compact: a SHA-256 over every record tells two reads apart,
/// and one 64-bit mark per entry finds where they part (for the message). A 21,000-entry archive
/// costs 170 KB here, where keeping every name cost megabytes.
struct EntryAccount {
    private var hasher = SHA256Stream()
    /// The number of entries.
    private(set) var count = 0
    /// One mark per entry (a hash of its record).
    private(set) var marks: [UInt64] = []
    /// The other read's account this one is compared with, if any.
    private let expected: [UInt64]?
    /// The first entry whose record differs from the expected account's: its index and description.
    private(set) var firstDifference: (index: Int, description: String)?

    init() { expected = nil }
    init(expecting other: EntryAccount) { expected = other.marks }

    /// The SHA-256 over every record.
    var digest: SHA256Digest { hasher.finish() }

    mutating func add(_ name: UnsafeBufferPointer<UInt8>, isDirectory: Bool, size: Int64) {
        // Kind, size and name length, then the name, fed to both without an allocation per
        // entry. The mark is FNV-1a over the same bytes: it finds the first difference, it does
        // not prove one.
        var mark: UInt64 = 0xcbf2_9ce4_8422_2325
        func feed(_ bytes: UnsafeRawBufferPointer) {
            hasher.update(bytes)
            for b in bytes { mark = (mark ^ UInt64(b)) &* 0x100_0000_01b3 }
        }
        withUnsafeBytes(of: isDirectory ? UInt8(1) : UInt8(0)) { feed($0) }
        withUnsafeBytes(of: size.littleEndian) { feed($0) }
        withUnsafeBytes(of: UInt32(truncatingIfNeeded: name.count).littleEndian) { feed($0) }
        feed(UnsafeRawBufferPointer(name))
        if let expected, firstDifference == nil, count >= expected.count || expected[count] != mark {
            let text =
                quoted(String(decoding: name, as: UTF8.self)) + " ("
                + (isDirectory ? "a directory)" : "a file of \(size) bytes)")
            firstDifference = (count, text)
        }
        marks.append(mark)
        count += 1
    }
}

/// The bookkeeping of one read.
struct ReadState {
    let limits: TreeLimits
    let archiveSize: Int64
    var files: [FileEntry] = []
    var directories: [RelativePath] = []
    var entries = 0
    /// Every entry in archive order, as read (a streamed read is checked against the central
    /// directory's account with it).
    var seen = EntryAccount()
    /// Record the entries and skip every file's data (a check of headers only).
    var headersOnly = false
    var total: Int64 = 0
    /// Collision key → the name that claimed it (nil when the name is the key itself, as for
    /// nearly every name: one string per entry, shared with its path, instead of three), and
    /// whether it is a file.
    var claimed: [String: (name: String?, isFile: Bool)] = [:]
    /// Collision keys of directories stated by their own entry.
    var explicitDirectories: Set<String> = []
    /// Directory prefixes already claimed exactly as spelled (their key need not be computed again).
    var knownDirectories: Set<String> = []

    /// Files carry a placeholder digest until `takeListing(digests:)` fills in the sink's.
    static let placeholder = SHA256Digest.of([UInt8]())

    /// Files whose path storage names equal to theirs share (`ZipReader.expected`).
    var expected: [FileEntry] = []

    init(limits: TreeLimits, archiveSize: Int64, expectedFiles: Int = 0) {
        self.limits = limits
        self.archiveSize = archiveSize
        let n = max(0, min(expectedFiles, limits.maxFiles))
        files.reserveCapacity(n)
        claimed.reserveCapacity(n)
    }

    /// The listing, the files taken out of the state (no copy of a 20,000-entry array is made).
    mutating func takeListing(digests: [SHA256Digest]) -> ArchiveListing {
        var out = files
        files = []
        for i in out.indices { out[i].sha256 = digests[i] }
        out.sort { $0.path < $1.path }
        return ArchiveListing(files: out, directories: directories)
    }

    /// What `admitNext` made of the next header.
    enum Admitted {
        /// No more entries.
        case end
        /// An entry that carries nothing: the archive root (`./`), or any entry of a read of
        /// headers only.
        case skipped
        /// A directory entry, its name checked and claimed.
        case directory(RelativePath)
        /// A regular file, its name checked and claimed; `entry` and `name` (libarchive's
        /// memory) are valid until the next header is read.
        case file(RelativePath, entry: OpaquePointer, name: UnsafeBufferPointer<UInt8>)
    }

    mutating func run<S: EntrySink>(_ a: OpaquePointer, _ sink: inout S) throws(ArchiveError) {
        reading: while true {
            switch try admitNext(a) {
            case .end: break reading
            case .skipped: continue
            case .directory(let path):
                try sink.directory(path)
                directories.append(path)
            case .file(let path, let entry, let name):
                try readFile(a, entry, path, &sink)
                seen.add(name, isDirectory: false, size: files.last?.size ?? -1)
            }
        }
        if files.isEmpty && !headersOnly { throw .empty }
    }

    /// Reads the next header and applies every rule that needs no data: the entry count, its
    /// name, type, encryption and links, and its claim on its path (duplicates, collisions,
    /// file/directory conflicts).
    mutating func admitNext(_ a: OpaquePointer) throws(ArchiveError) -> Admitted {
        var entryPointer: OpaquePointer?
        let r = archive_read_next_header(a, &entryPointer)
        if r == LA.eof { return .end }
        let rawName = entryPointer.flatMap { archive_entry_pathname($0) }.map { String(cString: $0) }
        guard r == LA.ok, let entry = entryPointer else {
            throw .libarchive(entry: rawName, message: LA.message(a))
        }
        entries += 1
        if entries > limits.maxEntries { throw .tooManyEntries(limit: limits.maxEntries) }
        guard let cName = archive_entry_pathname(entry) else {
            throw .libarchive(entry: nil, message: "an entry has no name")
        }
        let nameBuffer = UnsafeBufferPointer(
            start: UnsafeRawPointer(cName).assumingMemoryBound(to: UInt8.self), count: strlen(cName))
        let display = String(decoding: nameBuffer, as: UTF8.self)
        if archive_entry_is_encrypted(entry) != 0 { throw .encrypted(entry: display) }
        if let target = archive_entry_hardlink(entry) {
            throw .hardLink(entry: display, target: String(cString: target))
        }
        let type = archive_entry_filetype(entry)
        guard type == LA.regular || type == LA.directory else {
            throw .unsupportedEntryType(entry: display, type: LA.typeName(type))
        }
        if type == LA.directory { seen.add(nameBuffer, isDirectory: true, size: 0) }
        if headersOnly {
            // Compared with a streamed read that checked every name; libarchive skips the data
            // when asked for the next header.
            if type == LA.regular {
                let declared: Int64 = archive_entry_size_is_set(entry) != 0 ? archive_entry_size(entry) : -1
                seen.add(nameBuffer, isDirectory: false, size: declared)
            }
            return .skipped
        }
        // bsdtar writes "./name"; the archive root itself ("./") carries nothing.
        var name = nameBuffer[...]
        while name.starts(with: [0x2E, 0x2F]) { name = name.dropFirst(2) }
        if name.isEmpty, type == LA.directory { return .skipped }
        let path: RelativePath
        switch RelativePath.validate(bytes: Array(name), limits: limits) {
        case .success(let p): path = type == LA.regular ? shared(p) : p
        case .failure(let problem): throw .badName(entry: display, problem: problem)
        }
        try claim(path, isFile: type == LA.regular)
        if type == LA.directory { return .directory(path) }
        return .file(path, entry: entry, name: nameBuffer)
    }

    /// `p`, or the expected file's path with the same bytes, whose storage it then shares.
    func shared(_ p: RelativePath) -> RelativePath {
        var lo = 0
        var hi = expected.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if expected[mid].path < p { lo = mid + 1 } else { hi = mid }
        }
        guard lo < expected.count, expected[lo].path.string.utf8.elementsEqual(p.string.utf8) else { return p }
        return expected[lo].path
    }

    /// Records `path` and its parent directories, refusing duplicates, collisions and a name
    /// used as both a file and a directory.
    mutating func claim(_ path: RelativePath, isFile: Bool) throws(ArchiveError) {
        let comps = path.components
        var prefix = ""
        for (i, c) in comps.enumerated() {
            let last = i == comps.count - 1
            // The whole path is the path's own string (shared, not built again).
            prefix = last ? path.string : prefix.isEmpty ? String(c) : prefix + "/" + c
            let wantFile = last && isFile
            if !last, knownDirectories.contains(prefix) { continue }
            let key = RelativePath.collisionKey(prefix)
            defer { if !last { knownDirectories.insert(prefix) } }
            guard let found = claimed[key] else {
                claimed[key] = (key == prefix ? nil : prefix, wantFile)
                if last && !isFile { explicitDirectories.insert(key) }
                continue
            }
            let existing = (name: found.name ?? key, isFile: found.isFile)
            if existing.name != prefix { throw .collision(entry: prefix, other: existing.name) }
            if existing.isFile != wantFile {
                let file = existing.isFile ? existing.name : path.string
                throw .fileDirectoryConflict(entry: file, other: existing.isFile ? path.string : existing.name)
            }
            if last {
                // A second file of the same name, or a directory entry stated twice. (A directory
                // first implied by a file inside it and then stated is fine.)
                if isFile || explicitDirectories.contains(key) { throw .duplicate(entry: prefix) }
                explicitDirectories.insert(key)
            }
        }
    }

    mutating func readFile<S: EntrySink>(
        _ a: OpaquePointer, _ entry: OpaquePointer, _ path: RelativePath, _ sink: inout S
    ) throws(ArchiveError) {
        let declared: Int64? = archive_entry_size_is_set(entry) != 0 ? archive_entry_size(entry) : nil
        try checkBeforeData(path, declared: declared)
        let count = try Self.copyData(
            a, path, declared: declared, totalBefore: total, limits: limits, archiveSize: archiveSize, &sink)
        total += count
        files.append(FileEntry(path: path, size: count, sha256: Self.placeholder))
    }

    /// The rules on a file that its header decides, before any of its data is read: its declared
    /// size, the total with it, and the number of files.
    func checkBeforeData(_ path: RelativePath, declared: Int64?) throws(ArchiveError) {
        if let d = declared {
            if d > limits.maxFileBytes { throw .fileTooLarge(entry: path.string, size: d, limit: limits.maxFileBytes) }
            if total + d > limits.maxTotalBytes { throw .totalTooLarge(limit: limits.maxTotalBytes) }
        }
        if files.count + 1 > limits.maxFiles { throw .tooManyFiles(limit: limits.maxFiles) }
    }

    /// Hands the current entry's data to `sink`, counting it against its declared size, the
    /// per-file and total limits and the compression ratio (`totalBefore`: the bytes of every
    /// file before it in the archive); returns its size.
    static func copyData<S: EntrySink>(
        _ a: OpaquePointer, _ path: RelativePath, declared: Int64?, totalBefore: Int64, limits: TreeLimits,
        archiveSize: Int64, _ sink: inout S
    ) throws(ArchiveError) -> Int64 {
        try sink.beginFile(path, declaredSize: declared)
        var count: Int64 = 0
        var total = totalBefore
        var buffer: UnsafeRawPointer?
        var size = 0
        var offset: Int64 = 0
        let ratioLimit = limits.maxCompressionRatio.multipliedReportingOverflow(by: max(archiveSize, 1))
        while true {
            let r = archive_read_data_block(a, &buffer, &size, &offset)
            if r == LA.eof { break }
            guard r == LA.ok else { throw .libarchive(entry: path.string, message: LA.message(a)) }
            if size == 0 { continue }
            guard offset == count, let base = buffer else { throw .discontiguousData(entry: path.string) }
            count += Int64(size)
            total += Int64(size)
            if let d = declared, count > d { throw .sizeMismatch(entry: path.string, declared: d, actual: count) }
            if count > limits.maxFileBytes {
                throw .fileTooLarge(entry: path.string, size: count, limit: limits.maxFileBytes)
            }
            if total > limits.maxTotalBytes { throw .totalTooLarge(limit: limits.maxTotalBytes) }
            if total > limits.ratioFloorBytes, !ratioLimit.overflow, total > ratioLimit.partialValue {
                throw .compressionRatio(entry: path.string, limit: limits.maxCompressionRatio)
            }
            let chunk = UnsafeRawBufferPointer(start: base, count: size)
            try sink.write(chunk, of: path)
        }
        if let d = declared, count != d { throw .sizeMismatch(entry: path.string, declared: d, actual: count) }
        try sink.endFile(path, size: count)
        return count
    }
}
