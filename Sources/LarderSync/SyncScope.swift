import Foundation
import LarderCore
import LarderFetch
import LarderStore
import Logging

/// What every phase of one sync works in: the app's setup and this sync's request, the
/// sandbox's config, the open (locked, recovered) sandbox, and the repository with the transport
/// that reaches it.
struct SyncScope {
    let setup: SyncSetup
    let request: SyncRequest
    let config: SyncConfig
    let sandbox: Sandbox
    let transport: any Transport
    let base: URL

    /// Where the sync logs what it decided.
    var logger: Logger { setup.logger }

    /// The repository URL of a document.
    func url(_ relative: String) -> URL { base.appendingPathComponent(relative) }

    /// The document `ref` names, fetched whole (at most its signed size, and never more than an
    /// index may be); the caller checks it against `ref` (`matches`).
    func document(_ ref: BlobRef) async throws(FetchError) -> Data {
        try await transport.document(
            url(ref.path), etag: nil, maxBytes: Int(min(ref.size, Int64(Syncer.maxIndexBytes)))
        ).data
    }
}

extension BlobRef {
    /// Whether `data` is the exact bytes this reference signs (size and SHA-256).
    func matches(_ data: Data) -> Bool {
        Int64(data.count) == size && SHA256Digest.of(data) == sha256
    }
}
