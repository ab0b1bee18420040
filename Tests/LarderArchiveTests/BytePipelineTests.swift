import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import LarderTestSupport
import SystemPackage
import Testing

@Suite("Archive: the byte pipeline (one codec per kind of blob)")
struct BytePipelineTests {
    /// Some compressible text and a small edit of it.
    static let content = Data((0..<3000).map { "line \($0): the quick brown fox\n" }.joined().utf8)
    static var edited: Data {
        var d = content
        d.replaceSubrange(1000..<1004, with: Data("EDIT".utf8))
        return d
    }

    /// The standard pipeline and one with every kind masked (a layered encoding, as encryption).
    static let pipelines: [(String, BytePipeline)] = [("standard", .standard), ("masked", MaskingCodec.pipeline)]

    func file(_ dir: TemporaryDirectory, _ name: String, _ data: Data) throws -> FilePath {
        let path = FilePath(dir.appending(name).path)
        try AtomicFile.write(data, to: path)
        return path
    }

    @Test("an object round-trips: encoded from a file, placed with its size and SHA-256 checked", arguments: [0, 1])
    func objectRoundTrip(_ which: Int) throws {
        let (name, pipeline) = Self.pipelines[which]
        let dir = try TemporaryDirectory("pipeline")
        defer { dir.remove() }
        let source = try file(dir, "source", Self.content)
        let stored = FilePath(dir.appending("object").path)
        let encoded = try pipeline.encodeObject(file: source, to: stored)
        #expect(encoded.size == Int64(Self.content.count) && encoded.sha256 == SHA256Digest.of(Self.content))
        let bytes = try AtomicFile.read(stored)
        #expect(encoded.storedSize == Int64(bytes.count), "\(name)")
        // Standard objects are gzip; masked ones show no gzip magic at all.
        #expect((bytes.prefix(2) == Data([0x1F, 0x8B])) == (name == "standard"))
        let target = FilePath(dir.appending("placed").path)
        try pipeline.placeObject(stored, at: target, size: encoded.size, sha256: encoded.sha256)
        #expect(try AtomicFile.read(target) == Self.content)
        #expect(try pipeline.decodeObject(file: stored, limit: encoded.size) == Self.content)
        let digest = try pipeline.contentOfObject(file: stored, limit: encoded.size)
        #expect(digest.size == encoded.size && digest.sha256 == encoded.sha256)
    }

    @Test("an object that is another content, damaged, or placed over a file fails with its own case")
    func objectRefusals() throws {
        let pipeline = BytePipeline.standard
        let dir = try TemporaryDirectory("pipeline")
        defer { dir.remove() }
        let stored = FilePath(dir.appending("object").path)
        let encoded = try pipeline.encodeObject(file: try file(dir, "source", Self.content), to: stored)
        let other = SHA256Digest.of(Data("other".utf8))
        #expect(throws: BlobError.mismatch(.object, size: encoded.size, sha256: encoded.sha256)) {
            try pipeline.placeObject(
                stored, at: FilePath(dir.appending("a").path), size: encoded.size, sha256: other)
        }
        var damaged = try AtomicFile.read(stored)
        damaged[damaged.count / 2] ^= 0xFF
        let bad = try file(dir, "damaged", damaged)
        do {
            try pipeline.placeObject(bad, at: FilePath(dir.appending("b").path), size: encoded.size, sha256: other)
            Issue.record("a damaged object was placed")
        } catch {
            guard case .malformed(.object, _) = error else {
                Issue.record("a damaged object gave \(error)")
                return
            }
        }
        let existing = try file(dir, "existing", Data())
        do {
            try pipeline.placeObject(stored, at: existing, size: encoded.size, sha256: encoded.sha256)
            Issue.record("an object was placed over an existing file")
        } catch {
            guard case .io = error else {
                Issue.record("placing over a file gave \(error)")
                return
            }
        }
    }

    @Test("a document round-trips; a truncated one or one past its limit is refused", arguments: [0, 1])
    func documents(_ which: Int) throws {
        let pipeline = Self.pipelines[which].1
        let stored = try pipeline.encodeDocument(Self.content)
        #expect(try pipeline.decodeDocument(stored, limit: Int64(Self.content.count), exact: true) == Self.content)
        #expect(throws: BlobError.self) {
            _ = try pipeline.decodeDocument(stored.prefix(stored.count - 9), limit: 1 << 30)
        }
        #expect(throws: BlobError.self) {
            _ = try pipeline.decodeDocument(stored, limit: Int64(Self.content.count) - 1)
        }
    }

    @Test("a patch made and placed: the result checked; another base or result is refused in words", arguments: [0, 1])
    func patches(_ which: Int) throws {
        let pipeline = Self.pipelines[which].1
        let dir = try TemporaryDirectory("pipeline")
        defer { dir.remove() }
        let stored = try pipeline.makePatch(base: Self.content, target: Self.edited, level: 3)
        #expect(try pipeline.applyPatch(stored, base: Self.content, limit: 1 << 20) == Self.edited)
        // The patch lies in a delta's patch file between other patches' bytes.
        let patchFile = try file(dir, "patch", Data(repeating: 7, count: 100) + stored + Data(repeating: 9, count: 50))
        let base = try file(dir, "base", Self.content)
        let ref = PatchRef(
            target: SHA256Digest.of(Self.edited), size: Int64(Self.edited.count), base: SHA256Digest.of(Self.content),
            offset: 100, length: Int64(stored.count))
        let output = FilePath(dir.appending("out").path)
        try pipeline.placePatched(ref, patchFile: patchFile, base: base, at: output)
        #expect(try AtomicFile.read(output) == Self.edited)
        // A slice that runs past the file's end is refused.
        var beyond = ref
        beyond.offset = 120
        #expect(throws: BlobError.self) {
            try pipeline.placePatched(beyond, patchFile: patchFile, base: base, at: output)
        }

        let altered = try file(dir, "altered", Self.edited)
        #expect(
            throws: BlobError.malformed(
                .patch, "the base content on disk is not the one the patch applies to (altered or damaged)")
        ) {
            try pipeline.placePatched(ref, patchFile: patchFile, base: altered, at: output)
        }
        var lying = ref
        lying.target = SHA256Digest.of(Data("not it".utf8))
        do {
            try pipeline.placePatched(lying, patchFile: patchFile, base: base, at: output)
            Issue.record("a patch whose result is not its target was placed")
        } catch {
            #expect(error.description.hasPrefix("the patch's result is not the content it promises"))
            #expect(!AtomicFile.exists(output), "the output of a failed patch is removed")
        }
    }

    @Test("a bundle written through a layered codec is no zip on disk, and reads back as one")
    func bundles() throws {
        let dir = try TemporaryDirectory("pipeline")
        defer { dir.remove() }
        let a = try file(dir, "a.txt", Self.content)
        let b = try file(dir, "b.txt", Self.edited)
        let files = [(path: RelativePath("a.txt")!, source: a), (path: RelativePath("b/b.txt")!, source: b)]
        for (name, pipeline) in Self.pipelines {
            let bundle = FilePath(dir.appending("\(name).bundle").path)
            let entries = try pipeline.writeBundle(files, to: bundle)
            #expect(entries.map(\.sha256) == [SHA256Digest.of(Self.content), SHA256Digest.of(Self.edited)])
            let head = try AtomicFile.read(bundle).prefix(4)
            #expect((head == Data([0x50, 0x4B, 0x03, 0x04])) == (name == "standard"), "\(name)")
            #expect(pipeline.streamsBundles == (name == "standard"))
            let listing = try pipeline.withZip(of: bundle, limit: 1 << 30) { (zip) throws(ArchiveError) in
                try ZipReader().validate(zip)
            }
            #expect(listing.files == entries)
            // The decoded copy is gone afterwards.
            #expect(try SystemCalls.listDirectory(FilePath(dir.path)).filter { $0.string.hasSuffix(".zip") }.isEmpty)
        }
    }
}
