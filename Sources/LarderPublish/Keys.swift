import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

import enum Crypto.Curve25519

/// What `keygen` wrote.
package struct KeygenReport: Sendable, Codable, Equatable {
    /// The key id (the first 16 hex digits of the public key's SHA-256).
    package var keyId: String
    /// The public key, base64.
    package var publicKey: String
    /// Where the private key was written (mode 0600).
    package var privateKeyFile: String
    /// Where the public key was written.
    package var publicKeyFile: String
}

/// Errors of `keygen`.
package enum KeygenError: Error, Sendable, Equatable, CustomStringConvertible {
    /// One of the files exists; keys are never overwritten.
    case exists(String)
    /// Writing a key file failed.
    case io(FileSystemError)
    /// A key could not be encoded (a bug, not bad input).
    case encoding(String)

    /// What was wrong, and what to do.
    package var description: String {
        switch self {
        case .exists(let p): "\(p) already exists; keys are never overwritten (choose another --out)"
        case .io(let e): e.description
        case .encoding(let d): "cannot encode the key: \(d)"
        }
    }
}

/// Why a key file could not be loaded.
public enum KeyLoadError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The file could not be read.
    case io(FileSystemError)
    /// The file is not a usable Larder key.
    case key(SigningError)

    /// What was wrong.
    public var description: String {
        switch self {
        case .io(let e): e.description
        case .key(let e): e.description
        }
    }
}

/// The publisher's key files: make a pair, load either half.
public enum PublisherKeys {
    /// Makes a new Ed25519 key pair: `<out>.key` (private, mode 0600) and `<out>.pub`.
    package static func generate(out: FilePath) throws(KeygenError) -> KeygenReport {
        let key = PrivateKey()
        let (privatePath, publicPath) = try writePair(
            out: out, { try ManifestCoding.encode(KeyFile(private: key)) },
            { try ManifestCoding.encode(KeyFile(public: key.publicKey)) })
        return KeygenReport(
            keyId: key.publicKey.keyID, publicKey: key.publicKey.base64, privateKeyFile: privatePath.string,
            publicKeyFile: publicPath.string)
    }

    /// Reads a private key file.
    package static func loadPrivateKey(_ path: FilePath) throws(KeyLoadError) -> PrivateKey {
        let data = try Self.read(path)
        do { return try KeyFile.privateKey(from: data, path: path.string) } catch { throw .key(error) }
    }

    /// Reads a public key file (a private key file also yields its public half).
    public static func loadPublicKey(_ path: FilePath) throws(KeyLoadError) -> PublicKey {
        let data = try Self.read(path)
        do { return try KeyFile.publicKey(from: data, path: path.string) } catch { throw .key(error) }
    }

    /// Makes a new X25519 recipient key pair for encrypted packages (manifests §16):
    /// `<out>.key` (private, mode 0600: the app holds it) and `<out>.pub` (for
    /// `pack --encrypt-to`).
    package static func generateRecipient(out: FilePath) throws(KeygenError) -> KeygenReport {
        let key = Curve25519.KeyAgreement.PrivateKey()
        let (privatePath, publicPath) = try writePair(
            out: out, { try ManifestCoding.encode(RecipientKeyFile(private: key)) },
            { try ManifestCoding.encode(RecipientKeyFile(public: key.publicKey)) })
        return KeygenReport(
            keyId: ContentKeys.keyID(key.publicKey), publicKey: key.publicKey.rawRepresentation.base64EncodedString(),
            privateKeyFile: privatePath.string, publicKeyFile: publicPath.string)
    }

    /// Reads a recipient's private key file (`keygen --recipient`).
    package static func loadRecipientKey(_ path: FilePath) throws(KeyLoadError) -> RecipientKey {
        let data = try Self.read(path)
        do { return try RecipientKey(file: data, path: path.string) } catch { throw .key(error) }
    }

    /// Reads a recipient's public key file (a private key file also yields its public half).
    package static func loadRecipientPublicKey(_ path: FilePath) throws(KeyLoadError) -> RecipientPublicKey {
        let data = try Self.read(path)
        do { return try RecipientKeyFile.publicKey(from: data, path: path.string) } catch { throw .key(error) }
    }

    /// Writes `<out>.key` (mode 0600) and `<out>.pub`, neither of which may exist yet.
    private static func writePair(out: FilePath, _ privateData: () throws -> Data, _ publicData: () throws -> Data)
        throws(KeygenError) -> (FilePath, FilePath)
    {
        let privatePath = FilePath(out.string + ".key")
        let publicPath = FilePath(out.string + ".pub")
        for p in [privatePath, publicPath] where AtomicFile.exists(p) { throw .exists(p.string) }
        let privateBytes: Data
        let publicBytes: Data
        do {
            privateBytes = try privateData()
            publicBytes = try publicData()
        } catch {
            throw .encoding("\(error)")
        }
        do {
            let dir = out.parentPath
            if !dir.isEmpty { try AtomicFile.makeDirectories(dir) }
            try AtomicFile.write(privateBytes, to: privatePath, permissions: [.ownerReadWrite])
            try AtomicFile.write(publicBytes, to: publicPath)
        } catch {
            throw .io(error)
        }
        return (privatePath, publicPath)
    }

    private static func read(_ path: FilePath) throws(KeyLoadError) -> Data {
        do { return try AtomicFile.read(path, limit: 1 << 16) } catch { throw .io(error) }
    }
}
