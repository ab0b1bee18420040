import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import LarderStore
import SystemPackage
import Testing

/// A bundle extracted into a staging area by several threads (`ReadParallelism`, forced on any
/// archive) against one thread: the same tree, byte for byte, the same listing, and the same
/// error for every refused archive; what it extracts installs.
@Suite("Store: bundles extracted by several threads")
struct ConcurrentExtractionTests {
    /// Two and three workers on any archive.
    static let shared = [2, 3].map { ReadParallelism(maxWorkers: $0, minimumArchiveBytes: 0) }

    /// An extraction's result: the listing and the staged tree.
    struct Extracted: Equatable {
        let listing: ArchiveListing
        let tree: [String: Node]
    }

    /// Extracts `bundle` into a fresh staging area of `sandbox`, then discards the area.
    static func extract(
        _ sandbox: Sandbox, _ bundle: FilePath, _ parallelism: ReadParallelism, checkCRC: Bool = false
    ) -> Result<Extracted, StoreError> {
        let area: StagingArea
        do { area = try sandbox.makeStagingArea(id: pid("shared"), version: ver("1.0.0")) } catch {
            return .failure(error)
        }
        defer { area.discard() }
        do throws(StoreError) {
            let staged = try area.extract(bundle: bundle, checkCRC: checkCRC, parallelism: parallelism)
            return .success(Extracted(listing: staged.listing, tree: snapshot(area.tree)))
        } catch {
            return .failure(error)
        }
    }

    /// Expects every shared extraction of `bundle` to end as the one on one thread; returns that.
    @discardableResult
    static func expectAgreement(
        _ sandbox: Sandbox, _ bundle: FilePath, checkCRC: Bool = false, _ comment: String
    ) -> Result<Extracted, StoreError> {
        let expected = extract(sandbox, bundle, .sequential, checkCRC: checkCRC)
        for parallelism in shared {
            let got = extract(sandbox, bundle, parallelism, checkCRC: checkCRC)
            #expect(got == expected, "\(comment), \(parallelism.maxWorkers) workers")
        }
        #expect(names(sandbox.layout.staging) == [], "\(comment): staging/ is not empty")
        return expected
    }

    @Test func everyFixtureAgrees() throws {
        let fixtures = try ZipFixtures.get()
        let env = try StoreEnv()
        defer { env.cleanup() }
        try env.withSandbox { sandbox in
            for (name, expected) in fixtures.expected.sorted(by: { $0.key < $1.key }) {
                let zip = try env.write(try #require(fixtures.data[name]), named: name)
                for crc in [true, false] {
                    switch Self.expectAgreement(sandbox, zip, checkCRC: crc, "\(name), CRC \(crc)") {
                    case .success(let extracted):
                        #expect(expected == "ok", "\(name) accepted")
                        #expect(extracted.tree.values.contains { if case .file = $0 { true } else { false } })
                    case .failure(let error):
                        #expect(error.code.rawValue == expected, "\(name): \(error)")
                    }
                }
            }
        }
    }

    /// A bundle of a few hundred files in nested directories: the same tree and listing on any
    /// number of threads; installed from a shared extraction, it passes the check against its
    /// list, and the installed tree is the bundle's.
    @Test func aLargerBundleInstalls() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let zip = FilePath(env.dir.url.appendingPathComponent("many.zip").path)
        try run("python3", ["-c", Self.generator, zip.string, "300"])
        try env.withSandbox { sandbox in
            let expected = try Self.expectAgreement(sandbox, zip, "300 files").get()
            #expect(expected.listing.files.count == 300)

            let area = try sandbox.makeStagingArea(id: pid("many"), version: ver("1.0.0"))
            let staged = try area.extract(bundle: zip, checkCRC: false, parallelism: Self.shared[0])
            let list = FileList(id: pid("many"), version: ver("1.0.0"), files: staged.listing.files)
            _ = try sandbox.install(staged: staged, fileList: list, activate: true)
            let tree = sandbox.layout.tree(pid("many"), ver("1.0.0"))
            #expect(TreeCheck.problems(tree: tree, list: list) == [])
            #expect(snapshot(tree) == expected.tree)
            #expect(sandbox.state[pid("many")].active == ver("1.0.0"))
        }
    }

    /// A write that fails (EIO, then ENOSPC) in the middle of a shared extraction fails it as it
    /// fails the one on one thread, and the area is discarded.
    @Test func aFailedWriteFailsTheExtraction() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let zip = FilePath(env.dir.url.appendingPathComponent("many.zip").path)
        try run("python3", ["-c", Self.generator, zip.string, "60"])
        try env.withSandbox { sandbox in
            for (kind, n, errno) in [
                (SystemCall.write, 7, Errno.ioError), (.open, 20, .noSpace), (.mkdir, 4, .ioError),
            ] {
                var codes: [String] = []
                for parallelism in [ReadParallelism.sequential] + Self.shared {
                    let scope = FaultInjector.install(
                        .fail(kind: kind, nth: n, errno: errno), under: sandbox.layout.staging)
                    defer { scope.remove() }
                    switch Self.extract(sandbox, zip, parallelism) {
                    case .success: Issue.record("\(kind) \(n) did not fail the extraction")
                    case .failure(let error): codes.append(error.code.rawValue)
                    }
                }
                #expect(Set(codes).count == 1, "\(kind) \(n): \(codes)")
                #expect(names(sandbox.layout.staging) == [])
            }
        }
    }

    /// Python: writes a zip of argv[2] files of assorted sizes in nested directories at argv[1].
    static let generator = #"""
        import random, sys, zipfile
        r = random.Random(42)
        words = [b"var", b"let", b"function", b"return", b"<div>", b"</div>", b"\n"]
        with zipfile.ZipFile(sys.argv[1], "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr(zipfile.ZipInfo("static/"), b"")
            for i in range(int(sys.argv[2])):
                d = r.choice(["", "static/", "static/js/", "static/css/", "schemas/a/b/"])
                n = r.choice([0, 10, 700, 5000, 40000, 150000])
                data = bytearray()
                while len(data) < n:
                    data += r.choice(words) + b" "
                z.writestr(zipfile.ZipInfo("%sfile%03d.txt" % (d, i), (2024, 1, 1, 0, 0, 0)), bytes(data[:n]), zipfile.ZIP_DEFLATED)
        """#
}
