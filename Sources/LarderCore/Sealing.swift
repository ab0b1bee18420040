import Crypto
import Foundation

/// Why sealed bytes could not be opened, or a content key unwrapped.
package enum SealError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The header is not a sealed blob's (magic, version or segment size).
    case header(String)
    /// Segment `n` does not open with this key (tampered, reordered, or another key's).
    case segment(Int)
    /// The bytes end before the last segment.
    case truncated
    /// Bytes follow the last segment.
    case trailing
    /// No wrapped key is for this recipient (its key id is named).
    case noRecipient(String)
    /// The wrapped key for this recipient does not open with its private key.
    case wrongKey(String)
    /// A padded blob's length field or padding is not what padding writes.
    case padding(String)

    /// What was wrong, for a person.
    package var description: String {
        switch self {
        case .header(let why): "not a sealed blob: \(why)"
        case .segment(let n): "segment \(n) does not open with the content key (tampered, reordered or another key's)"
        case .truncated: "the sealed blob ends before its last segment"
        case .trailing: "bytes follow the sealed blob's last segment"
        case .noRecipient(let id): "no content key is wrapped for recipient \(id)"
        case .wrongKey(let id): "the content key wrapped for recipient \(id) does not open with its private key"
        case .padding(let why): "the sealed blob's padding is malformed: \(why)"
        }
    }
}

/// Segmented authenticated encryption: the sealed form of an encrypted version's blobs
/// (manifests §16). A sealed blob is a 16-byte header — `LRDE`, version 1, the segment size's power of
/// two, a random 7-byte nonce prefix, 3 zero bytes — then the content in segments of that size
/// (the last one shorter, or empty for empty content), each sealed with ChaCha20-Poly1305 and
/// followed by its 16-byte tag. A segment's nonce is the prefix, its number (4 bytes, big
/// endian) and 1 for the last segment, else 0 (the STREAM construction), and it authenticates
/// the header and the caller's associated data: a segment moved, dropped, or taken from another
/// blob or key does not open, nor does a blob cut at a segment's end. Segments are opened one by
/// one as bytes arrive, each authenticated before its content is handed on. A version 2 header
/// has flags in byte 13 (`SealHeader`): a padded content, an object key derived from the prefix.
package enum SegmentedSeal {
    static let magic: [UInt8] = Array("LRDE".utf8)
    /// The newest header version this build reads and writes (it reads 1 too, and writes 1 when
    /// no flag is set).
    package static let version: UInt8 = 2
    /// The header's size.
    package static let headerSize = 16
    /// A segment's tag.
    package static let tagSize = 16
    /// 64 KiB segments.
    package static let defaultSegmentShift = 16

    /// The size of `content` bytes sealed in segments of 2^`segmentShift` bytes.
    package static func sealedSize(_ content: Int64, segmentShift: Int = defaultSegmentShift) -> Int64 {
        let size = Int64(1) << segmentShift
        return Int64(headerSize) + content + Int64(tagSize) * max(1, (content + size - 1) / size)
    }

    /// `content` sealed with `key`; `prefix` (7 bytes) is random unless given (objects, tests).
    /// With `SealHeader.paddedFlag` in `flags`, the content is sealed after its length field and
    /// followed by zeros up to `paddedContentSize`.
    package static func seal(
        _ content: Data, key: SymmetricKey, associated: Data, segmentShift: Int = defaultSegmentShift,
        prefix: [UInt8]? = nil, flags: UInt8 = 0
    ) throws -> Data {
        precondition((10...24).contains(segmentShift), "segments of 1 KiB to 16 MiB")
        let noncePrefix = prefix ?? (0..<7).map { _ in UInt8.random(in: 0...255) }
        precondition(noncePrefix.count == 7, "a 7-byte nonce prefix")
        let header = SealHeader(segmentShift: segmentShift, prefix: noncePrefix, flags: flags).bytes
        var content = content
        if flags & SealHeader.paddedFlag != 0 {
            let stored = Int64(content.count)
            let zeros = paddedContentSize(stored, segmentShift: segmentShift) - lengthFieldSize - stored
            content = lengthField(stored) + content + Data(count: Int(zeros))
        }
        let size = 1 << segmentShift
        var out = header
        out.reserveCapacity(header.count + content.count + (content.count / size + 1) * tagSize)
        var start = content.startIndex
        var n: UInt32 = 0
        repeat {
            let end = min(start + size, content.endIndex)
            let last = end == content.endIndex
            let box = try ChaChaPoly.seal(
                content[start..<end], using: key, nonce: nonce(noncePrefix, n, last: last),
                authenticating: header + associated)
            out += box.ciphertext
            out += box.tag
            start = end
            n += 1
        } while start < content.endIndex
        return out
    }

    static func nonce(_ prefix: [UInt8], _ n: UInt32, last: Bool) throws -> ChaChaPoly.Nonce {
        let counter = [UInt8(n >> 24 & 0xFF), UInt8(n >> 16 & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n & 0xFF)]
        return try ChaChaPoly.Nonce(data: prefix + counter + [last ? 1 : 0])
    }

    /// Seals content fed in pieces: the header first, then each segment once a byte after it
    /// has arrived (so the last one is known), then the last one at `finish`. The same bytes as
    /// `seal` of the whole content with the same prefix and flags.
    package struct Sealer {
        let key: SymmetricKey
        let associated: Data
        let prefix: [UInt8]
        let segmentSize: Int
        let segmentShift: Int
        /// The 16-byte header, written before the first segment.
        package let header: Data
        /// A padded sealer's stored length (its length field), nil when not padded.
        let padded: Int64?
        var fed: Int64 = 0
        var buffer = Data()
        var next: UInt32 = 0

        /// A sealer with a random nonce prefix unless one is given (objects, tests). A padded one
        /// (`paddedLength`: the stored form's length, which must be what is fed) writes the length
        /// field first and Padmé zeros at `finish`.
        package init(
            key: SymmetricKey, associated: Data, segmentShift: Int = defaultSegmentShift, prefix: [UInt8]? = nil,
            flags: UInt8 = 0, paddedLength: Int64? = nil
        ) {
            precondition((10...24).contains(segmentShift), "segments of 1 KiB to 16 MiB")
            self.key = key
            self.associated = associated
            self.prefix = prefix ?? (0..<7).map { _ in UInt8.random(in: 0...255) }
            precondition(self.prefix.count == 7, "a 7-byte nonce prefix")
            segmentSize = 1 << segmentShift
            self.segmentShift = segmentShift
            padded = paddedLength
            let allFlags = flags | (paddedLength == nil ? 0 : SealHeader.paddedFlag)
            header = SealHeader(segmentShift: segmentShift, prefix: self.prefix, flags: allFlags).bytes
            if let paddedLength { buffer = lengthField(paddedLength) }
        }

        /// Takes content; returns the sealed segments it completed.
        package mutating func feed(_ content: Data) throws -> Data {
            fed += Int64(content.count)
            return try sealFull(content)
        }

        mutating func sealFull(_ content: Data) throws -> Data {
            buffer += content
            var out = Data()
            while buffer.count > segmentSize {
                out += try sealSegment(buffer.prefix(segmentSize), last: false)
                buffer.removeFirst(segmentSize)
            }
            return out
        }

        /// The last segment (empty when the content ended at a segment's end, or was empty),
        /// after the padding's segments when padded.
        package mutating func finish() throws -> Data {
            var out = Data()
            try finish { out += $0 }
            return out
        }

        /// Hands `emit` the padding's segments (when padded), then the last segment.
        package mutating func finish(_ emit: (Data) throws -> Void) throws {
            if let padded {
                guard fed == padded else { throw SealError.padding("\(fed) bytes fed, \(padded) declared") }
                var zeros = paddedContentSize(padded, segmentShift: segmentShift) - lengthFieldSize - padded
                while zeros > 0 {
                    let k = min(zeros, Int64(4 * segmentSize))
                    try emit(try sealFull(Data(count: Int(k))))
                    zeros -= k
                }
            }
            let out = try sealSegment(buffer, last: true)
            buffer = Data()
            try emit(out)
        }

        mutating func sealSegment(_ content: Data, last: Bool) throws -> Data {
            let box = try ChaChaPoly.seal(
                content, using: key, nonce: try nonce(prefix, next, last: last), authenticating: header + associated)
            next += 1
            return box.ciphertext + box.tag
        }
    }

    /// Opens a sealed blob fed in pieces: each complete segment is authenticated, then its
    /// content handed on. A segment wholly inside the bytes fed is opened from them; only one
    /// that spans two feeds waits in a buffer (at most a segment).
    package final class Opener {
        /// The key segments open with, known once the header is (it may depend on the header).
        var key: SymmetricKey?
        let keyFor: (SealHeader) throws(SealError) -> SymmetricKey
        let associated: Data
        /// Strips a padded blob's length field and padding.
        var unpadder: Unpadder?
        /// The header while it arrives, then a segment while it does.
        var buffer: [UInt8] = []
        /// The header and the associated data: what every segment authenticates.
        var authenticated = Data()
        var prefix: [UInt8] = []
        var segmentSize = 0
        var next: UInt32 = 0
        var ended = false
        var haveHeader = false

        /// An opener for blobs sealed with `key` and `associated` (a blob whose header says its
        /// key is derived does not open).
        package init(key: SymmetricKey, associated: Data) {
            keyFor = { (h: SealHeader) throws(SealError) -> SymmetricKey in
                guard !h.derivedKey else { throw .header("a derived key where none is used") }
                return key
            }
            self.associated = associated
        }

        /// An opener whose key `keyFor` gives from the header (a sealed object's).
        package init(associated: Data, keyFor: @escaping (SealHeader) throws(SealError) -> SymmetricKey) {
            self.keyFor = keyFor
            self.associated = associated
        }

        /// Hands `opened` a segment's content, stripped of a padded blob's length and padding.
        private func hand(_ content: Data, _ opened: (Data) throws(SealError) -> Void) throws(SealError) {
            guard unpadder != nil else { return try opened(content) }
            let stored = try unpadder?.take(content) ?? content
            if !stored.isEmpty { try opened(stored) }
        }

        /// Takes more sealed bytes; returns the content of the segments they completed (a
        /// segment is known not to be the last once a byte after it has arrived).
        package func feed(_ bytes: Data) throws(SealError) -> Data {
            var out = Data()
            let fed: Result<Void, SealError> = bytes.withUnsafeBytes { raw in
                Result { () throws(SealError) in try feed(raw) { out += $0 } }
            }
            try fed.get()
            return out
        }

        /// Takes more sealed bytes, handing `opened` the content of each segment they completed,
        /// in order.
        package func feed(_ bytes: UnsafeRawBufferPointer, _ opened: (Data) throws(SealError) -> Void)
            throws(SealError)
        {
            if ended, !bytes.isEmpty { throw .trailing }
            var rest = bytes[...]
            if !haveHeader {
                let take = min(rest.count, SegmentedSeal.headerSize - buffer.count)
                buffer.append(contentsOf: rest.prefix(take))
                rest = rest.dropFirst(take)
                try readHeader()
                guard haveHeader else { return }
            }
            let sealed = segmentSize + SegmentedSeal.tagSize
            if !buffer.isEmpty {
                // A segment begun in an earlier feed: completed, and opened once a byte follows it.
                let take = min(rest.count, sealed - buffer.count)
                buffer.append(contentsOf: rest.prefix(take))
                rest = rest.dropFirst(take)
                guard !rest.isEmpty else { return }
                try hand(try openBuffer(last: false), opened)
                buffer.removeAll(keepingCapacity: true)
            }
            while rest.count > sealed {
                try hand(openSegment(UnsafeRawBufferPointer(rebasing: rest.prefix(sealed)), last: false), opened)
                rest = rest.dropFirst(sealed)
            }
            buffer.append(contentsOf: rest)
        }

        /// Ends the input: opens the last segment, which must be all that is left.
        package func finish() throws(SealError) -> Data {
            var out = Data()
            try finish { out += $0 }
            return out
        }

        /// Ends the input: hands `opened` the last segment's content, which must be all that is left.
        package func finish(_ opened: (Data) throws(SealError) -> Void) throws(SealError) {
            if ended { return }
            guard haveHeader, buffer.count >= SegmentedSeal.tagSize else { throw .truncated }
            guard buffer.count <= segmentSize + SegmentedSeal.tagSize else { throw .trailing }
            let content = try openBuffer(last: true)
            buffer = []
            ended = true
            try hand(content, opened)
            try unpadder?.finish()
        }

        /// Opens the segment held in the buffer.
        private func openBuffer(last: Bool) throws(SealError) -> Data {
            let r: Result<Data, SealError> = buffer.withUnsafeBytes { raw in
                Result { () throws(SealError) in try openSegment(raw, last: last) }
            }
            return try r.get()
        }

        private func readHeader() throws(SealError) {
            guard !haveHeader, buffer.count >= SegmentedSeal.headerSize else { return }
            let bytes = buffer
            let header = try SealHeader(parsing: bytes)
            key = try keyFor(header)
            if header.padded { unpadder = Unpadder() }
            segmentSize = 1 << header.segmentShift
            prefix = header.prefix
            authenticated = Data(bytes) + associated
            haveHeader = true
            buffer.removeAll(keepingCapacity: true)
            buffer.reserveCapacity(segmentSize + SegmentedSeal.tagSize)
        }

        private func openSegment(_ sealed: UnsafeRawBufferPointer, last: Bool) throws(SealError) -> Data {
            let n = next
            guard let key else { throw .header("no key") }
            do {
                let box = try ChaChaPoly.SealedBox(
                    nonce: try SegmentedSeal.nonce(prefix, n, last: last),
                    ciphertext: sealed.prefix(sealed.count - SegmentedSeal.tagSize),
                    tag: sealed.suffix(SegmentedSeal.tagSize))
                let content = try ChaChaPoly.open(box, using: key, authenticating: authenticated)
                next += 1
                return content
            } catch {
                throw .segment(Int(n))
            }
        }
    }
}

/// A content key wrapped for one recipient with HPKE (RFC 9180: X25519, HKDF-SHA256,
/// ChaCha20-Poly1305, base mode).
package struct WrappedKey: Codable, Sendable, Equatable {
    /// The recipient's key id: the first 16 hex digits of the SHA-256 of its raw public key.
    package var keyId: String
    /// HPKE's encapsulated key, base64.
    package var enc: String
    /// The content key sealed to the recipient, base64.
    package var key: String

    /// Creates one.
    package init(keyId: String, enc: String, key: String) {
        self.keyId = keyId
        self.enc = enc
        self.key = key
    }
}

/// Content keys wrapped for recipients, and unwrapped by one.
package enum ContentKeys {
    static let suite = HPKE.Ciphersuite.Curve25519_SHA256_ChachaPoly

    /// A recipient key's id.
    package static func keyID(_ key: Curve25519.KeyAgreement.PublicKey) -> String {
        String(SHA256Digest.of(key.rawRepresentation).hex.prefix(16))
    }

    /// `key` wrapped for each recipient; `info` binds it to its use (a package and version).
    package static func wrap(
        _ key: SymmetricKey, to recipients: [Curve25519.KeyAgreement.PublicKey], info: Data
    ) throws -> [WrappedKey] {
        try recipients.map { r in
            var sender = try HPKE.Sender(recipientKey: r, ciphersuite: suite, info: info)
            let sealed = try key.withUnsafeBytes { try sender.seal(Data($0)) }
            return WrappedKey(
                keyId: keyID(r), enc: sender.encapsulatedKey.base64EncodedString(),
                key: sealed.base64EncodedString())
        }
    }

    /// The content key wrapped for `privateKey`'s public half.
    package static func unwrap(
        _ wrapped: [WrappedKey], with privateKey: Curve25519.KeyAgreement.PrivateKey, info: Data
    ) throws(SealError) -> SymmetricKey {
        let id = keyID(privateKey.publicKey)
        guard let mine = wrapped.first(where: { $0.keyId == id }) else { throw .noRecipient(id) }
        guard let enc = Data(base64Encoded: mine.enc), let sealed = Data(base64Encoded: mine.key) else {
            throw .wrongKey(id)
        }
        do {
            var recipient = try HPKE.Recipient(
                privateKey: privateKey, ciphersuite: suite, info: info, encapsulatedKey: enc)
            let bytes = try recipient.open(sealed)
            guard bytes.count == 32 else { throw SealError.wrongKey(id) }
            return SymmetricKey(data: bytes)
        } catch {
            throw .wrongKey(id)
        }
    }
}
