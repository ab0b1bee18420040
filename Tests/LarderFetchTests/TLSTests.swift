import Foundation
import LarderCore
import LarderFetch
import LarderTestSupport
import Testing

/// https against the origin in its TLS mode, with a certificate made by `openssl` for the test.
/// The CA files are read by the NIO engine; URLSession trusts the system's roots only (Apple
/// platforms: what the device trusts), so over URLSession each test checks that instead: the
/// private CA is not trusted, whatever `caFiles` says. These run on Linux only (the origin's
/// certificate is made with openssl here).
#if os(Linux)
    @Suite("HTTPS: private CA, downgrade refused", .hangGuard)
    struct TLSTests {
        static func options(trusting files: FaultOrigin.TLSFiles?) -> HTTPOptions {
            var o = fastOptions(attempts: 2)
            o.caFiles = files.map { [$0.certificate] } ?? []
            return o
        }

        static func files(_ env: OriginEnv) -> FaultOrigin.TLSFiles {
            FaultOrigin.TLSFiles(
                certificate: env.dir.appending("origin-cert.pem").path,
                privateKey: env.dir.appending("origin-key.pem").path)
        }

        /// A request to a server the client does not trust (no CA given, or an engine that does
        /// not read `caFiles`): it fails in TLS, and nothing reaches the origin.
        static func refusedInTLS(_ env: OriginEnv, _ url: URL, trusting: FaultOrigin.TLSFiles?) async {
            let error = await failure {
                _ = try await HTTPTransport(options: options(trusting: trusting)).document(
                    url, etag: nil, maxBytes: 1 << 20)
            }
            guard case .connection(let u, let detail) = error else {
                Issue.record("expected a connection error, got \(String(describing: error))")
                return
            }
            #expect(u == url.absoluteString)
            #expect(detail.contains("TLS") || detail.lowercased().contains("certificate"), "\(detail)")
            #expect(env.origin.requests.isEmpty)
        }

        @Test("a download over https from a server whose CA is given in caFiles")
        func trusted() async throws {
            try await withOrigin(tls: true) { env in
                guard testedEngineReadsCAFiles else {
                    return await Self.refusedInTLS(env, env.url("bundle.zip"), trusting: Self.files(env))
                }
                let data = try env.file("bundle.zip", count: 50_000)
                env.origin.inject(.lengthLess(by: 30_000), at: "/bundle.zip")
                let part = env.part()
                #expect(env.url("bundle.zip").scheme == "https")
                try await HTTPTransport(options: Self.options(trusting: Self.files(env))).download(
                    env.url("bundle.zip"), to: part, expecting: exactly(data), progress: nil)
                #expect(env.bytes(part) == data)
                #expect(env.requests("bundle.zip").map(\.range) == [nil, "bytes=20000-"], "resumed over TLS")
            }
        }

        @Test("a server the client does not trust: a connection error in TLS, and no request reaches it")
        func untrusted() async throws {
            try await withOrigin(tls: true) { env in
                try env.file("index.json", count: 100)
                await Self.refusedInTLS(env, env.url("index.json"), trusting: nil)
            }
        }

        @Test("a redirect from https to http on the same host is refused")
        func downgrade() async throws {
            try await withOrigin(tls: true) { env in
                // URLSession: refused before any redirect (the CA is not trusted); its redirect
                // policy is ResponseHandler.refusal, the one checked here over AsyncHTTPClient.
                guard testedEngineReadsCAFiles else {
                    return await Self.refusedInTLS(env, env.url("bundle.zip"), trusting: Self.files(env))
                }
                let data = try env.file("bundle.zip", count: 1_000)
                env.origin.inject(.redirectToHTTP, at: "/bundle.zip", count: nil)
                let url = env.url("bundle.zip")
                await #expect(
                    throws: FetchError.redirect(url: url.absoluteString, detail: "redirect from https to http refused")
                ) {
                    try await HTTPTransport(options: Self.options(trusting: Self.files(env))).download(
                        url, to: env.part(), expecting: exactly(data), progress: nil)
                }
                #expect(env.requests("bundle.zip").count == 1)
            }
        }

        @Test("a CA file that cannot be read fails when the transport is made, naming the file")
        func missingCAFile() throws {
            var o = HTTPOptions()
            o.caFiles = ["/nonexistent/larder-test-ca.pem"]
            o.stallTimeout = 7.25  // a configuration no other test uses: the client is made here
            guard testedEngineReadsCAFiles else {
                // URLSession reads no CA file, so a missing one is no error when it is made.
                #expect(throws: Never.self) { _ = try HTTPTransport(options: o) }
                return
            }
            let failure: FetchError?
            do {
                _ = try HTTPTransport(options: o)
                failure = nil
            } catch {
                failure = error
            }
            guard case .io(let detail) = failure else {
                Issue.record("expected an io error, got \(String(describing: failure))")
                return
            }
            #expect(detail.hasPrefix("CA file /nonexistent/larder-test-ca.pem: "), "\(detail)")
        }
    }
#endif
