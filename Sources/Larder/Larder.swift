@_exported import LarderCore
@_exported import LarderPublish
@_exported import LarderStore
@_exported import LarderSync
@_exported import LarderResolve
import Foundation
import LarderFileSystem
import SystemPackage

/// The use cases an app or tool calls. Publisher side: keys, `Publisher` (pack, revoke),
/// `Verifier`. Device side: `Sandbox` (install, confirm, reportFailure, beginLaunch, rollback,
/// status, gc, doctor) and `SandboxReader` (lock-free reads, `pin`).
public enum Larder {
    /// The version of this build, compared with `minClientVersion` by the differ.
    public static let version = larderVersion
}

/// What `keygen` wrote.
public struct KeygenReport: Sendable, Codable, Equatable {
    public var keyId: String
    public var publicKey: String
    public var privateKeyFile: String
    public var publicKeyFile: String
}

/// Errors of `keygen`.
public enum KeygenError: Error, Sendable, Equatable, CustomStringConvertible {
    /// One of the files exists; keys are never overwritten.
    case exists(String)
    case io(FileSystemError)

    public var description: String {
        switch self {
        case .exists(let p): "\(p) already exists; keys are never overwritten (choose another --out)"
        case .io(let e): e.description
        }
    }
}

extension Larder {
    /// Makes a new Ed25519 key pair: `<out>.key` (private, mode 0600) and `<out>.pub`.
    public static func generateKeyPair(out: FilePath) throws(KeygenError) -> KeygenReport {
        let privatePath = FilePath(out.string + ".key")
        let publicPath = FilePath(out.string + ".pub")
        for p in [privatePath, publicPath] where AtomicFile.exists(p) { throw .exists(p.string) }
        let key = PrivateKey()
        do {
            let dir = out.removingLastComponent()
            if !dir.isEmpty { try AtomicFile.makeDirectories(dir) }
            try AtomicFile.write(try ManifestCoding.encode(KeyFile(private: key)), to: privatePath, permissions: [.ownerReadWrite])
            try AtomicFile.write(try ManifestCoding.encode(KeyFile(public: key.publicKey)), to: publicPath)
        } catch let e as FileSystemError {
            throw .io(e)
        } catch {
            throw .io(FileSystemError("write", privatePath, .ioError))
        }
        return KeygenReport(
            keyId: key.publicKey.keyID, publicKey: key.publicKey.base64, privateKeyFile: privatePath.string,
            publicKeyFile: publicPath.string)
    }

    /// Reads a private key file.
    public static func loadPrivateKey(_ path: FilePath) throws -> PrivateKey {
        try KeyFile.privateKey(from: try AtomicFile.read(path, limit: 1 << 16), path: path.string)
    }

    /// Reads a public key file (a private key file also yields its public half).
    public static func loadPublicKey(_ path: FilePath) throws -> PublicKey {
        try KeyFile.publicKey(from: try AtomicFile.read(path, limit: 1 << 16), path: path.string)
    }

    /// Reads and decodes a file list.
    public static func loadFileList(_ path: FilePath) throws -> FileList {
        try ManifestCoding.decode(FileList.self, from: try AtomicFile.read(path), document: path.string)
    }
}
