import Foundation
import LarderCore
import LarderTestSupport
import SystemPackage
import Testing

@testable import LarderArchive

/// Hands out a file's bytes in chunks of pseudo-random sizes (1 byte to 64 KiB), as a download
/// would, and can fail after a given number of bytes.
final class ChunkedSource: ArchiveByteSource {
    let path: FilePath
    let data: Data
    var offset = 0
    var rng: SplitMix
    var failAfter: Int?
    private(set) var completeCalls = 0
    struct Cut: Error {}

    init(_ path: FilePath, seed: UInt64, failAfter: Int? = nil) throws {
        self.path = path
        data = try Data(contentsOf: URL(fileURLWithPath: path.string))
        rng = SplitMix(seed: seed)
        self.failAfter = failAfter
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        if let cut = failAfter, offset >= cut { throw Cut() }
        let want = Int(rng.next() % 65_536) + 1
        var n = min(want, buffer.count, data.count - offset)
        if let cut = failAfter { n = min(n, cut - offset) }
        if n <= 0 { return 0 }
        data.withUnsafeBytes { raw in
            buffer.baseAddress?.copyMemory(from: raw.baseAddress! + offset, byteCount: n)
        }
        offset += n
        return n
    }

    func complete() throws -> FilePath {
        completeCalls += 1
        return path
    }
}

@Suite("Streamed zip reading", .temporaryDirectory("zip"))
struct StreamingReadTests {
    /// Every fixture: what the reader of a complete file accepts, a streamed read accepts with the
    /// same listing; what it refuses, a streamed read refuses too.
    @Test(arguments: [1, 2, 3])
    func streamedReadAgreesWithFileRead(seed: UInt64) throws {
        let fx = try ZipReaderTests.fixtures.get()
        for (name, expected) in fx.expected.sorted(by: { $0.key < $1.key }) {
            let path = try fx.path(name)
            let source = try ChunkedSource(path, seed: seed)
            var consumer = ValidatingConsumer()
            var reader = ZipReader()
            reader.parallelHashing = seed % 2 == 0
            let outcome: Result<ArchiveListing, ArchiveError>
            do throws(ArchiveError) {
                outcome = .success(try reader.read(streaming: source, size: Int64(source.data.count), into: &consumer))
            } catch { outcome = .failure(error) }
            switch outcome {
            case .success(let listing):
                #expect(expected == "ok", "\(name) was accepted when streamed but must fail with \(expected)")
                if expected == "ok" { #expect(listing == (try ZipReader().validate(path)), "\(name)") }
                #expect(source.completeCalls == 1, "\(name): a streamed read must wait for the complete file")
            case .failure(let error):
                #expect(expected != "ok", "\(name) was refused when streamed: \(error)")
                #expect(!error.description.isEmpty)
            }
        }
    }

    /// The address of a path's UTF-8 storage (nil for a string stored inline).
    static func storage(_ p: RelativePath) -> UnsafeRawPointer? {
        guard p.string.utf8.count > 15 else { return nil }
        return p.string.utf8.withContiguousStorageIfAvailable { UnsafeRawPointer($0.baseAddress!) } ?? nil
    }

    /// `ZipReader.expected` is a memory hint: the listing is the one read without it, and a name
    /// equal to an expected path shares that path's storage (no second copy is held).
    @Test func expectedFilesOnlyShareStorage() throws {
        let fx = try ZipReaderTests.fixtures.get()
        var shared = 0
        for (name, verdict) in fx.expected.sorted(by: { $0.key < $1.key }) where verdict == "ok" {
            let path = try fx.path(name)
            let plain = try ZipReader().validate(path)
            // The list's paths in storage of their own, one changed, and one the archive lacks.
            var expected = plain.files.map { f in
                FileEntry(
                    path: try! RelativePath.validate(String(decoding: Array(f.path.string.utf8), as: UTF8.self)).get(),
                    size: f.size, sha256: f.sha256)
            }
            if let first = expected.first {
                expected[0] = FileEntry(
                    path: try RelativePath.validate(first.path.string + "-not-in-the-archive").get(), size: 1,
                    sha256: first.sha256)
            }
            let anyDigest = plain.files.first?.sha256 ?? SHA256Digest.of([UInt8]())
            let lacking = try RelativePath.validate("zzzz/only/in/the/list.txt").get()
            expected.append(FileEntry(path: lacking, size: 1, sha256: anyDigest))
            expected.sort { $0.path < $1.path }
            var reader = ZipReader()
            reader.expected = expected
            var consumer = ValidatingConsumer()
            let source = try ChunkedSource(path, seed: 7)
            let listing = try reader.read(streaming: source, size: Int64(source.data.count), into: &consumer)
            #expect(listing == plain, "\(name)")
            let byPath = Dictionary(expected.map { ($0.path.string, $0.path) }, uniquingKeysWith: { a, _ in a })
            for f in listing.files {
                guard let mine = Self.storage(f.path) else { continue }
                if let e = byPath[f.path.string], let theirs = Self.storage(e) {
                    #expect(mine == theirs, "\(name): \(f.path) holds a copy of an expected path")
                    shared += 1
                } else {
                    #expect(!expected.contains { Self.storage($0.path) == mine }, "\(name): \(f.path)")
                }
            }
        }
        #expect(shared > 0, "no fixture has a name long enough to be stored out of line")
    }

    /// The entry hidden between two others is found by the structure check, whichever reader.
    @Test func hiddenEntryIsRefused() throws {
        let fx = try ZipReaderTests.fixtures.get()
        let path = try fx.path("hidden-entry.zip")
        #expect(throws: ArchiveError.self) { try ZipReader().validate(path) }
        let source = try ChunkedSource(path, seed: 7)
        var consumer = ValidatingConsumer()
        do throws(ArchiveError) {
            _ = try ZipReader().read(streaming: source, size: Int64(source.data.count), into: &consumer)
            Issue.record("hidden-entry.zip must be refused")
        } catch {
            #expect(error.code == "archive-gap", "\(error)")
            #expect(error.description.contains("unlisted bytes"))
        }
    }

    /// A transfer that stops inside the first entry ends the read with the source's error, and
    /// never asks for the complete file.
    @Test func aFailingSourceStopsTheRead() throws {
        let fx = try ZipReaderTests.fixtures.get()
        let path = try fx.path("infozip.zip")
        let size = try Data(contentsOf: URL(fileURLWithPath: path.string)).count
        let source = try ChunkedSource(path, seed: 3, failAfter: 40)
        var consumer = ValidatingConsumer()
        do throws(ArchiveError) {
            _ = try ZipReader().read(streaming: source, size: Int64(size), into: &consumer)
            Issue.record("a cut stream must fail")
        } catch {
            #expect(error.code == "archive-unreadable", "\(error)")
            #expect(error.description.contains("stopped arriving"), "\(error)")
        }
        #expect(source.completeCalls == 0)
    }
}

/// The compact account a streamed read is checked with against the central directory.
@Suite("Entry accounts")
struct EntryAccountTests {
    func account(_ records: [(String, Bool, Int64)], expecting other: EntryAccount? = nil) -> EntryAccount {
        var a = other.map { EntryAccount(expecting: $0) } ?? EntryAccount()
        for (name, isDirectory, size) in records {
            Array(name.utf8).withUnsafeBufferPointer { a.add($0, isDirectory: isDirectory, size: size) }
        }
        return a
    }

    @Test func equalRecordsGiveEqualAccounts() {
        let records: [(String, Bool, Int64)] = [("a/", true, 0), ("a/b.txt", false, 3), ("c.js", false, 0)]
        let streamed = account(records)
        let central = account(records, expecting: streamed)
        #expect(central.digest == streamed.digest && central.count == 3 && central.firstDifference == nil)
    }

    @Test("a different name, kind, size, order or count is told apart and located")
    func differencesAreFound() {
        let base: [(String, Bool, Int64)] = [("a/", true, 0), ("a/b.txt", false, 3), ("c.js", false, 0)]
        let streamed = account(base)
        let variants: [([(String, Bool, Int64)], Int)] = [
            ([("a/", true, 0), ("a/B.txt", false, 3), ("c.js", false, 0)], 1),
            ([("a/", true, 0), ("a/b.txt", false, 4), ("c.js", false, 0)], 1),
            ([("a/", false, 0), ("a/b.txt", false, 3), ("c.js", false, 0)], 0),
            ([("a/", true, 0), ("c.js", false, 0), ("a/b.txt", false, 3)], 1),
            ([("a/", true, 0), ("a/b.txt", false, 3), ("c.js", false, 0), ("d", false, 1)], 3),
        ]
        for (records, at) in variants {
            let central = account(records, expecting: streamed)
            #expect(central.digest != streamed.digest || central.count != streamed.count)
            #expect(central.firstDifference?.index == at, "\(records)")
        }
        // Fewer entries: the same prefix, told apart by the count.
        let shorter = account(Array(base.prefix(2)), expecting: streamed)
        #expect(shorter.count == 2 && shorter.digest != streamed.digest && shorter.firstDifference == nil)
    }
}
