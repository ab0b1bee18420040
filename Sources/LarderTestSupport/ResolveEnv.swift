import Foundation
import LarderCore
import LarderFileSystem
import LarderPublish
import LarderStore
import SystemPackage

/// A repository with the sample app packed under `https://app.example.com/` (and a second
/// package under `/docs/`), and a sandbox that installs from it directly (no sync: the resolver
/// only needs the state, the file lists and the cached index).
package final class ResolveEnv: Sendable {
    /// The temporary directory holding the repository and the sandbox.
    package let temporary: TemporaryDirectory
    /// The sample repository.
    package let repository: SampleRepository
    /// The sandbox root.
    package let root: FilePath

    /// A fresh repository and an empty sandbox in a temporary directory.
    package init() throws {
        temporary = try TemporaryDirectory("resolve")
        repository = SampleRepository(in: temporary.url)
        root = FilePath(temporary.appending("sandbox").path)
    }

    /// The temporary directory.
    package var dir: URL { temporary.url }
    /// The repository root.
    package var repo: URL { repository.url }
    /// The publisher's key.
    package var key: PrivateKey { repository.key }

    /// Removes the temporary directory.
    package func cleanup() { temporary.remove() }

    /// Packs `version` of `id` (the sample app, with `catalog.json` naming the version), with
    /// routes and policy by package, or the `routes` and `policy` given.
    package func publish(
        _ version: String, id: String = "sample-app", routes: [String]? = nil, policy: Policy? = nil,
        configure: (inout PackRequest) -> Void = { _ in }
    ) throws {
        let catalog = "{\"version\": \"\(version)\", \"items\": []}\n"
        try repository.publish(
            version, id: id, edit: { try Data(catalog.utf8).write(to: $0.appendingPathComponent("data/catalog.json")) }
        ) { r in
            if let routes, let policy {
                r.routes = routes
                r.policy = policy
            } else if id == "sample-app" {
                r.routes = ["https://app.example.com/"]
                r.policy = Policy(mode: .localThenNetwork, bypass: ["/api/"])
            } else {
                r.routes = ["https://app.example.com/docs/"]
                r.policy = Policy(mode: .localOnly)
            }
            configure(&r)
        }
    }

    /// The bundle of `id`@`version` in the repository.
    package func bundle(_ id: String, _ version: String) -> FilePath {
        FilePath(repo.path).joined(RepositoryLayout.bundlePath(Self.names(id, version).0, Self.names(id, version).1))
    }

    /// The file list of `id`@`version` in the repository.
    package func list(_ id: String, _ version: String) -> FilePath {
        FilePath(repo.path).joined(
            RepositoryLayout.fileListPath(Self.names(id, version).0, Self.names(id, version).1))
    }

    /// Installs and activates a published version in this process, and caches the index.
    package func install(_ version: String, id: String = "sample-app") throws {
        let sandbox = try Sandbox.open(root)
        defer { sandbox.close() }
        let list = try ManifestCoding.decode(
            FileList.self, from: AtomicFile.read(self.list(id, version)), document: "list")
        _ = try sandbox.install(
            bundle: bundle(id, version), id: packageID(id), version: semanticVersion(version), fileList: list)
        try cacheIndex()
    }

    /// Copies the repository's index into the sandbox as the accepted one.
    package func cacheIndex() throws {
        try FileManager.default.createDirectory(atPath: root.string, withIntermediateDirectories: true)
        let dest = URL(fileURLWithPath: SandboxLayout(root: root).acceptedIndex.string)
        try? FileManager.default.removeItem(at: dest)
        try FileManager.default.copyItem(at: repo.appendingPathComponent("index.json"), to: dest)
    }

    /// Runs `body` with the sandbox open for writing.
    package func withSandbox<T>(_ body: (Sandbox) throws -> T) throws -> T {
        let sandbox = try Sandbox.open(root)
        defer { sandbox.close() }
        return try body(sandbox)
    }

    /// The tree of `id`@`version` in the sandbox.
    package func tree(_ id: String, _ version: String) -> URL {
        URL(
            fileURLWithPath: SandboxLayout(root: root).tree(Self.names(id, version).0, Self.names(id, version).1).string
        )
    }

    /// The id and version as values (the test's own texts: a bad one is the test's mistake).
    static func names(_ id: String, _ version: String) -> (PackageID, SemanticVersion) {
        guard let p = PackageID(id), let v = SemanticVersion(version) else {
            preconditionFailure("not an id and a version: \(id) \(version)")
        }
        return (p, v)
    }
}
