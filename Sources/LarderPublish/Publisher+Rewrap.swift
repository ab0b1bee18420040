import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import SystemPackage

/// What `rewrap` did.
package struct RewrapReport: Sendable, Codable, Equatable {
    /// The serial of the newly signed index.
    package var serial: UInt64
    /// When the new index expires.
    package var expires: Date
    /// The encrypted versions whose content keys were wrapped again (`id@version`).
    package var versions: [String]
    /// The key ids they are now wrapped for.
    package var recipients: [String]
    /// The key id of the publisher's own key.
    package var signedBy: String
}

/// Rewrap: the content keys of encrypted versions wrapped for a new set of recipients in a newly
/// signed index. No content is written again: the sealed blobs stay as they are.
extension Publisher {
    /// Wraps the content key of every encrypted version in the index (of `ids` only, when given)
    /// for `recipients`, opening each with one of `holding` (a recipient key the publisher
    /// holds). A recipient left out can no longer get these versions' keys from the index; what
    /// it fetched before (keys, contents) it keeps.
    package func rewrap(
        ids: [String] = [], to recipients: [RecipientPublicKey], holding: [RecipientKey], repository: FilePath,
        timeToLive: TimeInterval = 30 * 24 * 3600
    ) throws(PublishError) -> RewrapReport {
        guard !recipients.isEmpty else { throw .encryption("no recipient to wrap the content keys for") }
        let wanted = Set(ids)
        for id in ids where PackageID(id) == nil { throw .badID(id) }
        let layout = RepositoryLayout(root: repository)
        let lock = try publishLock(layout)
        defer { lock.unlock() }
        // In a delegated repository, the team of this key rewraps its own packages only.
        let (loaded, target) = try openTarget(layout)
        guard var index = loaded else {
            throw .existingIndexUntrusted(detail: "\(layout.index) does not exist")
        }
        var versions: [String] = []
        for i in index.packages.indices {
            let e = index.packages[i]
            guard let encryption = e.encryption, wanted.isEmpty || wanted.contains(e.id.rawValue) else { continue }
            if let team = target.team, let root = target.delegated?.root, root.owner(of: e.id)?.name != team.name {
                if wanted.contains(e.id.rawValue) { try requireOwned(e.id, by: team, root) }
                continue
            }
            let info = Encryption.keyInfo(e.id, e.version)
            var opened: [WrappedKey]?
            for k in holding {
                guard let key = try? k.unwrap(encryption.recipients, info: info) else { continue }
                do { opened = try ContentKeys.wrap(key, to: recipients, info: info) } catch {
                    throw .encryption("\(e.id)@\(e.version): the content key could not be wrapped: \(error)")
                }
                break
            }
            guard let rewrapped = opened else {
                throw .encryption(
                    "\(e.id)@\(e.version): no --recipient-key opens its content key (it is wrapped for "
                        + encryption.recipients.map(\.keyId).joined(separator: ", ") + ")")
            }
            index.packages[i].encryption?.recipients = rewrapped
            versions.append("\(e.id)@\(e.version)")
        }
        guard !versions.isEmpty else {
            throw .encryption(
                ids.isEmpty
                    ? "the index has no encrypted version" : "no encrypted version of \(ids.joined(separator: ", "))")
        }
        let (result, _) = try publishChange(&index, target, layout, ttl: timeToLive)
        return RewrapReport(
            serial: result.serial, expires: result.expires, versions: versions,
            recipients: recipients.map(ContentKeys.keyID), signedBy: key.publicKey.keyID)
    }
}
