import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import Logging
import SystemPackage

/// Publishes to a static repository directory: packs versions and revokes them, each time
/// writing a newly signed index. Every file is written atomically, a version directory is
/// assembled under a temporary name and renamed into place, and the index pair is published
/// through `.pending` files that the next run completes or discards, so an interrupted run never
/// leaves a repository that verifies with a half-written version.
package struct Publisher: Sendable {
    let key: PrivateKey
    /// Further keys that sign every index this publisher writes (during a key rotation).
    let coSigners: [PrivateKey]
    let now: @Sendable () -> Date
    let logger: Logger
    /// In a delegated repository (format §18), the online keys that sign the composed index
    /// (`--index-key`); without enough of them a team's publication writes its part only, and
    /// `compose` publishes it later.
    package var indexKeys: [PrivateKey] = []
    /// Seconds to wait for another publisher of the same repository.
    package var lockTimeout: Double = 60
    /// How bundles, objects, documents and patches are encoded (`BytePipeline.standard`).
    package var pipeline: BytePipeline = .standard
    /// Where the index's on-demand entries go: in the index itself (`inline`, schema version 1)
    /// or in shards it names (`sharded`, schema version 2); nil keeps the current index's layout
    /// (inline for a new repository).
    package var indexLayout: IndexLayout?

    /// Where an index keeps its on-demand entries.
    package enum IndexLayout: String, Sendable, CaseIterable {
        /// Every entry in the signed index (schema version 1; every device reads it).
        case inline
        /// On-demand entries in shards the index names (schema version 2): a device reads the
        /// shards of what it holds only. Devices older than shards refuse such an index.
        case sharded
    }

    /// A publisher signing with `key` (and `coSigners`); `now` is the clock used for `expires`.
    package init(
        key: PrivateKey, coSigners: [PrivateKey] = [], now: @escaping @Sendable () -> Date = { Date() },
        logger: Logger = Logger(label: "larder.publish")
    ) {
        self.key = key
        self.coSigners = coSigners
        self.now = now
        self.logger = logger
    }

    /// The keys whose signature on the current index this publisher accepts.
    var ownKeys: [PublicKey] { [key.publicKey] + coSigners.map(\.publicKey) }

    /// What `rotateKeys` did.
    package struct RotationReport: Sendable, Codable, Equatable {
        /// The serial of the newly signed index.
        package var serial: UInt64
        /// The key ids of the new trusted set, as published in the index's `keys`.
        package var keys: [String]
        /// The key ids that signed the index: the publisher's key, then its co-signers.
        package var signedBy: [String]
    }

    /// Publishes an index whose `keys` are `newKeys`: devices that verify it with a key they
    /// trust adopt `newKeys` as their trusted set. Sign with the old key and co-sign with the new
    /// one, so that both old and updated devices accept it.
    package func rotateKeys(to newKeys: [PublicKey], repository: FilePath, timeToLive: TimeInterval = 30 * 24 * 3600)
        throws(PublishError) -> RotationReport
    {
        let layout = RepositoryLayout(root: repository)
        guard !layout.isDelegated else {
            throw .delegationSetup(
                "\(repository) is delegated: its keys rotate with `larder delegate` (a team's keys) or `larder delegate root`"
            )
        }
        let lock = try publishLock(layout)
        defer { lock.unlock() }
        guard var index = try loadIndex(layout) else {
            throw .existingIndexUntrusted(detail: "\(layout.index) does not exist")
        }
        index.keys = newKeys.map { KeyFile(public: $0) }
        let published = try publish(&index, layout, ttl: timeToLive)
        return RotationReport(serial: published.serial, keys: newKeys.map(\.keyID), signedBy: ownKeys.map(\.keyID))
    }

}

/// Runs a file-system step, mapping its error into `PublishError.io`.
func io<T>(_ body: () throws(FileSystemError) -> T) throws(PublishError) -> T {
    do {
        return try body()
    } catch {
        throw .io(error)
    }
}

/// The size of a file.
func fileSize(_ path: FilePath) throws(PublishError) -> Int64 {
    do { return try SystemCalls.stat(path).size } catch { throw .io(error) }
}

/// The SHA-256 of a file, streamed.
func digest(of path: FilePath) throws(PublishError) -> SHA256Digest {
    try io { () throws(FileSystemError) -> SHA256Digest in
        let fd = try SystemCalls.open(path, .readOnly)
        defer { try? SystemCalls.close(fd, path: path) }
        var hasher = SHA256Stream()
        var buffer = [UInt8](repeating: 0, count: 256 << 10)
        while true {
            let n = try SystemCalls.read(fd, into: &buffer, path: path)
            if n == 0 { break }
            buffer.withUnsafeBytes { hasher.update(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
        }
        return hasher.finish()
    }
}
