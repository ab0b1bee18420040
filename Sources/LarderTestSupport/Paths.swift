import Foundation

/// A failure of the test support itself (a missing binary, a tool that failed, a timeout). A test
/// that throws it fails with this message.
public struct TestSupportError: Error, CustomStringConvertible {
    /// What went wrong.
    public let description: String

    /// Creates an error with `description`.
    public init(_ description: String) { self.description = description }
}

/// Where the package's own files are, found from this file's path
/// (`<root>/Sources/LarderTestSupport/Paths.swift`).
public enum TestPaths {
    /// The package root.
    public static let packageRoot: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// `Examples/sample-app`, the web app most tests pack.
    public static let sampleApp: URL = packageRoot.appendingPathComponent("Examples/sample-app")
}
