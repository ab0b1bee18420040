import Foundation
import LarderCore

#if canImport(AsyncHTTPClient)
    import AsyncHTTPClient
    import NIOCore
    import NIOHTTP1
#elseif canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The platform's `NetworkExchange` for passthrough forwarding (the gateway, the WebKit
/// scheme-task driver): AsyncHTTPClient's shared client on Linux (redirects followed, the body
/// relayed as it arrives — not decoded, so `Content-Encoding` and `Content-Length` stay true —
/// with back-pressure), URLSession's shared session on Apple platforms (which decodes a
/// `Content-Encoding`: the field and the length are then dropped).
public struct HTTPExchange: NetworkExchange {
    /// Seconds a forwarded request may take to its response head.
    public var timeout: TimeInterval

    /// An exchange whose requests time out after `timeout` seconds.
    public init(timeout: TimeInterval = 60) { self.timeout = timeout }

    #if canImport(AsyncHTTPClient)
        /// Sends `request` with the shared `HTTPClient`.
        public func send(_ request: ForwardRequest, maxBytes: Int) async throws -> ForwardResponse {
            var upstream = HTTPClientRequest(url: request.url)
            upstream.method = HTTPMethod(rawValue: request.method)
            for (name, value) in request.headers { upstream.headers.add(name: name, value: value) }
            if let body = request.body { upstream.body = .bytes(ByteBuffer(bytes: body)) }
            let response = try await HTTPClient.shared.execute(upstream, timeout: .seconds(Int64(timeout)))
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
    #else
        /// Sends `request` with URLSession's shared session.
        public func send(_ request: ForwardRequest, maxBytes: Int) async throws -> ForwardResponse {
            guard let url = URL(string: request.url) else { throw URLError(.badURL) }
            var r = URLRequest(url: url, timeoutInterval: timeout)
            r.httpMethod = request.method
            for (name, value) in request.headers where name.lowercased() != "accept-encoding" {
                r.addValue(value, forHTTPHeaderField: name)
            }
            r.httpBody = request.body
            let (bytes, response) = try await URLSession.shared.bytes(for: r)
            guard let http = response as? HTTPURLResponse else { throw URLError(.badServerResponse) }
            var headers: [(String, String)] = []
            let decoded = http.value(forHTTPHeaderField: "Content-Encoding") != nil
            for (k, v) in http.allHeaderFields {
                guard let name = k as? String, let value = v as? String else { continue }
                if decoded, ["content-encoding", "content-length"].contains(name.lowercased()) { continue }
                headers.append((name, value))
            }
            let reader = BytesReader(bytes.makeAsyncIterator(), limit: maxBytes)
            return ForwardResponse(
                status: http.statusCode, headers: headers, body: ForwardBody { try await reader.next() })
        }

        /// Pulls the body in chunks of up to 64 KiB, counting it against the limit.
        final class BytesReader: @unchecked Sendable {
            // @unchecked: one reader pulls at a time.
            var iterator: URLSession.AsyncBytes.AsyncIterator
            var total = 0
            let limit: Int
            init(_ iterator: URLSession.AsyncBytes.AsyncIterator, limit: Int) {
                self.iterator = iterator
                self.limit = limit
            }
            func next() async throws -> Data? {
                var chunk = Data()
                while chunk.count < 64 << 10, let byte = try await iterator.next() { chunk.append(byte) }
                guard !chunk.isEmpty else { return nil }
                total += chunk.count
                if total > limit { throw ForwardTooLarge(limit: limit) }
                return chunk
            }
        }
    #endif
}
