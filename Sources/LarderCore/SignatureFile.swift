import Foundation

/// One signature in `index.json.sig`.
package struct SignatureEntry: Codable, Sendable, Equatable {
    /// The signing key's id (see `PublicKey.keyID`).
    package var keyID: String
    /// Always `ed25519` in schema 1.
    package var algorithm: String
    /// The 64-byte signature, base64.
    package var signature: String

    enum CodingKeys: String, CodingKey {
        case keyID = "keyId"
        case algorithm, signature
    }

    /// Creates an entry.
    package init(keyID: String, algorithm: String = "ed25519", signature: String) {
        self.keyID = keyID
        self.algorithm = algorithm
        self.signature = signature
    }

    /// Decodes an entry, refusing a key id that is not 16 lowercase hex digits.
    package init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        keyID = try c.decode(String.self, forKey: .keyID)
        algorithm = try c.decode(String.self, forKey: .algorithm)
        signature = try c.decode(String.self, forKey: .signature)
        let hex = keyID.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }
        guard keyID.utf8.count == 16, hex else {
            throw DecodingError.dataCorruptedError(
                forKey: .keyID, in: c, debugDescription: "\(quoted(keyID)) is not a key id (16 lowercase hex digits)")
        }
    }
}

/// `index.json.sig`: detached signatures over the exact bytes of `index.json` (several during a
/// key rotation).
///
/// `index` names the exact bytes the signatures are over (size and SHA-256), so that a device can
/// tell a signature and an index from two different publications (a CDN edge caches each on its
/// own schedule) from a bad signature, and fetch the index the signature names. It is a name, not
/// a proof: only the signatures are trusted. Absent in files written before it existed.
package struct SignatureFile: Codable, Sendable, Equatable, RepositoryDocument {
    /// The document's format version; `ManifestCoding.decode` refuses any but `currentSchemaVersion`.
    package var schemaVersion: Int
    /// The index the signatures are over; nil in signature files from before it existed.
    package var index: IndexName?
    /// One signature per signing key over the same bytes; never empty once decoded.
    package var signatures: [SignatureEntry]
    /// In a delegated repository (format §18), the root whose index keys signed: a name, not a
    /// proof (the index says it again, signed), so that a device can check the signature before
    /// it decodes the index.
    package var root: RootName?

    /// Creates a signature file.
    package init(
        schemaVersion: Int = currentSchemaVersion, index: IndexName? = nil, signatures: [SignatureEntry],
        root: RootName? = nil
    ) {
        self.schemaVersion = schemaVersion
        self.index = index
        self.signatures = signatures
        self.root = root
    }

    enum CodingKeys: String, CodingKey { case schemaVersion, index, signatures, root }

    /// Decodes a signature file, refusing one with no signatures.
    package init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        schemaVersion = try c.decode(Int.self, forKey: .schemaVersion)
        index = try c.decodeIfPresent(IndexName.self, forKey: .index)
        signatures = try c.decode([SignatureEntry].self, forKey: .signatures)
        root = try c.decodeIfPresent(RootName.self, forKey: .root)
        if signatures.isEmpty {
            throw DecodingError.dataCorruptedError(forKey: .signatures, in: c, debugDescription: "no signatures")
        }
    }
}

/// The exact bytes of one `index.json`: its size and SHA-256 (`index.json.sig`'s `index`).
package struct IndexName: Codable, Sendable, Equatable {
    /// Length in bytes.
    package var size: Int64
    /// SHA-256 of the bytes.
    package var sha256: SHA256Digest

    /// The name of `bytes`.
    package init(of bytes: Data) {
        size = Int64(bytes.count)
        sha256 = SHA256Digest.of(bytes)
    }

    /// Whether `bytes` are the index this names.
    package func names(_ bytes: Data) -> Bool { Int64(bytes.count) == size && SHA256Digest.of(bytes) == sha256 }
}
