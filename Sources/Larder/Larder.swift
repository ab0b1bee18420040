import Foundation
@_exported import HTTPTypes
@_exported import LarderCore
@_exported import LarderFetch
import LarderFileSystem
@_exported import LarderPublish
@_exported import LarderResolve
@_exported import LarderStore
@_exported import LarderSync
@_exported import LarderWebView
@_exported import SystemPackage

/// The use cases an app or tool calls. Publisher side: `PublisherKeys` (keygen, key files),
/// `Publisher` (pack, revoke), `Verifier`. Device side: `Syncer` (sync, plan), `Sandbox`
/// (install, confirm, reportFailure, beginLaunch, rollback, status, gc, doctor),
/// `SandboxReader` (lock-free reads, `pin`) and `Resolver` / `ResourceLoader` (page loads).
public enum Larder {
    /// The version of this build, compared with `minClientVersion` by the differ.
    public static let version = larderVersion

    /// Reads and decodes a file list.
    public static func loadFileList(_ path: FilePath) throws -> FileList {
        try readFileList(path).list
    }

    /// Reads and decodes a file list; also returns the bytes it was decoded from (to place as
    /// they are, see `Sandbox.provideListBytes`).
    public static func readFileList(_ path: FilePath) throws -> (list: FileList, bytes: Data) {
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
