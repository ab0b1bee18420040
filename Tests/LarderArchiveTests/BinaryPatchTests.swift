import Foundation
import LarderArchive
import Testing

@Suite("Archive: binary patches (zstd patch-from)")
struct BinaryPatchTests {
    /// A JS-like text and a small edit of it (a renamed chunk id, a changed line).
    static func pair() -> (Data, Data) {
        var lines: [String] = []
        for i in 0..<4000 { lines.append("export function f\(i)(x) { return x * \(i) + \"chunk-3f2a9c\"; }") }
        let base = Data(lines.joined(separator: "\n").utf8)
        lines[1200] = "export function f1200(x) { return x - 1; }"
        let target = Data(lines.joined(separator: "\n").replacingOccurrences(of: "3f2a9c", with: "9c1e07").utf8)
        return (base, target)
    }

    @Test("a small edit makes a small patch, and the patch gives the target back exactly")
    func roundTrip() throws {
        let (base, target) = Self.pair()
        let patch = try BinaryPatch.make(base: base, target: target)
        #expect(patch.count < target.count / 20, "\(patch.count) bytes for a \(target.count)-byte target")
        #expect(try BinaryPatch.apply(patch: patch, base: base, limit: Int64(target.count)) == target)
    }

    @Test("empty base, empty target, unrelated contents")
    func edges() throws {
        let (base, target) = Self.pair()
        for (b, t) in [(Data(), target), (base, Data()), (Data("abc".utf8), Data("xyz".utf8))] {
            let p = try BinaryPatch.make(base: b, target: t)
            #expect(try BinaryPatch.apply(patch: p, base: b, limit: Int64(t.count)) == t)
        }
    }

    @Test("a damaged patch, a truncated one, another base, or a result past the limit is refused")
    func refusals() throws {
        let (base, target) = Self.pair()
        let patch = try BinaryPatch.make(base: base, target: target)
        var flipped = patch
        flipped[patch.count / 2] ^= 0x55
        #expect(throws: PatchError.self) { _ = try BinaryPatch.apply(patch: flipped, base: base, limit: 1 << 30) }
        #expect(throws: PatchError.truncated) {
            _ = try BinaryPatch.apply(patch: patch.prefix(patch.count - 9), base: base, limit: 1 << 30)
        }
        // (A base altered where the patch does not look gives the same result: the device checks
        // every result's SHA-256 anyway. One altered throughout fails the frame checksum.)
        let otherBase = Data(base.reversed())
        #expect(throws: PatchError.self) { _ = try BinaryPatch.apply(patch: patch, base: otherBase, limit: 1 << 30) }
        #expect(throws: PatchError.resultTooLong(limit: 1000)) {
            _ = try BinaryPatch.apply(patch: patch, base: base, limit: 1000)
        }
        #expect(throws: PatchError.self) {
            _ = try BinaryPatch.apply(patch: Data("not zstd".utf8), base: base, limit: 1 << 30)
        }
    }

    @Test("the result streams in chunks of at most 64 KiB")
    func streamed() throws {
        let base = Data((0..<400_000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        var target = base
        target.append(contentsOf: [1, 2, 3])
        let patch = try BinaryPatch.make(base: base, target: target)
        var chunks: [Int] = []
        var out = Data()
        try BinaryPatch.apply(patch: patch, base: base, limit: Int64(target.count)) {
            chunks.append($0.count)
            out.append(contentsOf: $0)
        }
        #expect(out == target)
        #expect(chunks.count >= 6 && chunks.allSatisfy { $0 <= 64 << 10 })
    }

    @Test("interoperates with the zstd command: its --patch-from patch applies here, and ours there")
    func zstdCommand() throws {
        let zstd = ["/usr/bin/zstd", "/usr/local/bin/zstd"].first { FileManager.default.isExecutableFile(atPath: $0) }
        let tool = try #require(zstd, "the zstd command is not installed (scripts/bootstrap installs it)")
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("patch-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let (base, target) = Self.pair()
        let b = dir.appendingPathComponent("base")
        let t = dir.appendingPathComponent("target")
        try base.write(to: b)
        try target.write(to: t)
        func run(_ args: [String]) throws {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: tool)
            p.arguments = ["-qq", "-f"] + args
            try p.run()
            p.waitUntilExit()
            #expect(p.terminationStatus == 0, "zstd \(args)")
        }
        try run(["-19", "--patch-from=\(b.path)", t.path, "-o", dir.appendingPathComponent("cli.patch").path])
        let cliPatch = try Data(contentsOf: dir.appendingPathComponent("cli.patch"))
        #expect(try BinaryPatch.apply(patch: cliPatch, base: base, limit: Int64(target.count)) == target)
        try BinaryPatch.make(base: base, target: target).write(to: dir.appendingPathComponent("ours.patch"))
        try run([
            "-d", "--patch-from=\(b.path)", dir.appendingPathComponent("ours.patch").path, "-o",
            dir.appendingPathComponent("out").path,
        ])
        #expect(try Data(contentsOf: dir.appendingPathComponent("out")) == target)
    }
}
