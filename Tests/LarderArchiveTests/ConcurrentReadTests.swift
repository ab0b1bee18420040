import Foundation
import LarderArchive
import LarderCore
import LarderTestSupport
import Synchronization
import SystemPackage
import Testing

/// The read shared among threads (`ReadParallelism`) against the read on one thread: forced onto
/// two and three workers whatever the archive's size, it must give the same listing, the same
/// bytes to the consumer, and — for every refused archive — the same error.
@Suite("Zip reader: a read shared among threads", .temporaryDirectory("zip-shared"))
struct ConcurrentReadTests {
    /// Two and three workers on any archive.
    static let shared = [2, 3].map { ReadParallelism(maxWorkers: $0, minimumArchiveBytes: 0) }

    /// What `reader` makes of the archive at `path` (a read into `consumer`'s copy).
    static func outcome<C: ConcurrentArchiveConsumer>(
        _ reader: ZipReader, _ path: FilePath, _ consumer: C
    ) -> Result<ArchiveListing, ArchiveError> {
        var consumer = consumer
        do throws(ArchiveError) { return .success(try reader.read(path, into: &consumer)) } catch {
            return .failure(error)
        }
    }

    /// Expects every shared read of `path` to end as the read on one thread does; returns that.
    @discardableResult
    static func expectAgreement<C: ConcurrentArchiveConsumer>(
        _ path: FilePath, limits: TreeLimits = .standard, checkCRC: Bool = true, consumer: C = ValidatingConsumer(),
        _ comment: String
    ) -> Result<ArchiveListing, ArchiveError> {
        var one = ZipReader(limits: limits)
        one.checkCRC = checkCRC
        one.parallelism = .sequential
        let expected = outcome(one, path, consumer)
        for parallelism in shared {
            var reader = one
            reader.parallelism = parallelism
            let got = outcome(reader, path, consumer)
            #expect(got == expected, "\(comment), \(parallelism.maxWorkers) workers")
        }
        return expected
    }

    /// Writes a zip of `files` with Python's `zipfile` (see `generator`) and returns its path.
    static func makeZip(_ name: String, _ spec: [[String: Any]]) throws -> FilePath {
        let dir = try TemporaryDirectory.forCurrentTest()
        let out = dir.appending(name).path
        let json = String(decoding: try JSONSerialization.data(withJSONObject: spec), as: UTF8.self)
        try run("python3", ["-c", generator, out, json])
        return FilePath(out)
    }

    /// Entries of a generated zip: `count` files of assorted sizes (up to 200 KiB, compressible
    /// text, some stored), in a few directories, with explicit directory entries.
    static func assorted(_ count: Int, seed: Int = 1) -> [[String: Any]] {
        var spec: [[String: Any]] = [["name": "assets/", "dir": true], ["name": "assets/img/", "dir": true]]
        var rng = SplitMix(seed: UInt64(seed))
        for i in 0..<count {
            let dir = ["", "assets/", "assets/img/", "js/", "js/chunks/"][Int(rng.next() % 5)]
            let size = i % 7 == 0 ? Int(rng.next() % 200_000) : Int(rng.next() % 12_000)
            spec.append([
                "name": "\(dir)f\(i).txt", "size": size, "seed": i, "store": rng.next() % 6 == 0,
            ])
        }
        return spec
    }

    /// Python: writes the zip at argv[1] from the JSON spec in argv[2]. Each entry has a name,
    /// and a size and seed (deterministic compressible text), or "dir"; "store" stores it
    /// uncompressed; "corrupt" flips a byte in the middle of its data once it is written.
    static let generator = #"""
        import json, random, sys, zipfile
        out, spec = sys.argv[1], json.loads(sys.argv[2])
        words = [b"alpha", b"beta", b"gamma", b"delta", b"const", b"function", b"return", b"{", b"}", b"\n"]
        with zipfile.ZipFile(out, "w") as z:
            for e in spec:
                if e.get("dir"):
                    z.writestr(zipfile.ZipInfo(e["name"]), b"")
                    continue
                r = random.Random(e["seed"])
                data = bytearray()
                while len(data) < e["size"]:
                    data += r.choice(words) + b" "
                method = zipfile.ZIP_STORED if e.get("store") else zipfile.ZIP_DEFLATED
                z.writestr(zipfile.ZipInfo(e["name"], (2024, 1, 1, 0, 0, 0)), bytes(data[: e["size"]]), method)
        bad = [e["name"] for e in spec if e.get("corrupt")]
        if bad:
            with zipfile.ZipFile(out) as z:
                infos = {i.filename: i for i in z.infolist()}
            raw = bytearray(open(out, "rb").read())
            for name in bad:
                i = infos[name]
                start = i.header_offset + 30 + len(i.filename.encode()) + len(i.extra)
                raw[start + max(i.compress_size // 2, 0)] ^= 0x5A
            open(out, "wb").write(bytes(raw))
        """#

    @Test func everyFixtureAgrees() throws {
        let fx = try ZipReaderTests.fixtures.get()
        for (name, expected) in fx.expected.sorted(by: { $0.key < $1.key }) {
            let path = try fx.path(name)
            for crc in [true, false] {
                let got = Self.expectAgreement(path, checkCRC: crc, "\(name), CRC \(crc)")
                switch got {
                case .success: #expect(expected == "ok", "\(name) accepted")
                case .failure(let error): #expect(error.code.rawValue == expected, "\(name): \(error)")
                }
            }
        }
    }

    /// The mutation test's corruptions of real zips: whatever each one is, accepted or refused,
    /// the shared read says the same.
    @Test func mutatedArchivesAgree() throws {
        let fx = try ZipReaderTests.fixtures.get()
        var rng = SplitMix(seed: 0x5A_12ED)
        let target = try TemporaryDirectory.forCurrentTest().appending("m.zip")
        var codes = Set<String>()
        for name in ["python-deflated.zip", "python-zip64.zip", "infozip-stream.zip", "bsdtar.zip"] {
            let original = [UInt8](fx.bytes[name] ?? Data())
            for _ in 0..<150 {
                var bytes = original
                for _ in 0..<Int(rng.next() % 4 + 1) {
                    bytes[Int(rng.next() % UInt64(bytes.count))] = UInt8(truncatingIfNeeded: rng.next())
                }
                try Data(bytes).write(to: target)
                let got = Self.expectAgreement(FilePath(target.path), "a mutation of \(name)")
                if case .failure(let error) = got { codes.insert(error.code.rawValue) }
            }
        }
        #expect(codes.count > 3, "\(codes)")
    }

    /// Every byte reaches the consumer, the same bytes under the same names, and the listing is
    /// the same; the consumer's workers are all given back.
    @Test func theSameBytesReachTheConsumer() throws {
        let zip = try Self.makeZip("assorted.zip", Self.assorted(120))
        let one = Recorder()
        var sequential = ZipReader()
        sequential.parallelism = .sequential
        var recorder = one
        let expected = try sequential.read(zip, into: &recorder)
        #expect(expected.files.count == 120)
        #expect(expected.directories.count == 2)
        for parallelism in Self.shared {
            var reader = ZipReader()
            reader.parallelism = parallelism
            var recorder = Recorder()
            #expect(try reader.read(zip, into: &recorder) == expected)
            #expect(recorder.shared.files.withLock { $0 } == one.shared.files.withLock { $0 })
            #expect(recorder.shared.directories.withLock { $0 } == one.shared.directories.withLock { $0 })
            #expect(recorder.absorbed == parallelism.maxWorkers)
        }
        for file in expected.files {
            #expect(SHA256Digest.of(one.shared.files.withLock { $0[file.path.string] } ?? Data()) == file.sha256)
        }
    }

    /// A corrupted entry anywhere — in either worker's share, or two of them — fails the read
    /// at the earliest one, with the error of the read on one thread (with and without the
    /// CRC-32 check, which turns corrupted bytes that still inflate into an error).
    @Test func corruptedDataFailsAtTheSameEntry() throws {
        let base = Self.assorted(16, seed: 7)
        let files = base.indices.filter { base[$0]["dir"] == nil && (base[$0]["size"] as? Int ?? 0) > 64 }
        var refused = 0
        var cases: [[Int]] = files.map { [$0] }
        cases += [[files[1], files[files.count - 2]], [files[2], files[3]]]
        for corrupt in cases {
            var spec = base
            for i in corrupt { spec[i]["corrupt"] = true }
            let zip = try Self.makeZip("corrupt.zip", spec)
            for crc in [true, false] {
                let got = Self.expectAgreement(zip, checkCRC: crc, "corrupted \(corrupt), CRC \(crc)")
                if case .failure = got { refused += 1 }
            }
        }
        #expect(refused >= files.count)
    }

    /// A header refused after a corrupted entry, and before one: the read fails at whichever
    /// comes first, as on one thread.
    @Test func aRefusedHeaderAndACorruptedEntry() throws {
        let base = Self.assorted(12, seed: 3)
        let fileIndices = base.indices.filter { base[$0]["dir"] == nil && (base[$0]["size"] as? Int ?? 0) > 64 }
        let (early, late) = (fileIndices[2], fileIndices[fileIndices.count - 2])
        for (corrupt, hostile) in [(early, late), (late, early)] {
            for hostileName in ["../escape.txt", "f0.txt", "ASSETS/x.txt", "js"] {
                var spec = base
                spec[corrupt]["corrupt"] = true
                spec[hostile]["name"] = hostileName
                let zip = try Self.makeZip("mixed.zip", spec)
                let got = Self.expectAgreement(zip, "corrupt \(corrupt), \(hostileName) at \(hostile)")
                #expect(throws: ArchiveError.self) { try got.get() }
            }
        }
    }

    /// The total, per-file, file-count, entry-count and compression-ratio limits, each crossed
    /// at every point of the archive in turn: the same entry and error as on one thread.
    @Test func limitsAreCrossedAtTheSameEntry() throws {
        let zip = try Self.makeZip("limits.zip", Self.assorted(40, seed: 11))
        let listing = try ZipReader().validate(zip)
        let total = listing.files.reduce(Int64(0)) { $0 + $1.size }
        let archiveSize = Int64(try Data(contentsOf: URL(fileURLWithPath: zip.string)).count)
        var outcomes = Set<String>()
        for step in 1...20 {
            var limits = TreeLimits.standard
            limits.maxTotalBytes = total * Int64(step) / 20
            let got = Self.expectAgreement(zip, limits: limits, "total \(limits.maxTotalBytes)")
            outcomes.insert((try? got.get()).map { _ in "ok" } ?? "refused")

            var ratio = TreeLimits.standard
            ratio.ratioFloorBytes = total * Int64(step - 1) / 20
            ratio.maxCompressionRatio = max(1, total / archiveSize - 1)
            Self.expectAgreement(zip, limits: ratio, "ratio floor \(ratio.ratioFloorBytes)")

            var files = TreeLimits.standard
            files.maxFiles = listing.files.count * step / 20
            Self.expectAgreement(zip, limits: files, "\(files.maxFiles) files")

            var entries = TreeLimits.standard
            entries.maxEntries = (listing.files.count + 2) * step / 20
            Self.expectAgreement(zip, limits: entries, "\(entries.maxEntries) entries")

            var fileSize = TreeLimits.standard
            fileSize.maxFileBytes = Int64(step) * 10_000
            Self.expectAgreement(zip, limits: fileSize, "files of \(fileSize.maxFileBytes) bytes")
        }
        #expect(outcomes == ["ok", "refused"])
    }

    /// A consumer that refuses one entry, in either share: the read fails with the same error,
    /// naming that entry; every worker is given back.
    @Test func aConsumerFailureIsReportedAsOnOneThread() throws {
        let spec = Self.assorted(10, seed: 5)
        let zip = try Self.makeZip("sink.zip", spec)
        for entry in spec {
            let name = entry["name"] as? String ?? ""
            for stage in Refusing.Stage.allCases {
                let refusing = Refusing(path: name.hasSuffix("/") ? String(name.dropLast()) : name, stage: stage)
                let got = Self.expectAgreement(zip, consumer: refusing, "\(name) refused at \(stage)")
                if stage == .directory, entry["dir"] == nil { continue }
                if stage != .directory, entry["dir"] != nil { continue }
                if stage == .write, (entry["size"] as? Int ?? 0) == 0 { continue }
                #expect(throws: ArchiveError.sink(entry: refusing.path, detail: "\(Refusing.No())"), "\(name)") {
                    try got.get()
                }
            }
        }
    }

    /// Below `minimumArchiveBytes`, above `maximumEntries` (and with one worker), the read is the
    /// one on one thread: no worker is made.
    @Test func smallArchivesAreReadOnOneThread() throws {
        let zip = try Self.makeZip("small.zip", Self.assorted(8))
        for parallelism in [
            ReadParallelism(maxWorkers: 4, minimumArchiveBytes: 1 << 40),
            ReadParallelism(maxWorkers: 1, minimumArchiveBytes: 0),
            ReadParallelism(maxWorkers: 4, minimumArchiveBytes: 0, maximumEntries: 7),
        ] {
            var reader = ZipReader()
            reader.parallelism = parallelism
            var recorder = Recorder()
            _ = try reader.read(zip, into: &recorder)
            #expect(recorder.absorbed == 0)
            #expect(recorder.shared.made.withLock { $0 } == 0)
        }
    }
}

/// Records what it is given, under a lock shared by its workers: file bytes and directories by
/// name. Counts the workers made and given back.
struct Recorder: ConcurrentArchiveConsumer {
    /// What every worker records into (a class: a `Mutex` is not copied with the worker).
    final class Shared: Sendable {
        let files = Mutex<[String: Data]>([:])
        let directories = Mutex<Set<String>>([])
        let made = Mutex(0)
    }
    let shared = Shared()
    var absorbed = 0
    private var current: String?
    private var bytes = Data()

    mutating func directory(_ path: RelativePath) throws {
        let inserted = shared.directories.withLock { $0.insert(path.string).inserted }
        if !inserted { throw Twice() }
    }
    mutating func beginFile(_ path: RelativePath, declaredSize: Int64?) throws {
        guard current == nil else { throw Twice() }
        current = path.string
        bytes = Data()
    }
    mutating func write(_ chunk: UnsafeRawBufferPointer) throws { bytes.append(contentsOf: chunk) }
    mutating func endFile(_ path: RelativePath, size: Int64) throws {
        guard current == path.string, Int64(bytes.count) == size else { throw Twice() }
        let previous = shared.files.withLock { $0.updateValue(bytes, forKey: path.string) }
        if previous != nil { throw Twice() }
        current = nil
    }
    func makeWorker() -> Recorder {
        shared.made.withLock { $0 += 1 }
        var worker = self
        worker.current = nil
        worker.absorbed = 0
        return worker
    }
    mutating func absorb(_ worker: Recorder) { absorbed += 1 }

    struct Twice: Error {}
}

/// Refuses one entry at one stage.
struct Refusing: ConcurrentArchiveConsumer {
    enum Stage: CaseIterable { case directory, begin, write, end }
    struct No: Error, CustomStringConvertible { var description: String { "refused" } }
    let path: String
    let stage: Stage

    mutating func directory(_ path: RelativePath) throws {
        if stage == .directory, path.string == self.path { throw No() }
    }
    mutating func beginFile(_ path: RelativePath, declaredSize: Int64?) throws {
        if stage == .begin, path.string == self.path { throw No() }
        current = path.string
    }
    mutating func write(_ chunk: UnsafeRawBufferPointer) throws { if stage == .write, current == path { throw No() } }
    mutating func endFile(_ path: RelativePath, size: Int64) throws {
        if stage == .end, path.string == self.path { throw No() }
    }
    private var current = ""
    init(path: String, stage: Stage) {
        self.path = path
        self.stage = stage
    }
    func makeWorker() -> Refusing { self }
    mutating func absorb(_ worker: Refusing) {}
}
