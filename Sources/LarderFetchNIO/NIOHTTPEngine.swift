import AsyncHTTPClient
import Foundation
import LarderCore
import LarderFetch
import LarderFileSystem
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import Synchronization
import SystemPackage

/// The engine on Linux: AsyncHTTPClient over NIO. One `HTTPClient` per process and
/// configuration (CA files, stall timeout, connections per host), kept for the process's life,
/// so that every request of a sync — and of later syncs in an app — shares its pool: keep-alive
/// connections, TLS session reuse, and HTTP/2 (one connection) where the server offers it over
/// TLS. The body arrives as an async sequence with back-pressure: NIO stops reading the socket
/// while the handler writes and hashes, so memory stays flat whatever the bundle's size.
/// Redirects are not followed by the client but here, so that the handler's policy decides
/// each one and the request's own header fields (If-None-Match, Range, If-Range) go with it.
///
/// A bulk request (a bundle: more than 1 MiB to fetch) goes over HTTP/1.1, through a second
/// client of the same settings. AsyncHTTPClient opens every HTTP/2 stream with an 8 MiB
/// receive window (fixed in its code), so a fast server may send up to 8 MiB that wait in
/// the process for the disk writer: the first sync of a 21,488-file bundle over https peaked
/// at 60–71 MiB from run to run. Over HTTP/1.1 what is not yet read waits in the kernel's
/// socket buffer, bounded by TCP's flow control (59 MiB in every run). Small requests —
/// documents, objects — keep HTTP/2's one multiplexed connection.
package struct NIOHTTPEngine: HTTPEngine {
    let client: HTTPClient
    let bulkClient: HTTPClient
    let options: HTTPOptions

    private static let clients = Mutex<[String: (HTTPClient, HTTPClient)]>([:])

    /// The engine for these options, its clients shared with every engine of the same settings.
    package static func engine(_ options: HTTPOptions) throws(FetchError) -> NIOHTTPEngine {
        let key = "\(options.caFiles)|\(options.stallTimeout)|\(options.connectionsPerHost)"
        if let (client, bulk) = clients.withLock({ $0[key] }) {
            return NIOHTTPEngine(client: client, bulkClient: bulk, options: options)
        }
        var tls = TLSConfiguration.makeClientConfiguration()
        var roots: [NIOSSLCertificate] = []
        for path in options.caFiles {
            do {
                let pem = try AtomicFile.read(FilePath(path), limit: 1 << 20)
                roots += try NIOSSLCertificate.fromPEMBytes(Array(pem))
            } catch {
                throw .io("CA file \(path): \(error) (a PEM file of certificates is expected)")
            }
            if roots.isEmpty { throw .io("CA file \(path): no PEM certificate in it") }
        }
        if !roots.isEmpty { tls.additionalTrustRoots = [.certificates(roots)] }
        var config = HTTPClient.Configuration(
            tlsConfiguration: tls, redirectConfiguration: .disallow,
            timeout: .init(connect: .seconds(10), read: .nanoseconds(Int64(options.stallTimeout * 1e9))),
            connectionPool: .init(
                idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: options.connectionsPerHost),
            decompression: .disabled)
        config.httpVersion = .automatic
        // A connection that cannot be made (refused, TLS verification failed) fails the
        // request at once; the transport's own retries, with backoff, decide what follows
        // (the pool would otherwise retry for the whole 10 s connect timeout).
        config.connectionPool.retryConnectionEstablishment = false
        var bulkConfig = config
        bulkConfig.httpVersion = .http1Only
        let (client, bulk) = clients.withLock { clients in
            if let existing = clients[key] { return existing }
            let made = (
                HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: config),
                HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: bulkConfig)
            )
            clients[key] = made
            return made
        }
        return NIOHTTPEngine(client: client, bulkClient: bulk, options: options)
    }

    package func run(_ request: TransferRequest, handler: ResponseHandler) async -> HTTPTransport.Outcome {
        let remaining = ContinuousClock.now.duration(to: handler.deadline)
        let deadline = NIODeadline.now() + .nanoseconds(max(0, Int64(ResponseHandler.seconds(remaining) * 1e9)))
        var url = request.url
        var redirects = 0
        while true {
            var outgoing = HTTPClientRequest(url: url.absoluteString)
            outgoing.method = .GET
            outgoing.headers.add(name: "User-Agent", value: "larder/\(larderVersion)")
            for (name, value) in request.headers { outgoing.headers.add(name: name, value: value) }
            let response: HTTPClientResponse
            do {
                response = try await (request.bulk ? bulkClient : client).execute(outgoing, deadline: deadline)
            } catch {
                return .failed(.connection(url: handler.url, detail: Self.describe(error)), retryable: true)
            }
            let status = Int(response.status.code)
            if [301, 302, 303, 307, 308].contains(status), let location = response.headers.first(name: "location") {
                redirects += 1
                guard let next = URL(string: location, relativeTo: url)?.absoluteURL else {
                    let detail = "redirect to an unreadable Location \(quoted(location)) refused"
                    return .failed(.redirect(url: handler.url, detail: detail), retryable: false)
                }
                if let refusal = ResponseHandler.refusal(
                    of: redirects, from: request.url, to: next, options: options)
                {
                    return .failed(refusal, retryable: false)
                }
                // Read the (small) body of the redirect so that its connection can serve the next request.
                _ = try? await response.body.collect(upTo: 64 << 10)
                url = next
                continue
            }
            if let failure = handler.head(status: status, headers: response.headers.map { ($0.name, $0.value) }) {
                return failure
            }
            return await Self.receive(response.body, handler: handler)
        }
    }

    /// Streams the body into the handler while a watchdog checks the throughput floor every
    /// second and the transfer's deadline when it comes; whichever ends first decides, and the
    /// other is cancelled (a cancelled body read makes the client close the connection, so the
    /// server stops sending at once).
    static func receive(_ body: HTTPClientResponse.Body, handler: ResponseHandler) async -> HTTPTransport.Outcome {
        await withTaskGroup(of: HTTPTransport.Outcome?.self) { group in
            group.addTask {
                do {
                    for try await buffer in body {
                        if let failure = buffer.withUnsafeReadableBytes({ handler.chunk($0) }) { return failure }
                    }
                } catch {
                    return .failed(.connection(url: handler.url, detail: describe(error)), retryable: true)
                }
                return handler.outcome
            }
            group.addTask {
                while true {
                    let next = min(ContinuousClock.now + .seconds(1), handler.deadline)
                    do { try await Task.sleep(until: next, clock: .continuous) } catch { return nil }
                    if let failure = handler.checkPace() { return failure }
                }
            }
            var outcome: HTTPTransport.Outcome?
            while outcome == nil, let next = await group.next() { outcome = next }
            group.cancelAll()
            return outcome
                ?? .failed(.connection(url: handler.url, detail: "connection cancelled"), retryable: true)
        }
    }

    /// An error of the client, in words that say what happened on the connection.
    static func describe(_ error: any Error) -> String {
        if let e = error as? HTTPClientError {
            switch e {
            case .readTimeout: return ResponseHandler.stalled
            case .remoteConnectionClosed: return "connection closed by the server before the response ended"
            case .deadlineExceeded: return "connection abandoned at the transfer's deadline"
            case .connectTimeout: return "connection not established within 10 s"
            default: return "connection failed: \(e)"
            }
        }
        if error is NIOSSLError || error is BoringSSLError { return tls(error) }
        if let e = error as? NIOConnectionError {
            let causes =
                e.connectionErrors.map { ($0.error as? IOError).map(socket) ?? "\($0.error)" }
                + [e.dnsAError, e.dnsAAAAError].compactMap { $0 }.map { "name not resolved: \($0)" }
            return "connection to \(e.host):\(e.port) failed: \(causes.first ?? "\(e)")"
        }
        if let e = error as? IOError { return "connection failed: \(socket(e))" }
        return "connection failed: \(error)"
    }

    /// A TLS failure in words, without the TLS library's source paths; an untrusted certificate
    /// names the option that trusts a private CA.
    static func tls(_ error: any Error) -> String {
        let text = "\(error)"
        if text.contains("CERTIFICATE_VERIFY_FAILED") || text.contains("certificate verify failed") {
            return "TLS: the server's certificate is not trusted (for a private CA, pass --ca-file FILE.pem)"
        }
        if text.contains("WRONG_VERSION_NUMBER") { return "TLS: the server does not speak TLS on that port" }
        // BoringSSL's reasons read `…:error:10000…:SSL routines:OPENSSL_internal:REASON:path:line`.
        let reasons = text.split(separator: ":").filter { part in
            part.count > 3 && part.allSatisfy { $0.isUppercase || $0 == "_" || $0.isNumber }
                && part.contains { $0.isLetter }
        }
        let reason = reasons.first.map { ": " + String($0).lowercased().replacingOccurrences(of: "_", with: " ") }
        return "TLS handshake failed" + (reason ?? "")
    }

    /// A socket error in words (the errno's meaning, not NIO's wrapping of it).
    static func socket(_ e: IOError) -> String {
        switch e.errnoCode {
        case ECONNREFUSED: "refused (nothing listens on that port)"
        case ECONNRESET: "reset by the server"
        case ETIMEDOUT: "timed out"
        case ENETUNREACH, EHOSTUNREACH: "network unreachable"
        default: String(cString: strerror(e.errnoCode))
        }
    }
}
