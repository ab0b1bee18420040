import Foundation
import LarderCore
import LarderFileSystem
import LarderStore
import SystemPackage

/// One immutable view of a sandbox for resolving: the route table of a state, the state's
/// generation, and each package's active and fallback versions. Built without taking the lock.
///
/// A rebuild reuses what has not changed since the snapshot it replaces: the serving settings
/// while the accepted index file is the same file, and each package's routed files while its
/// version and settings are the same. After a sync that changed one package, only that package's
/// file list is read; the state is read in its serving form only (no histories or dates).
public final class Snapshot: Sendable {
    /// The routes of the active versions, from their file lists and the index's serving settings.
    public let table: RouteTable
    /// The generation of the state it was read from (`SandboxState.generation`).
    public let generation: UInt64
    /// Each package's active and fallback versions in that state.
    public let versions: [PackageID: ServingState.Versions]
    /// The serving settings of the last accepted index, by package id (this device's channel).
    let settings: [PackageID: ServingSettings]
    /// The channel the settings were chosen for.
    let channel: String
    /// The accepted index file the settings were read from.
    let indexIdentity: FileIdentity?
    /// How many packages' file lists this build read (the others were reused).
    public let listsRead: Int
    /// Built for one URL (`Resolver(root:schemes:onlyFor:)`): only the package that URL routes
    /// to has its files; a later build reuses nothing from it.
    public let partial: Bool

    init(
        table: RouteTable, generation: UInt64, versions: [PackageID: ServingState.Versions],
        settings: [PackageID: ServingSettings], channel: String, indexIdentity: FileIdentity?, listsRead: Int,
        partial: Bool = false
    ) {
        self.partial = partial
        self.table = table
        self.generation = generation
        self.versions = versions
        self.settings = settings
        self.channel = channel
        self.indexIdentity = indexIdentity
        self.listsRead = listsRead
    }

    /// Resolves a URL with this snapshot's table (borrowed from the snapshot, not copied).
    func resolve(_ url: String) -> Resolution {
        table.resolve(url)
    }

    /// Reads the sandbox at `root`: each package's active version (its verified file list) with
    /// the serving settings (routes, entry, SPA fallback, policy) of the last accepted index; a
    /// package the index does not describe (side-loaded) is reachable by `larder://<id>/` with
    /// the defaults. A list that cannot be read leaves its package out (it resolves as absent).
    /// What `previous` holds and has not changed is reused. With `url`, only the package that
    /// URL routes to gets its files (a partial snapshot, for a one-shot lookup).
    static func load(
        root: FilePath, schemes: Set<String>, reusing earlier: Snapshot? = nil, onlyFor url: String? = nil
    ) throws(StoreError) -> Snapshot {
        let previous = earlier?.partial == true ? nil : earlier
        let reader = SandboxReader(root: root)
        let state = try reader.servingState()
        let channel = (try? SyncConfig.load(root: root))?.channel ?? Channel.default
        let identity = FileIdentity(reader.layout.acceptedIndex)
        var settings: [PackageID: ServingSettings] = [:]
        if let prev = previous, prev.channel == channel, identity != nil, prev.indexIdentity == identity {
            settings = prev.settings
        } else if let data = try? AtomicFile.read(reader.layout.acceptedIndex),
            let index = try? ManifestCoding.decode(ServingIndex.self, from: data, document: "index")
        {
            for e in index.packages where e.channel == channel { settings[e.id] = e }
        }
        var packages: [RoutedPackage] = []
        var versions: [PackageID: ServingState.Versions] = [:]
        var read = 0
        if let url {
            for key in state.packages.keys.sorted() {
                guard let id = PackageID(key), let v = state.packages[key] else { continue }
                versions[id] = v
                if let active = v.active {
                    packages.append(RoutedPackage(id: id, version: active, settings: settings[id]))
                }
            }
            // The package the URL routes to gets its files; one whose list cannot be read is left
            // out, as a whole build leaves it out, and the URL may then route to another.
            var table = RouteTable(packages: packages, schemes: schemes)
            while let id = table.routedPackage(url), let shell = table.package(id), shell.files.isEmpty {
                packages.removeAll { $0.id == id }
                read += 1
                let pkg = routed(reader.layout, id, shell.version, settings[id])
                if let pkg { packages.append(pkg) }
                table = RouteTable(packages: packages, schemes: schemes)
                if pkg != nil { break }
            }
            return Snapshot(
                table: table, generation: state.generation, versions: versions, settings: settings,
                channel: channel, indexIdentity: identity, listsRead: read, partial: true)
        }
        for key in state.packages.keys.sorted() {
            guard let id = PackageID(key), let v = state.packages[key] else { continue }
            versions[id] = v
            guard let active = v.active else { continue }
            if let prev = previous, let p = prev.table.package(id), p.version == active,
                prev.settings[id] == settings[id]
            {
                packages.append(p)
                continue
            }
            read += 1
            if let pkg = routed(reader.layout, id, active, settings[id]) { packages.append(pkg) }
        }
        return Snapshot(
            table: RouteTable(packages: packages, schemes: schemes), generation: state.generation, versions: versions,
            settings: settings, channel: channel, indexIdentity: identity, listsRead: read)
    }

    /// One version of a package as the table routes it, from its file list on disk.
    static func routed(_ layout: SandboxLayout, _ id: PackageID, _ version: SemanticVersion, _ s: ServingSettings?)
        -> RoutedPackage?
    {
        guard let data = try? AtomicFile.read(layout.list(id, version)),
            let list = try? ManifestCoding.decode(ServingList.self, from: data, document: "list"),
            list.id == id, list.version == version
        else { return nil }
        return RoutedPackage(list: list, settings: s)
    }

    /// `version` of `id` routed with this snapshot's settings (for pinned and fallback versions).
    func routed(_ layout: SandboxLayout, _ id: PackageID, _ version: SemanticVersion) -> RoutedPackage? {
        if let p = table.package(id), p.version == version { return p }
        return Self.routed(layout, id, version, settings[id])
    }
}
