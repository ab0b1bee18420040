import LarderCore
import SystemPackage

/// The sandbox directory (see README, "Sandbox"):
///
/// ```
/// <root>/.lock          writers take it (flock); readers never do
/// <root>/config.json    the repository, trusted keys, channel and device id (`larder init`)
/// <root>/repository-index.json(.sig)   the last accepted index and its signature, as fetched
/// <root>/state.json     active / fallback / pending versions, health, history
/// <root>/generation     state.json's generation as 8 bytes, rewritten in place after each
///                       state write so readers notice a change with one memory load (mmap)
/// <root>/packages/<id>/<version>/   extracted trees, never modified after activation
/// <root>/lists/<id>/<version>.json  the verified file list of each tree
/// <root>/staging/       extractions in progress; emptied by recovery
/// <root>/downloads/     partial downloads kept for resume
/// <root>/trash/         trees being deleted; emptied by recovery
/// <root>/pins/<id>/<version>/<lease>   live sessions that keep a version from deletion
/// ```
public struct SandboxLayout: Sendable {
    public let root: FilePath

    /// A layout rooted at `root`.
    public init(root: FilePath) { self.root = root }

    public var lock: FilePath { root.appending(".lock") }
    public var state: FilePath { root.appending("state.json") }
    public var config: FilePath { root.appending("config.json") }
    /// The last accepted repository index, byte for byte as it was verified.
    public var acceptedIndex: FilePath { root.appending("repository-index.json") }
    /// The signature file of `acceptedIndex`.
    public var acceptedSignature: FilePath { root.appending("repository-index.json.sig") }
    public var generation: FilePath { root.appending("generation") }
    public var packages: FilePath { root.appending("packages") }
    public var lists: FilePath { root.appending("lists") }
    public var staging: FilePath { root.appending("staging") }
    public var downloads: FilePath { root.appending("downloads") }
    public var trash: FilePath { root.appending("trash") }
    public var pins: FilePath { root.appending("pins") }

    /// `packages/<id>/<version>`: the id and version are validated types, so the path stays
    /// inside the root.
    public func tree(_ id: PackageID, _ version: SemanticVersion) -> FilePath {
        packages.appending(id.rawValue).appending(version.description)
    }

    /// `lists/<id>/<version>.json`.
    public func list(_ id: PackageID, _ version: SemanticVersion) -> FilePath {
        lists.appending(id.rawValue).appending("\(version).json")
    }

    /// `pins/<id>/<version>`.
    public func pinDirectory(_ id: PackageID, _ version: SemanticVersion) -> FilePath {
        pins.appending(id.rawValue).appending(version.description)
    }
}
