import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

/// Why a fetch failed. Each case says what was wrong with the server's answer.
public enum FetchError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The server answered with a status that is not success (after retries where they apply).
    case status(url: String, code: Int)
    /// The connection failed (after retries).
    case connection(url: String, detail: String)
    /// More bytes than declared or allowed.
    case tooLarge(url: String, limit: Int64)
    /// Fewer bytes than declared.
    case truncated(url: String, expected: Int64, got: Int64)
    /// The content's SHA-256 is not the declared one.
    case hashMismatch(url: String, expected: SHA256Digest, got: SHA256Digest)
    /// A partial response that does not continue what we have (bad Content-Range).
    case badRange(url: String, detail: String)
    /// The transfer took longer than the deadline, or its rate fell below the floor.
    case tooSlow(url: String, detail: String)
    /// The redirect policy refused a redirect (another host, a downgrade, a loop).
    case redirect(url: String, detail: String)
    /// Plain http to a non-loopback host without the explicit flag.
    case insecure(url: String)
    /// The URL's scheme (the text, empty when there is none) is not https, http or file.
    case unsupportedScheme(String)
    /// A local file operation of the transfer failed (the part file, a `file://` document).
    case file(FileSystemError)
    /// The part file, or a `file://` source, could not be read or written; the text names the path.
    case io(String)

    /// A stable machine-readable code.
    public var code: ReasonCode {
        switch self {
        case .status: "http-status"
        case .connection: "connection"
        case .tooLarge: "too-large"
        case .truncated: "truncated"
        case .hashMismatch: "hash-mismatch"
        case .badRange: "bad-range"
        case .tooSlow: "too-slow"
        case .redirect: "redirect"
        case .insecure: "insecure-http"
        case .unsupportedScheme: "unsupported-scheme"
        case .file: "io"
        case .io: "io"
        }
    }

    /// The URL concerned and what was wrong, for a person.
    public var description: String {
        switch self {
        case .status(let u, 404) where u.lowercased().hasPrefix("file:"):
            "\(u): no such file (check the file:// repository's path)"
        case .status(let u, let c): "\(u): the server answered \(c)"
        case .connection(let u, let d): "\(u): \(d)"
        case .tooLarge(let u, let l): "\(u): more than the \(l) bytes declared or allowed"
        case .truncated(let u, let e, let g): "\(u): ended after \(g) of \(e) bytes"
        case .hashMismatch(let u, let e, let g): "\(u): sha256 \(g), expected \(e)"
        case .badRange(let u, let d): "\(u): \(d)"
        case .tooSlow(let u, let d): "\(u): \(d)"
        case .redirect(let u, let d): "\(u): \(d)"
        case .insecure(let u): "\(u): plain http is allowed only to loopback, or with --allow-http"
        case .unsupportedScheme(let s): "unsupported URL scheme \(quoted(s)) (use https://, http:// or file://)"
        case .file(let e): e.description
        case .io(let d): d
        }
    }
}

/// A small document fetched whole (index, signature, file list).
package struct FetchedDocument: Sendable, Equatable {
    /// The body; empty when `notModified`.
    package var data: Data
    /// The ETag to send next time (`file://`: the quoted SHA-256 of the bytes); nil when there is none.
    package var etag: String?
    /// The server answered 304 to our If-None-Match.
    package var notModified: Bool

    /// Creates a document.
    package init(data: Data, etag: String?, notModified: Bool) {
        self.data = data
        self.etag = etag
        self.notModified = notModified
    }
}

/// What a download must be.
package struct Expectation: Sendable, Equatable {
    /// Exact size when declared; reading stops there.
    package var size: Int64?
    /// Upper bound when the size is not declared (objects).
    package var limit: Int64
    /// The content's SHA-256, checked when the download ends; nil to skip the check (objects).
    package var sha256: SHA256Digest?

    /// Creates an expectation.
    package init(size: Int64?, limit: Int64, sha256: SHA256Digest?) {
        self.size = size
        self.limit = limit
        self.sha256 = sha256
    }
}

/// Byte progress of one transfer.
package typealias ProgressHandler = @Sendable (_ bytes: Int64) -> Void

/// The one seam between sync and the network (or offline media). Implementations: HTTP(S)
/// through URLSession, and `file://` repositories; tests inject faults through real servers.
package protocol Transport: Sendable {
    /// Fetches a small document, conditionally when `etag` is given.
    func document(_ url: URL, etag: String?, maxBytes: Int) async throws(FetchError) -> FetchedDocument

    /// Downloads to `part`, resuming from the bytes already in it, until the expected size;
    /// verifies the SHA-256 when one is expected. `part` is complete and verified on return.
    /// `watch`, when given, is told of every byte as it is written (`advance`), of a restart
    /// (`restart`), and of the verified end (`completed`), so that the file can be read while it
    /// grows. A transport that ignores it still works: the complete file is read afterwards.
    func download(
        _ url: URL, to part: FilePath, expecting: Expectation, progress: ProgressHandler?, watch: GrowingPart?)
        async throws(FetchError)
}

extension Transport {
    /// Downloads with nobody following the file.
    package func download(_ url: URL, to part: FilePath, expecting: Expectation, progress: ProgressHandler?)
        async throws(FetchError)
    {
        try await download(url, to: part, expecting: expecting, progress: progress, watch: nil)
    }
}

/// Picks the transport for a repository URL: `file://` read directly, http(s) over `stack`.
package func transport(for url: URL, options: HTTPOptions = HTTPOptions(), stack: HTTPStack) throws(FetchError)
    -> any Transport
{
    switch url.scheme?.lowercased() {
    case "file": return FileTransport()
    case "http", "https": return try HTTPTransport(options: options, stack: stack)
    case let s: throw .unsupportedScheme(s ?? "")
    }
}

/// `file://` repositories (offline media, a mounted share): the same contract, no network.
/// ETags are the SHA-256 of the document, so a no-change sync reads the index once.
package struct FileTransport: Transport {
    /// Creates one.
    package init() {}

    /// Reads the file at the URL's path whole; `notModified` when `etag` is still its ETag.
    package func document(_ url: URL, etag: String?, maxBytes: Int) async throws(FetchError) -> FetchedDocument {
        let path = FilePath(url.path)
        guard let status = try? SystemCalls.stat(path), status.kind == .regular else {
            throw .status(url: url.absoluteString, code: 404)
        }
        if status.size > Int64(maxBytes) { throw .tooLarge(url: url.absoluteString, limit: Int64(maxBytes)) }
        let data: Data
        do { data = try AtomicFile.read(path, limit: maxBytes) } catch {
            if error.errno == .fileTooLarge { throw .tooLarge(url: url.absoluteString, limit: Int64(maxBytes)) }
            throw .status(url: url.absoluteString, code: 404)
        }
        let tag = "\"\(SHA256Digest.of(data).hex)\""
        if let e = etag, e == tag { return FetchedDocument(data: Data(), etag: tag, notModified: true) }
        return FetchedDocument(data: data, etag: tag, notModified: false)
    }

    /// Copies the file at the URL's path into `part`, after the bytes `part` already holds, then verifies it.
    package func download(
        _ url: URL, to part: FilePath, expecting: Expectation, progress: ProgressHandler?, watch: GrowingPart?
    ) async throws(FetchError) {
        let source = FilePath(url.path)
        guard let input = try? SystemCalls.open(source, .readOnly) else {
            throw .status(url: url.absoluteString, code: 404)
        }
        defer { try? SystemCalls.close(input, path: source) }
        var sink = try PartFile(part, url: url.absoluteString, expecting: expecting, watch: watch)
        defer { sink.close() }
        var buffer = [UInt8](repeating: 0, count: 256 << 10)
        while true {
            let n: Int
            do { n = try SystemCalls.pread(input, into: &buffer, at: sink.have, path: source) } catch {
                throw .file(error)
            }
            if n == 0 {
                do { try sink.finish() } catch {
                    // Wrong bytes left by an earlier attempt: copy it all once more.
                    if sink.shouldRefetch(after: error) { continue }
                    throw error
                }
                return
            }
            try buffer.withUnsafeBytes { raw in
                Result { () throws(FetchError) in try sink.append(UnsafeRawBufferPointer(rebasing: raw[0..<n])) }
            }.get()
            progress?(Int64(n))
        }
    }
}
