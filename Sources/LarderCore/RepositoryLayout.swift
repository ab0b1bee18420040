import SystemPackage

/// Where each document of a repository lives, relative to its root (see manifests/README.md).
package struct RepositoryLayout: Sendable {
    /// The repository root directory.
    package let root: FilePath

    /// A layout rooted at `root`.
    package init(root: FilePath) { self.root = root }

    /// File name of the signed index at the repository root.
    package static let indexName = "index.json"
    /// File name of the index's detached signatures, next to the index.
    package static let signatureName = "index.json.sig"
    /// Suffix of the index and signature a publication writes before renaming them into place.
    package static let pendingSuffix = ".pending"

    /// The signed index, `<root>/index.json`.
    package var index: FilePath { root.joined(Self.indexName) }
    /// The index's signatures, `<root>/index.json.sig`.
    package var signature: FilePath { root.joined(Self.signatureName) }
    /// The next index while a publication is under way, `<root>/index.json.pending`.
    package var pendingIndex: FilePath { root.joined(Self.indexName + Self.pendingSuffix) }
    /// The next signatures while a publication is under way, `<root>/index.json.sig.pending`.
    package var pendingSignature: FilePath { root.joined(Self.signatureName + Self.pendingSuffix) }
    /// The directory of package versions (bundles and file lists), `<root>/packages`.
    package var packages: FilePath { root.joined("packages") }
    /// The objects, one gzip-compressed file per content named by its SHA-256, `<root>/objects`.
    package var objects: FilePath { root.joined("objects") }

    /// Every published index under its SHA-256, immutable (`<root>/indexes`): the copy a
    /// device fetches when the signature it got names another index than `index.json` gave it.
    package var indexes: FilePath { root.joined("indexes") }

    /// `indexes/<sha256>.json` relative to the root.
    package static func indexCopyPath(_ digest: SHA256Digest) -> String { "indexes/\(digest.hex).json" }

    /// `packages/<id>/<version>` relative to the root.
    package static func versionPath(_ id: PackageID, _ version: SemanticVersion) -> String {
        "packages/\(id)/\(version)"
    }

    /// `packages/<id>/<version>/bundle.zip` relative to the root.
    package static func bundlePath(_ id: PackageID, _ version: SemanticVersion) -> String {
        versionPath(id, version) + "/bundle.zip"
    }

    /// `packages/<id>/<version>/files.json` relative to the root.
    package static func fileListPath(_ id: PackageID, _ version: SemanticVersion) -> String {
        versionPath(id, version) + "/files.json"
    }

    /// `packages/<id>/<version>/bundle.sealed`: an encrypted version's bundle, sealed.
    package static func sealedBundlePath(_ id: PackageID, _ version: SemanticVersion) -> String {
        versionPath(id, version) + "/bundle.sealed"
    }

    /// `packages/<id>/<version>/files.sealed`: an encrypted version's file list, gzipped then sealed.
    package static func sealedListPath(_ id: PackageID, _ version: SemanticVersion) -> String {
        versionPath(id, version) + "/files.sealed"
    }

    /// `packages/<id>/<version>/files.json.gz` relative to the root: the file list, gzipped.
    package static func fileListGzipPath(_ id: PackageID, _ version: SemanticVersion) -> String {
        fileListPath(id, version) + ".gz"
    }

    /// `packages/<id>/<to>/deltas/<from>.json.gz` relative to the root: a delta manifest, gzipped.
    package static func deltaPath(_ id: PackageID, from: SemanticVersion, to: SemanticVersion) -> String {
        versionPath(id, to) + "/deltas/\(from).json.gz"
    }

    /// `packages/<id>/<to>/deltas/<from>.sealed`: an encrypted version's delta manifest, sealed.
    package static func sealedDeltaPath(_ id: PackageID, from: SemanticVersion, to: SemanticVersion) -> String {
        versionPath(id, to) + "/deltas/\(from).sealed"
    }

    /// `packages/<id>/<version>/encryption.json`: an encrypted version's `encryption` member as
    /// packed (its wrapped keys), kept so that a publisher holding a recipient key can read the
    /// version later (to make deltas from it).
    package static func encryptionPath(_ id: PackageID, _ version: SemanticVersion) -> String {
        versionPath(id, version) + "/encryption.json"
    }

    /// `patches/<aa>/<sha256>` relative to the root: a binary patch, named by its own SHA-256.
    package static func patchPath(_ digest: SHA256Digest) -> String {
        let hex = digest.hex
        return "patches/\(hex.prefix(2))/\(hex)"
    }

    /// `objects/<aa>/<sha256>` relative to the root.
    package static func objectPath(_ digest: SHA256Digest) -> String {
        let hex = digest.hex
        return "objects/\(hex.prefix(2))/\(hex)"
    }

    /// A repository-relative path made absolute. The relative paths come from this layout or
    /// from a verified index; `verify` checks index paths against the layout before use.
    package func resolve(_ relative: String) -> FilePath {
        root.joined(relative)
    }
}
