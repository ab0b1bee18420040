import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import SystemPackage

/// One problem `verify` found. `code` is stable; `package`, `version` and `file` locate it.
package struct VerifyProblem: Sendable, Codable, Equatable, CustomStringConvertible {
    /// A stable machine-readable code, like `index-serial` or the archive reader's code.
    package var code: ReasonCode
    /// The package id concerned, if any.
    package var package: String?
    /// The version concerned (of `package`), if any.
    package var version: String?
    /// Repository-relative path of the document, or the path inside a bundle.
    package var file: String?
    /// What is wrong, in a sentence for a person.
    package var message: String

    /// Creates a problem.
    package init(code: ReasonCode, package: String? = nil, version: String? = nil, file: String? = nil, message: String)
    {
        self.code = code
        self.package = package
        self.version = version
        self.file = file
        self.message = message
    }

    /// `<package>@<version> <file>: [<code>] <message>`, leaving out the parts that are not known.
    package var description: String {
        var location: [String] = []
        if let p = package { location.append(version.map { "\(p)@\($0)" } ?? p) }
        if let f = file { location.append(f) }
        return (location.isEmpty ? "" : location.joined(separator: " ") + ": ") + "[\(code)] \(message)"
    }
}

/// The outcome of `verify`: every problem, and what was looked at.
package struct VerifyReport: Sendable, Codable, Equatable {
    /// `repository` or `bundle`.
    package var kind: String
    /// The repository root or bundle file verified.
    package var path: String
    /// The index's serial, once the index was read (repositories only).
    package var serial: UInt64?
    /// The id of the trusted key whose signature verified, when the signature was checked and valid.
    package var signedBy: String?
    /// Whether the index signature was checked (false with --skip-signature, and for bundles).
    package var signatureChecked = false
    /// Index entries checked (one per package and channel), or 1 for a bundle.
    package var packagesChecked: Int
    /// Files named by the file lists checked, or the files in the bundle.
    package var filesChecked: Int
    /// Delta manifests checked (repositories only).
    package var deltasChecked = 0
    /// Distinct objects checked (repositories only).
    package var objectsChecked: Int
    /// Shards of a sharded index checked (repositories only; 0 for an inline index).
    package var shardsChecked = 0
    /// In a delegated repository, the root version the chain was followed to.
    package var rootVersion: UInt64?
    /// In a delegated repository, the team parts checked.
    package var teamsChecked = 0
    /// Encrypted versions checked (repositories only).
    package var encryptedChecked = 0
    /// Of those, the ones opened with a recipient key and checked fully; the others were
    /// checked without the key (signatures, layout, sealed digests and headers).
    package var encryptedOpened = 0
    /// Every problem found, in the order found; empty when all is well.
    package var problems: [VerifyProblem]
    /// Whether nothing was found.
    package var ok: Bool { problems.isEmpty }

    /// An empty report: nothing checked, nothing found yet.
    package init(kind: String, path: String) {
        self.kind = kind
        self.path = path
        packagesChecked = 0
        filesChecked = 0
        objectsChecked = 0
        problems = []
    }

    enum CodingKeys: String, CodingKey {
        case kind, path, serial, signedBy, signatureChecked, packagesChecked, filesChecked, objectsChecked,
            shardsChecked, encryptedChecked, encryptedOpened, problems, ok
    }

    /// Encodes every field and `ok`, so the JSON output carries the verdict.
    package func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(kind, forKey: .kind)
        try c.encode(path, forKey: .path)
        try c.encodeIfPresent(serial, forKey: .serial)
        try c.encodeIfPresent(signedBy, forKey: .signedBy)
        try c.encode(signatureChecked, forKey: .signatureChecked)
        try c.encode(packagesChecked, forKey: .packagesChecked)
        try c.encode(filesChecked, forKey: .filesChecked)
        try c.encode(objectsChecked, forKey: .objectsChecked)
        if shardsChecked > 0 { try c.encode(shardsChecked, forKey: .shardsChecked) }
        if encryptedChecked > 0 {
            try c.encode(encryptedChecked, forKey: .encryptedChecked)
            try c.encode(encryptedOpened, forKey: .encryptedOpened)
        }
        try c.encode(problems, forKey: .problems)
        try c.encode(ok, forKey: .ok)
    }

    /// Decodes a report (`ok` follows from `problems`); a missing `signatureChecked` is false.
    package init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        kind = try c.decode(String.self, forKey: .kind)
        path = try c.decode(String.self, forKey: .path)
        serial = try c.decodeIfPresent(UInt64.self, forKey: .serial)
        signedBy = try c.decodeIfPresent(String.self, forKey: .signedBy)
        signatureChecked = try c.decodeIfPresent(Bool.self, forKey: .signatureChecked) ?? false
        packagesChecked = try c.decode(Int.self, forKey: .packagesChecked)
        filesChecked = try c.decode(Int.self, forKey: .filesChecked)
        objectsChecked = try c.decode(Int.self, forKey: .objectsChecked)
        shardsChecked = try c.decodeIfPresent(Int.self, forKey: .shardsChecked) ?? 0
        encryptedChecked = try c.decodeIfPresent(Int.self, forKey: .encryptedChecked) ?? 0
        encryptedOpened = try c.decodeIfPresent(Int.self, forKey: .encryptedOpened) ?? 0
        problems = try c.decode([VerifyProblem].self, forKey: .problems)
    }

}
