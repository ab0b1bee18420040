import Foundation
// What an app calls, and the values those calls take and return; each module below shows an app
// only its `public` line. The CLI, the benches and the tests import the modules they use.
@_exported import HTTPTypes  // `HTTPRequest.Method`, the method of a `LoadRequest`
@_exported import LarderCore  // PackageID, SemanticVersion, Channel, PublicKey, RecipientKey, …
import LarderFileSystem
@_exported import LarderResolve  // Resolver, ResourceLoader, Forwarder, PageHealthTracker, SessionPins
@_exported import LarderStore  // StoreError, HealthOutcome, PageHealthOutcome, BudgetReport, ServingHandoff
@_exported import LarderSync  // SyncReport, SyncSetup, SyncRequest, SyncError, PackageFailure
@_exported import LarderWebView  // SchemeTaskDriver, WebViewHealth, CookieStore: a web-view engine's glue
@_exported import SystemPackage  // FilePath

@_exported import enum LarderArchive.ArchiveError
@_exported import enum LarderFetch.FetchError
@_exported import struct LarderFetch.HTTPOptions
@_exported import struct LarderFetch.HTTPStack
@_exported import struct LarderFileSystem.FileSystemError
@_exported import enum LarderPublish.KeyLoadError
@_exported import enum LarderPublish.PublisherKeys

/// This build of Larder. An app's one object is `OfflinePackages`; the lower-level use cases
/// (`Publisher`, `Verifier`, `Sandbox`, `SandboxReader`) are `package`, reached through the `larder` CLI.
public enum Larder {
    /// The version of this build, compared with `minClientVersion` by the differ.
    public static let version = larderVersion

    /// Reads and decodes a file list.
    package static func loadFileList(_ path: FilePath) throws -> FileList {
        try readFileList(path).list
    }

    /// Reads and decodes a file list; also returns the bytes it was decoded from (to place as
    /// they are, see `Sandbox.provideListBytes`).
    package static func readFileList(_ path: FilePath) throws -> (list: FileList, bytes: Data) {
        let data = try AtomicFile.read(path)
        return (try decodeFileList(data, document: path.string), data)
    }

    private static func decodeFileList(_ data: Data, document: String) throws -> FileList {
        try ManifestCoding.decode(FileList.self, from: data, document: document)
    }

    /// Reads a file list and decodes it on a thread of its own, for an install to extract its
    /// bundle meanwhile (`Sandbox.install(bundle:id:version:pending:force:)`).
    package static func readPendingFileList(_ path: FilePath) throws -> PendingFileList {
        let data = try AtomicFile.read(path)
        let document = path.string
        return PendingFileList(bytes: data) { try decodeFileList($0, document: document) }
    }
}
