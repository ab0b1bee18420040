import LarderCore
import SystemPackage

/// A failed system call on a path, with the errno that explains it.
public struct FileSystemError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What was being done (`open`, `create`, `write`, `fsync`, `rename`, …).
    public let operation: String
    /// The path involved (for a call on a descriptor, the path it was opened with).
    public let path: String
    /// The second path of a two-path call (where `rename` or `link` was going), else `nil`.
    public let destination: String?
    /// The system's reason.
    public let errno: Errno

    /// Creates an error.
    public init(_ operation: String, _ path: FilePath, _ errno: Errno) {
        self.operation = operation
        self.path = path.string
        self.destination = nil
        self.errno = errno
    }

    /// Creates an error of a two-path call (`rename`, `link`).
    public init(_ operation: String, _ path: FilePath, to destination: FilePath, _ errno: Errno) {
        self.operation = operation
        self.path = path.string
        self.destination = destination.string
        self.errno = errno
    }

    /// `<operation> <path>: <errno description>`, as in `rename /a/b: No such file or directory`;
    /// a two-path call names both (`rename /a → /b: …`), and a common errno adds what to do
    /// (`write /a: No space left on device (free space on that file system and try again)`).
    public var description: String {
        let paths = destination.map { "\(path) → \($0)" } ?? path
        let advice = Self.advice(for: errno).map { " (\($0))" } ?? ""
        return "\(operation) \(paths): \(errno)\(advice)"
    }

    /// What a person can do about the common errors of a file system.
    static func advice(for errno: Errno) -> String? {
        switch errno {
        case .noSpace: "free space on that file system and try again"
        case .diskQuotaExceeded: "the disk quota is used up; free space or raise it and try again"
        case .readOnlyFileSystem: "the file system is mounted read-only"
        case .ioError: "the device reported an I/O error; check the disk"
        case .permissionDenied, .notPermitted: "check the owner and permissions of the path"
        case .tooManyOpenFiles: "the process ran out of file descriptors; raise `ulimit -n`"
        default: nil
        }
    }
}
