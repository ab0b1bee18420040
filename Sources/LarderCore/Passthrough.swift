import Foundation
import HTTPTypes
import Synchronization

/// A request on its way to the network: what a front-end received, as the forwarder passes it on.
package struct ForwardRequest: Sendable {
    /// The HTTP method, as received (any RFC 9110 token, not only the standard ones).
    package var method: HTTPRequest.Method
    /// The absolute http(s) URL to send it to.
    package var url: String
    /// Header fields in order (hop-by-hop fields already removed).
    package var headers: [(String, String)]
    /// The request body, if any.
    package var body: Data?

    /// Creates one.
    package init(method: HTTPRequest.Method, url: String, headers: [(String, String)], body: Data?) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
    }
}

/// The network's answer: status, header fields, and the body as it arrives.
package struct ForwardResponse: Sendable {
    /// The HTTP status.
    package var status: Int
    /// Header fields in order, consistent with the body as delivered (an engine that decodes a
    /// `Content-Encoding` removes it and the length).
    package var headers: [(String, String)]
    /// The body in chunks as the reader asks for them (the network is read no faster), ending
    /// with an error if the connection failed mid-way or the body passed the limit.
    package var body: ForwardBody

    /// Creates one.
    package init(status: Int, headers: [(String, String)], body: ForwardBody) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}

/// What carries a forwarded request (`HTTPStack.makeExchange()`: AsyncHTTPClient on Linux,
/// URLSession on Apple platforms; a fake in tests). A redirect comes back as it is (the gateway
/// relays it to the browser; the web-view driver follows it itself, with cookies) — except through
/// URLSession's exchange, which still follows redirects; the body is streamed; a body longer than
/// `maxBytes` ends its stream with an error.
package protocol NetworkExchange: Sendable {
    /// Sends `request`; returns when the response head arrived.
    func send(_ request: ForwardRequest, maxBytes: Int) async throws -> ForwardResponse
}

/// A forwarded body, pulled chunk by chunk: each `next()` reads from the network only then, so a
/// slow reader holds back the sender (back-pressure) and memory stays at one chunk.
package struct ForwardBody: AsyncSequence, Sendable {
    /// Chunks of the body.
    package typealias Element = Data
    let pull: @Sendable () async throws -> Data?

    /// A body whose chunks `pull` returns, nil at its end.
    package init(pull: @escaping @Sendable () async throws -> Data?) { self.pull = pull }

    /// A body of these bytes, in one chunk (empty: none).
    package static func bytes(_ data: Data) -> ForwardBody {
        let left = Mutex<Data?>(data.isEmpty ? nil : data)
        return ForwardBody {
            left.withLock { d in
                defer { d = nil }
                return d
            }
        }
    }

    /// The next chunk, or nil at the end.
    package func next() async throws -> Data? { try await pull() }

    /// Iterates the chunks.
    package struct AsyncIterator: AsyncIteratorProtocol {
        let pull: @Sendable () async throws -> Data?
        /// The next chunk, or nil at the end.
        package mutating func next() async throws -> Data? { try await pull() }
    }

    /// An iterator over the chunks (one reader at a time).
    package func makeAsyncIterator() -> AsyncIterator { AsyncIterator(pull: pull) }
}

/// A forwarded body longer than the limit.
package struct ForwardTooLarge: Error, Sendable, CustomStringConvertible {
    /// The limit, in bytes.
    package let limit: Int
    /// Creates one.
    package init(limit: Int) { self.limit = limit }
    /// What happened.
    package var description: String { "the answer is larger than \(limit) bytes" }
}

/// `Set-Cookie` fields as an HTTP stack may hand them over.
package enum SetCookieFields {
    /// Several `Set-Cookie` fields that an HTTP stack joined into one with commas (Foundation's
    /// `allHeaderFields` does), apart again: a comma starts a new cookie only where a name and `=`
    /// follow before any `;` — the comma of an `Expires` date (`Wed, 09 Jun 2100 …`) does not.
    package static func split(joined: String) -> [String] {
        var out: [String] = []
        var current = ""
        var rest = Substring(joined)
        while let comma = rest.firstIndex(of: ",") {
            current += rest[..<comma]
            let after = rest[rest.index(after: comma)...]
            let next = after.drop { $0 == " " || $0 == "\t" }
            let head = next.prefix { $0 != ";" && $0 != "," }
            if let eq = head.firstIndex(of: "="), eq != head.startIndex,
                !head[..<eq].contains(where: { $0 == " " || $0 == "\t" })
            {
                out.append(current.trimmingCharacters(in: .whitespaces))
                current = ""
                rest = next
            } else {
                current += ","
                rest = after
            }
        }
        current += rest
        out.append(current.trimmingCharacters(in: .whitespaces))
        return out.filter { !$0.isEmpty }
    }

}
