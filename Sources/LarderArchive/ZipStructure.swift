import LarderCore
import LarderFileSystem
import SystemPackage

/// Checks that a zip archive has exactly one interpretation, before libarchive reads it.
///
/// This is not a zip reader — it extracts and inflates nothing; libarchive does all reading. It
/// exists because libarchive resolves ambiguous archives silently (it takes local-header names
/// over central ones, drops central entries that share a local header, skips data before the
/// first entry), so that two tools could see different files in the same bytes. It reads only
/// the end records, the central directory, and each entry's fixed-size local header, and refuses:
/// data before the first entry or after the end record; several end records; a central directory
/// that does not end where the end record starts; a local header (or data descriptor) whose
/// name, method, flags, CRC-32 or sizes differ from its central entry; entries whose data overlap; bytes between entries that no entry
/// accounts for (a reader walking local headers, as a streaming one does, would find an entry
/// hidden there). It returns the entries' uncompressed sizes in local-header order — the order in
/// which libarchive's reader of the central directory lists them — to plan a read shared among
/// threads.
enum ZipStructure {
    /// What the structure check found wrong (a stable code and a sentence), or the read that
    /// failed (`io`: the archive could not be read, which says nothing about its structure).
    struct Problem: Error, Equatable {
        let code: ReasonCode
        let message: String
        var io: FileSystemError? = nil
        /// The entry refused for itself rather than for the archive's structure (its name or its
        /// type), reported as the reader reports it.
        var entry: ArchiveError? = nil
    }

    private struct Central {
        /// The name's bytes in the central directory (shared, not copied: 21,488 names copied
        /// one by one cost about 2 MB of a large bundle's check).
        let name: ArraySlice<UInt8>
        let method: UInt16
        let flags: UInt16
        let crc: UInt32
        let compressedSize: UInt64
        let uncompressedSize: UInt64
        let localOffset: UInt64
    }

    /// Where the end records put the central directory.
    private struct Directory {
        /// The entries the end record counts.
        var entries: UInt64
        var size: UInt64
        var offset: UInt64
        /// Where the directory must end: the end record, or the zip64 end record.
        var end: UInt64
    }

    /// Checks the archive open as `fd` (from `path`) of `size` bytes; returns the entries'
    /// uncompressed sizes as the central directory states them, in the order of their local
    /// headers (the order a streaming reader meets them).
    @discardableResult
    static func check(fd: FileDescriptor, size: Int64, path: FilePath) throws(Problem) -> [UInt64] {
        let file = UInt64(size)
        guard file >= 22 else { throw Problem(code: "archive-truncated", message: "too short to be a zip archive") }
        let directory = try findDirectory(fd, file: file, path)
        let centrals = try readCentralDirectory(fd, directory, path)
        var walk = LocalHeaderWalk(fd: fd, path: path, directoryOffset: directory.offset, file: file)
        for (index, c) in centrals.sorted(by: { $0.localOffset < $1.localOffset }).enumerated() {
            try walk.check(c, first: index == 0)
        }
        try walk.finish(empty: centrals.isEmpty)
        return walk.sizes
    }

    /// Step 1: the end record (the last 22 bytes plus at most a 65,535-byte comment), the zip64
    /// end record it may point at, and the refusals of an archive with more than one end record
    /// or bytes before or after the archive proper.
    private static func findDirectory(_ fd: FileDescriptor, file: UInt64, _ path: FilePath) throws(Problem)
        -> Directory
    {
        let tailLength = min(file, 22 + 65_535)
        let tailStart = file - tailLength
        let tail = try bytes(fd, at: tailStart, count: Int(tailLength), path)
        var candidates: [Int] = []
        var i = tail.count - 22
        while i >= 0 {
            if tail[i] == 0x50, tail[i + 1] == 0x4B, tail[i + 2] == 0x05, tail[i + 3] == 0x06 { candidates.append(i) }
            i -= 1
        }
        // An end record is one whose comment reaches exactly the end of the file.
        let exact = candidates.filter { Int(le16(tail, $0 + 20)) + 22 + $0 == tail.count }
        guard let eocd = exact.first else {
            if candidates.isEmpty {
                throw Problem(code: "archive-no-end-record", message: "no end of central directory record")
            }
            throw Problem(code: "archive-trailing-data", message: "data follows the end of central directory record")
        }
        let eocdOffset = tailStart + UInt64(eocd)
        var directory = Directory(
            entries: UInt64(le16(tail, eocd + 10)), size: UInt64(le32(tail, eocd + 12)),
            offset: UInt64(le32(tail, eocd + 16)), end: eocdOffset)
        if eocdOffset >= 20 { try readZip64EndRecord(fd, before: eocdOffset, into: &directory, path) }
        // A second end record: inside the comment (readers that search back from the end take
        // the last signature they meet), one whose comment also reaches the end, or one in the
        // directory or after it. Two readers may pick different ones. A signature inside an
        // entry's data (before the directory; every byte there is accounted for below) is data:
        // an archive stored in the archive, as a web app may ship one.
        let others = candidates.filter {
            $0 != eocd && ($0 > eocd || exact.contains($0) || tailStart + UInt64($0) >= directory.offset)
        }
        if others.contains(where: { plausibleEndRecord(tail, $0, tailStart: tailStart) }) {
            throw Problem(
                code: "archive-several-end-records", message: "more than one end of central directory record")
        }
        try checkDirectoryBounds(directory)
        return directory
    }

    /// Zip64: a locator just before the end record points at the zip64 end record, whose counts
    /// and offsets replace the end record's.
    private static func readZip64EndRecord(
        _ fd: FileDescriptor, before eocdOffset: UInt64, into directory: inout Directory, _ path: FilePath
    ) throws(Problem) {
        let loc = try bytes(fd, at: eocdOffset - 20, count: 20, path)
        guard loc[0] == 0x50, loc[1] == 0x4B, loc[2] == 0x06, loc[3] == 0x07 else { return }
        let z64 = le64(loc, 8)
        guard add(z64, 56) <= eocdOffset - 20 else {
            throw Problem(code: "archive-bad-end-record", message: "the zip64 end record is out of bounds")
        }
        let rec = try bytes(fd, at: z64, count: 56, path)
        guard rec[0] == 0x50, rec[1] == 0x4B, rec[2] == 0x06, rec[3] == 0x06 else {
            throw Problem(
                code: "archive-bad-end-record", message: "the zip64 locator does not point at a zip64 end record")
        }
        guard add(add(z64, 12), le64(rec, 4)) == eocdOffset - 20 else {
            throw Problem(code: "archive-trailing-data", message: "data between the zip64 end record and its locator")
        }
        directory = Directory(entries: le64(rec, 32), size: le64(rec, 40), offset: le64(rec, 48), end: z64)
    }

    /// The central directory must end where the end record starts, with nothing before the
    /// archive, and stay within the limits.
    private static func checkDirectoryBounds(_ d: Directory) throws(Problem) {
        if add(d.offset, d.size) < d.end {
            // Offsets count from the start of the zip proper: whatever precedes it (a
            // self-extractor stub, junk) shifts everything by the gap.
            throw Problem(
                code: "archive-leading-data", message: "\(d.end - d.offset - d.size) bytes precede the archive")
        }
        guard d.offset <= d.end, add(d.offset, d.size) == d.end else {
            throw Problem(
                code: "archive-bad-central-directory",
                message: "the central directory does not end where the end record starts")
        }
        guard d.size <= 64 << 20, d.entries <= 1_000_000 else {
            throw Problem(code: "limit-entries", message: "the central directory is too large")
        }
    }

    /// Step 2: every central record, each well formed and of a kind some reader would not act on
    /// differently, as many as the end record counts.
    private static func readCentralDirectory(_ fd: FileDescriptor, _ d: Directory, _ path: FilePath) throws(Problem)
        -> [Central]
    {
        let cd = try bytes(fd, at: d.offset, count: Int(d.size), path)
        var centrals: [Central] = []
        // Each central record takes at least 46 bytes, whatever the end record claims.
        centrals.reserveCapacity(min(Int(d.entries), cd.count / 46))
        var p = 0
        while p < cd.count {
            guard p + 46 <= cd.count, le32(cd, p) == 0x0201_4B50 else {
                throw Problem(code: "archive-bad-central-directory", message: "a central directory entry is malformed")
            }
            let nameLength = Int(le16(cd, p + 28))
            let extraLength = Int(le16(cd, p + 30))
            let commentLength = Int(le16(cd, p + 32))
            guard p + 46 + nameLength + extraLength + commentLength <= cd.count else {
                throw Problem(
                    code: "archive-bad-central-directory", message: "a central directory entry runs past the directory")
            }
            let name = cd[(p + 46)..<(p + 46 + nameLength)]
            try checkKind(name, madeBy: le16(cd, p + 4), attributes: le32(cd, p + 38))
            var fields = (
                compressed: UInt64(le32(cd, p + 20)), uncompressed: UInt64(le32(cd, p + 24)),
                offset: UInt64(le32(cd, p + 42))
            )
            readZip64Extra(cd, from: p + 46 + nameLength, length: extraLength, into: &fields)
            centrals.append(
                Central(
                    name: name, method: le16(cd, p + 10), flags: le16(cd, p + 8), crc: le32(cd, p + 16),
                    compressedSize: fields.compressed, uncompressedSize: fields.uncompressed,
                    localOffset: fields.offset))
            p += 46 + nameLength + extraLength + commentLength
        }
        guard UInt64(centrals.count) == d.entries else {
            throw Problem(
                code: "archive-bad-central-directory",
                message: "the end record counts \(d.entries) entries, the directory holds \(centrals.count)")
        }
        return centrals
    }

    /// Zip64 extended information (header 0x0001): the fields saturated in the central record,
    /// in order.
    private static func readZip64Extra(
        _ cd: [UInt8], from start: Int, length: Int,
        into fields: inout (compressed: UInt64, uncompressed: UInt64, offset: UInt64)
    ) {
        var e = start
        let extraEnd = e + length
        while e + 4 <= extraEnd {
            let id = le16(cd, e)
            let len = Int(le16(cd, e + 2))
            guard e + 4 + len <= extraEnd else { break }
            if id == 0x0001 {
                var q = e + 4
                if fields.uncompressed == 0xFFFF_FFFF, q + 8 <= e + 4 + len {
                    fields.uncompressed = le64(cd, q)
                    q += 8
                }
                if fields.compressed == 0xFFFF_FFFF, q + 8 <= e + 4 + len {
                    fields.compressed = le64(cd, q)
                    q += 8
                }
                if fields.offset == 0xFFFF_FFFF, q + 8 <= e + 4 + len { fields.offset = le64(cd, q) }
            }
            e += 4 + len
        }
    }

    /// Step 3: the local headers in file order: the first at offset 0, each matching its central
    /// entry, none overlapping the previous entry's data, and no byte between entries that no
    /// entry accounts for.
    private struct LocalHeaderWalk {
        let fd: FileDescriptor
        let path: FilePath
        let directoryOffset: UInt64
        var window: Window
        var previousEnd: UInt64 = 0
        var previousSlack: UInt64 = 0
        var previousName = ""
        /// The entries' uncompressed sizes, in the order walked.
        var sizes: [UInt64] = []

        init(fd: FileDescriptor, path: FilePath, directoryOffset: UInt64, file: UInt64) {
            self.fd = fd
            self.path = path
            self.directoryOffset = directoryOffset
            window = Window(fileSize: file)
        }

        /// Checks the entry whose central record is `c`, the next in file order.
        mutating func check(_ c: Central, first: Bool) throws(Problem) {
            let display = String(decoding: c.name, as: UTF8.self)
            try checkPlacement(c, first: first, display)
            let head = try window.bytes(fd, at: c.localOffset, count: 30, path)
            guard le32(head, 0) == 0x0403_4B50 else {
                throw Problem(
                    code: "archive-bad-local-header",
                    message: "entry \(quoted(display)) has no local header at its offset")
            }
            let nameLength = Int(le16(head, 26))
            let extraLength = UInt64(le16(head, 28))
            let localName = try window.bytes(fd, at: c.localOffset + 30, count: nameLength, path)
            // Bit 3 (sizes in a data descriptor) and bit 11 (UTF-8) must agree; other bits are hints.
            let mask: UInt16 = 0x0808
            guard localName.elementsEqual(c.name), le16(head, 8) == c.method, le16(head, 6) & mask == c.flags & mask
            else {
                throw Problem(
                    code: "archive-header-mismatch",
                    message:
                        "the local header of \(quoted(display)) disagrees with the central directory (\(quoted(String(decoding: localName, as: UTF8.self))))"
                )
            }
            var end = add(add(add(c.localOffset, 30 + UInt64(nameLength)), extraLength), c.compressedSize)
            try checkChecksums(c, head: head, dataEnd: end, display)
            // A data descriptor follows: 12 bytes at least (no signature, 32-bit sizes), 24 at
            // most (signature, 64-bit sizes). Nothing else may lie between entries: a reader that
            // walks local headers (a streaming one) would find an entry hidden there.
            let slack: UInt64 = c.flags & 0x0008 != 0 ? 12 : 0
            if slack > 0 { end = add(end, 12) }
            guard end <= directoryOffset else {
                throw Problem(
                    code: "archive-overlapping-entries",
                    message: "the data of \(quoted(display)) runs into the central directory")
            }
            previousEnd = end
            previousSlack = slack
            previousName = display
            sizes.append(c.uncompressedSize)
        }

        /// The entry starts where the previous one's data (and descriptor) ended, and before the
        /// central directory.
        private func checkPlacement(_ c: Central, first: Bool, _ display: String) throws(Problem) {
            if first, c.localOffset != 0 {
                throw Problem(code: "archive-leading-data", message: "\(c.localOffset) bytes precede the first entry")
            }
            guard c.localOffset >= previousEnd else {
                throw Problem(
                    code: "archive-overlapping-entries",
                    message: "entry \(quoted(display)) overlaps the data of \(quoted(previousName))")
            }
            if !first, c.localOffset - previousEnd > previousSlack {
                throw Problem(
                    code: "archive-gap",
                    message:
                        "\(c.localOffset - previousEnd) unlisted bytes between \(quoted(previousName)) and \(quoted(display))"
                )
            }
            guard add(c.localOffset, 30) <= directoryOffset else {
                throw Problem(
                    code: "archive-bad-local-header", message: "entry \(quoted(display)) points past the entries")
            }
        }

        /// The CRC-32 and sizes a reader of local headers uses must be the central ones: in the
        /// local header, or after the data when bit 3 defers them to a data descriptor.
        private mutating func checkChecksums(_ c: Central, head: [UInt8], dataEnd end: UInt64, _ display: String)
            throws(Problem)
        {
            let agree: Bool
            if c.flags & 0x0008 == 0 {
                let sizesAgree =
                    (le32(head, 18) == 0xFFFF_FFFF || UInt64(le32(head, 18)) == c.compressedSize)
                    && (le32(head, 22) == 0xFFFF_FFFF || UInt64(le32(head, 22)) == c.uncompressedSize)
                agree = le32(head, 14) == c.crc && sizesAgree
            } else {
                guard add(end, 12) <= directoryOffset else {
                    throw Problem(
                        code: "archive-overlapping-entries",
                        message: "the data of \(quoted(display)) runs into the central directory")
                }
                let descriptor = try window.bytes(fd, at: end, count: 8, path)
                agree = (le32(descriptor, 0) == 0x0807_4B50 ? le32(descriptor, 4) : le32(descriptor, 0)) == c.crc
            }
            guard agree else {
                throw Problem(
                    code: "archive-header-mismatch",
                    message:
                        "the CRC-32 or sizes of \(quoted(display)) in its local header or data descriptor disagree with the central directory"
                )
            }
        }

        /// After the last entry: nothing but its descriptor before the central directory.
        func finish(empty: Bool) throws(Problem) {
            if !empty, directoryOffset - previousEnd > previousSlack {
                throw Problem(
                    code: "archive-gap",
                    message:
                        "\(directoryOffset - previousEnd) unlisted bytes between \(quoted(previousName)) and the central directory"
                )
            }
        }
    }

    /// Refuses what the central record says of an entry that some reader would act on: a NUL in
    /// the name (C readers, libarchive among them, stop there: `a\0b.txt` would become `a`), a
    /// file type other than regular file or directory in the Unix mode bits (Python's `zipfile`
    /// and Info-ZIP read them whatever the "made by" host says; libarchive only for Unix hosts), and
    /// a directory by its attributes whose name does not end in `/` (a directory to libarchive, a
    /// file to `zipfile`).
    private static func checkKind(_ name: ArraySlice<UInt8>, madeBy: UInt16, attributes: UInt32) throws(Problem) {
        let display = String(decoding: name, as: UTF8.self)
        if name.contains(0) {
            let error = ArchiveError.badName(entry: display, problem: .nul)
            throw Problem(code: error.code, message: error.description, entry: error)
        }
        let type = (attributes >> 16) & 0o170000
        if type != 0, type != 0o100000, type != 0o040000 {
            let error = ArchiveError.unsupportedEntryType(entry: display, type: LA.typeName(type))
            throw Problem(code: error.code, message: error.description, entry: error)
        }
        let host = madeBy >> 8
        let directoryByAttributes = type == 0o040000 || (type == 0 && host == 0 && attributes & 0x10 != 0)
        if directoryByAttributes, name.last != UInt8(ascii: "/") {
            let error = ArchiveError.unsupportedEntryType(
                entry: display, type: "directory by its attributes whose name does not end in /")
            throw Problem(code: error.code, message: error.description, entry: error)
        }
    }

    /// Whether the bytes at `at` in `tail` look like a real end record (its directory would lie
    /// inside the file), as opposed to the signature appearing by chance in data.
    private static func plausibleEndRecord(_ tail: [UInt8], _ at: Int, tailStart: UInt64) -> Bool {
        guard at + 22 <= tail.count else { return false }
        let cdSize = UInt64(le32(tail, at + 12))
        let cdOffset = UInt64(le32(tail, at + 16))
        return add(cdOffset, cdSize) <= tailStart + UInt64(at) && le16(tail, at + 10) == le16(tail, at + 8)
    }

    /// Saturating addition: offsets and sizes come from the archive and may be absurd.
    private static func add(_ a: UInt64, _ b: UInt64) -> UInt64 {
        let (r, overflow) = a.addingReportingOverflow(b)
        return overflow ? .max : r
    }

    /// The local headers' reads, made in file order through one buffer of up to 64 KiB: the
    /// headers of small entries that follow one another cost one `pread` together, not two each.
    private struct Window {
        let fileSize: UInt64
        private var buffer: [UInt8] = []
        private var start: UInt64 = 0

        init(fileSize: UInt64) { self.fileSize = fileSize }

        /// Exactly `count` bytes at `offset`, as `ZipStructure.bytes` reads them (the end of the
        /// file first is a truncated archive): from the buffer when it holds them, else after
        /// filling it from `offset`.
        mutating func bytes(
            _ fd: FileDescriptor, at offset: UInt64, count: Int, _ path: FilePath
        ) throws(Problem) -> [UInt8] {
            if offset >= start, add(offset, UInt64(count)) <= start + UInt64(buffer.count) {
                let from = Int(offset - start)
                return Array(buffer[from..<from + count])
            }
            let rest = offset < fileSize ? fileSize - offset : 0
            let fill = max(count, Int(min(64 << 10, rest)))
            buffer = try ZipStructure.bytes(fd, at: offset, count: fill, path)
            start = offset
            return Array(buffer[0..<count])
        }
    }

    /// Exactly `count` bytes at `offset` (the funnel retries EINTR; the end of the file first is
    /// a truncated archive).
    private static func bytes(
        _ fd: FileDescriptor, at offset: UInt64, count: Int, _ path: FilePath
    ) throws(Problem) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let n = out.withUnsafeMutableBytes { raw in
                Result { () throws(FileSystemError) in
                    let rest = UnsafeMutableRawBufferPointer(rebasing: raw[done...])
                    return try SystemCalls.pread(fd, into: rest, at: Int64(offset) + Int64(done), path: path)
                }
            }
            switch n {
            case .failure(let e): throw Problem(code: "archive-unreadable", message: e.description, io: e)
            case .success(0): throw Problem(code: "archive-truncated", message: "the archive ends inside a header")
            case .success(let k): done += k
            }
        }
        return out
    }

    private static func le16(_ b: [UInt8], _ i: Int) -> UInt16 { UInt16(b[i]) | UInt16(b[i + 1]) << 8 }
    private static func le32(_ b: [UInt8], _ i: Int) -> UInt32 {
        UInt32(b[i]) | UInt32(b[i + 1]) << 8 | UInt32(b[i + 2]) << 16 | UInt32(b[i + 3]) << 24
    }
    private static func le64(_ b: [UInt8], _ i: Int) -> UInt64 { UInt64(le32(b, i)) | UInt64(le32(b, i + 4)) << 32 }
}
