import LarderCore
import SystemPackage

/// A failed system call on a path, with the errno that explains it.
public struct FileSystemError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What was being done (`open`, `write`, `fsync`, `rename`, …).
    public let operation: String
    /// The path involved.
    public let path: String
    /// The system's reason.
    public let errno: Errno

    /// Creates an error.
    public init(_ operation: String, _ path: FilePath, _ errno: Errno) {
        self.operation = operation
        self.path = path.string
        self.errno = errno
    }

    /// `<operation> <path>: <errno description>`, as in `rename /a/b: No such file or directory`.
    public var description: String { "\(operation) \(path): \(errno)" }
}
