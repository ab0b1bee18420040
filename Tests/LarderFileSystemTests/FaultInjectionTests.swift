import Foundation
import LarderFileSystem
import LarderTestSupport
import SystemPackage
import Testing

@Suite("the funnel's fault seam", .temporaryDirectory("fs"))
struct FaultInjectionTests {
    @Test("EINTR is retried: two interrupted writes, then the write succeeds")
    func interruptedWriteIsRetried() throws {
        let dir = try testDirectory()
        let file = dir.appending("f")
        let eintr = Fault.fail(kind: .write, nth: 1, times: 2, errno: .interrupted)
        try FaultInjector.withFaults(eintr, under: dir) { scope in
            try SystemCalls.writeFile(Array("hello".utf8), to: file)
            #expect(scope.hits == [2])
        }
        #expect(contents(file) == Array("hello".utf8))
    }

    @Test(
        "EINTR is retried on opens, reads, positioned reads and flushes",
        arguments: [SystemCall.open, .read, .pread, .fsync])
    func interruptedCallsAreRetried(kind: SystemCall) throws {
        let dir = try testDirectory()
        let file = dir.appending("f")
        try SystemCalls.writeFile(Array("0123456789".utf8), to: file)
        let eintr = Fault.fail(kind: kind, nth: 1, times: 2, errno: .interrupted)
        try FaultInjector.withFaults(eintr, under: dir) { scope in
            let fd = try SystemCalls.open(file, .readWrite)
            defer { try? SystemCalls.close(fd, path: file) }
            var buffer = [UInt8](repeating: 0, count: 4)
            #expect(try SystemCalls.read(fd, into: &buffer, path: file) == 4)
            #expect(buffer == Array("0123".utf8))
            #expect(try SystemCalls.pread(fd, into: &buffer, at: 6, path: file) == 4)
            #expect(buffer == Array("6789".utf8))
            try SystemCalls.fsync(fd, path: file)
            #expect(scope.hits == [2])
        }
    }

    @Test("the third write fails with ENOSPC, and the error names the call, the path and the errno")
    func nthWriteFailsWithNoSpace() throws {
        let dir = try testDirectory()
        let file = dir.appending("big")
        FaultInjector.withFaults(.fail(kind: .write, nth: 3, errno: .noSpace), under: dir) { scope in
            let error = #expect(throws: FileSystemError.self) {
                try writeInChunks("aaaabbbbccccdddd", chunk: 4, to: file)
            }
            #expect(error == FileSystemError("write", file, .noSpace))
            #expect(error?.operation == "write")
            #expect(error?.path == file.string)
            #expect(error?.errno == .noSpace)
            #expect(error?.description.hasPrefix("write \(file): ") == true)
            #expect(error?.description.contains("free space") == true)
            #expect(scope.hits == [1])
        }
        // The first two writes landed; the third never happened.
        #expect(contents(file) == Array("aaaabbbb".utf8))
    }

    @Test("a lost write reports success but leaves the file without its bytes")
    func lostWriteDropsTheBytes() throws {
        let dir = try testDirectory()
        let middle = dir.appending("middle")
        let last = dir.appending("last")
        let positioned = dir.appending("positioned")
        try SystemCalls.writeFile(Array("........".utf8), to: positioned)
        try FaultInjector.withFaults(
            .loseWrite(kind: .write, nth: 2), .loseWrite(kind: .write, nth: 6), .loseWrite(kind: .pwrite),
            under: dir
        ) { scope in
            // Calls 1–3 of `write` under dir, then 4–6: the 2nd and the 6th are lost.
            try writeInChunks("aaaabbbbcccc", chunk: 4, to: middle)
            try writeInChunks("xxxxyyyyzzzz", chunk: 4, to: last)
            let fd = try SystemCalls.open(positioned, .writeOnly)
            defer { try? SystemCalls.close(fd, path: positioned) }
            try SystemCalls.writeAll(fd, contentsOf: Array("PPPP".utf8), at: 2, path: positioned)
            try SystemCalls.writeAll(fd, contentsOf: Array("QQ".utf8), at: 6, path: positioned)
            #expect(scope.hits == [1, 1, 1])
        }
        // A lost block in the middle reads back as a hole; a lost last block leaves the file short.
        #expect(contents(middle) == Array("aaaa".utf8) + [0, 0, 0, 0] + Array("cccc".utf8))
        #expect(contents(last) == Array("xxxxyyyy".utf8))
        // The first pwrite was lost; the second one landed.
        #expect(contents(positioned) == Array("......QQ".utf8))
    }

    @Test("a lost fsync reports success (what a lying disk does)")
    func lostFlushReportsSuccess() throws {
        let dir = try testDirectory()
        let file = dir.appending("state.json")
        try FaultInjector.withFaults(.loseWrite(kind: .fsync, times: .max), under: dir) { scope in
            try AtomicFile.write(Data("new".utf8), to: file)
            // The temporary file's fsync and the directory's fsync.
            #expect(scope.hits == [2])
        }
        #expect(contents(file) == Array("new".utf8))
    }

    @Test(
        "AtomicFile.write leaves the old content, and no temporary file, when a step fails with EIO",
        arguments: [SystemCall.write, .fsync, .close, .rename])
    func atomicWriteKeepsTheOldContent(failing kind: SystemCall) throws {
        let dir = try testDirectory()
        let file = dir.appending("state.json")
        try AtomicFile.write(Data("old".utf8), to: file)
        FaultInjector.withFaults(.fail(kind: kind, errno: .ioError), under: dir) { scope in
            let error = #expect(throws: FileSystemError.self) {
                try AtomicFile.write(Data("new content".utf8), to: file)
            }
            #expect(error?.operation == kind.rawValue)
            #expect(error?.errno == .ioError)
            #expect(scope.hits == [1])
        }
        #expect(contents(file) == Array("old".utf8))
        #expect(try SystemCalls.listDirectory(dir).map(\.string) == ["state.json"])
    }

    @Test("faults apply under their root only: a parallel writer elsewhere is not affected")
    func faultsAreScoped() async throws {
        let dir = try testDirectory()
        let faulty = dir.appending("a")
        // A sibling whose name starts with the same characters: matching is by component.
        let healthy = dir.appending("ab")
        try SystemCalls.mkdir(faulty)
        try SystemCalls.mkdir(healthy)
        let rounds = 40
        await FaultInjector.withFaults(
            .fail(kind: .write, times: .max, errno: .noSpace), .fail(kind: .rename, times: .max, errno: .ioError),
            under: faulty
        ) { scope in
            async let failures = Task.detached {
                var failed = 0
                for i in 0..<rounds {
                    do { try AtomicFile.write(Data("x".utf8), to: faulty.appending("f\(i)")) } catch { failed += 1 }
                }
                return failed
            }.value
            async let successes = Task.detached {
                var written = 0
                for i in 0..<rounds {
                    let file = healthy.appending("f\(i)")
                    if (try? AtomicFile.write(Data("y".utf8), to: file)) != nil { written += 1 }
                }
                return written
            }.value
            let (failed, written) = await (failures, successes)
            #expect(failed == rounds)
            #expect(written == rounds)
            #expect(scope.hits == [rounds, 0])
        }
        // Once the scope is gone, the same directory works again.
        try AtomicFile.write(Data("z".utf8), to: faulty.appending("after"))
        #expect(contents(faulty.appending("after")) == Array("z".utf8))
    }

    @Test(
        "a path is under a scope's root by its normal form: `.` and `..` components resolved, names made of dots kept",
        arguments: [
            ("a/./f", true), ("ab/../a/f", true), ("a/..f", true), ("a/.f", true), ("a/../ab/f", false),
            ("ab/f", false), ("ab/../a/./g", true),
        ])
    func coveredBySpelling(spelled: String, covered: Bool) throws {
        let dir = try testDirectory()
        try SystemCalls.mkdir(dir.appending("a"))
        try SystemCalls.mkdir(dir.appending("ab"))
        let path = FilePath(dir.string + "/" + spelled)
        try FaultInjector.withFaults(.fail(kind: .open, errno: .noSpace), under: dir.appending("a")) { scope in
            let opened = Result { () throws(FileSystemError) in
                try SystemCalls.open(path, .writeOnly, options: [.create, .truncate])
            }
            if case .success(let fd) = opened { try SystemCalls.close(fd, path: path) }
            #expect((scope.hits == [1]) == covered, "\(path): hits \(scope.hits)")
            #expect(covered ? (try? opened.get()) == nil : (try? opened.get()) != nil)
        }
    }

    @Test("a removed scope keeps its counts and injects nothing more")
    func removedScope() throws {
        let dir = try testDirectory()
        let scope = FaultInjector.install(.fail(kind: .unlink, times: .max, errno: .permissionDenied), under: dir)
        let file = dir.appending("f")
        try SystemCalls.writeFile(Array("1".utf8), to: file)
        #expect(throws: FileSystemError("unlink", file, .permissionDenied)) { try SystemCalls.unlink(file) }
        scope.remove()
        try SystemCalls.unlink(file)
        #expect(scope.hits == [1])
        #expect(!AtomicFile.exists(file))
    }

    @Test("a fault describes itself")
    func descriptions() {
        #expect(Fault.fail(kind: .write, nth: 3, errno: .noSpace).description.hasPrefix("write #3 fails with errno 28"))
        #expect(Fault.loseWrite(kind: .fsync, nth: 2, times: .max).description == "fsync #2 onwards is lost")
        let twice = Fault.fail(kind: .seek, nth: 1, times: 2, errno: .interrupted)
        #expect(twice.description.hasPrefix("lseek #1…#2 fails"))
    }
}
