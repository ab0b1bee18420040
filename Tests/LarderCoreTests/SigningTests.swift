import Foundation
import LarderCore
import Testing

/// RFC 8032 §7.1 test vectors for Ed25519, checked by verification (and, since Ed25519 signing
/// is deterministic, by re-signing where the platform's implementation is deterministic).
@Suite("Ed25519 (RFC 8032)")
struct SigningTests {
    struct Vector: Sendable, CustomStringConvertible {
        let name: String
        let secret: String
        let publicKey: String
        let message: String
        let signature: String
        var description: String { name }
    }

    static let vectors = [
        Vector(
            name: "TEST 1",
            secret: "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
            publicKey: "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
            message: "",
            signature:
                "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
        ),
        Vector(
            name: "TEST 2",
            secret: "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
            publicKey: "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
            message: "72",
            signature:
                "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"
        ),
        Vector(
            name: "TEST 3",
            secret: "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
            publicKey: "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
            message: "af82",
            signature:
                "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a"
        ),
        Vector(
            name: "TEST SHA(abc)",
            secret: "833fe62409237b9d62ec77587520911e9a759cec1d19755b7da901b96dca3d42",
            publicKey: "ec172b93ad5e563bf4932c70e1245034c35467ef2efd4d64ebf819683467e2bf",
            message:
                "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f",
            signature:
                "dc2a4459e7369633a52b1bf277839a00201009a3efbf3ecb69bea2186c26b58909351fc9ac90b3ecfdfbc7c66431e0303dca179c138ac17ad9bef1177331a704"
        ),
    ]

    static func bytes(_ hex: String) -> Data {
        var out = Data()
        var i = hex.startIndex
        while i < hex.endIndex {
            let j = hex.index(i, offsetBy: 2)
            out.append(UInt8(hex[i..<j], radix: 16) ?? 0)
            i = j
        }
        return out
    }

    @Test(arguments: vectors)
    func vectorVerifies(_ v: Vector) throws {
        let key = try PublicKey(rawRepresentation: Self.bytes(v.publicKey))
        #expect(key.isValidSignature(Self.bytes(v.signature), for: Self.bytes(v.message)))
    }

    @Test(arguments: vectors)
    func secretDerivesPublicKey(_ v: Vector) throws {
        let key = try PrivateKey(rawRepresentation: Self.bytes(v.secret))
        #expect(key.publicKey.rawRepresentation == Self.bytes(v.publicKey))
        // Whatever the implementation's nonce choice, its own signature must verify.
        let sig = try key.signature(for: Self.bytes(v.message))
        #expect(key.publicKey.isValidSignature(sig, for: Self.bytes(v.message)))
        #if os(Linux)
            // swift-crypto on Linux is BoringSSL, which signs deterministically as RFC 8032 says.
            #expect(sig == Self.bytes(v.signature))
        #endif
    }

    @Test(arguments: vectors)
    func tamperedInputsFail(_ v: Vector) throws {
        let key = try PublicKey(rawRepresentation: Self.bytes(v.publicKey))
        var sig = Self.bytes(v.signature)
        sig[5] ^= 0x01
        #expect(!key.isValidSignature(sig, for: Self.bytes(v.message)))
        var msg = Self.bytes(v.message)
        msg.append(0x00)
        #expect(!key.isValidSignature(Self.bytes(v.signature), for: msg))
        #expect(!key.isValidSignature(Data(Self.bytes(v.signature).prefix(63)), for: Self.bytes(v.message)))
    }

    @Test func indexSignatureTrust() throws {
        let trusted = PrivateKey()
        let other = PrivateKey()
        let index = Data("{\"serial\": 1}\n".utf8)
        let sig = try IndexSignature.sign(index, with: [trusted])
        #expect(
            try IndexSignature.verify(index, signatures: sig, trusted: [trusted.publicKey]) == trusted.publicKey.keyID)
        #expect(
            throws: SigningError.noTrustedSignature(
                signedBy: [trusted.publicKey.keyID], trusted: [other.publicKey.keyID])
        ) {
            try IndexSignature.verify(index, signatures: sig, trusted: [other.publicKey])
        }
        var edited = index
        edited[edited.startIndex + 11] = UInt8(ascii: "2")
        #expect(throws: SigningError.invalidSignature(keyID: trusted.publicKey.keyID)) {
            try IndexSignature.verify(edited, signatures: sig, trusted: [trusted.publicKey])
        }
        // Two signatures during a rotation: either key alone is enough.
        let both = try IndexSignature.sign(index, with: [other, trusted])
        #expect(
            try IndexSignature.verify(index, signatures: both, trusted: [trusted.publicKey]) == trusted.publicKey.keyID)
    }

    @Test func keyFilesRoundTrip() throws {
        let key = PrivateKey()
        let privateData = try ManifestCoding.encode(KeyFile(private: key))
        let publicData = try ManifestCoding.encode(KeyFile(public: key.publicKey))
        #expect(try KeyFile.privateKey(from: privateData, path: "k").publicKey == key.publicKey)
        #expect(try KeyFile.publicKey(from: publicData, path: "p") == key.publicKey)
        #expect(try KeyFile.publicKey(from: privateData, path: "k") == key.publicKey)
        #expect(throws: SigningError.self) { try KeyFile.privateKey(from: publicData, path: "p") }
        #expect(throws: SigningError.self) { try KeyFile.publicKey(from: Data("garbage".utf8), path: "g") }
        #expect(key.publicKey.keyID.count == 16)
    }
}
