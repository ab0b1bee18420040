import Foundation

/// One request as the transport asks for it: a GET of `url` with these header fields (the
/// engine adds User-Agent).
struct HTTPRequestHead: Sendable {
    var url: URL
    var headers: [String: String] = [:]
    /// The body may be large (a bundle): the engine carries it where the bytes waiting for the
    /// reader stay bounded (see `NIOHTTPEngine`).
    var bulk = false
}

/// What carries a request: opens or reuses a connection, follows redirects the handler's policy
/// allows, hands the final response's head and body to the handler, and returns the outcome.
/// An engine is one client: every request through it shares its connection pool.
protocol HTTPEngine: Sendable {
    func run(_ request: HTTPRequestHead, handler: ResponseHandler) async -> HTTPTransport.Outcome
}

/// The platform's engine. Linux: AsyncHTTPClient (NIO), chosen by measurement over
/// FoundationNetworking's URLSession, whose libcurl alone adds about 6 ms to every process start
/// (BENCHMARKS.md); Apple platforms: URLSession. Building with `-DLARDER_URLSESSION` selects
/// URLSession on Linux too, for a side-by-side measurement.
func defaultEngine(_ options: HTTPOptions) throws(FetchError) -> any HTTPEngine {
    #if canImport(Darwin) || LARDER_URLSESSION
        return URLSessionEngine(options: options)
    #else
        return try NIOHTTPEngine.engine(options)
    #endif
}
