
import SystemPackage

/// Where each document of a repository lives, relative to its root (see manifests/README.md).
public struct RepositoryLayout: Sendable {
    /// The repository root directory.
    public let root: FilePath

    /// A layout rooted at `root`.
    public init(root: FilePath) { self.root = root }

    public static let indexName = "index.json"
    public static let signatureName = "index.json.sig"
    public static let pendingSuffix = ".pending"

    public var index: FilePath { root.appending(Self.indexName) }
    public var signature: FilePath { root.appending(Self.signatureName) }
    public var pendingIndex: FilePath { root.appending(Self.indexName + Self.pendingSuffix) }
    public var pendingSignature: FilePath { root.appending(Self.signatureName + Self.pendingSuffix) }
    public var packages: FilePath { root.appending("packages") }
    public var objects: FilePath { root.appending("objects") }

    /// `packages/<id>/<version>` relative to the root.
    public static func versionPath(_ id: PackageID, _ version: SemanticVersion) -> String {
        "packages/\(id)/\(version)"
    }

    /// `packages/<id>/<version>/bundle.zip` relative to the root.
    public static func bundlePath(_ id: PackageID, _ version: SemanticVersion) -> String {
        versionPath(id, version) + "/bundle.zip"
    }

    /// `packages/<id>/<version>/files.json` relative to the root.
    public static func fileListPath(_ id: PackageID, _ version: SemanticVersion) -> String {
        versionPath(id, version) + "/files.json"
    }

    /// `objects/<aa>/<sha256>` relative to the root.
    public static func objectPath(_ digest: SHA256Digest) -> String {
        let hex = digest.hex
        return "objects/\(hex.prefix(2))/\(hex)"
    }

    /// A repository-relative path made absolute. The relative paths come from this layout or
    /// from a verified index; `verify` checks index paths against the layout before use.
    public func resolve(_ relative: String) -> FilePath {
        root.appending(relative)
    }
}
