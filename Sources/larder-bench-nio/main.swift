// The SwiftNIO baseline of `scripts/bench`'s serve rows: a static file server written directly on
// SwiftNIO (no Hummingbird, no resolver), doing per request the work nginx does with its bench
// configuration — map the path under ROOT, open the file, fstat it, read a body of at most 64 KiB
// into one buffer (larger: `sendfile` by `FileRegion`), answer 200 with Content-Type,
// Content-Length, ETag, Date and Server, close the file. One event loop per CPU, NIO's HTTP/1
// codec, keep-alive. It answers what SwiftNIO itself costs on this machine, so the gateway's gap
// to nginx can be split into what NIO costs and what Larder adds (issue 32 asks which of
// Hummingbird and SwiftNIO the gateway should build on).
//
// Not a product: no Range, no conditional requests, no percent-decoding; a path with `..` or a
// file that is not regular is 404.
//
// Usage: larder-bench-nio ROOT PORT   (prints "listening on PORT" once bound; SIGTERM stops it)
import Foundation
import LarderFileSystem
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization
import SystemPackage

let args = CommandLine.arguments
guard args.count == 3, let port = Int(args[2]) else {
    FileHandle.standardError.write(Data("usage: larder-bench-nio ROOT PORT\n".utf8))
    exit(64)
}
let root = args[1].hasSuffix("/") ? String(args[1].dropLast()) : args[1]

/// The `Date` header, formatted once a second per event loop.
final class DateHeader: Sendable {
    /// The second formatted last, and its text (each used on its own event loop, so uncontended).
    private let formatted = Mutex((second: 0, value: ""))
    func now() -> String {
        let t = time(nil)
        return formatted.withLock { formatted in
            if t != formatted.second {
                var t = t
                var parts = tm()
                gmtime_r(&t, &parts)
                var text = [CChar](repeating: 0, count: 64)
                let n = strftime(&text, text.count, "%a, %d %b %Y %H:%M:%S GMT", &parts)
                formatted = (t, String(decoding: text[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self))
            }
            return formatted.value
        }
    }
}

let types: [Substring: String] = [
    "html": "text/html", "js": "application/javascript", "mjs": "application/javascript", "css": "text/css",
    "json": "application/json", "svg": "image/svg+xml", "txt": "text/plain", "map": "application/json",
    "png": "image/png", "jpg": "image/jpeg", "woff2": "font/woff2", "wasm": "application/wasm",
]

final class StaticFiles: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart
    private let dates: DateHeader
    private var head: HTTPRequestHead?

    init(dates: DateHeader) { self.dates = dates }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let h): head = h
        case .body: break
        case .end:
            if let head { respond(head, context: context) }
            head = nil
        }
    }

    private func respond(_ request: HTTPRequestHead, context: ChannelHandlerContext) {
        let path = request.uri.prefix { $0 != "?" }
        guard path.hasPrefix("/"), !path.contains(".."),
            let fd = try? SystemCalls.open(FilePath(root + path), .readOnly)
        else { return notFound(context) }
        let file = FilePath(String(path))
        guard let status = try? SystemCalls.fstat(fd, path: file), status.kind == .regular else {
            try? SystemCalls.close(fd, path: file)
            return notFound(context)
        }
        let size = Int(status.size)
        let ext = path.lastIndex(of: ".").map { path[path.index(after: $0)...] } ?? ""
        var headers = HTTPHeaders()
        headers.reserveCapacity(6)
        headers.add(name: "Server", value: "larder-bench-nio")
        headers.add(name: "Date", value: dates.now())
        headers.add(name: "Content-Type", value: types[Substring(ext)] ?? "application/octet-stream")
        headers.add(name: "Content-Length", value: String(size))
        headers.add(
            name: "ETag",
            value: "\"\(String(status.modificationTime.seconds, radix: 16))-\(String(size, radix: 16))\"")
        let head = HTTPResponseHead(version: request.version, status: .ok, headers: headers)
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        if request.method == .HEAD {
            try? SystemCalls.close(fd, path: file)
        } else if size <= 64 << 10 {
            var buffer = context.channel.allocator.buffer(capacity: size)
            let read = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: size) { raw in
                (try? SystemCalls.pread(
                    fd, into: UnsafeMutableRawBufferPointer(rebasing: raw[..<size]), at: 0, path: file))
                    ?? 0
            }
            try? SystemCalls.close(fd, path: file)
            guard read == size else { return context.close(promise: nil) }
            context.write(wrapOutboundOut(.body(.byteBuffer(buffer))), promise: nil)
        } else {
            let handle = NIOFileHandle(_deprecatedTakingOwnershipOfDescriptor: fd.rawValue)
            let sent = context.eventLoop.makePromise(of: Void.self)
            sent.futureResult.whenComplete { _ in try? handle.close() }
            context.write(
                wrapOutboundOut(.body(.fileRegion(FileRegion(fileHandle: handle, readerIndex: 0, endIndex: size)))),
                promise: sent)
        }
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        if !request.isKeepAlive { context.close(promise: nil) }
    }

    private func notFound(_ context: ChannelHandlerContext) {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Length", value: "0")
        context.write(
            wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .notFound, headers: headers))),
            promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }
}

let group = MultiThreadedEventLoopGroup(numberOfThreads: System.coreCount)
var dateHeaders: [ObjectIdentifier: DateHeader] = [:]
for loop in group.makeIterator() { dateHeaders[ObjectIdentifier(loop)] = DateHeader() }
let perLoop = dateHeaders
let channel = try ServerBootstrap(group: group)
    .serverChannelOption(.backlog, value: 256)
    .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
    .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
    .childChannelInitializer { channel in
        channel.eventLoop.makeCompletedFuture {
            let ops = channel.pipeline.syncOperations
            try ops.configureHTTPServerPipeline(withPipeliningAssistance: false, withErrorHandling: true)
            try ops.addHandler(StaticFiles(dates: perLoop[ObjectIdentifier(channel.eventLoop)] ?? DateHeader()))
        }
    }
    .bind(host: "127.0.0.1", port: port).wait()
FileHandle.standardOutput.write(Data("listening on \(channel.localAddress?.port ?? port)\n".utf8))
signal(SIGTERM, SIG_IGN)
let term = DispatchSource.makeSignalSource(signal: SIGTERM, queue: .main)
term.setEventHandler { exit(0) }
term.resume()
dispatchMain()
