import Foundation

/// One file of a package version.
package struct FileEntry: Codable, Sendable, Equatable {
    /// The file's path inside the package.
    package var path: RelativePath
    /// The file's exact length in bytes.
    package var size: Int64
    /// SHA-256 of the file's bytes.
    package var sha256: SHA256Digest
    /// Optional MIME type overriding the resolver's table.
    package var mime: String?
    /// The size of this content's object (gzip) in the repository, for a device to weigh
    /// objects against the bundle by what they really cost; absent in older lists.
    package var packed: Int64?
    /// In the list of an encrypted version: the SHA-256 of this content's sealed object, which
    /// is its name in the repository (`objects/<aa>/<sealed>`, `packed` bytes). Absent otherwise.
    package var sealed: SHA256Digest?

    /// Creates an entry.
    package init(
        path: RelativePath, size: Int64, sha256: SHA256Digest, mime: String? = nil, packed: Int64? = nil,
        sealed: SHA256Digest? = nil
    ) {
        self.path = path
        self.size = size
        self.sha256 = sha256
        self.mime = mime
        self.packed = packed
        self.sealed = sealed
    }

    enum CodingKeys: String, CodingKey { case path, size, sha256, mime, packed, sealed }

    /// The digest the object of this content is named by: its sealed form's in an encrypted
    /// version, else the content's own.
    package var objectName: SHA256Digest { sealed ?? sha256 }

    /// What fetching this content as an object costs in bytes: its object's size when the list
    /// says it, else its own size (an upper bound for all but incompressible contents).
    package var objectCost: Int64 { packed ?? size }

    /// The entry without its object's name and size (`sealed`, `packed`): what a delta of an
    /// encrypted version checks the list it builds by (manifests §16), the rest being the
    /// content itself.
    package var contentOnly: FileEntry { FileEntry(path: path, size: size, sha256: sha256, mime: mime) }

    /// Decodes an entry, refusing a size outside `0...maxDeclaredSize` and a `mime` that is not a
    /// media type.
    package init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        path = try c.decode(RelativePath.self, forKey: .path)
        size = try c.decode(Int64.self, forKey: .size)
        sha256 = try c.decode(SHA256Digest.self, forKey: .sha256)
        mime = try c.decodeIfPresent(String.self, forKey: .mime)
        packed = try c.decodeIfPresent(Int64.self, forKey: .packed)
        sealed = try c.decodeIfPresent(SHA256Digest.self, forKey: .sealed)
        try Self.check(size: size, mime: mime, c, sizeKey: .size, mimeKey: .mime)
        if let p = packed, p < 0 || p > maxDeclaredSize + maxDeclaredSize / 64 + 1024 {
            throw DecodingError.dataCorruptedError(
                forKey: .packed, in: c, debugDescription: "packed size \(p) is outside the possible range")
        }
    }

    /// Refuses a size outside `0...maxDeclaredSize` and a `mime` that is not a media type (the
    /// checks of every decoded file entry, here and in `ServingList`).
    static func check<K: CodingKey>(
        size: Int64, mime: String?, _ c: KeyedDecodingContainer<K>, sizeKey: K, mimeKey: K
    ) throws {
        if size < 0 || size > maxDeclaredSize {
            throw DecodingError.dataCorruptedError(
                forKey: sizeKey, in: c, debugDescription: "size \(size) is outside 0...\(maxDeclaredSize)")
        }
        if let m = mime, !isMediaType(m) {
            throw DecodingError.dataCorruptedError(
                forKey: mimeKey, in: c,
                debugDescription:
                    "\(quoted(m)) is not a media type (type/subtype, optional ;parameters, printable ASCII)")
        }
    }

    /// `type/subtype` of RFC 6838 token characters, optionally followed by `; parameters` of
    /// printable ASCII; no control characters, so it can never split a header line.
    static func isMediaType(_ s: String) -> Bool {
        let u = Array(s.utf8)
        guard !u.isEmpty, u.count <= 255, u.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else { return false }
        let head = u.split(separator: UInt8(ascii: ";"), maxSplits: 1, omittingEmptySubsequences: false)[0]
        let parts = head.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        func token(_ t: ArraySlice<UInt8>) -> Bool {
            !t.isEmpty
                && t.allSatisfy { c in
                    (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A)
                        || Array("!#$&^_.+-".utf8).contains(c)
                }
        }
        return parts.count == 2 && token(parts[0]) && token(parts[1])
    }
}

/// `packages/<id>/<version>/files.json`: every file of a version, sorted by path bytes.
package struct FileList: Codable, Sendable, Equatable, RepositoryDocument {
    /// The document's format version; `ManifestCoding.decode` refuses any but `currentSchemaVersion`.
    package var schemaVersion: Int
    /// The package this list belongs to.
    package var id: PackageID
    /// The version whose files this lists.
    package var version: SemanticVersion
    /// Every file of the version, sorted by path in UTF-8 byte order.
    package var files: [FileEntry]

    /// Creates a file list; `files` is sorted by path.
    package init(schemaVersion: Int = currentSchemaVersion, id: PackageID, version: SemanticVersion, files: [FileEntry])
    {
        self.schemaVersion = schemaVersion
        self.id = id
        self.version = version
        self.files = files.sorted { $0.path < $1.path }
    }

    enum CodingKeys: String, CodingKey { case schemaVersion, id, version, files }

    /// The list with every entry's object name and size left out (`FileEntry.contentOnly`).
    package var contentOnly: FileList {
        var list = self
        list.files = files.map(\.contentOnly)
        return list
    }

    /// Decodes a list and checks it as a whole: paths strictly increasing in byte order (so no
    /// duplicates), and no two that a case- or normalisation-insensitive file system would merge.
    package init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        schemaVersion = try c.decode(Int.self, forKey: .schemaVersion)
        id = try c.decode(PackageID.self, forKey: .id)
        version = try c.decode(SemanticVersion.self, forKey: .version)
        // Decoded into an array of the right size (an array grown by doubling held up to twice
        // the entries: 1 MB more for a 20,000-file list, kept while its version is placed).
        var u = try c.nestedUnkeyedContainer(forKey: .files)
        if let n = u.count, n > 1_000_000 {
            throw DecodingError.dataCorruptedError(
                forKey: .files, in: c, debugDescription: "\(n) files is beyond any limit")
        }
        var decoded: [FileEntry] = []
        // At most what a version may hold: a document claiming more elements than it has valid
        // entries reserves no more than that.
        decoded.reserveCapacity(min(u.count ?? 0, TreeLimits.standard.maxFiles))
        while !u.isAtEnd { decoded.append(try u.decode(FileEntry.self)) }
        files = decoded
        var keys: [String: String] = [:]
        keys.reserveCapacity(files.count)
        for (i, f) in files.enumerated() {
            if i > 0, !(files[i - 1].path < f.path) {
                throw DecodingError.dataCorruptedError(
                    forKey: .files, in: c,
                    debugDescription:
                        "\(quoted(f.path)) is out of order or repeated (paths are sorted by UTF-8 bytes, each once)")
            }
            if let other = keys.updateValue(f.path.string, forKey: f.path.collisionKey) {
                throw DecodingError.dataCorruptedError(
                    forKey: .files, in: c,
                    debugDescription: "\(quoted(f.path)) and \(quoted(other)) differ only by case or normalisation")
            }
        }
    }

    /// Sum of the file sizes.
    package var totalSize: Int64 { files.reduce(0) { $0 + $1.size } }

    /// How a tree (as listed by reading it) differs from this list, in list order then extras.
    package func differences(from actual: [FileEntry]) -> [FileDifference] {
        let have = Dictionary(actual.map { ($0.path, $0) }, uniquingKeysWith: { a, _ in a })
        let want = Set(files.map(\.path))
        var out: [FileDifference] = []
        for f in files {
            guard let got = have[f.path] else {
                out.append(.missing(f))
                continue
            }
            if got.size != f.size || got.sha256 != f.sha256 { out.append(.differs(listed: f, actual: got)) }
        }
        for f in actual where !want.contains(f.path) { out.append(.extra(f)) }
        return out
    }
}

/// One way a tree differs from its file list.
package enum FileDifference: Sendable, Equatable {
    /// Listed but absent.
    case missing(FileEntry)
    /// Present but not listed.
    case extra(FileEntry)
    /// Present with another size or SHA-256.
    case differs(listed: FileEntry, actual: FileEntry)

    /// The path concerned.
    package var path: RelativePath {
        switch self {
        case .missing(let f), .extra(let f): f.path
        case .differs(let l, _): l.path
        }
    }
}
