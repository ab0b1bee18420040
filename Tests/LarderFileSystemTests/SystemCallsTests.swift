import Foundation
import LarderFileSystem
import LarderTestSupport
import SystemPackage
import Testing

@Suite("the system-call funnel", .temporaryDirectory("fs"))
struct SystemCallsTests {
    /// `dir/inside/{file, sub/deep, out → outside}` and `outside/keep`, next to each other in `dir`.
    private func treeWithLinkOut(_ dir: FilePath) throws -> (inside: FilePath, outside: FilePath) {
        let inside = dir.appending("inside")
        let outside = dir.appending("outside")
        try SystemCalls.makeDirectories(inside.appending("sub"))
        try SystemCalls.mkdir(outside)
        try SystemCalls.writeFile(Array("f".utf8), to: inside.appending("file"))
        try SystemCalls.writeFile(Array("d".utf8), to: inside.appending("sub/deep"))
        try SystemCalls.writeFile(Array("k".utf8), to: outside.appending("keep"))
        try FileManager.default.createSymbolicLink(
            atPath: inside.appending("out").string, withDestinationPath: outside.string)
        try FileManager.default.createSymbolicLink(
            atPath: inside.appending("sub/up").string, withDestinationPath: outside.appending("keep").string)
        return (inside, outside)
    }

    @Test("listing names a symbolic link without following it")
    func listingDoesNotFollowLinks() throws {
        let dir = try testDirectory()
        let (inside, _) = try treeWithLinkOut(dir)
        let names = try SystemCalls.listDirectory(inside).map(\.string).sorted()
        #expect(names == ["file", "out", "sub"])
        #expect(try SystemCalls.lstat(inside.appending("out")).kind == .symbolicLink)
        #expect(try SystemCalls.stat(inside.appending("out")).kind == .directory)
    }

    @Test("removeTree removes links, not what they point to")
    func removeTreeDoesNotFollowLinks() throws {
        let dir = try testDirectory()
        let (inside, outside) = try treeWithLinkOut(dir)
        try SystemCalls.removeTree(inside)
        #expect(!AtomicFile.exists(inside))
        #expect(contents(outside.appending("keep")) == Array("k".utf8))
        #expect(try SystemCalls.listDirectory(dir).map(\.string) == ["outside"])
    }

    @Test("removeTree on a link to a directory removes the link only; a missing path is fine")
    func removeTreeOnALink() throws {
        let dir = try testDirectory()
        let (_, outside) = try treeWithLinkOut(dir)
        let link = dir.appending("link")
        try FileManager.default.createSymbolicLink(atPath: link.string, withDestinationPath: outside.string)
        try SystemCalls.removeTree(link)
        #expect(!AtomicFile.exists(link))
        #expect(contents(outside.appending("keep")) == Array("k".utf8))
        try SystemCalls.removeTree(dir.appending("never-was"))
    }

    @Test("removeTree stops at the first failure and says where")
    func removeTreeReportsFailures() throws {
        let dir = try testDirectory()
        let (inside, _) = try treeWithLinkOut(dir)
        FaultInjector.withFaults(.fail(kind: .unlink, nth: 2, errno: .ioError), under: inside) { _ in
            let error = #expect(throws: FileSystemError.self) { try SystemCalls.removeTree(inside) }
            #expect(error?.operation == "unlink")
            #expect(error?.errno == .ioError)
            #expect(error.map { FilePath($0.path).starts(with: inside) } == true)
        }
        try SystemCalls.removeTree(inside)
        #expect(!AtomicFile.exists(inside))
    }

    @Test("a listed name keeps its bytes, UTF-8 or not")
    func listingKeepsRawNames() throws {
        let dir = try testDirectory()
        let raw: [CChar] = [0x66, CChar(bitPattern: 0xFF), 0]
        let name = try #require(FilePath.Component(platformString: raw))
        try SystemCalls.writeFile(Array("x".utf8), to: dir.appending(name))
        let entries = try SystemCalls.listDirectory(dir)
        #expect(entries.map(\.bytes) == [[0x66, 0xFF]])
        #expect(contents(dir.appending(try #require(entries.first).name)) == Array("x".utf8))
    }

    @Test("status: kinds, sizes and times")
    func status() throws {
        let dir = try testDirectory()
        let file = dir.appending("f")
        try SystemCalls.writeFile(Array("12345".utf8), to: file, permissions: [.ownerReadWrite])
        let st = try SystemCalls.stat(file)
        #expect(st.kind == .regular && st.size == 5 && st.permissions == [.ownerReadWrite] && st.linkCount == 1)
        #expect(try SystemCalls.lstat(dir).kind == .directory)
        try SystemCalls.setTimes(
            file, accessed: FileTime(seconds: 1_000_000), modified: FileTime(seconds: 2_000_000))
        #expect(try SystemCalls.stat(file).modificationTime == FileTime(seconds: 2_000_000))
        #expect(throws: FileSystemError("stat", dir.appending("nothing"), .noSuchFileOrDirectory)) {
            try SystemCalls.stat(dir.appending("nothing"))
        }
    }

    @Test("copyFile copies content and permissions, and never overwrites")
    func copyFile() throws {
        let dir = try testDirectory()
        let source = dir.appending("s")
        let target = dir.appending("t")
        try SystemCalls.writeFile(Array(repeating: 7, count: 300_000), to: source, permissions: [.ownerReadWrite])
        try SystemCalls.copyFile(source, to: target)
        #expect(contents(target) == Array(repeating: 7, count: 300_000))
        #expect(try SystemCalls.stat(target).permissions == [.ownerReadWrite])
        #expect(throws: FileSystemError("create", target, .fileExists)) {
            try SystemCalls.copyFile(source, to: target)
        }
    }

    @Test("link, rename and unlink; a two-path error names both")
    func paths() throws {
        let dir = try testDirectory()
        let a = dir.appending("a")
        try SystemCalls.writeFile(Array("a".utf8), to: a)
        try SystemCalls.link(a, to: dir.appending("b"))
        #expect(try SystemCalls.stat(a).linkCount == 2)
        try SystemCalls.rename(dir.appending("b"), to: dir.appending("c"))
        try SystemCalls.unlink(a)
        #expect(contents(dir.appending("c")) == Array("a".utf8))
        let error = #expect(throws: FileSystemError.self) { try SystemCalls.rename(a, to: dir.appending("d")) }
        #expect(error == FileSystemError("rename", a, to: dir.appending("d"), .noSuchFileOrDirectory))
        #expect(error?.description == "rename \(a) → \(dir.appending("d")): \(Errno.noSuchFileOrDirectory)")
    }

    @Test("makeDirectories creates what is missing and returns it")
    func makeDirectories() throws {
        let dir = try testDirectory()
        let deep = dir.appending("a/b/c")
        #expect(try SystemCalls.makeDirectories(deep) == [dir.appending("a"), dir.appending("a/b"), deep])
        #expect(try SystemCalls.makeDirectories(deep) == [])
        try AtomicFile.makeDirectories(dir.appending("a/x/y"))
        #expect(AtomicFile.isDirectory(dir.appending("a/x/y")))
    }

    @Test("directory-relative calls name the full path in errors and fault scopes")
    func relativeCalls() throws {
        let dir = try testDirectory()
        let root = try SystemCalls.open(dir, .readOnly, options: [.directory])
        defer { try? SystemCalls.close(root, path: dir) }
        try SystemCalls.mkdir("sub", in: root, directoryPath: dir)
        let fd = try SystemCalls.open(
            "sub/f", in: root, directoryPath: dir, .writeOnly, options: [.create, .exclusiveCreate, .noFollow])
        try SystemCalls.writeAll(fd, contentsOf: Array("rel".utf8), path: dir.appending("sub/f"))
        try SystemCalls.close(fd, path: dir.appending("sub/f"))
        #expect(contents(dir.appending("sub/f")) == Array("rel".utf8))
        #expect(throws: FileSystemError("create", dir.appending("sub/f"), .fileExists)) {
            try SystemCalls.open(
                "sub/f", in: root, directoryPath: dir, .writeOnly, options: [.create, .exclusiveCreate])
        }
        #expect(try SystemCalls.lstat("sub", in: root, directoryPath: dir).kind == .directory)
    }

    @Test("a read-only mapping sees the file's bytes")
    func mapping() throws {
        let dir = try testDirectory()
        let file = dir.appending("generation")
        try SystemCalls.writeFile([1, 2, 3, 4, 5, 6, 7, 8], to: file)
        let fd = try SystemCalls.open(file, .readOnly)
        defer { try? SystemCalls.close(fd, path: file) }
        let p = try SystemCalls.mapReadOnly(fd, length: 8, path: file)
        #expect(Array(UnsafeRawBufferPointer(start: p, count: 8)) == [1, 2, 3, 4, 5, 6, 7, 8])
        try SystemCalls.unmap(p, length: 8, path: file)
    }

    @Test("an interrupted close counts as closed, not as a failure")
    func interruptedClose() throws {
        let dir = try testDirectory()
        let file = dir.appending("f")
        try SystemCalls.writeFile(Array("x".utf8), to: file)
        let fd = try SystemCalls.open(file, .readOnly)
        try FaultInjector.withFaults(.fail(kind: .close, errno: .interrupted), under: dir) { scope in
            try SystemCalls.close(fd, path: file)
            #expect(scope.hits == [1])
        }
        try SystemCalls.close(fd, path: file)  // the injected EINTR did not close it; this does
    }

    @Test("a second writer's lock waits, then names the holder")
    func lock() throws {
        let dir = try testDirectory()
        let path = dir.appending(".lock")
        let first = try FileLock(path: path, timeout: 1)
        let error = #expect(throws: FileLockError.self) { _ = try FileLock(path: path, timeout: 0.1) }
        guard case .locked(let holder, let waited) = error else {
            Issue.record("expected .locked, got \(String(describing: error))")
            return
        }
        #expect(holder == getpid())
        #expect(waited >= 0.1)
        first.unlock()
        let second = try FileLock(path: path, timeout: 1)
        second.unlock()
    }
}
