import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import Logging
import SystemPackage

/// Revoke: a version marked revoked in a newly signed index; nothing is deleted.
extension Publisher {
    /// Marks `version` of `id` revoked in a newly signed index: devices running it roll back off
    /// it and no device installs it again.
    package func revoke(
        id idText: String, version versionText: String, repository: FilePath,
        timeToLive: TimeInterval = 30 * 24 * 3600
    ) throws(PublishError) -> RevokeReport {
        guard let id = PackageID(idText) else { throw .badID(idText) }
        guard let version = SemanticVersion(versionText) else { throw .badVersion(versionText) }
        let layout = RepositoryLayout(root: repository)
        let lock = try publishLock(layout)
        defer { lock.unlock() }
        let (loaded, target) = try openTarget(layout)
        guard var index = loaded else {
            throw .existingIndexUntrusted(detail: "\(layout.index) does not exist")
        }
        if let team = target.team, let root = target.delegated?.root { try requireOwned(id, by: team, root) }
        let entries = index.packages.indices.filter { index.packages[$0].id == id }
        let published = AtomicFile.isDirectory(layout.resolve(RepositoryLayout.versionPath(id, version)))
        guard !entries.isEmpty, published else { throw .unknownVersion(id: id.rawValue, version: version.description) }
        guard entries.contains(where: { !index.packages[$0].revoked.contains(version) }) else {
            throw .alreadyRevoked(id: id.rawValue, version: version.description)
        }
        for i in entries where !index.packages[i].revoked.contains(version) {
            index.packages[i].revoked.append(version)
            index.packages[i].revoked.sort()
        }
        let (result, part) = try publishChange(&index, target, layout, ttl: timeToLive)
        return RevokeReport(
            id: id.rawValue, version: version.description, serial: result.serial, expires: result.expires,
            signedBy: key.publicKey.keyID, part: part)
    }

}
