import Foundation
import LarderCore
import LarderFetch
import LarderFileSystem
import LarderStore
import SystemPackage

/// The no-change sync: when the repository's signature file names the index the last sync
/// applied in full, and neither the state nor the sync's inputs changed since, there is nothing
/// to plan — the plan would be the last one, which left nothing to do. Such a sync makes its one
/// request (the signature file, a few hundred bytes), records the check, and stops, whatever the
/// number and size of the packages.
extension Syncer {
    /// `last-sync.json`: what the last sync that left nothing to do saw.
    struct SyncMarker: Codable {
        var schemaVersion = currentSchemaVersion
        /// The accepted index it applied: serial, digest, expiry and the server's validator.
        var serial: UInt64
        var index: SHA256Digest
        var etag: String?
        var expires: Date
        /// `state.json` as that sync left it (any later write replaces the file).
        var state: FileIdentity
        /// What else decides a plan: repository, channel, app version, device id, trusted keys,
        /// retention, the on-demand packages asked for and a preload's network.
        var inputs: SHA256Digest
        /// When the sync finished, and when a later no-change sync last confirmed it.
        var at: Date
        var checkedAt: Date
        /// The SHA-256 of the accepted index's signature file: compared with the repository's
        /// when its signature file does not name its index (an older publisher). A signature
        /// covers the index's exact bytes, so the same signature means the same index, and an
        /// index changed under an old signature could not be accepted anyway.
        var signature: SHA256Digest?
        /// When a rollout schedule of the index next moves a share (format §20): past it, the
        /// plan may differ, so the record no longer stands.
        var until: Date?
    }

    /// The inputs of a plan besides the index and the state.
    func planInputs(_ config: SyncConfig) -> SHA256Digest {
        let ctx = context(config)
        let keys = config.trustedKeys.map { "\($0.keyId)" }.sorted().joined(separator: ",")
        // The on-demand packages asked for and a preload's network change what a plan installs.
        let wanted = ctx.wanted.map(\.rawValue).sorted().joined(separator: ",")
        let text = [
            config.repository, ctx.channel.rawValue, ctx.appVersion.description, ctx.deviceID, keys,
            "\(setup.retention)",
            wanted, ctx.preload?.rawValue ?? "",
        ].joined(separator: "\n")
        return SHA256Digest.of(Data(text.utf8))
    }

    /// After a sync of every package that left nothing to do (nothing failed), records what it
    /// saw. Best effort: without the record the next sync only plans again.
    func recordSettled(_ report: SyncReport, sandbox: Sandbox, config: SyncConfig, until: Date? = nil) {
        let layout = sandbox.layout
        guard request.packages.isEmpty, !report.hasFailures, let accepted = sandbox.state.index,
            let state = FileIdentity(layout.state)
        else {
            try? SystemCalls.unlink(layout.lastSync)
            return
        }
        let now = setup.clock()
        let signature = (try? AtomicFile.read(layout.acceptedSignature, limit: 1 << 16)).map { SHA256Digest.of($0) }
        let marker = SyncMarker(
            serial: accepted.serial, index: accepted.sha256, etag: accepted.etag, expires: accepted.expires,
            state: state, inputs: planInputs(config), at: now, checkedAt: now, signature: signature, until: until)
        guard let data = try? ManifestCoding.encode(marker) else { return }
        try? AtomicFile.write(data, to: layout.lastSync)
    }

    /// What the no-change check found.
    enum NoChangeCheck {
        /// Nothing to do: the sync's report.
        case upToDate(SyncReport)
        /// The repository's signature names another index: the full sync goes on with this
        /// signature file (not requested twice).
        case changed(signature: Data)
        /// No check was possible: no record, the state or an input changed, the index expired
        /// (the full sync reports it), or the lock is busy.
        case notChecked
    }

    /// The no-change sync (see above). A failed request is the sync's error.
    func checkNoChange() async throws(SyncError) -> NoChangeCheck {
        guard let found = try await upToDate() else { return .notChecked }
        return found
    }

    private func upToDate() async throws(SyncError) -> NoChangeCheck? {
        guard request.packages.isEmpty else { return nil }
        let layout = SandboxLayout(root: root)
        guard let data = try? AtomicFile.read(layout.lastSync, limit: 1 << 16),
            let marker = try? ManifestCoding.decode(SyncMarker.self, from: data, document: "last-sync.json"),
            let config = try? SyncConfig.load(root: root), marker.inputs == planInputs(config),
            setup.clock() < marker.expires, marker.until.map({ setup.clock() < $0 }) ?? true,
            let base = URL(string: config.repository),
            let lock = try? FileLock(path: layout.lock, timeout: 0)
        else { return nil }
        defer { lock.unlock() }
        guard FileIdentity(layout.state) == marker.state else { return nil }
        let t = try transportFor(base, config)
        // One request: the signature file, which names the index it signs.
        let sig = try await fetchSignature(t, base)
        if let named = Self.indexName(in: sig) {
            return named.sha256 == marker.index ? .upToDate(settled(marker, layout: layout)) : .changed(signature: sig)
        }
        // An older publisher's signature file: the same file signs the same index.
        if let signature = marker.signature, SHA256Digest.of(sig) == signature {
            return .upToDate(settled(marker, layout: layout))
        }
        return .changed(signature: sig)
    }

    /// Records that the repository was checked and found unchanged, and reports it.
    private func settled(_ marker: SyncMarker, layout: SandboxLayout) -> SyncReport {
        var checked = marker
        checked.checkedAt = setup.clock()
        if checked.signature == nil {
            // A record from before `signature`: the accepted index was just found unchanged, so
            // its cached signature is the one to compare next time.
            checked.signature = (try? AtomicFile.read(layout.acceptedSignature, limit: 1 << 16)).map {
                SHA256Digest.of($0)
            }
        }
        // Not durable (no fsync): the record is a cache, and a damaged one means a full sync.
        if let bytes = try? ManifestCoding.encode(checked) {
            try? AtomicFile.write(bytes, to: layout.lastSync, durable: false)
        }
        setup.progress?(.index(serial: marker.serial, changed: false))
        var report = SyncReport(serial: marker.serial, indexChanged: false, packages: [], removedByGC: [])
        report.upToDate = true
        return report
    }
}
