import Crypto
import Foundation
import LarderArchive
import LarderCore
import SystemPackage
import Testing

/// gzip as another packer writes it: the same content, other stored bytes (the header's OS byte
/// says "unknown"), which any gzip reader inflates to the same content.
struct OtherPackerGzip: BlobCodec {
    var kind: BlobKind { .object }

    func encode(_ content: Data) throws(BlobError) -> Data {
        var stored = try GzipCodec(.object).encode(content)
        stored[stored.startIndex + 9] = 0xFF
        return stored
    }

    func encode(file source: FilePath, to output: FilePath) throws(BlobError) -> EncodedBlob {
        throw .malformed(.object, "not used")
    }

    func makeDecoder(limit: Int64) throws(BlobError) -> any BlobDecoder {
        try GzipCodec(.object).makeDecoder(limit: limit)
    }
}

/// Sealed objects (manifests §16): the key and nonce an object is sealed with follow from what is
/// sealed (its stored form), not from its content alone, and objects earlier builds sealed open.
@Suite("Sealed object keys and nonces")
struct SealedObjectKeyTests {
    static let key = SymmetricKey(size: .bits256)
    static let associated = Encryption.associatedObject(PackageID("shop")!)
    static let content = Data((0..<60_000).map { i in UInt8(truncatingIfNeeded: (i * 7919) % 251 + i / 1000) })

    static func codec(_ inner: any BlobCodec) -> SealedCodec {
        SealedCodec(inner, key: key, associated: associated, perContent: true)
    }

    /// `sealed` opened with `codec` bound to the content's digest.
    static func open(_ codec: SealedCodec, _ sealed: Data) throws -> Data {
        let decoder = try codec.forContent(SHA256Digest.of(content)).makeDecoder(limit: 1 << 20)
        var out = Data()
        try sealed.withUnsafeBytes { raw in try decoder.feed(raw) { out.append(contentsOf: $0) } }
        try decoder.finish { out.append(contentsOf: $0) }
        return out
    }

    @Test("two packers' encodings of one content get other nonces and keys: no key stream is used twice")
    func otherEncodingOtherKeyAndNonce() throws {
        let storedA = try GzipCodec(.object).encode(Self.content)
        let storedB = try OtherPackerGzip().encode(Self.content)
        #expect(storedA != storedB)
        let sealedA = try Self.codec(GzipCodec(.object)).encode(Self.content)
        let sealedB = try Self.codec(OtherPackerGzip()).encode(Self.content)
        // Version 2 headers whose nonce prefixes differ.
        #expect(sealedA[4] == 2 && sealedB[4] == 2)
        #expect(sealedA[6..<13] != sealedB[6..<13])
        // Under one key and nonce, the ciphertexts' XOR would be the stored forms' XOR.
        let n = min(storedA.count, storedB.count)
        let cipherXor = zip(sealedA.dropFirst(16).prefix(n), sealedB.dropFirst(16).prefix(n)).map { $0 ^ $1 }
        let plainXor = zip(storedA.prefix(n), storedB.prefix(n)).map { $0 ^ $1 }
        #expect(cipherXor != plainXor)
        // Still the same prefix-derived key for the same stored bytes: sealing is reproducible.
        #expect(try Self.codec(GzipCodec(.object)).encode(Self.content) == sealedA)
        // Both open to the content.
        #expect(try Self.open(Self.codec(GzipCodec(.object)), sealedA) == Self.content)
        #expect(try Self.open(Self.codec(GzipCodec(.object)), sealedB) == Self.content)
    }

    @Test("the key is not a function of the content: a stored form sealed with the content-only key does not open")
    func keyIsNotTheContentsAlone() throws {
        let stored = try GzipCodec(.object).encode(Self.content)
        let sealed = try Self.codec(GzipCodec(.object)).encode(Self.content)
        let prefix = [UInt8](sealed[6..<13])
        // The same stored form sealed under the version 1 key with the same nonce prefix and header
        // differs: the version 2 key is not the content-derived one.
        let v1Key = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: Self.key, salt: Data("larder-seal-1 object".utf8),
            info: Self.associated + Data(SHA256Digest.of(Self.content).hex.utf8), outputByteCount: 32)
        let underV1Key = try SegmentedSeal.seal(
            stored, key: v1Key, associated: Self.associated, prefix: prefix, flags: SealHeader.derivedKeyFlag)
        #expect(underV1Key.prefix(16) == sealed.prefix(16))
        #expect(underV1Key != sealed)
    }

    @Test("an object an earlier build sealed (version 1: key from the content's digest, zero prefix) still opens")
    func earlierBuildsObjectsOpen() throws {
        let stored = try GzipCodec(.object).encode(Self.content)
        let v1Key = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: Self.key, salt: Data("larder-seal-1 object".utf8),
            info: Self.associated + Data(SHA256Digest.of(Self.content).hex.utf8), outputByteCount: 32)
        let old = try SegmentedSeal.seal(
            stored, key: v1Key, associated: Self.associated, prefix: [UInt8](repeating: 0, count: 7))
        #expect(old[4] == 1 && old[13..<16].allSatisfy { $0 == 0 })
        #expect(try Self.open(Self.codec(GzipCodec(.object)), old) == Self.content)
        // Without the content's digest an object opens not at all.
        #expect(throws: BlobError.self) { try Self.codec(GzipCodec(.object)).makeDecoder(limit: 1 << 20) }
    }

    @Test("a padded object opens to its content and has a Padmé sealed size")
    func paddedObject() throws {
        let codec = SealedCodec(
            GzipCodec(.object), key: Self.key, associated: Self.associated, perContent: true, padded: true)
        let stored = try GzipCodec(.object).encode(Self.content)
        let sealed = try codec.encode(Self.content)
        #expect(Int64(sealed.count) == SegmentedSeal.paddedSealedSize(Int64(stored.count)))
        #expect(Int64(sealed.count) == Padme.padded(Int64(sealed.count)))
        #expect(try Self.open(codec, sealed) == Self.content)
    }
}
