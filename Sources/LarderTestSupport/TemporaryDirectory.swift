import Foundation
import Testing

/// A fresh directory for one test, removed when the test ends.
///
/// Where: `$LARDER_TEST_TMPDIR`, else `/dev/shm` when it is a writable directory (a memory file
/// system: fsync and syncfs cost nothing there, which keeps the suites fast on a busy disk;
/// durability is the crash tests' business), else the system's temporary directory.
package struct TemporaryDirectory: Sendable {
    /// The directory (symlinks resolved).
    package let url: URL

    /// Its path.
    package var path: String { url.path }

    /// The base every temporary directory is made in.
    package static let base: URL = {
        if let dir = ProcessInfo.processInfo.environment["LARDER_TEST_TMPDIR"], !dir.isEmpty {
            return URL(fileURLWithPath: dir)
        }
        var isDir: ObjCBool = false
        if FileManager.default.fileExists(atPath: "/dev/shm", isDirectory: &isDir), isDir.boolValue,
            FileManager.default.isWritableFile(atPath: "/dev/shm")
        {
            return URL(fileURLWithPath: "/dev/shm")
        }
        return FileManager.default.temporaryDirectory
    }()

    /// Makes a new empty directory named `larder-<label>-<UUID>` under `base`.
    package init(_ label: String = "test") throws {
        TestLogging.quiet
        let dir = Self.base.appendingPathComponent("larder-\(label)-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        url = dir.resolvingSymlinksInPath()
    }

    /// A path inside the directory.
    package func appending(_ component: String) -> URL { url.appendingPathComponent(component) }

    /// Removes the directory and everything in it, including entries whose permissions or odd
    /// names upset FileManager.
    package func remove() {
        if (try? FileManager.default.removeItem(at: url)) == nil {
            _ = try? runProcess(URL(fileURLWithPath: "/bin/rm"), ["-rf", url.path], timeout: 30)
        }
    }

    /// The directory of the test running now, made by the `.temporaryDirectory` trait.
    @TaskLocal package static var current: TemporaryDirectory?

    /// The current test's directory; fails the test when it has no `.temporaryDirectory` trait.
    package static func forCurrentTest() throws -> TemporaryDirectory {
        guard let dir = current else { throw TestSupportError("this test has no .temporaryDirectory trait") }
        return dir
    }
}

/// Runs `body` with a fresh directory and removes it afterwards, whatever `body` does.
package func withTemporaryDirectory<T>(_ label: String = "test", _ body: (TemporaryDirectory) throws -> T) throws -> T {
    let dir = try TemporaryDirectory(label)
    defer { dir.remove() }
    return try body(dir)
}

/// The async form of `withTemporaryDirectory`.
package func withTemporaryDirectory<T>(
    _ label: String = "test", _ body: (TemporaryDirectory) async throws -> T
) async throws -> T {
    let dir = try TemporaryDirectory(label)
    defer { dir.remove() }
    return try await body(dir)
}

/// A trait that gives each test (each case of a parameterised test) its own temporary
/// directory, as `TemporaryDirectory.current`, and removes it when the test ends. On a suite it
/// applies to every test in it.
package struct TemporaryDirectoryTrait: TestTrait, SuiteTrait, TestScoping {
    let label: String

    /// On a suite, every test in it gets the trait.
    package var isRecursive: Bool { true }

    /// A scope for each test case only (not for a suite as a whole).
    package func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? {
        testCase == nil ? nil : self
    }

    /// Runs the test inside a fresh directory's scope.
    package func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        let dir = try TemporaryDirectory(label)
        defer { dir.remove() }
        try await TemporaryDirectory.$current.withValue(dir) { try await function() }
    }
}

extension Trait where Self == TemporaryDirectoryTrait {
    /// A fresh temporary directory per test, as `TemporaryDirectory.current`.
    package static var temporaryDirectory: Self { TemporaryDirectoryTrait(label: "test") }

    /// A fresh temporary directory per test named after `label`.
    package static func temporaryDirectory(_ label: String) -> Self { TemporaryDirectoryTrait(label: label) }
}
