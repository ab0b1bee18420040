import Foundation
import LarderArchive
import LarderCore
import LarderTestSupport
import SystemPackage
import Testing

@Suite("Hardened zip reader", .temporaryDirectory("zip"))
struct ZipReaderTests {
    /// One generation of the fixtures for the whole suite.
    static let fixtures = Result { try ZipFixtures() }

    @Test func everyFixtureHasItsOutcome() throws {
        let fx = try Self.fixtures.get()
        // The external tools must all have produced their zips: acceptance is part of the contract.
        for tool in [
            "infozip.zip", "infozip-stream.zip", "bsdtar.zip", "python-deflated.zip", "python-stored.zip",
            "python-zip64.zip", "python-data-descriptor.zip",
        ] {
            #expect(fx.expected[tool] == "ok", "\(tool) missing from the fixtures")
        }
        #expect(fx.expected.count >= 25)
        for (name, expected) in fx.expected.sorted(by: { $0.key < $1.key }) {
            let path = try fx.path(name)
            let outcome: Result<ArchiveListing, ArchiveError>
            do throws(ArchiveError) { outcome = .success(try ZipReader().validate(path)) } catch {
                outcome = .failure(error)
            }
            switch outcome {
            case .success(let listing):
                #expect(expected == "ok", "\(name) was accepted but should fail with \(expected)")
                if expected == "ok" {
                    let names = Set(listing.files.map(\.path.string))
                    #expect(names.isSuperset(of: ["index.html", "css/app.css", "café/naïve.txt"]), "\(name): \(names)")
                    let css = try #require(listing.files.first { $0.path.string == "css/app.css" })
                    #expect(css.size == 300)
                    #expect(css.sha256 == SHA256Digest.of(Data(String(repeating: "body{}", count: 50).utf8)))
                }
            case .failure(let error):
                #expect(error.code.rawValue == expected, "\(name): got \(error.code) (\(error)), expected \(expected)")
                #expect(!error.description.isEmpty)
            }
        }
    }

    /// What libarchive does to names before Larder sees them, pinned so a libarchive upgrade
    /// that changes it is noticed.
    @Test func libarchiveNameNormalisation() throws {
        let fx = try Self.fixtures.get()
        let nfd = try ZipReader().validate(try fx.path("nfd-flagged.zip"))
        #expect(nfd.files.contains { $0.path.string == "caf\u{e9}.txt" })
    }

    /// A zip stored inside the bundle (a web app may ship one) is a file like any other: its end
    /// record, inside the entry's data, is not taken for a second end record of the bundle.
    @Test func anArchiveStoredInsideIsData() throws {
        let fx = try Self.fixtures.get()
        let listing = try ZipReader().validate(try fx.path("inner-zip-stored.zip"))
        let inner = try #require(listing.files.first { $0.path.string == "assets/data.zip" })
        #expect(inner.size > 22)
        #expect(listing.files.count == 4)
    }

    /// A refused name is quoted with its control characters escaped: a hostile name cannot
    /// rewrite the user's terminal line (ESC, BEL, CR) or cut the message short (NUL).
    @Test func refusedNamesAreEscaped() throws {
        let fx = try Self.fixtures.get()
        let cases = ["escape-name.zip": #""\u{1B}[K\u{7}\u{D}.bn""#, "nul-name.zip": #""caf\u{0}.bin""#]
        for (name, shown) in cases {
            let path = try fx.path(name)
            do throws(ArchiveError) {
                _ = try ZipReader().validate(path)
                Issue.record("\(name) must be refused")
            } catch {
                #expect(error.description.contains(shown), "\(name): \(error.description)")
                #expect(!error.description.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F })
            }
        }
    }

    /// Hashing on a second thread gives the same listing as hashing inline, with or without
    /// libarchive's CRC check.
    @Test func parallelHashingAgrees() throws {
        let fx = try Self.fixtures.get()
        for (name, expected) in fx.expected where expected == "ok" {
            let path = try fx.path(name)
            var inline = ZipReader()
            inline.parallelHashing = false
            var parallel = ZipReader()
            parallel.parallelHashing = true
            parallel.checkCRC = false
            #expect(try inline.validate(path) == parallel.validate(path), "\(name)")
        }
    }

    /// Thousands of seeded random corruptions of real zips: the reader refuses or accepts, and
    /// never crashes (overflow, out-of-bounds) — every failure is an `ArchiveError`. A streamed
    /// read of the same bytes accepts only what the reader of the whole file accepts, with the
    /// same listing.
    @Test func mutatedArchivesNeverCrash() throws {
        let fx = try Self.fixtures.get()
        var rng = SplitMix(seed: 0x1A2D_E12)
        let tmp = try TemporaryDirectory.forCurrentTest()
        let target = tmp.url.appendingPathComponent("m.zip")
        var outcomes = [String: Int]()
        var streamedAccepted = 0
        for name in ["python-deflated.zip", "python-zip64.zip", "infozip-stream.zip", "bsdtar.zip"] {
            let original = [UInt8](fx.bytes[name] ?? Data())
            for _ in 0..<400 {
                var bytes = original
                for _ in 0..<Int(rng.next() % 4 + 1) {
                    let i = Int(rng.next() % UInt64(bytes.count))
                    bytes[i] = UInt8(truncatingIfNeeded: rng.next())
                }
                if rng.next() % 8 == 0 { bytes.removeLast(Int(rng.next() % UInt64(bytes.count / 2))) }
                try Data(bytes).write(to: target)
                var whole: ArchiveListing?
                do throws(ArchiveError) {
                    whole = try ZipReader().validate(FilePath(target.path))
                    outcomes["accepted", default: 0] += 1
                } catch {
                    outcomes[error.code.rawValue, default: 0] += 1
                }
                // The same bytes streamed: never a crash, and accepted only as the whole file is.
                let source = try ChunkedSource(FilePath(target.path), seed: rng.next())
                var consumer = ValidatingConsumer()
                do throws(ArchiveError) {
                    let streamed = try ZipReader().read(streaming: source, size: Int64(bytes.count), into: &consumer)
                    #expect(
                        streamed == whole,
                        "\(name): streamed read accepted what the file read did not, or listed otherwise")
                    streamedAccepted += 1
                } catch {}
            }
        }
        #expect(outcomes.values.reduce(0, +) == 1600)
        #expect(outcomes.count > 3, "\(outcomes)")
        // A streamed read meets local headers first and may refuse damage the central directory
        // hides (a wrong local size); it must still accept nearly all of what the file read does.
        let accepted = outcomes["accepted"] ?? 0
        #expect(
            streamedAccepted <= accepted && streamedAccepted * 10 >= accepted * 8,
            "\(streamedAccepted) streamed, \(accepted) whole")
    }

    @Test func messagesNameTheEntry() throws {
        let fx = try Self.fixtures.get()
        let cases = [
            "dotdot.zip": "../x", "symlink.zip": "link", "absolute.zip": "/tmp/x", "duplicate.zip": "index.html",
            "case-collision.zip": "INDEX.html",
        ]
        for (name, entry) in cases {
            let path = try fx.path(name)
            do throws(ArchiveError) {
                _ = try ZipReader().validate(path)
                Issue.record("\(name) must be refused")
            } catch {
                #expect(error.description.contains(entry), "\(name): \(error.description)")
            }
        }
    }

    @Test func limitsAreApplied() throws {
        let fx = try Self.fixtures.get()
        let path = try fx.path("python-deflated.zip")
        var few = TreeLimits.standard
        few.maxFiles = 2
        #expect(throws: ArchiveError.tooManyFiles(limit: 2)) { try ZipReader(limits: few).validate(path) }
        var small = TreeLimits.standard
        small.maxFileBytes = 100
        #expect(throws: ArchiveError.fileTooLarge(entry: "css/app.css", size: 300, limit: 100)) {
            try ZipReader(limits: small).validate(path)
        }
        var total = TreeLimits.standard
        total.maxTotalBytes = 200
        #expect(throws: ArchiveError.totalTooLarge(limit: 200)) { try ZipReader(limits: total).validate(path) }
    }

    @Test func consumerSeesEveryByte() throws {
        let fx = try Self.fixtures.get()
        struct Collect: ArchiveConsumer {
            var data: [String: Data] = [:]
            var current = ""
            var ended: [(RelativePath, Int64)] = []
            mutating func beginFile(_ path: RelativePath, declaredSize: Int64?) throws {
                current = path.string
                data[current] = Data()
            }
            mutating func write(_ chunk: UnsafeRawBufferPointer) throws { data[current]?.append(contentsOf: chunk) }
            mutating func endFile(_ path: RelativePath, size: Int64) throws { ended.append((path, size)) }
        }
        var c = Collect()
        let listing = try ZipReader().read(try fx.path("bsdtar.zip"), into: &c)
        #expect(c.data["index.html"] == Data("<h1>hi</h1>".utf8))
        #expect(c.ended.count == 3)
        for (path, size) in c.ended { #expect(Int64(c.data[path.string]?.count ?? -1) == size) }
        #expect(listing.files.count == 3)
        for e in listing.files { #expect(SHA256Digest.of(c.data[e.path.string] ?? Data()) == e.sha256) }
    }

    @Test func sinkErrorsStopTheRead() throws {
        let fx = try Self.fixtures.get()
        struct Failing: ArchiveConsumer {
            struct Boom: Error {}
            mutating func write(_ chunk: UnsafeRawBufferPointer) throws { throw Boom() }
        }
        var f = Failing()
        #expect(throws: ArchiveError.self) {
            try ZipReader().read(try fx.path("infozip.zip"), into: &f)
        }
    }
}

/// A small deterministic generator for the mutation test.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

@Suite("Deterministic writer and gzip", .temporaryDirectory("zip"))
struct WriterTests {
    func makeTree(_ dir: URL) throws -> [(path: RelativePath, source: FilePath)] {
        let files = [
            "index.html": "<h1>x</h1>", "img/a.png": String(repeating: "p", count: 5000), "z/é.txt": "e",
            "b.js": String(repeating: "console.log(1);\n", count: 200),
        ]
        var out: [(RelativePath, FilePath)] = []
        for (name, text) in files {
            let url = dir.appendingPathComponent(name)
            try FileManager.default.createDirectory(
                at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try Data(text.utf8).write(to: url)
            out.append((try #require(RelativePath(name)), FilePath(url.path)))
        }
        return out.sorted { $0.0 < $1.0 }.map { (path: $0.0, source: $0.1) }
    }

    @Test func sameTreeSameBytes() throws {
        let tmp = try TemporaryDirectory.forCurrentTest()
        let files = try makeTree(tmp.url.appendingPathComponent("src"))
        let a = FilePath(tmp.url.appendingPathComponent("a.zip").path)
        let b = FilePath(tmp.url.appendingPathComponent("b.zip").path)
        let entriesA = try ZipWriter.write(files, to: a)
        // Touch every source: timestamps must not reach the archive.
        for f in files {
            try FileManager.default.setAttributes(
                [.modificationDate: Date(timeIntervalSince1970: 1_234_567)], ofItemAtPath: f.source.string)
        }
        let entriesB = try ZipWriter.write(files, to: b)
        let bytesA = try Data(contentsOf: URL(fileURLWithPath: a.string))
        let bytesB = try Data(contentsOf: URL(fileURLWithPath: b.string))
        #expect(bytesA == bytesB)
        #expect(entriesA == entriesB)
        // Our own output passes our reader and lists the same files.
        let listing = try ZipReader().validate(a)
        #expect(listing.files == entriesA.sorted { $0.path < $1.path })
        // And other tools read it: Python's zipfile test and names (UTF-8 flag set).
        let names = try run(
            "python3",
            [
                "-c",
                "import zipfile,sys;z=zipfile.ZipFile(sys.argv[1]);assert z.testzip() is None;print('\\n'.join(i.filename for i in z.infolist()))",
                a.string,
            ])
        #expect(
            String(decoding: names, as: UTF8.self).split(separator: "\n") == [
                "b.js", "img/a.png", "index.html", "z/é.txt",
            ])
        try run("unzip", ["-tq", a.string])
    }

    /// What is already compressed is stored; the rest, WebAssembly included, is deflated.
    @Test func storedOnlyWhatIsCompressedAlready() throws {
        let tmp = try TemporaryDirectory.forCurrentTest()
        let module = Data((0..<200_000).map { UInt8(truncatingIfNeeded: ($0 / 7) % 61) })
        var files: [(path: RelativePath, source: FilePath)] = []
        for name in ["app.wasm", "logo.png", "font.woff2", "main.js"] {
            let url = tmp.url.appendingPathComponent(name)
            try module.write(to: url)
            files.append((try #require(RelativePath(name)), FilePath(url.path)))
        }
        let zip = FilePath(tmp.url.appendingPathComponent("b.zip").path)
        _ = try ZipWriter.write(files, to: zip)
        let methods = try run(
            "python3",
            [
                "-c",
                "import zipfile,sys;print(' '.join('%s:%d' % (i.filename, i.compress_type) for i in zipfile.ZipFile(sys.argv[1]).infolist()))",
                zip.string,
            ])
        #expect(
            String(decoding: methods, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
                == "app.wasm:8 logo.png:0 font.woff2:0 main.js:8")
    }

    /// Contents whose inflated size is a multiple of the inflater's 256 KiB buffer (the last
    /// inflate call fills it exactly) and odd sizes around it.
    @Test(arguments: [0, 1, 262_143, 262_144, 262_145, 524_288, 1_048_576])
    func gzipBufferBoundaries(_ size: Int) throws {
        let tmp = try TemporaryDirectory.forCurrentTest()
        let src = tmp.url.appendingPathComponent("in.bin")
        let data = Data((0..<size).map { UInt8(truncatingIfNeeded: $0 / 97) })
        try data.write(to: src)
        let gz = FilePath(tmp.url.appendingPathComponent("out.gz").path)
        let objects = BytePipeline.standard
        _ = try objects.encodeObject(file: FilePath(src.path), to: gz)
        let back = try objects.contentOfObject(file: gz, limit: 1 << 30)
        #expect(back.size == Int64(size) && back.sha256 == SHA256Digest.of(data))
    }

    @Test func gzipRoundTrip() throws {
        let tmp = try TemporaryDirectory.forCurrentTest()
        let src = tmp.url.appendingPathComponent("in.bin")
        var data = Data()
        for i in 0..<300_000 { data.append(UInt8(truncatingIfNeeded: i * 7 / 3)) }
        try data.write(to: src)
        let gz = FilePath(tmp.url.appendingPathComponent("out.gz").path)
        let objects = BytePipeline.standard
        let result = try objects.encodeObject(file: FilePath(src.path), to: gz)
        #expect(result.size == Int64(data.count))
        #expect(result.sha256 == SHA256Digest.of(data))
        let back = try objects.contentOfObject(file: gz, limit: 1 << 30)
        #expect(back.size == Int64(data.count) && back.sha256 == SHA256Digest.of(data))
        // The system's gzip agrees.
        let plain = try run("gzip", ["-dc", gz.string])
        #expect(plain == data)
        // A limit below the content's size is enforced.
        #expect(throws: BlobError.malformed(.object, GzipError.tooLarge(limit: 1000).description)) {
            try objects.contentOfObject(file: gz, limit: 1000)
        }
        // Truncated and trailing-garbage streams are refused.
        let bytes = try Data(contentsOf: URL(fileURLWithPath: gz.string))
        let cut = tmp.url.appendingPathComponent("cut.gz")
        try bytes.prefix(bytes.count - 4).write(to: cut)
        #expect(throws: BlobError.self) { try objects.contentOfObject(file: FilePath(cut.path), limit: 1 << 30) }
        let extra = tmp.url.appendingPathComponent("extra.gz")
        try (bytes + Data("junk".utf8)).write(to: extra)
        #expect(throws: BlobError.malformed(.object, GzipError.trailingData.description)) {
            try objects.contentOfObject(file: FilePath(extra.path), limit: 1 << 30)
        }
    }
}
