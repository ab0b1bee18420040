import Foundation
import LarderCore
import LarderFetch
import Synchronization
import SystemPackage

/// One call a transport received.
package enum TransportCall: Sendable, Equatable {
    /// `document(url, etag:)`.
    case document(url: String, etag: String?)
    /// `download(url, to:)`.
    case download(url: String)
}

/// A transport that records every call and hands it to another (a real `FileTransport` by
/// default), so a test can assert how many requests a sync made and in which order.
package final class RecordingTransport: Transport, Sendable {
    private let inner: any Transport
    private let recorded = Mutex<[TransportCall]>([])

    /// Records and forwards to `inner`.
    package init(_ inner: any Transport = FileTransport()) { self.inner = inner }

    /// The calls so far, in order.
    package var calls: [TransportCall] { recorded.withLock { $0 } }

    private func record(_ c: TransportCall) { recorded.withLock { $0.append(c) } }

    /// Records, then forwards.
    package func document(_ url: URL, etag: String?, maxBytes: Int) async throws(FetchError) -> FetchedDocument {
        record(.document(url: url.absoluteString, etag: etag))
        return try await inner.document(url, etag: etag, maxBytes: maxBytes)
    }

    /// Records, then forwards.
    package func download(
        _ url: URL, to part: FilePath, expecting: Expectation, progress: ProgressHandler?, watch: GrowingPart?
    ) async throws(FetchError) {
        record(.download(url: url.absoluteString))
        try await inner.download(url, to: part, expecting: expecting, progress: progress, watch: watch)
    }
}

/// A transport that fails: every request whose URL ends with one of `failing`'s keys gets that
/// key's error; any other request is forwarded to `inner` — or, without one, fails loudly as a
/// call the test did not expect.
package struct FailingTransport: Transport {
    private let failing: [String: FetchError]
    private let inner: (any Transport)?

    /// Fails the requests whose URL ends with a key of `failing`; forwards the rest to `inner`.
    package init(failing: [String: FetchError], forwardingTo inner: (any Transport)? = nil) {
        self.failing = failing
        self.inner = inner
    }

    private func check(_ url: URL) throws(FetchError) -> any Transport {
        for (suffix, error) in failing where url.absoluteString.hasSuffix(suffix) { throw error }
        guard let inner else { throw .io("unexpected request in a test: \(url.absoluteString)") }
        return inner
    }

    /// Fails or forwards.
    package func document(_ url: URL, etag: String?, maxBytes: Int) async throws(FetchError) -> FetchedDocument {
        try await check(url).document(url, etag: etag, maxBytes: maxBytes)
    }

    /// Fails or forwards.
    package func download(
        _ url: URL, to part: FilePath, expecting: Expectation, progress: ProgressHandler?, watch: GrowingPart?
    ) async throws(FetchError) {
        try await check(url).download(url, to: part, expecting: expecting, progress: progress, watch: watch)
    }
}
