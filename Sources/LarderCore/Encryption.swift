import Crypto
import Foundation

/// How an encrypted version is sealed (manifests §16): a content key of its own, wrapped for
/// each recipient, seals its bundle, objects and file list in 64 KiB ChaCha20-Poly1305 segments.
/// The index names every sealed blob by the SHA-256 of its sealed bytes, so a device checks what
/// it downloaded before it opens anything.
package struct Encryption: Codable, Sendable, Equatable {
    /// The one scheme this build knows: HPKE (X25519, HKDF-SHA256, ChaCha20-Poly1305) for the
    /// content key, `SegmentedSeal` (ChaCha20-Poly1305, STREAM nonces) for the blobs.
    package static let scheme = "larder-seal-1"

    /// The scheme; a device refuses a version whose scheme it does not know.
    package var scheme: String
    /// The sealed file list (`files.sealed`: the list, gzipped, then sealed).
    package var files: BlobRef
    /// The content key, wrapped for each recipient.
    package var recipients: [WrappedKey]
    /// `"padme"` when every sealed blob of the version is padded to a Padmé size
    /// (`pack --pad`); nil when none is.
    package var padding: String?

    /// The one padding this build writes: Padmé (`padding`).
    package static let padme = "padme"

    /// Creates one.
    package init(scheme: String = Encryption.scheme, files: BlobRef, recipients: [WrappedKey], padding: String? = nil) {
        self.scheme = scheme
        self.files = files
        self.recipients = recipients
        self.padding = padding
    }

    enum CodingKeys: String, CodingKey { case scheme, files, recipients, padding }

    /// Decodes one, refusing an empty or oversized recipient list.
    package init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        scheme = try c.decode(String.self, forKey: .scheme)
        files = try c.decode(BlobRef.self, forKey: .files)
        recipients = try c.decode([WrappedKey].self, forKey: .recipients)
        padding = try c.decodeIfPresent(String.self, forKey: .padding)
        guard (1...256).contains(recipients.count) else {
            throw DecodingError.dataCorruptedError(
                forKey: .recipients, in: c, debugDescription: "\(recipients.count) recipients is not 1...256")
        }
    }

    /// What a content key of `id`@`version` is bound to when wrapped (HPKE's `info`).
    package static func keyInfo(_ id: PackageID, _ version: SemanticVersion) -> Data {
        Data("larder content key \(id)@\(version)".utf8)
    }

    /// What every sealed blob of `id`@`version` of `kind` authenticates besides its bytes, so a
    /// blob sealed for one use does not open as another.
    package static func associated(_ id: PackageID, _ version: SemanticVersion, _ kind: String) -> Data {
        Data("larder sealed \(kind) \(id)@\(version)".utf8)
    }

    /// What every sealed object of package `id` authenticates besides its bytes: objects are
    /// bound to the package, so that versions sharing a content key share objects.
    package static func associatedObject(_ id: PackageID) -> Data {
        Data("larder sealed object \(id)".utf8)
    }

    /// The marker `files` names in an encrypted entry: a file list of schema version 2 with no
    /// files, which a device that does not know encryption refuses ("upgrade larder") instead of
    /// installing anything.
    package static func marker(_ id: PackageID, _ version: SemanticVersion) throws -> Data {
        try ManifestCoding.encode(Marker(schemaVersion: 2, id: id, version: version, encrypted: true, files: []))
    }

    struct Marker: Codable {
        var schemaVersion: Int
        var id: PackageID
        var version: SemanticVersion
        var encrypted: Bool
        var files: [FileEntry]
    }
}

/// A recipient's public key (X25519): what `pack --encrypt-to` wraps content keys for.
package typealias RecipientPublicKey = Curve25519.KeyAgreement.PublicKey

/// A device's recipient key (the private half of an X25519 pair from `larder keygen --recipient`):
/// it opens the content keys of versions encrypted to its public half.
public struct RecipientKey: Sendable {
    let privateKey: Curve25519.KeyAgreement.PrivateKey

    /// A new random key (tests, and `keygen --recipient`).
    public init() { privateKey = Curve25519.KeyAgreement.PrivateKey() }

    /// The key a private recipient key file holds.
    public init(file data: Data, path: String) throws(SigningError) {
        privateKey = try RecipientKeyFile.privateKey(from: data, path: path)
    }

    /// Wraps an X25519 private key.
    public init(_ privateKey: Curve25519.KeyAgreement.PrivateKey) { self.privateKey = privateKey }

    /// The public half, for `pack --encrypt-to`.
    public var publicKey: Curve25519.KeyAgreement.PublicKey { privateKey.publicKey }

    /// The key id its wrapped keys are found by.
    public var keyId: String { ContentKeys.keyID(privateKey.publicKey) }

    /// The content key wrapped for this key among `wrapped`, bound to `info`.
    package func unwrap(_ wrapped: [WrappedKey], info: Data) throws(SealError) -> SymmetricKey {
        try ContentKeys.unwrap(wrapped, with: privateKey, info: info)
    }
}

/// A recipient's X25519 key pair, as `larder keygen --recipient` writes it: the app holds the
/// private half, a publisher encrypts to the public one.
package struct RecipientKeyFile: Codable, Sendable, Equatable {
    /// `type` of a file holding a private key.
    package static let privateType = "x25519-recipient-private"
    /// `type` of a file holding a public key.
    package static let publicType = "x25519-recipient-public"
    /// One of the two types.
    package var type: String
    /// The key id (first 16 hex digits of the public key's SHA-256).
    package var keyId: String
    /// The raw key, base64.
    package var key: String

    /// The file for a public key.
    package init(public key: Curve25519.KeyAgreement.PublicKey) {
        type = Self.publicType
        keyId = ContentKeys.keyID(key)
        self.key = key.rawRepresentation.base64EncodedString()
    }

    /// The file for a private key (it names its public key's id).
    package init(private key: Curve25519.KeyAgreement.PrivateKey) {
        type = Self.privateType
        keyId = ContentKeys.keyID(key.publicKey)
        self.key = key.rawRepresentation.base64EncodedString()
    }

    /// The private key a file holds.
    package static func privateKey(from data: Data, path: String) throws(SigningError)
        -> Curve25519.KeyAgreement.PrivateKey
    {
        let file = try parse(data, path: path)
        guard file.type == privateType else {
            throw .badKeyFile(path: path, detail: "type \(quoted(file.type)) is not \(privateType)")
        }
        let bytes = try raw(file, path)
        do {
            return try Curve25519.KeyAgreement.PrivateKey(rawRepresentation: bytes)
        } catch {
            throw .badKeyFile(path: path, detail: "not an X25519 private key")
        }
    }

    /// The public key a file holds (a private key file gives its public half).
    package static func publicKey(from data: Data, path: String) throws(SigningError)
        -> Curve25519.KeyAgreement.PublicKey
    {
        let file = try parse(data, path: path)
        if file.type == privateType { return try privateKey(from: data, path: path).publicKey }
        guard file.type == publicType else {
            throw .badKeyFile(path: path, detail: "type \(quoted(file.type)) is not \(publicType)")
        }
        let bytes = try raw(file, path)
        do {
            return try Curve25519.KeyAgreement.PublicKey(rawRepresentation: bytes)
        } catch {
            throw .badKeyFile(path: path, detail: "not an X25519 public key")
        }
    }

    static func parse(_ data: Data, path: String) throws(SigningError) -> RecipientKeyFile {
        do { return try JSONDecoder().decode(RecipientKeyFile.self, from: data) } catch {
            throw .badKeyFile(path: path, detail: "not a recipient key file (type, keyId, key)")
        }
    }

    static func raw(_ file: RecipientKeyFile, _ path: String) throws(SigningError) -> Data {
        guard let raw = Data(base64Encoded: file.key), raw.count == 32 else {
            throw .badKeyFile(path: path, detail: "\"key\" is not 32 bytes of base64")
        }
        return raw
    }
}
