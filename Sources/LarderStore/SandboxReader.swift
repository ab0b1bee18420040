import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

/// A sandbox opened for reading: takes no lock and never blocks on writers (state.json is
/// replaced atomically, so a read sees the old state or the new one).
package struct SandboxReader: Sendable {
    /// The paths of the sandbox read.
    package let layout: SandboxLayout

    /// A reader of the sandbox at `root`.
    package init(root: FilePath) { layout = SandboxLayout(root: root) }

    /// The current state (empty when the sandbox has none yet).
    package func state() throws(StoreError) -> SandboxState {
        guard AtomicFile.exists(layout.state) else { return SandboxState() }
        do {
            return try ManifestCoding.decode(
                SandboxState.self, from: AtomicFile.read(layout.state), document: "state.json")
        } catch {
            throw .corruptState(detail: "\(error)")
        }
    }

    /// The status report, read without the lock.
    package func status() throws(StoreError) -> StatusReport {
        Sandbox.status(of: try state(), layout: layout)
    }

    /// Pins the active version of `id` for a session (e.g. a web view that loaded it): until the
    /// lease is released or this process dies, no gc deletes that version. The pin is written
    /// before the state is read again, so a concurrent gc either sees the pin or has already
    /// dropped the version from the state — in which case the pin moves to the new active version.
    package func pin(id: PackageID) throws(StoreError) -> PinLease {
        let idText = id.rawValue
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

/// What a resolver needs of `state.json`: the generation and each package's active and fallback
/// versions — decoded without the histories, dates and records a writer needs, so that a
/// snapshot of a thousand packages does not decode all of them.
package struct ServingState: Decodable, Sendable, SchemaVersioned {
    /// One package's served versions.
    package struct Versions: Decodable, Sendable, Equatable {
        /// The version served.
        package var active: SemanticVersion?
        /// The last known good version.
        package var fallback: SemanticVersion?
        /// The package's activation number (`PackageState.activation`; absent in older states).
        package var activation: UInt64?

        /// Versions as given.
        package init(active: SemanticVersion?, fallback: SemanticVersion?, activation: UInt64? = nil) {
            self.active = active
            self.fallback = fallback
            self.activation = activation
        }

        /// The current activation of the active version of `id`; nil when none is active.
        package func activationRef(_ id: PackageID) -> ActivationRef? {
            active.map { ActivationRef(package: id, version: $0, number: activation ?? 0) }
        }
    }

    /// The document's format version.
    package var schemaVersion: Int
    /// The generation of the state read.
    package var generation: UInt64
    /// Each package's versions, keyed by package id text.
    package var packages: [String: Versions]
}

extension SandboxReader {
    /// The served versions of the current state (empty when the sandbox has none yet).
    package func servingState() throws(StoreError) -> ServingState {
        guard AtomicFile.exists(layout.state) else {
            return ServingState(schemaVersion: currentSchemaVersion, generation: 0, packages: [:])
        }
        do {
            return try ManifestCoding.decode(
                ServingState.self, from: AtomicFile.read(layout.state), document: "state.json")
        } catch {
            throw .corruptState(detail: "\(error)")
        }
    }
}
