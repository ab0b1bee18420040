import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

/// A sandbox opened for reading: takes no lock and never blocks on writers (state.json is
/// replaced atomically, so a read sees the old state or the new one).
public struct SandboxReader: Sendable {
    /// The paths of the sandbox read.
    public let layout: SandboxLayout

    /// A reader of the sandbox at `root`.
    public init(root: FilePath) { layout = SandboxLayout(root: root) }

    /// The current state (empty when the sandbox has none yet).
    public func state() throws(StoreError) -> SandboxState {
        guard AtomicFile.exists(layout.state) else { return SandboxState() }
        do {
            return try ManifestCoding.decode(
                SandboxState.self, from: AtomicFile.read(layout.state), document: "state.json")
        } catch {
            throw .corruptState(detail: "\(error)")
        }
    }

    /// The status report, read without the lock.
    public func status() throws(StoreError) -> StatusReport {
        Sandbox.status(of: try state(), layout: layout)
    }

    /// Pins the active version of `id` for a session (e.g. a web view that loaded it): until the
    /// lease is released or this process dies, no gc deletes that version. The pin is written
    /// before the state is read again, so a concurrent gc either sees the pin or has already
    /// dropped the version from the state — in which case the pin moves to the new active version.
    public func pin(id idText: String) throws(StoreError) -> PinLease {
        guard let id = PackageID(idText) else { throw .badID(idText) }
        for _ in 0..<5 {
            guard let version = try state()[id].active else { throw .unknownPackage(idText) }
            let lease: PinLease
            do { lease = try Pins.create(layout, id, version) } catch { throw .io(error) }
            if try state()[id].has(version) { return lease }
            lease.release()
        }
        throw .unknownPackage(idText)
    }
}
