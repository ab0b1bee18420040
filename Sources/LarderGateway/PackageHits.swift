import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import LarderCore
import LarderResolve
import Logging
import NIOCore
import NIOHTTP1
import Synchronization

/// Hummingbird's HTTP/1.1 channel with the gateway's event-loop responder in its pipeline.
///
/// `PackageHits` sits between NIO's HTTP/1 codec and Hummingbird's conversion to HTTP types: it
/// answers the requests a package serves on the connection's event loop, and hands every other
/// request on to Hummingbird, whose task answers it with `Gateway.respond` as before.
@available(macOS 14, iOS 17, tvOS 17, *)
struct GatewayChannel: ServerChildChannel, HTTPChannelHandler {
    typealias Value = HTTP1Channel.Value
    let inner: HTTP1Channel
    let gateway: Gateway
    let bound: BoundPort
    let dates: DateField

    var responder: HTTPChannelHandler.Responder { inner.responder }

    func setup(channel: any NIOCore.Channel, logger: Logger) -> EventLoopFuture<Value> {
        inner.setup(channel: channel, logger: logger).flatMapThrowing { value in
            let ops = channel.pipeline.syncOperations
            let decoder = try ops.handler(type: ByteToMessageHandler<HTTPRequestDecoder>.self)
            try ops.addHandler(
                PackageHits(gateway: gateway, bound: bound, dates: dates), position: .after(decoder))
            return value
        }
    }

    func handle(value: Value, logger: Logger) async {
        await inner.handle(value: value, logger: logger)
    }
}

/// The gateway's responder on the event loop: a GET or HEAD that a package answers (200, 206 or
/// 304) is answered here, with no hop to a task. The body is read into one buffer when it is at
/// most `bufferedBytes` (one `writev` with the head), else sent from the file by `FileRegion`
/// (`sendfile` on Linux). Every other request — another method, a body, `Connection: close`, a
/// reserved path, a watched navigation, first use, passthrough, any other status — goes on down
/// the pipeline to Hummingbird unchanged; while one of those is being answered, the requests
/// after it on the connection go the same way, so responses keep their order.
///
/// Opening the file (and the loader's fallback, when a listed file is broken) runs on the event
/// loop, as nginx does: local files, no network.
@available(macOS 14, iOS 17, tvOS 17, *)
final class PackageHits: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    /// Bodies up to this size are read into a buffer; larger ones go by `sendfile`.
    static let bufferedBytes = 64 << 10

    private enum State {
        case idle
        /// A request answered here, waiting for its end.
        case answering(Answer)
        /// A request handed on: its parts follow it.
        case handingOn
    }

    private struct Answer {
        let method: HTTPRequest.Method
        let url: String
        let response: LoadResponse
        let started: Date
    }

    private let gateway: Gateway
    private let bound: BoundPort
    private let dates: DateField
    private var state = State.idle
    /// Requests handed on whose response has not ended yet.
    private var handedOn = 0

    init(gateway: Gateway, bound: BoundPort, dates: DateField) {
        self.gateway = gateway
        self.bound = bound
        self.dates = dates
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        switch (state, part) {
        case (.idle, .head(let head)):
            if handedOn == 0, let answer = answer(head) {
                state = .answering(answer)
            } else {
                state = .handingOn
                handedOn += 1
                context.fireChannelRead(data)
            }
        case (.answering, .body):
            break  // none: a request with a body is handed on
        case (.answering(let answer), .end):
            state = .idle
            send(answer, context: context)
        case (.handingOn, .end):
            state = .idle
            context.fireChannelRead(data)
        default:
            context.fireChannelRead(data)
        }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data), handedOn > 0 { handedOn -= 1 }
        context.write(data, promise: promise)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        if case .answering(let answer) = state { answer.response.close() }
        state = .idle
    }

    /// The package's answer to `head`, when it is one this handler sends.
    private func answer(_ head: HTTPRequestHead) -> Answer? {
        guard head.method == .GET || head.method == .HEAD, head.isKeepAlive, head.uri.hasPrefix("/"),
            !head.uri.hasPrefix("/.larder/"),
            head.headers[canonicalForm: "content-length"].allSatisfy({ $0 == "0" }),
            !head.headers.contains(name: "transfer-encoding")
        else { return nil }
        let headers = head.headers
        if gateway.health != nil && head.method == .GET
            && Gateway.isNavigation(fetchDest: field(headers, "sec-fetch-dest"), accept: field(headers, "accept"))
        {
            return nil
        }
        let started = Date()
        let method: HTTPRequest.Method = head.method == .GET ? .get : .head
        let urls = Gateway.candidates(
            authority: headers.first(name: "host") ?? "", target: head.uri, gatewayHost: gateway.host,
            ownPort: bound.port ?? gateway.port)
        guard
            case .served(let url, let r) = gateway.lookUp(
                method, urls, range: field(headers, "range"), ifNoneMatch: field(headers, "if-none-match"),
                origin: field(headers, "origin"), afterInstall: false)
        else { return nil }
        guard r.status == 200 || r.status == 206 || r.status == 304 else {
            r.close()
            return nil
        }
        return Answer(method: method, url: url, response: r, started: started)
    }

    /// Every value of a header field, joined with commas as `HTTPFields` does; nil when absent.
    private func field(_ headers: HTTPHeaders, _ name: String) -> String? {
        let values = headers[name]
        return values.isEmpty ? nil : values.joined(separator: ", ")
    }

    private func send(_ answer: Answer, context: ChannelHandlerContext) {
        let r = answer.response
        let length = r.header("Content-Length")
        let outcome = "\(r.outcome)"
        var headers = HTTPHeaders()
        headers.reserveCapacity(r.headers.count + 3)
        for (name, value) in r.headers { headers.add(name: name, value: value) }
        headers.add(name: "X-Larder-Outcome", value: outcome)
        headers.add(name: "Date", value: dates.now())
        headers.add(name: "Server", value: "larder")
        let head = HTTPResponseHead(
            version: .http1_1, status: HTTPResponseStatus(statusCode: r.status), headers: headers)
        gateway.log(gateway.line(answer.method, answer.url, r.status, outcome, length, answer.started))
        guard answer.method != .head, r.status != 304 else {
            r.close()
            context.write(wrapOutboundOut(.head(head)), promise: nil)
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
            return
        }
        let count = Int(length ?? "") ?? -1
        if count > Self.bufferedBytes, let file = r.takeFile() {
            // The kernel copies the bytes from the file to the socket. The loader checked the
            // file's length when it opened it; installed files are never rewritten in place.
            let handle = NIOFileHandle(_deprecatedTakingOwnershipOfDescriptor: file.descriptor)
            let region = FileRegion(
                fileHandle: handle, readerIndex: Int(file.range.lowerBound), endIndex: Int(file.range.upperBound))
            let sent = context.eventLoop.makePromise(of: Void.self)
            sent.futureResult.whenComplete { _ in try? handle.close() }
            context.write(wrapOutboundOut(.head(head)), promise: nil)
            context.write(wrapOutboundOut(.body(.fileRegion(region))), promise: sent)
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
            return
        }
        // Read here, then write head and body together.
        defer { r.close() }
        var buffer = context.channel.allocator.buffer(capacity: max(count, 0))
        do {
            while try buffer.writeWithUnsafeMutableBytes(
                minimumWritableBytes: min(max(count - buffer.readableBytes, 1), Self.bufferedBytes),
                { try r.nextChunk(into: $0) }) > 0
            {}
        } catch {
            // The file changed or broke under the server: no response rather than a wrong one.
            gateway.log("\(answer.method) \(answer.url) aborted: \(error)")
            context.close(promise: nil)
            return
        }
        guard count < 0 || buffer.readableBytes == count else {
            gateway.log(
                "\(answer.method) \(answer.url) aborted: \(buffer.readableBytes) bytes read, \(count) announced")
            context.close(promise: nil)
            return
        }
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(buffer))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }
}

/// The `Date` header's value, formatted once a second.
final class DateField: Sendable {
    /// The second last formatted, and its text.
    private let formatted = Mutex((second: 0, value: ""))

    func now() -> String {
        let t = time(nil)
        return formatted.withLock { formatted in
            if t != formatted.second { formatted = (t, Self.format(t)) }
            return formatted.value
        }
    }

    /// IMF-fixdate (RFC 9110 §5.6.7): `Sun, 06 Nov 1994 08:49:37 GMT`.
    static func format(_ t: time_t) -> String {
        var t = t
        var parts = tm()
        gmtime_r(&t, &parts)
        let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return
            "\(days[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(parts.tm_year + 1900) "
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
    }
}
