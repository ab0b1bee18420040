import Foundation
import LarderCore
import LarderFetch
import LarderFileSystem
import LarderTestSupport
import SystemPackage
import Testing

/// `file://` repositories (offline media): the same contract as HTTP, no network.
@Suite("file:// transport", .temporaryDirectory("file-transport"))
struct FileTransportTests {
    let dir: TemporaryDirectory

    init() throws { dir = try TemporaryDirectory.forCurrentTest() }

    func write(_ name: String, _ data: Data) throws -> URL {
        let url = dir.appending(name)
        try data.write(to: url)
        return url
    }

    var part: FilePath { FilePath(dir.appending("file.part").path) }
    var partBytes: Data { (try? Data(contentsOf: URL(fileURLWithPath: part.string))) ?? Data() }

    @Test("a document: its bytes and an ETag that is its quoted SHA-256; the same ETag again: not modified")
    func document() async throws {
        let data = content(5_000)
        let url = try write("index.json", data)
        let tag = "\"\(sha(data).hex)\""
        let first = try await FileTransport().document(url, etag: nil, maxBytes: 1 << 20)
        #expect(first == FetchedDocument(data: data, etag: tag, notModified: false))
        let again = try await FileTransport().document(url, etag: tag, maxBytes: 1 << 20)
        #expect(again == FetchedDocument(data: Data(), etag: tag, notModified: true))
        let other = try await FileTransport().document(url, etag: "\"something else\"", maxBytes: 1 << 20)
        #expect(other == first)
    }

    @Test("a document larger than maxBytes is refused")
    func documentTooLarge() async throws {
        let url = try write("index.json", content(5_000))
        await #expect(throws: FetchError.tooLarge(url: url.absoluteString, limit: 4_999)) {
            _ = try await FileTransport().document(url, etag: nil, maxBytes: 4_999)
        }
    }

    @Test("a missing path (or a directory) is a 404, for documents and downloads")
    func missing() async throws {
        let url = dir.appending("nowhere/index.json")
        await #expect(throws: FetchError.status(url: url.absoluteString, code: 404)) {
            _ = try await FileTransport().document(url, etag: nil, maxBytes: 1 << 20)
        }
        await #expect(throws: FetchError.status(url: dir.url.absoluteString, code: 404)) {
            _ = try await FileTransport().document(dir.url, etag: nil, maxBytes: 1 << 20)
        }
        let bundle = dir.appending("nowhere/bundle.zip")
        await #expect(throws: FetchError.status(url: bundle.absoluteString, code: 404)) {
            try await FileTransport().download(
                bundle, to: part, expecting: FetchExpectation(size: 10, limit: 10, sha256: nil), progress: nil)
        }
    }

    @Test("a good copy: the exact bytes, progress for each, verified")
    func copy() async throws {
        let data = content(600_000)
        let url = try write("bundle.zip", data)
        let progress = ProgressTotal()
        try await FileTransport().download(url, to: part, expecting: exactly(data), progress: progress.handler)
        #expect(partBytes == data)
        #expect(progress.value == Int64(data.count))
    }

    @Test("a part file already holding the start: only the rest is copied")
    func resume() async throws {
        let data = content(100_000)
        let url = try write("bundle.zip", data)
        try data.prefix(40_000).write(to: URL(fileURLWithPath: part.string))
        let progress = ProgressTotal()
        try await FileTransport().download(url, to: part, expecting: exactly(data), progress: progress.handler)
        #expect(partBytes == data)
        #expect(progress.value == 60_000)
    }

    @Test("a part file at full size holding zeros (a power cut): copied again, not called a bad file")
    func zeroedPart() async throws {
        let data = content(100_000)
        let url = try write("bundle.zip", data)
        try Data(count: data.count).write(to: URL(fileURLWithPath: part.string))
        try await FileTransport().download(url, to: part, expecting: exactly(data), progress: nil)
        #expect(partBytes == data)
    }

    @Test("a file shorter than declared: truncated, naming both sizes")
    func shorter() async throws {
        let data = content(1_000)
        let url = try write("bundle.zip", data)
        await #expect(throws: FetchError.truncated(url: url.absoluteString, expected: 1_500, got: 1_000)) {
            try await FileTransport().download(
                url, to: part, expecting: FetchExpectation(size: 1_500, limit: 1_500, sha256: sha(data)), progress: nil)
        }
    }

    @Test("a file longer than declared: too-large at the declared size, nothing written past it")
    func longer() async throws {
        let data = content(300_000)
        let url = try write("bundle.zip", data)
        await #expect(throws: FetchError.tooLarge(url: url.absoluteString, limit: 299_999)) {
            try await FileTransport().download(
                url, to: part, expecting: FetchExpectation(size: 299_999, limit: 299_999, sha256: nil), progress: nil)
        }
        #expect(partBytes.count <= 299_999)
    }

    @Test("a file whose content is not the declared one: hash-mismatch with both digests, the part file emptied")
    func hashMismatch() async throws {
        let data = content(10_000)
        let url = try write("bundle.zip", data)
        let declared = content(10_000, seed: 2)
        await #expect(
            throws: FetchError.hashMismatch(url: url.absoluteString, expected: sha(declared), got: sha(data))
        ) {
            try await FileTransport().download(url, to: part, expecting: exactly(declared), progress: nil)
        }
        #expect(partBytes.isEmpty)
    }

    @Test("a part file that cannot be created: a file error naming its path")
    func unwritablePart() async throws {
        let data = content(100)
        let url = try write("bundle.zip", data)
        let nowhere = FilePath(dir.appending("no-such-dir/file.part").path)
        let error = await failure {
            try await FileTransport().download(url, to: nowhere, expecting: exactly(data), progress: nil)
        }
        guard case .file(let e) = error else {
            Issue.record("expected a file error, got \(String(describing: error))")
            return
        }
        #expect(e.path == nowhere.string && e.errno == Errno.noSuchFileOrDirectory, "\(e)")
    }
}
