import Foundation

/// One installed package as the resolver sees it: its active version's files and the serving
/// settings the index gave it. Every answer is computed here, once per snapshot (type, ETag), so
/// a lookup is one dictionary access.
package struct RoutedPackage: Sendable {
    /// The package's id, also the host of its `larder://` URLs.
    package var id: PackageID
    /// The version whose files `files` holds (the active one, or one a session pinned).
    package var version: SemanticVersion
    /// The route prefixes the index gave the package; the table matches the http(s) ones by prefix.
    package var routes: [RoutePrefix]
    /// The file served for a directory URL, relative to the directory (`index.html` by default).
    package var entry: String
    /// Whether an extension-less path with no file of its own is answered with the root entry file.
    package var spaFallback: Bool
    /// What a path with no file does (not found or pass through), and the prefixes that always pass through.
    package var policy: Policy
    /// Origins that may read its files across origins (manifests §17; empty for an encrypted one).
    package var corsOrigins: [String] = []
    /// Hosts its pages may reach through passthrough and bypass routes; nil: any.
    package var networkHosts: [String]?
    /// Path inside the package → the answer for it.
    package var files: [String: LocalFile] {
        get { indexedFiles.files }
        set { indexedFiles = newValue.isEmpty ? .empty : IndexedFiles(newValue) }
    }
    /// `files` with their index by path bytes (for the fast path), always set together.
    private(set) var indexedFiles = IndexedFiles.empty

    /// Creates one from a file list and the index's settings.
    package init(list: FileList, routes: [RoutePrefix], entry: String, spaFallback: Bool, policy: Policy) {
        id = list.id
        version = list.version
        self.routes = routes
        self.entry = entry
        self.spaFallback = spaFallback
        self.policy = policy
        files = Self.table(list.id, list.version, list.files.lazy.map { ($0.path, $0.size, $0.sha256.hex, $0.mime) })
    }

    /// Path → answer for the files of one version (path, size, SHA-256 in hex, listed media
    /// type); the first entry of a path wins.
    static func table<S: Collection>(_ id: PackageID, _ version: SemanticVersion, _ entries: S)
        -> [String: LocalFile] where S.Element == (RelativePath, Int64, String, String?)
    {
        var files: [String: LocalFile] = [:]
        files.reserveCapacity(entries.count)
        for (path, size, hex, mime) in entries where files[path.string] == nil {
            files[path.string] = LocalFile(
                package: id, version: version, path: path, mime: mime ?? MediaTypes.type(for: path), length: size,
                etag: "\"\(hex)\"")
        }
        return files
    }
}
