import Crypto
import Foundation

/// Errors of keys and signatures.
public enum SigningError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A key file could not be read as a Larder key.
    case badKeyFile(path: String, detail: String)
    /// No signature in the file is by a trusted key.
    case noTrustedSignature(signedBy: [String], trusted: [String])
    /// A signature by a trusted key does not match the bytes.
    case invalidSignature(keyID: String)
    /// The signature file cannot be read as one (the detail says why).
    case badSignatureFile(detail: String)

    /// Names the key file, the key ids or the signature file involved and what went wrong, for a person.
    public var description: String {
        switch self {
        case .badKeyFile(let path, let detail):
            "\(path) is not a Larder key file: \(detail)"
        case .noTrustedSignature(let signedBy, let trusted):
            "index.json is not signed by a trusted key: signed by [\(signedBy.joined(separator: ", "))], trusted [\(trusted.joined(separator: ", "))]"
        case .invalidSignature(let keyID):
            "the signature by trusted key \(keyID) does not match index.json (edited after signing, or corrupted)"
        case .badSignatureFile(let detail):
            "index.json.sig is not a signature file: \(detail)"
        }
    }
}

/// An Ed25519 public key that verifies repository signatures.
public struct PublicKey: Sendable, Equatable, Hashable {
    /// The 32 raw key bytes.
    public let rawRepresentation: Data

    /// Wraps 32 raw bytes.
    public init(rawRepresentation: Data) throws {
        _ = try Curve25519.Signing.PublicKey(rawRepresentation: rawRepresentation)
        self.rawRepresentation = rawRepresentation
    }

    init(_ key: Curve25519.Signing.PublicKey) {
        rawRepresentation = key.rawRepresentation
    }

    /// The key id: the first 16 hex digits of the SHA-256 of the raw key.
    public var keyID: String { String(SHA256Digest.of(rawRepresentation).hex.prefix(16)) }

    /// The raw key, base64.
    public var base64: String { rawRepresentation.base64EncodedString() }

    /// Whether `signature` is a valid Ed25519 signature of `message` by this key. Any error
    /// counts as "not valid".
    package func isValidSignature(_ signature: Data, for message: Data) -> Bool {
        guard signature.count == 64, let key = try? Curve25519.Signing.PublicKey(rawRepresentation: rawRepresentation)
        else { return false }
        return key.isValidSignature(signature, for: message)
    }
}

/// An Ed25519 private key that signs repository indexes.
package struct PrivateKey: Sendable {
    private let key: Curve25519.Signing.PrivateKey

    /// A new random key.
    package init() { key = Curve25519.Signing.PrivateKey() }

    /// Wraps a 32-byte seed.
    package init(rawRepresentation: Data) throws {
        key = try Curve25519.Signing.PrivateKey(rawRepresentation: rawRepresentation)
    }

    /// The 32-byte seed.
    package var rawRepresentation: Data { key.rawRepresentation }

    /// The matching public key.
    package var publicKey: PublicKey { PublicKey(key.publicKey) }

    /// Signs `message`.
    package func signature(for message: Data) throws -> Data {
        try key.signature(for: message)
    }
}

/// The on-disk form of key files: `{"type": "ed25519-private" | "ed25519-public", "keyId": …, "key": base64}`.
package struct KeyFile: Codable, Sendable, Equatable, RepositoryDocument {
    /// `type` of a file holding a private key's 32-byte seed.
    package static let privateType = "ed25519-private"
    /// `type` of a file holding a public key's 32 raw bytes.
    package static let publicType = "ed25519-public"
    /// `ed25519-private` or `ed25519-public`.
    package var type: String
    /// The key id (first 16 hex digits of the public key's SHA-256), for both kinds of file.
    package var keyId: String
    /// The key bytes, base64: the seed for a private key, the raw key for a public one.
    package var key: String

    /// The file for a public key.
    package init(public key: PublicKey) {
        type = Self.publicType
        keyId = key.keyID
        self.key = key.base64
    }

    /// The file for a private key (it also names the public key's id).
    package init(private key: PrivateKey) {
        type = Self.privateType
        keyId = key.publicKey.keyID
        self.key = key.rawRepresentation.base64EncodedString()
    }

    /// Reads a public key file; a private key file is also accepted (its public half is used).
    package static func publicKey(from data: Data, path: String) throws(SigningError) -> PublicKey {
        let file = try parse(data, path: path)
        guard let raw = Data(base64Encoded: file.key) else {
            throw .badKeyFile(path: path, detail: "\"key\" is not base64")
        }
        do {
            switch file.type {
            case publicType: return try PublicKey(rawRepresentation: raw)
            case privateType: return try PrivateKey(rawRepresentation: raw).publicKey
            default: throw SigningError.badKeyFile(path: path, detail: "unknown type \(quoted(file.type))")
            }
        } catch let e as SigningError {
            throw e
        } catch {
            throw .badKeyFile(path: path, detail: "the key bytes are not an Ed25519 key")
        }
    }

    /// Reads a private key file.
    package static func privateKey(from data: Data, path: String) throws(SigningError) -> PrivateKey {
        let file = try parse(data, path: path)
        guard file.type == privateType else {
            throw .badKeyFile(
                path: path,
                detail: "type is \(quoted(file.type)), expected \(quoted(privateType)) (is this the .pub file?)")
        }
        guard let raw = Data(base64Encoded: file.key), let key = try? PrivateKey(rawRepresentation: raw) else {
            throw .badKeyFile(path: path, detail: "the key bytes are not an Ed25519 seed")
        }
        return key
    }

    private static func parse(_ data: Data, path: String) throws(SigningError) -> KeyFile {
        do {
            return try ManifestCoding.decode(KeyFile.self, from: data, document: path)
        } catch {
            throw .badKeyFile(path: path, detail: error.description)
        }
    }
}

/// Signing and checking `index.json`.
package enum IndexSignature {
    /// A signature file with one signature per key over `indexBytes`, naming them.
    /// `root` names a delegated repository's root (format §18).
    package static func sign(_ indexBytes: Data, with keys: [PrivateKey], root: RootName? = nil) throws -> SignatureFile
    {
        SignatureFile(
            index: IndexName(of: indexBytes),
            signatures: try keys.map { key in
                SignatureEntry(
                    keyID: key.publicKey.keyID, signature: try key.signature(for: indexBytes).base64EncodedString())
            }, root: root)
    }

    /// Checks that at least one signature is by a trusted key and that every signature by a
    /// trusted key is valid; returns the id of the key that verified. A signature by an untrusted
    /// key is ignored (it may belong to a rotation in progress).
    @discardableResult
    package static func verify(_ indexBytes: Data, signatures: SignatureFile, trusted: [PublicKey]) throws(SigningError)
        -> String
    {
        let byID = Dictionary(trusted.map { ($0.keyID, $0) }, uniquingKeysWith: { a, _ in a })
        var verifiedBy: String?
        for entry in signatures.signatures {
            guard let key = byID[entry.keyID] else { continue }
            guard entry.algorithm == "ed25519", let sig = Data(base64Encoded: entry.signature),
                key.isValidSignature(sig, for: indexBytes)
            else {
                throw .invalidSignature(keyID: entry.keyID)
            }
            verifiedBy = verifiedBy ?? entry.keyID
        }
        guard let id = verifiedBy else {
            throw .noTrustedSignature(
                signedBy: signatures.signatures.map(\.keyID), trusted: trusted.map(\.keyID).sorted())
        }
        return id
    }
}
