import Foundation
import LarderCore
import LarderFileSystem
import LarderStore
import SystemPackage

/// Builds the route table of a sandbox without taking the lock: each package's active version
/// (its verified file list) with the serving settings (routes, entry, SPA fallback, policy) of
/// the last accepted index; a package the index does not describe (side-loaded) is reachable
/// by `larder://<id>/` with the defaults.
public struct Resolver: Sendable {
    public let root: FilePath
    /// Extra custom schemes the app routes like `larder:`.
    public let schemes: Set<String>

    /// A resolver for the sandbox at `root`.
    public init(root: FilePath, schemes: Set<String> = []) {
        self.root = root
        self.schemes = schemes
    }

    /// The table for the current state, and that state's generation.
    public func table() throws(StoreError) -> (RouteTable, UInt64) {
        let reader = SandboxReader(root: root)
        let state = try reader.state()
        let channel = (try? SyncConfig.load(root: root))?.channel ?? Channel.default
        var entries: [PackageID: PackageEntry] = [:]
        if let data = try? AtomicFile.read(root.appending("repository-index.json")),
            let index = try? ManifestCoding.decode(RepositoryIndex.self, from: data, document: "index")
        {
            for e in index.packages where e.channel == channel { entries[e.id] = e }
        }
        var packages: [RoutedPackage] = []
        for key in state.packages.keys.sorted() {
            guard let id = PackageID(key), let active = state.packages[key]?.active,
                let data = try? AtomicFile.read(reader.layout.list(id, active)),
                let list = try? ManifestCoding.decode(FileList.self, from: data, document: "list")
            else { continue }
            let e = entries[id]
            packages.append(RoutedPackage(
                list: list, routes: (e?.routes ?? []).compactMap(RoutePrefix.init), entry: e?.entry ?? "index.html",
                spaFallback: e?.spaFallback ?? false, policy: e?.policy ?? Policy()))
        }
        return (RouteTable(packages: packages, schemes: schemes), state.generation)
    }

    /// The file on disk for a local resolution.
    public func filePath(_ f: LocalFile) -> FilePath {
        SandboxLayout(root: root).tree(f.package, f.version).appending(f.path.string)
    }
}
