import CArchive
import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

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
