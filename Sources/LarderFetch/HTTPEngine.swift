import Foundation
import LarderCore

/// One request as the transport asks for it: a GET of `url` with these header fields (the
/// engine adds User-Agent).
package struct TransferRequest: Sendable {
    /// The URL fetched.
    package var url: URL
    /// Header fields the transport sets (If-None-Match, Range, If-Range).
    package var headers: [String: String] = [:]
    /// The body may be large (a bundle): the engine carries it where the bytes waiting for the
    /// reader stay bounded (see `NIOHTTPEngine`).
    package var bulk = false
}

/// What carries a request: opens or reuses a connection, follows redirects the handler's policy
/// allows, hands the final response's head and body to the handler, and returns the outcome.
/// An engine is one client: every request through it shares its connection pool.
package protocol HTTPEngine: Sendable {
    /// Runs one request to its outcome.
    func run(_ request: TransferRequest, handler: ResponseHandler) async -> HTTPTransport.Outcome
}

/// The HTTP engine a process uses: what carries a sync's and a verify's transfers, and what
/// forwards a page's passthrough requests. Engines live in targets of their own
/// (`LarderFetchNIO`: AsyncHTTPClient; `LarderFetchURLSession`: URLSession); which one a
/// platform uses is chosen in one place, `HTTPStack.platform` in LarderSync, and passed to what
/// makes transports (`SyncSetup.engine`, `HTTPTransport(options:stack:)`).
public struct HTTPStack: Sendable {
    /// The engine's name, for logs and reports.
    public let name: String
    let engine: @Sendable (HTTPOptions) throws(FetchError) -> any HTTPEngine
    let exchange: @Sendable (TimeInterval) -> any NetworkExchange

    /// A stack of these makers.
    package init(
        name: String, engine: @escaping @Sendable (HTTPOptions) throws(FetchError) -> any HTTPEngine,
        exchange: @escaping @Sendable (TimeInterval) -> any NetworkExchange
    ) {
        self.name = name
        self.engine = engine
        self.exchange = exchange
    }

    /// An engine for transfers with these options (its connection pool may be shared with other
    /// engines of the same settings); fails when a CA file cannot be read.
    package func makeEngine(_ options: HTTPOptions) throws(FetchError) -> any HTTPEngine { try engine(options) }

    /// What forwards passthrough requests, each allowed `timeout` seconds to its response head.
    package func makeExchange(timeout: TimeInterval = 60) -> any NetworkExchange { exchange(timeout) }

    /// No HTTP at all: `file://` repositories only. A transport for an http(s) URL fails with
    /// `FetchError.unsupportedScheme`, and passthrough answers as if offline.
    public static let none = HTTPStack(
        name: "none", engine: { _ throws(FetchError) in throw .unsupportedScheme("http (no HTTP engine given)") },
        exchange: { _ in NoExchange() })
}

/// The exchange of `HTTPStack.none`: every forwarded request fails.
struct NoExchange: NetworkExchange {
    struct Unavailable: Error, CustomStringConvertible {
        var description: String { "no HTTP engine: passthrough is not available in this build" }
    }

    func send(_ request: ForwardRequest, maxBytes: Int) async throws -> ForwardResponse { throw Unavailable() }
}
