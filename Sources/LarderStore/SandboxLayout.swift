import Foundation
import LarderCore
import SystemPackage

/// The sandbox directory (see docs/sandbox.md):
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
package struct SandboxLayout: Sendable {
    /// The sandbox directory; every other path is under it.
    package let root: FilePath

    /// A layout rooted at `root`.
    package init(root: FilePath) { self.root = root }

    /// `.lock`: the writers' lock file (flock); readers never take it.
    package var lock: FilePath { root.joined(".lock") }
    /// `state.json`: the sandbox state, replaced atomically.
    package var state: FilePath { root.joined("state.json") }
    /// `config.json`: the repository, trusted keys, channel and device id.
    package var config: FilePath { root.joined("config.json") }
    /// The last accepted repository index, byte for byte as it was verified.
    package var acceptedIndex: FilePath { root.joined("repository-index.json") }
    /// The signature file of `acceptedIndex`.
    package var acceptedSignature: FilePath { root.joined("repository-index.json.sig") }
    /// `index-shards/`: of a sharded accepted index, the shards this device read (each
    /// `<sha256>.json`) and its catalog (`catalog-<sha256>.json`), each verified against the
    /// index before it was written under its digest.
    package var indexShards: FilePath { root.joined("index-shards") }
    /// The cached copy of the shard the index names by `digest`.
    package func cachedShard(_ digest: SHA256Digest) -> FilePath { indexShards.joined("\(digest.hex).json") }
    /// The cached copy of the catalog the index names by `digest`.
    package func cachedCatalog(_ digest: SHA256Digest) -> FilePath {
        indexShards.joined("catalog-\(digest.hex).json")
    }
    /// `trust/`: a delegated repository's trust (format §18): `root.json` (the root this device
    /// follows, as verified), `parts.json` (each team's accepted part serial and digest) and
    /// `parts/<sha256>.json` (the parts of the accepted index, verified).
    package var trust: FilePath { root.joined("trust") }
    /// `trust/root.json`.
    package var heldRoot: FilePath { trust.joined("root.json") }
    /// `trust/parts.json`.
    package var acceptedParts: FilePath { trust.joined("parts.json") }
    /// `trust/parts/<sha256>.json`: a verified team part, by its digest.
    package func cachedPart(_ digest: SHA256Digest) -> FilePath { trust.joined("parts").joined("\(digest.hex).json") }
    /// `generation`: the last state's generation as 8 bytes, for readers to notice a change.
    package var generation: FilePath { root.joined("generation") }
    /// `last-sync.json`: the record of the last sync that left nothing to do, which lets the
    /// next one stop after its one request when nothing changed since.
    package var lastSync: FilePath { root.joined("last-sync.json") }
    /// `packages/`: the extracted trees, as `<id>/<version>/`.
    package var packages: FilePath { root.joined("packages") }
    /// `lists/`: the verified file list of each tree, as `<id>/<version>.json`.
    package var lists: FilePath { root.joined("lists") }
    /// `staging/`: extractions in progress; emptied by recovery.
    package var staging: FilePath { root.joined("staging") }
    /// `downloads/`: partial downloads kept for resume.
    package var downloads: FilePath { root.joined("downloads") }
    /// `trash/`: trees being deleted; emptied by recovery.
    package var trash: FilePath { root.joined("trash") }
    /// `pins/`: the leases of live sessions, as `<id>/<version>/<lease>`.
    package var pins: FilePath { root.joined("pins") }
    /// `usage/`: one empty file per package whose modification time is its last use (at most a
    /// minute stale), for the disk budget to evict the least recently used first.
    package var usage: FilePath { root.joined("usage") }

    /// `usage/<id>`.
    package func usage(_ id: PackageID) -> FilePath { usage.joined(id.rawValue) }

    /// `packages/<id>/<version>`: the id and version are validated types, so the path stays
    /// inside the root.
    package func tree(_ id: PackageID, _ version: SemanticVersion) -> FilePath {
        packages.joined(id.rawValue).joined(version.description)
    }

    /// `lists/<id>/<version>.json`.
    package func list(_ id: PackageID, _ version: SemanticVersion) -> FilePath {
        lists.joined(id.rawValue).joined("\(version).json")
    }

    /// `downloads/<id>-<version>-<sha256 prefix>.zip.part`: a bundle being downloaded (kept for
    /// Range resume; the digest prefix keeps a re-published version from resuming the old bytes).
    package func bundlePart(_ id: PackageID, _ version: SemanticVersion, sha256: SHA256Digest) -> FilePath {
        downloads.joined("\(id)-\(version)-\(sha256.hex.prefix(16)).zip.part")
    }

    /// `downloads/patch-<sha256>.part`: a binary patch being downloaded (named by the patch's SHA-256).
    package func patchPart(_ sha256: SHA256Digest) -> FilePath {
        downloads.joined("patch-\(sha256.hex).part")
    }

    /// `downloads/applied-<sha256>`: a content made by a patch (named by the content's SHA-256),
    /// checked, waiting to be linked into the version's tree.
    package func appliedContent(_ sha256: SHA256Digest) -> FilePath {
        downloads.joined("applied-\(sha256.hex)")
    }

    /// `downloads/object-<sha256>.gz.part`: a content object being downloaded.
    package func objectPart(_ sha256: SHA256Digest) -> FilePath {
        downloads.joined("object-\(sha256.hex).gz.part")
    }

    /// A fresh name under `staging/` for one version (pid and a random number make it unique).
    package func newStagingDirectory(_ id: PackageID, _ version: SemanticVersion) -> FilePath {
        staging.joined("\(id)@\(version)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
    }

    /// Where a version's file list waits under `staging/` until the version is placed (the
    /// verified bytes of a download, see `Sandbox.provideListBytes`).
    package func stagedList(_ id: PackageID, _ version: SemanticVersion) -> FilePath {
        staging.joined("\(id)@\(version).files.json")
    }

    /// A fresh name under `trash/` for a tree being deleted.
    package func newTrashEntry(_ id: PackageID, _ version: SemanticVersion) -> FilePath {
        trash.joined("\(id)@\(version)-\(UInt32.random(in: 0...UInt32.max))")
    }

    /// `pins/<id>/<version>`.
    package func pinDirectory(_ id: PackageID, _ version: SemanticVersion) -> FilePath {
        pins.joined(id.rawValue).joined(version.description)
    }
}
