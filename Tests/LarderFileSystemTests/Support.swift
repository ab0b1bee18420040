import Foundation
import LarderFileSystem
import LarderTestSupport
import SystemPackage

/// The running test's own directory (the suite's `.temporaryDirectory` trait makes it and
/// removes it when the test ends), as a path.
func testDirectory() throws -> FilePath {
    FilePath(try TemporaryDirectory.forCurrentTest().path)
}

/// The bytes of a file, or `nil` if it cannot be read.
func contents(_ path: FilePath) -> [UInt8]? {
    (try? AtomicFile.read(path)).map { Array($0) }
}

/// Writes `text` to a new file with separate `write` calls of `chunk` bytes each.
func writeInChunks(_ text: String, chunk: Int, to path: FilePath) throws(FileSystemError) {
    let fd = try SystemCalls.open(path, .writeOnly, options: [.create, .truncate])
    defer { try? SystemCalls.close(fd, path: path) }
    let bytes = Array(text.utf8)
    var start = 0
    while start < bytes.count {
        let end = min(start + chunk, bytes.count)
        try SystemCalls.writeAll(fd, contentsOf: bytes[start..<end], path: path)
        start = end
    }
}
