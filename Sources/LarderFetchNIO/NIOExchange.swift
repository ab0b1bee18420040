import AsyncHTTPClient
import Foundation
import LarderCore
import LarderFetch
import NIOCore
import NIOHTTP1
import NIOPosix

/// Passthrough forwarding over AsyncHTTPClient (the gateway, the web-view driver), with a client
/// of its own: a redirect is handed to the page with its fields (its `Set-Cookie` among them,
/// each field kept apart), never followed here; a connection that cannot be made fails the
/// request at once (no retried connection attempts: offline, a page's request fails in the time
/// the system takes to say so) and connecting has its own deadline; the body is relayed as it
/// arrives — not decoded, so `Content-Encoding` and `Content-Length` stay true — with
/// back-pressure.
package struct NIOExchange: NetworkExchange {
    /// Seconds a connection attempt may take.
    package static let connectTimeout: Int64 = 5

    /// The passthrough's client, for the process's life.
    static let client: HTTPClient = {
        var config = HTTPClient.Configuration(
            redirectConfiguration: .disallow,
            timeout: .init(connect: .seconds(connectTimeout)))
        config.connectionPool.retryConnectionEstablishment = false
        return HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: config)
    }()

    /// Seconds a forwarded request may take to its response head.
    package var timeout: TimeInterval

    /// An exchange whose requests time out after `timeout` seconds.
    package init(timeout: TimeInterval) { self.timeout = timeout }

    /// Sends `request` with the passthrough's client.
    package func send(_ request: ForwardRequest, maxBytes: Int) async throws -> ForwardResponse {
        var upstream = HTTPClientRequest(url: request.url)
        upstream.method = HTTPMethod(rawValue: request.method.rawValue)
        for (name, value) in request.headers { upstream.headers.add(name: name, value: value) }
        if let body = request.body { upstream.body = .bytes(ByteBuffer(bytes: body)) }
        let response = try await Self.client.execute(upstream, timeout: .seconds(Int64(timeout)))
        let reader = BodyReader(response.body.makeAsyncIterator(), limit: maxBytes)
        return ForwardResponse(
            status: Int(response.status.code), headers: response.headers.map { ($0.name, $0.value) },
            body: ForwardBody { try await reader.next() })
    }

    /// Pulls the response body, counting it against the limit.
    final class BodyReader: @unchecked Sendable {
        // @unchecked: one reader pulls at a time (a front-end writes one chunk, then asks for the next).
        var iterator: HTTPClientResponse.Body.AsyncIterator
        var total = 0
        let limit: Int
        init(_ iterator: HTTPClientResponse.Body.AsyncIterator, limit: Int) {
            self.iterator = iterator
            self.limit = limit
        }
        func next() async throws -> Data? {
            guard let buffer = try await iterator.next() else { return nil }
            total += buffer.readableBytes
            if total > limit { throw ForwardTooLarge(limit: limit) }
            return Data(buffer.readableBytesView)
        }
    }
}

extension HTTPStack {
    /// AsyncHTTPClient over NIO: transfers by `NIOHTTPEngine`, passthrough by `NIOExchange`.
    package static let nio = HTTPStack(
        name: "AsyncHTTPClient",
        engine: { options throws(FetchError) in try NIOHTTPEngine.engine(options) },
        exchange: { timeout in NIOExchange(timeout: timeout) })
}
