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
/// version and settings are the same. When no package came or went and none changed routes, the
/// table is updated in place of the packages that changed (`RouteTable.replacing`): after a sync
/// that changed one package, only that package's file list is read and only its part of the
/// table is rebuilt. The state is read in its serving form only (no histories or dates), and
/// when this process wrote the state and index now on disk, not read at all (`ServingHandoff`).
package final class Snapshot: Sendable {
    /// The routes of the active versions, from their file lists and the index's serving settings.
    package let table: RouteTable
    /// The generation of the state it was read from (`SandboxState.generation`).
    package let generation: UInt64
    /// Each package's active and fallback versions in that state.
    package let versions: ServedVersions
    /// The serving settings of the last accepted index, by package id text (this device's channel).
    let settings: [String: ServingSettings]
    /// The channel the settings were chosen for.
    let channel: Channel
    /// The accepted index file the settings were read from.
    let indexIdentity: FileIdentity?
    /// How many packages' file lists this build read (the others were reused).
    package let listsRead: Int
    /// Built for one URL (`Resolver(root:schemes:onlyFor:)`): only the package that URL routes
    /// to has its files; a later build reuses nothing from it.
    package let partial: Bool
    /// Every active package of the state is in the table (none was left out for a list that
    /// could not be read).
    let complete: Bool
    /// The state file read (nil when unknown, or replaced while it was read).
    let stateIdentity: FileIdentity?
    /// How many packages this build compared with the snapshot it replaces (all of them, or
    /// those the writes of this process named).
    package let compared: Int

    init(
        table: RouteTable, generation: UInt64, versions: [String: ServingState.Versions],
        settings: [String: ServingSettings], channel: Channel, indexIdentity: FileIdentity?, listsRead: Int,
        complete: Bool, stateIdentity: FileIdentity?, compared: Int, partial: Bool = false
    ) {
        self.partial = partial
        self.complete = complete
        self.stateIdentity = stateIdentity
        self.compared = compared
        self.table = table
        self.generation = generation
        self.versions = ServedVersions(byID: versions)
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
        root: FilePath, schemes: Set<String>, handoff: ServingHandoff?, reusing earlier: Snapshot? = nil,
        onlyFor url: String? = nil
    ) throws(StoreError) -> Snapshot {
        let previous = earlier?.partial == true ? nil : earlier
        let reader = SandboxReader(root: root)
        let layout = reader.layout
        let handed = handoff?.state(layout)
        let state: ServingState
        let stateIdentity: FileIdentity?
        if let handed {
            (state, stateIdentity) = handed
        } else {
            let before = FileIdentity(layout.state)
            state = try reader.servingState()
            // Named only if no writer replaced the file between the stat and the read.
            stateIdentity = before != nil && FileIdentity(layout.state) == before ? before : nil
            if let stateIdentity { handoff?.readState(state, identity: stateIdentity, layout) }
        }
        let channel = (try? SyncConfig.load(root: root))?.channel ?? .default
        let identity = FileIdentity(layout.acceptedIndex)
        var settings: [String: ServingSettings] = [:]
        var sameSettings = false
        if let prev = previous, prev.channel == channel, identity != nil, prev.indexIdentity == identity {
            settings = prev.settings
            sameSettings = true
        } else if let kept = handoff?.settings(layout, identity: identity, channel: channel) {
            // The index this process's sync just accepted: its settings, not the file read back.
            settings = kept
        } else if let index = layout.servingIndex() {
            settings = ServingSettings.byID(index.packages, channel: channel)
            // Offered as the base of the next index written here only if the file read is the
            // one whose identity names it (no writer replaced it between the stat and the read).
            if FileIdentity(layout.acceptedIndex) == identity {
                handoff?.readSettings(settings, channel: channel, identity: identity, layout)
            }
        }
        if let url {
            return partial(layout, state, settings, channel, identity, stateIdentity, schemes, url)
        }
        if let prev = previous, prev.complete {
            // The packages that changed, when this process's writes say which; else all are compared.
            var named: Set<String>?
            if handed != nil, prev.channel == channel, let handoff,
                let versions = handoff.changes(layout, from: prev.stateIdentity, to: stateIdentity),
                let routing = sameSettings
                    ? [] : handoff.settingsChanges(layout, from: prev.indexIdentity, to: identity, channel: channel)
            {
                named = versions.union(routing)
            }
            if let (table, read, compared) = updated(prev, state, settings, sameSettings, named, layout) {
                return Snapshot(
                    table: table, generation: state.generation, versions: state.packages, settings: settings,
                    channel: channel, indexIdentity: identity, listsRead: read, complete: true,
                    stateIdentity: stateIdentity, compared: compared)
            }
        }
        var packages: [RoutedPackage] = []
        var read = 0
        var active = 0
        for key in state.packages.keys.sorted() {
            guard let id = PackageID(key), let version = state.packages[key]?.active else { continue }
            active += 1
            if let prev = previous, let p = prev.table.package(id), p.version == version,
                sameSettings || prev.settings[key] == settings[key]
            {
                packages.append(p)
                continue
            }
            read += 1
            if let pkg = routed(layout, id, version, settings[key]) { packages.append(pkg) }
        }
        return Snapshot(
            table: RouteTable(packages: packages, schemes: schemes), generation: state.generation,
            versions: state.packages, settings: settings, channel: channel, indexIdentity: identity, listsRead: read,
            complete: packages.count == active, stateIdentity: stateIdentity, compared: previous == nil ? 0 : active)
    }

    /// A snapshot for one URL: every active package routed, only the one `url` routes to with its
    /// files.
    private static func partial(
        _ layout: SandboxLayout, _ state: ServingState, _ settings: [String: ServingSettings], _ channel: Channel,
        _ identity: FileIdentity?, _ stateIdentity: FileIdentity?, _ schemes: Set<String>, _ url: String
    ) -> Snapshot {
        var packages: [RoutedPackage] = []
        var read = 0
        for key in state.packages.keys.sorted() {
            guard let id = PackageID(key), let active = state.packages[key]?.active else { continue }
            packages.append(RoutedPackage(id: id, version: active, settings: settings[key]))
        }
        // The package the URL routes to gets its files; one whose list cannot be read is left
        // out, as a whole build leaves it out, and the URL may then route to another.
        var table = RouteTable(packages: packages, schemes: schemes)
        while let id = table.routedPackage(url), let shell = table.package(id), shell.files.isEmpty {
            packages.removeAll { $0.id == id }
            read += 1
            let pkg = routed(layout, id, shell.version, settings[id.rawValue])
            if let pkg { packages.append(pkg) }
            table = RouteTable(packages: packages, schemes: schemes)
            if pkg != nil { break }
        }
        return Snapshot(
            table: table, generation: state.generation, versions: state.packages, settings: settings,
            channel: channel, indexIdentity: identity, listsRead: read, complete: false,
            stateIdentity: stateIdentity, compared: 0, partial: true)
    }

    /// The table of `prev` (a whole snapshot with every active package in its table) with the
    /// packages whose active version or settings differ in `state` and `settings` read again;
    /// how many lists were read, and how many packages compared. Only the packages `named` are
    /// looked at when given (the writes of this process say which changed); else every package
    /// is compared. Nil when a package came or went, or a list cannot be read: the table is then
    /// built whole. Whether routes changed is `RouteTable.replacing`'s to find out.
    private static func updated(
        _ prev: Snapshot, _ state: ServingState, _ settings: [String: ServingSettings], _ sameSettings: Bool,
        _ named: Set<String>?, _ layout: SandboxLayout
    ) -> (RouteTable, Int, Int)? {
        let table = prev.table
        var changed: [RoutedPackage] = []
        func look(_ key: String, _ version: SemanticVersion?) -> Bool {
            let old = table.version(idText: key)
            guard let version else { return old == nil }
            guard let old else { return false }
            if old == version, sameSettings || prev.settings[key] == settings[key] { return true }
            guard let id = PackageID(key), let pkg = routed(layout, id, version, settings[key]) else { return false }
            changed.append(pkg)
            return true
        }
        var compared = 0
        if let named {
            for key in named.sorted() where !look(key, state.packages[key]?.active) { return nil }
            compared = named.count
        } else {
            for (key, v) in state.packages where v.active != nil {
                compared += 1
                guard look(key, v.active) else { return nil }
            }
            guard compared == table.count else { return nil }
        }
        return (changed.isEmpty ? table : table.replacing(changed), changed.count, compared)
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
        return Self.routed(layout, id, version, settings[id.rawValue])
    }
}

/// Each package's active and fallback versions in a snapshot's state.
package struct ServedVersions: Sendable {
    /// By package id text, as the state keys them.
    let byID: [String: ServingState.Versions]

    /// The versions of `id`; nil when the state does not know the package.
    package subscript(_ id: PackageID) -> ServingState.Versions? { byID[id.rawValue] }

    /// How many packages the state knows.
    package var count: Int { byID.count }

    /// The ids (text) of the packages with an active version, sorted.
    package var activeIDs: [String] {
        byID.filter { $0.value.active != nil && PackageID($0.key) != nil }.keys.sorted()
    }
}
