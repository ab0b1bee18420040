import Foundation

/// A failure of the test support itself (a missing binary, a tool that failed, a timeout). A test
/// that throws it fails with this message.
package struct TestSupportError: Error, CustomStringConvertible {
    /// What went wrong.
    package let description: String

    /// Creates an error with `description`.
    package init(_ description: String) { self.description = description }
}

/// Where the package's own files are, found from this file's path
/// (`<root>/Sources/LarderTestSupport/Paths.swift`).
package enum TestPaths {
    /// The package root.
    package static let packageRoot: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// `Examples/sample-app`, the web app most tests pack.
    package static let sampleApp: URL = packageRoot.appendingPathComponent("Examples/sample-app")
}
