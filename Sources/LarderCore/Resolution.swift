import Foundation

/// What a URL resolves to.
public enum Resolution: Sendable, Equatable {
    /// Served from the sandbox.
    case local(LocalFile)
    /// Let the request go to the network.
    case passthrough(reason: String)
    /// Inside a package's routes, no such file, and the policy forbids the network.
    case notFound(reason: String)
}

/// A file that serves a URL.
///
/// Its values live in one shared immutable object, so that a copy (every resolution returns
/// one) retains one reference rather than each string and array; setting a value gives the file
/// an object of its own.
public struct LocalFile: Sendable, Equatable {
    /// The shared values.
    private var storage: Storage

    /// The package that serves the file.
    public var package: PackageID {
        get { storage.fields.package }
        set { update { $0.package = newValue } }
    }
    /// The version of the package the file belongs to.
    public var version: SemanticVersion {
        get { storage.fields.version }
        set { update { $0.version = newValue } }
    }
    /// The path inside the package.
    public var path: RelativePath {
        get { storage.fields.path }
        set { update { $0.path = newValue } }
    }
    /// The Content-Type to send: the file list's `mime`, else the type for the path's extension.
    public var mime: String {
        get { storage.fields.mime }
        set { update { $0.mime = newValue } }
    }
    /// The file's size in bytes, from its file list.
    public var length: Int64 {
        get { storage.fields.length }
        set { update { $0.length = newValue } }
    }
    /// The file's SHA-256 from its file list (quoted for the header).
    public var etag: String {
        get { storage.fields.etag }
        set { update { $0.etag = newValue } }
    }

    /// Creates one (the route table makes them from file lists; tests and fuzzers make their own).
    public init(
        package: PackageID, version: SemanticVersion, path: RelativePath, mime: String, length: Int64, etag: String
    ) {
        storage = Storage(
            Fields(package: package, version: version, path: path, mime: mime, length: length, etag: etag))
    }

    /// Whether both name the same file with the same values.
    public static func == (a: LocalFile, b: LocalFile) -> Bool {
        a.storage === b.storage || a.storage.fields == b.storage.fields
    }

    /// Replaces the shared values with changed ones of this file's own.
    private mutating func update(_ change: (inout Fields) -> Void) {
        var fields = storage.fields
        change(&fields)
        storage = Storage(fields)
    }

    /// The values of a file.
    private struct Fields: Sendable, Equatable {
        var package: PackageID
        var version: SemanticVersion
        var path: RelativePath
        var mime: String
        var length: Int64
        var etag: String
    }

    /// One immutable set of values, shared by copies of a file.
    private final class Storage: Sendable {
        let fields: Fields

        init(_ fields: Fields) { self.fields = fields }
    }
}

extension LocalFile: CustomReflectable {
    /// The values as the fields they were before they were shared (for `dump`, test messages
    /// and `String(describing:)`).
    public var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "package": package, "version": version, "path": path, "mime": mime, "length": length, "etag": etag,
            ], displayStyle: .struct)
    }
}
