import Foundation
import LarderCore
import LarderFileSystem
import LarderStore
import SystemPackage

/// One immutable view of a sandbox for resolving: the route table of a state, the state's
/// generation, and the state itself (for fallback versions). Built without taking the lock.
public final class Snapshot: Sendable {
    /// The routes of the active versions, from their file lists and the index's serving settings.
    public let table: RouteTable
    /// The generation of the state it was read from (`SandboxState.generation`).
    public let generation: UInt64
    /// The state it was read from (used to find fallback versions).
    public let state: SandboxState
    /// The serving settings of the last accepted index, by package id (this device's channel).
    let settings: [PackageID: PackageEntry]

    init(table: RouteTable, generation: UInt64, state: SandboxState, settings: [PackageID: PackageEntry]) {
        self.table = table
        self.generation = generation
        self.state = state
        self.settings = settings
    }

    /// Reads the sandbox at `root`: each package's active version (its verified file list) with
    /// the serving settings (routes, entry, SPA fallback, policy) of the last accepted index; a
    /// package the index does not describe (side-loaded) is reachable by `larder://<id>/` with
    /// the defaults. A list that cannot be read leaves its package out (it resolves as absent).
    static func load(root: FilePath, schemes: Set<String>) throws(StoreError) -> Snapshot {
        let reader = SandboxReader(root: root)
        let state = try reader.state()
        let channel = (try? SyncConfig.load(root: root))?.channel ?? Channel.default
        var settings: [PackageID: PackageEntry] = [:]
        if let data = try? AtomicFile.read(reader.layout.acceptedIndex),
            let index = try? ManifestCoding.decode(RepositoryIndex.self, from: data, document: "index")
        {
            for e in index.packages where e.channel == channel { settings[e.id] = e }
        }
        var packages: [RoutedPackage] = []
        for key in state.packages.keys.sorted() {
            guard let id = PackageID(key), let active = state.packages[key]?.active,
                let pkg = routed(reader.layout, id, active, settings[id])
            else { continue }
            packages.append(pkg)
        }
        return Snapshot(
            table: RouteTable(packages: packages, schemes: schemes), generation: state.generation, state: state,
            settings: settings)
    }

    /// One version of a package as the table routes it, from its file list on disk.
    static func routed(_ layout: SandboxLayout, _ id: PackageID, _ version: SemanticVersion, _ e: PackageEntry?)
        -> RoutedPackage?
    {
        guard let data = try? AtomicFile.read(layout.list(id, version)),
            let list = try? ManifestCoding.decode(FileList.self, from: data, document: "list"),
            list.id == id, list.version == version
        else { return nil }
        return RoutedPackage(
            list: list, routes: (e?.routes ?? []).compactMap(RoutePrefix.init), entry: e?.entry ?? "index.html",
            spaFallback: e?.spaFallback ?? false, policy: e?.policy ?? Policy())
    }

    /// `version` of `id` routed with this snapshot's settings (for pinned and fallback versions).
    func routed(_ layout: SandboxLayout, _ id: PackageID, _ version: SemanticVersion) -> RoutedPackage? {
        if let p = table.package(id), p.version == version { return p }
        return Self.routed(layout, id, version, settings[id])
    }
}
