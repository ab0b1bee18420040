import Foundation

/// Why a fetched index was not accepted. Pure values: the sync maps each to its error and exit
/// code.
package enum IndexRefusal: Error, Sendable, Equatable, CustomStringConvertible {
    /// The signature file is unreadable, or no trusted key signed these exact bytes.
    case signature(SigningError)
    /// The signed bytes are not a valid index.
    case manifest(ManifestError)
    /// The serial is lower than one this sandbox accepted: a replayed old index.
    case rollbackAttack(serial: UInt64, accepted: UInt64)
    /// The serial this sandbox accepted, with different bytes.
    case serialReused(serial: UInt64)
    /// The index expired at this time.
    case expired(Date)
    /// The keys the index rotates to cannot be used (the detail says which and why).
    case unusableRotatedKeys(String)
    /// The signature names other index bytes than those fetched: the two come from different
    /// publications (a cache holding one longer than the other), not a forgery.
    case torn(String)
    /// A delegated repository's index is not signed by its root's index keys (format §18).
    case delegation(DelegationRefusal)

    /// What was wrong, for a person.
    package var description: String {
        switch self {
        case .signature(let e): "\(e)"
        case .manifest(let e): "\(e)"
        case .rollbackAttack(let s, let a): "serial \(s) is lower than the accepted \(a)"
        case .serialReused(let s): "serial \(s) was accepted with different contents"
        case .expired(let at): "expired at \(ManifestCoding.formatRFC3339(at))"
        case .unusableRotatedKeys(let d): "a rotated key is not usable: \(d)"
        case .torn(let detail): detail
        case .delegation(let e): e.description
        }
    }
}

/// An index that passed every trust rule.
package struct AcceptedIndexDecision: Sendable, Equatable {
    /// The decoded index.
    package let index: RepositoryIndex
    /// SHA-256 of the exact bytes verified.
    package let digest: SHA256Digest
    /// Whether the bytes are new to this sandbox (not a 304, not the bytes already accepted):
    /// only fresh bytes are recorded, and only they may rotate keys.
    package let fresh: Bool
    /// The keys trusted from now on, when a fresh index names keys other than the trusted ones.
    package let rotatedKeys: [KeyFile]?
}

/// The trust rules a fetched index must pass before anything acts on it (TUF-style): a
/// signature by a trusted key over the exact bytes, checked before anything is decoded; a serial
/// that never goes down and is never reused with other bytes; an expiry in the future; and key
/// rotation only by an index the current keys signed. Pure: no I/O, no clock of its own.
package enum IndexAcceptance {
    /// What a sync knows when it decides.
    package struct Input: Sendable {
        /// The index bytes: fetched, or the cached copy after a 304.
        package var bytes: Data
        /// The signature file's bytes.
        package var signature: Data
        /// The server answered 304 to the conditional GET (the bytes are the cached copy).
        package var notModified: Bool
        /// The keys the sandbox trusts, as configured (compared with the keys an index names).
        package var trustedKeys: [KeyFile]
        /// The same keys, parsed (the caller reports an unusable configured key its own way).
        package var trusted: [PublicKey]
        /// The last index the sandbox accepted.
        package var accepted: AcceptedIndex?
        /// The time to check expiry against.
        package var now: Date
        /// In a delegated repository, the root already followed to the one the signature names:
        /// the index keys it names sign instead of the trusted keys, and `keys` rotates nothing.
        package var root: RootDocument?

        /// Creates an input.
        package init(
            bytes: Data, signature: Data, notModified: Bool, trustedKeys: [KeyFile], trusted: [PublicKey],
            accepted: AcceptedIndex?, now: Date, root: RootDocument? = nil
        ) {
            self.root = root
            self.trusted = trusted
            self.bytes = bytes
            self.signature = signature
            self.notModified = notModified
            self.trustedKeys = trustedKeys
            self.accepted = accepted
            self.now = now
        }
    }

    /// Whether fetched bytes are new to the sandbox (so the signature must be fetched too).
    package static func isFresh(bytes: Data, notModified: Bool, accepted: AcceptedIndex?) -> Bool {
        guard !notModified else { return false }
        if let acc = accepted, SHA256Digest.of(bytes) == acc.sha256 { return false }
        return true
    }

    /// The public keys of key files, refusing any that cannot be used.
    package static func publicKeys(_ files: [KeyFile], document: String) throws(SigningError) -> [PublicKey] {
        var out: [PublicKey] = []
        for k in files {
            let data: Data
            do { data = try ManifestCoding.encode(k) } catch {
                throw .badKeyFile(path: document, detail: "\(error)")
            }
            out.append(try KeyFile.publicKey(from: data, path: document))
        }
        return out
    }

    /// Why a signature and an index do not belong together, for a person.
    static func tornDetail(named: IndexName, got: IndexName) -> String {
        "the signature is over another index (\(named.size) bytes, sha256 \(named.sha256.hex.prefix(12))…) than the one fetched (\(got.size) bytes, sha256 \(got.sha256.hex.prefix(12))…): the two come from different publications (a cache between them?)"
    }

    /// Applies every rule, in order: signature file, the index it names, signature, schema,
    /// serial, expiry, rotation.
    package static func decide(_ input: Input) throws(IndexRefusal) -> AcceptedIndexDecision {
        let signatures: SignatureFile
        do {
            signatures = try ManifestCoding.decode(
                SignatureFile.self, from: input.signature, document: RepositoryLayout.signatureName)
        } catch {
            throw .signature(.badSignatureFile(detail: error.description))
        }
        if let named = signatures.index, !named.names(input.bytes) {
            throw .torn(Self.tornDetail(named: named, got: IndexName(of: input.bytes)))
        }
        if let root = input.root {
            do {
                try DelegationCheck.requireIndexSignature(
                    input.bytes, signatures: signatures, root: root, now: input.now)
            } catch { throw .delegation(error) }
        } else {
            do { _ = try IndexSignature.verify(input.bytes, signatures: signatures, trusted: input.trusted) } catch {
                throw .signature(error)
            }
        }
        let index: RepositoryIndex
        do {
            index = try ManifestCoding.decode(
                RepositoryIndex.self, from: input.bytes, document: RepositoryLayout.indexName)
        } catch {
            throw .manifest(error)
        }
        let digest = SHA256Digest.of(input.bytes)
        if let acc = input.accepted {
            if index.serial < acc.serial { throw .rollbackAttack(serial: index.serial, accepted: acc.serial) }
            if index.serial == acc.serial && digest != acc.sha256 { throw .serialReused(serial: index.serial) }
        }
        if index.expires <= input.now { throw .expired(index.expires) }
        if let why = index.holdRaise() { throw .delegation(.rolloutRaise(why)) }
        let fresh = isFresh(bytes: input.bytes, notModified: input.notModified, accepted: input.accepted)
        var rotated: [KeyFile]?
        if input.root == nil, fresh, let keys = index.keys, !keys.isEmpty, keys != input.trustedKeys {
            do { _ = try publicKeys(keys, document: "config.json") } catch {
                throw .unusableRotatedKeys("\(error)")
            }
            rotated = keys
        }
        return AcceptedIndexDecision(index: index, digest: digest, fresh: fresh, rotatedKeys: rotated)
    }
}
