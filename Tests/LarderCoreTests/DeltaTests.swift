import Foundation
import LarderCore
import Testing

@Suite("Core: delta manifests, base selection and the cost model")
struct DeltaTests {
    static func d(_ s: String) -> SHA256Digest { SHA256Digest.of(Data(s.utf8)) }
    static func e(_ path: String, _ content: String, size: Int64? = nil, packed: Int64? = nil) -> FileEntry {
        FileEntry(
            path: RelativePath(path)!, size: size ?? Int64(content.utf8.count), sha256: d(content), packed: packed)
    }
    static func list(_ version: String, _ files: [FileEntry]) -> FileList {
        FileList(id: PackageID("app")!, version: SemanticVersion(version)!, files: files)
    }
    static let ref = BlobRef(path: "packages/app/2.0.0/files.json", size: 1, sha256: d("list"))

    /// `old` → `new` through a manifest: what it says, and that the rebuild gives `new` exactly.
    func roundTrip(_ old: FileList, _ new: FileList) throws -> DeltaManifest {
        let (remove, upsert) = DeltaManifest.changes(from: old, to: new)
        let m = DeltaManifest(
            id: old.id, from: old.version, to: new.version, files: Self.ref, remove: remove, upsert: upsert,
            patches: [], objects: [])
        let rebuilt = try m.rebuild(from: old).get()
        #expect(rebuilt == new)
        #expect(try ManifestCoding.encode(rebuilt) == ManifestCoding.encode(new))
        return m
    }

    @Test("renames, deletes, changes, additions: the rebuilt list is the target list, byte for byte")
    func rebuild() throws {
        let old = Self.list(
            "1.0.0",
            [
                Self.e("index.html", "<html>1"), Self.e("js/app.3f2a9c.js", "app v1"), Self.e("css/a.css", "a"),
                Self.e("img/logo.png", "logo"),
            ])
        let new = Self.list(
            "2.0.0",
            [
                Self.e("index.html", "<html>2"), Self.e("js/app.9c1e07.js", "app v2"), Self.e("css/a.css", "a"),
                Self.e("img/brand.png", "logo"), Self.e("new.txt", ""),
            ])
        let m = try roundTrip(old, new)
        #expect(m.remove.map(\.string) == ["img/logo.png", "js/app.3f2a9c.js"])
        #expect(m.upsert.map(\.path.string) == ["img/brand.png", "index.html", "js/app.9c1e07.js", "new.txt"])
    }

    @Test("a file that becomes a directory, empty files, one content under two paths")
    func shapes() throws {
        let old = Self.list("1.0.0", [Self.e("docs", "a file"), Self.e("x/empty", ""), Self.e("y", "same")])
        let new = Self.list(
            "2.0.0",
            [
                Self.e("docs/index.html", "a file"), Self.e("x/empty", ""), Self.e("x/empty2", ""), Self.e("y", "same"),
                Self.e("z", "same"),
            ])
        let m = try roundTrip(old, new)
        #expect(m.remove.map(\.string) == ["docs"])
        // The contents are all held already: nothing to patch or fetch.
        let resolved = try m.resolve(from: old).get()
        #expect(resolved.list == new && resolved.patchFile == nil)
        #expect(resolved.covers(new, holding: Set(old.files.map(\.sha256))) == nil)
    }

    @Test("a manifest for another version, or removing what the base lacks, is refused")
    func refusals() throws {
        let old = Self.list("1.0.0", [Self.e("a", "1")])
        let m = DeltaManifest(
            id: PackageID("app")!, from: SemanticVersion("1.0.0")!, to: SemanticVersion("2.0.0")!, files: Self.ref,
            remove: [RelativePath("nope")!], upsert: [], patches: [], objects: [])
        #expect(throws: DeltaError.self) { try m.rebuild(from: old).get() }
        #expect(throws: DeltaError.self) { try m.rebuild(from: Self.list("0.9.0", [Self.e("nope", "x")])).get() }
        // A content with no source, and a patch whose base the base version lacks.
        let new = Self.list("2.0.0", [Self.e("a", "2")])
        var gap = m
        gap.remove = []
        gap.upsert = [Self.e("a", "2")]
        #expect(
            try gap.resolve(from: old).get().covers(new, holding: [Self.d("1")])?.description.contains(
                "no source for a") == true)
        // The patch makes upsert's entry 0 from the base list's entry 0, 10 bytes of a 10-byte file.
        gap.patches = [DeltaPatch(target: 0, base: 0, length: 10)]
        gap.patchFile = BlobRef(path: "patches/x", size: 10, sha256: Self.d("p"))
        let resolved = try gap.resolve(from: old).get()
        #expect(
            resolved.patches == [PatchRef(target: Self.d("2"), size: 1, base: Self.d("1"), offset: 0, length: 10)])
        #expect(resolved.covers(new, holding: [Self.d("1")]) == nil)
        #expect(resolved.covers(new, holding: [])?.description.contains("does not hold") == true)
    }

    @Test(
        "positions outside their lists, patches that do not fill the patch file, and objects out of range are refused",
        arguments: [
            ([DeltaPatch(target: 1, base: 0, length: 10)], 10, [], "makes entry 1 of upsert"),
            ([DeltaPatch(target: 0, base: 3, length: 10)], 10, [], "applies to entry 3"),
            ([DeltaPatch(target: 0, base: 0, length: 0)], 10, [], "does not fit"),
            ([DeltaPatch(target: 0, base: 0, length: 11)], 10, [], "does not fit"),
            ([DeltaPatch(target: 0, base: 0, length: 4)], 10, [], "add up to 4 bytes"),
            ([], 0, [2], "an object names entry 2"),
        ] as [([DeltaPatch], Int64, [Int], String)])
    func positions(_ patches: [DeltaPatch], _ fileSize: Int64, _ objects: [Int], _ why: String) {
        let old = Self.list("1.0.0", [Self.e("a", "1")])
        let m = DeltaManifest(
            id: PackageID("app")!, from: SemanticVersion("1.0.0")!, to: SemanticVersion("2.0.0")!, files: Self.ref,
            remove: [], upsert: [Self.e("a", "2")],
            patchFile: patches.isEmpty ? nil : BlobRef(path: "patches/x", size: fileSize, sha256: Self.d("p")),
            patches: patches, objects: objects)
        switch m.resolve(from: old) {
        case .success: Issue.record("resolved: \(m)")
        case .failure(let e): #expect(e.description.contains(why), "\(e)")
        }
    }

    @Test("an encrypted version's patch file is sealed whole: its size is the patches' sum sealed, not the sum")
    func sealedPatchFile() throws {
        let old = Self.list("1.0.0", [Self.e("a", "1")])
        func manifest(fileSize: Int64) -> DeltaManifest {
            DeltaManifest(
                id: PackageID("app")!, from: SemanticVersion("1.0.0")!, to: SemanticVersion("2.0.0")!, files: Self.ref,
                remove: [], upsert: [Self.e("a", "2")],
                patchFile: BlobRef(path: "patches/x", size: fileSize, sha256: Self.d("p")),
                patches: [DeltaPatch(target: 0, base: 0, length: 70_000)], objects: [])
        }
        // Two 64 KiB segments: a 16-byte header and two 16-byte tags.
        let sealed = manifest(fileSize: 70_000 + 16 + 2 * 16)
        #expect(SegmentedSeal.sealedSize(70_000) == 70_048)
        #expect(try sealed.resolve(from: old, sealed: true).get().patches.first?.length == 70_000)
        #expect(throws: DeltaError.self) { try sealed.resolve(from: old).get() }
        #expect(throws: DeltaError.self) { try manifest(fileSize: 70_000).resolve(from: old, sealed: true).get() }
    }

    @Test("a delta manifest of format 1 (or any but 2) is refused by name, so the device fetches the list")
    func schemaVersion() throws {
        let m = DeltaManifest(
            schemaVersion: 1, id: PackageID("app")!, from: SemanticVersion("1.0.0")!, to: SemanticVersion("2.0.0")!,
            files: Self.ref, remove: [], upsert: [])
        let data = try ManifestCoding.encode(m)
        #expect(throws: ManifestError.unsupportedSchema(document: "d", found: 1, supported: 2)) {
            try ManifestCoding.decode(DeltaManifest.self, from: data, document: "d")
        }
        var current = m
        current.schemaVersion = deltaSchemaVersion
        #expect(
            try ManifestCoding.decode(DeltaManifest.self, from: ManifestCoding.encode(current), document: "d")
                == current)
    }

    @Test(
        "hash-like parts of file names are masked; words and numbers are not",
        arguments: [
            ("js/app.3f2a9c.js", "js/app.*.js"),
            ("static/main-BQ3xk9Zs.js", "static/main-*.js"),
            ("assets/index.a1b2c3d4e5f6a7b8.css", "assets/index.*.css"),
            ("static/9234.29a1b2c3d4e5f6a7b8c9.js", "static/9234.*.js"),
            ("fonts/Roboto-Regular.woff2", "fonts/Roboto-Regular.woff2"),
            ("img/logo.png", "img/logo.png"),
            ("lib/2024.1.0/x.js", "lib/2024.1.0/x.js"),
            ("MyComponent.vue", "MyComponent.vue"),
            ("vendor.1a2b3c.chunk.js", "vendor.*.chunk.js"),
        ])
    func masking(_ path: String, _ masked: String) {
        #expect(BaseSelection.masked(path) == masked)
    }

    @Test("candidates: same path, then the renamed chunk, then the nearest file of its type")
    func candidates() {
        let base = Self.list(
            "1.0.0",
            [
                Self.e("js/app.3f2a9c.js", "x", size: 1000), Self.e("js/vendor.77aa88.js", "v", size: 50_000),
                Self.e("js/other.js", "o", size: 1200), Self.e("js/tiny.js", "t", size: 100),
                Self.e("css/app.3f2a9c.css", "c", size: 1000), Self.e("js/main.js", "m1", size: 990),
            ])
        let renamed = BaseSelection.candidates(for: Self.e("js/app.9c1e07.js", "new", size: 1010), in: base)
        #expect(renamed.map(\.0.path.string) == ["js/app.3f2a9c.js", "js/main.js", "js/other.js"])
        #expect(renamed.map(\.1) == [.maskedPath, .sizeAndType, .sizeAndType])
        let edited = BaseSelection.candidates(for: Self.e("js/main.js", "m2", size: 995), in: base)
        #expect(edited.first?.1 == .samePath && edited.first?.0.path.string == "js/main.js")
        // Nothing of its type within a factor of two: no candidate.
        #expect(BaseSelection.candidates(for: Self.e("a.wasm", "w", size: 10), in: base).isEmpty)
    }

    @Test("the cost model: objects by their packed size, the delta by its patches, the bundle; the least wins")
    func costs() {
        let big = (0..<4).map { Self.e("js/c\($0).js", "new\($0)", size: 400_000, packed: 100_000) }
        let list = Self.list("2.0.0", big + [Self.e("held.js", "held")])
        let held: Set = [Self.d("held"), Self.d("old0"), Self.d("old1")]
        // Objects cost their packed size (400 KB), not their 1.6 MB: cheaper than a 1 MB bundle.
        let plain = Differ.choose(list: list, bundleSize: 1_000_000, localContents: held)
        #expect(plain.method == .objects && plain.bytes == 400_000 && plain.reused == 1)
        // A delta with two patches whose bases are held (the other two contents as objects).
        func patch(_ i: Int, base: String) -> PatchRef {
            PatchRef(target: Self.d("new\(i)"), size: 400_000, base: Self.d(base), offset: Int64(i) * 500, length: 500)
        }
        let manifest = DeltaManifest(
            id: PackageID("app")!, from: SemanticVersion("1.0.0")!, to: SemanticVersion("2.0.0")!, files: Self.ref,
            remove: [], upsert: [], patchFile: BlobRef(path: "patches/x", size: 1500, sha256: Self.d("p")))
        var delta = ResolvedDelta(
            manifest: manifest, list: list,
            patches: [patch(0, base: "old0"), patch(1, base: "old1"), patch(2, base: "gone")],
            objects: [Self.d("new3")])
        let withDelta = Differ.choose(list: list, bundleSize: 1_000_000, localContents: held, delta: delta)
        #expect(withDelta.method == .delta)
        // The whole patch file in one request, and two objects (one patch's base is not held here).
        #expect(withDelta.bytes == 1500 + 100_000 + 100_000 && withDelta.requests == 3)
        #expect(withDelta.alternatives?.map(\.method) == [.delta, .objects, .bundle])
        // No patch usable here: the delta is its objects, and the patch file is not fetched.
        let none = Differ.choose(list: list, bundleSize: 1_000_000, localContents: [Self.d("held")], delta: delta)
        #expect(none.alternatives?.first?.bytes == 400_000 && none.alternatives?.first?.requests == 4)
        // A small bundle beats both.
        let small = Differ.choose(list: list, bundleSize: 150_000, localContents: held, delta: delta)
        #expect(small.method == .bundle && small.reused == 0)
        // Everything held: local, whatever is offered.
        delta = ResolvedDelta(manifest: manifest, list: list, patches: [], objects: [])
        let all = Differ.choose(
            list: Self.list("2.0.0", [Self.e("held.js", "held")]), bundleSize: 1, localContents: held, delta: delta)
        #expect(all.method == .local)
    }

    @Test("documents with members no model knows still decode (an older client reads a newer repository)")
    func unknownMembers() throws {
        let entry = """
            {"id": "app", "version": "2.0.0", "bundle": {"path": "packages/app/2.0.0/bundle.zip", "size": 1,
             "sha256": "\(Self.d("b").hex)"}, "files": {"path": "packages/app/2.0.0/files.json", "size": 1,
             "sha256": "\(Self.d("f").hex)"}, "deltas": [{"from": "1.0.0", "manifest": {"path": "m", "size": 1,
             "sha256": "\(Self.d("m").hex)"}, "future": 1}], "somethingNew": {"x": [1, 2]}}
            """
        let index = """
            {"schemaVersion": 1, "serial": 3, "expires": "2030-01-01T00:00:00Z", "packages": [\(entry)], "later": true}
            """
        let decoded = try ManifestCoding.decode(RepositoryIndex.self, from: Data(index.utf8), document: "index.json")
        #expect(decoded.packages.first?.deltas?.first?.from == SemanticVersion("1.0.0"))
        let list = """
            {"schemaVersion": 1, "id": "app", "version": "2.0.0", "files": [{"path": "a", "size": 1,
             "sha256": "\(Self.d("a").hex)", "packed": 21, "compression": "br"}], "generator": "x"}
            """
        let l = try ManifestCoding.decode(FileList.self, from: Data(list.utf8), document: "files.json")
        #expect(l.files.first?.packed == 21 && l.files.first?.objectCost == 21)
    }
}
