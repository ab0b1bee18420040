import Foundation
import LarderCore
import LarderPublish
import SystemPackage

/// A `file://` repository of the sample app, signed with a key of its own: tests publish
/// versions into it (each from a fresh copy of `Examples/sample-app`) and sync or install from it.
package final class SampleRepository: Sendable {
    /// The directory holding the repository and the sources it was packed from.
    package let directory: URL
    /// The publisher's key.
    package let key: PrivateKey

    /// The repository root (`<directory>/repo`).
    package var url: URL { directory.appendingPathComponent("repo") }
    /// The repository root as a path.
    package var path: FilePath { FilePath(url.path) }

    /// A repository in `directory` (created when publishing), signed with `key`.
    package init(in directory: URL, key: PrivateKey = PrivateKey()) {
        self.directory = directory
        self.key = key
    }

    /// Sets the `"version"` of `data/catalog.json` in a copy of the sample app: one file changes
    /// from version to version, like a small release.
    package static func setCatalogVersion(_ version: String) -> @Sendable (URL) throws -> Void {
        { src in
            let cat = src.appendingPathComponent("data/catalog.json")
            let text = try String(contentsOf: cat, encoding: .utf8)
                .replacingOccurrences(of: "\"version\": \"1.0.0\"", with: "\"version\": \"\(version)\"")
            try Data(text.utf8).write(to: cat)
        }
    }

    /// The source tree of `id` at `version`: `<directory>/src-<id>-<version>`, a copy of the
    /// sample app made once.
    package func source(_ id: String, _ version: String) throws -> URL {
        let src = directory.appendingPathComponent("src-\(id)-\(version)")
        if !FileManager.default.fileExists(atPath: src.path) {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            try FileManager.default.copyItem(at: TestPaths.sampleApp, to: src)
        }
        return src
    }

    /// Packs `version` of `id` from a copy of the sample app: `edit` changes the copy first (by
    /// default the catalogue names the version), `configure` sets routes, dependencies, policy….
    @discardableResult
    /// `adjust` changes the publisher (a test's byte pipeline, say).
    /// Deltas are made only when a test asks (`configure`: `deltaBases`); the tests of objects and
    /// bundles see the repository as before deltas existed, and the delta tests ask for them.
    package func publish(
        _ version: String, id: String = "sample-app", edit: ((URL) throws -> Void)? = nil, at date: Date = Date(),
        configure: (inout PackRequest) -> Void = { _ in }, publisher adjust: (inout Publisher) -> Void = { _ in }
    ) throws -> PackReport {
        let src = try source(id, version)
        try (edit ?? Self.setCatalogVersion(version))(src)
        var request = PackRequest(source: FilePath(src.path), repository: path, id: id, version: version)
        request.deltaBases = 0
        configure(&request)
        var publisher = Publisher(key: key, now: { date })
        adjust(&publisher)
        return try publisher.pack(request)
    }

    /// `packages/<id>/<version>/bundle.zip` in the repository.
    package func bundle(_ id: String, _ version: String) throws -> FilePath {
        guard let pid = PackageID(id), let v = SemanticVersion(version) else {
            throw TestSupportError("\(id) \(version) is not a package id and version")
        }
        return path.joined(RepositoryLayout.bundlePath(pid, v))
    }

    /// `packages/<id>/<version>/files.json` in the repository.
    package func fileList(_ id: String, _ version: String) throws -> FilePath {
        guard let pid = PackageID(id), let v = SemanticVersion(version) else {
            throw TestSupportError("\(id) \(version) is not a package id and version")
        }
        return path.joined(RepositoryLayout.fileListPath(pid, v))
    }
}
