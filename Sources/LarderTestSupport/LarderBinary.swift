import Foundation

/// The built `larder` executable, for tests that run the CLI as a user would.
package enum LarderBinary {
    /// Where it is, or why it could not be found. Looked up once: `$LARDER_BIN`; next to the test
    /// bundle (the build products directory); then `<package>/.build*/**/debug/larder`, the most
    /// recently built one.
    package static let location: Result<URL, TestSupportError> = locate()

    /// The executable, or an error naming where it was looked for.
    package static func url() throws -> URL { try location.get() }

    /// Runs `larder` with `arguments`.
    @discardableResult
    package static func run(
        _ arguments: [String], cwd: URL? = nil, timeout: TimeInterval = 60, environment: [String: String] = [:]
    ) throws -> RunResult {
        try runProcess(try url(), arguments, cwd: cwd, timeout: timeout, environment: environment)
    }

    private static func isExecutable(_ url: URL) -> Bool {
        var st = stat()
        guard stat(url.path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return false }
        return access(url.path, X_OK) == 0
    }

    private static func modificationTime(_ url: URL) -> Date {
        (try? FileManager.default.attributesOfItem(atPath: url.path)[.modificationDate] as? Date) ?? .distantPast
    }

    private static func locate() -> Result<URL, TestSupportError> {
        var tried: [String] = []
        if let env = ProcessInfo.processInfo.environment["LARDER_BIN"], !env.isEmpty {
            let url = URL(fileURLWithPath: env)
            if isExecutable(url) { return .success(url) }
            return .failure(TestSupportError("LARDER_BIN=\(env) is not an executable file"))
        }
        // The xctest bundle (an executable on Linux, a directory on macOS) sits in the products dir.
        var productDirs: [URL] = []
        let arg0 = URL(fileURLWithPath: CommandLine.arguments[0]).standardizedFileURL
        productDirs.append(arg0.deletingLastPathComponent())
        let bundle = Bundle.main.bundleURL.standardizedFileURL
        productDirs.append(bundle)
        productDirs.append(bundle.deletingLastPathComponent())
        for b in Bundle.allBundles where b.bundleURL.pathExtension == "xctest" {
            productDirs.append(b.bundleURL.deletingLastPathComponent())
        }
        // macOS: <products>/X.xctest/Contents/MacOS/X.
        var walk = arg0
        for _ in 0..<4 {
            walk = walk.deletingLastPathComponent()
            if walk.pathExtension == "xctest" { productDirs.append(walk.deletingLastPathComponent()) }
        }
        for dir in productDirs {
            let candidate = dir.appendingPathComponent("larder")
            tried.append(candidate.path)
            if isExecutable(candidate) { return .success(candidate) }
        }
        // Fallback: any scratch directory of this package.
        var found: [URL] = []
        let fm = FileManager.default
        let root = TestPaths.packageRoot
        if let scratch = try? fm.contentsOfDirectory(atPath: root.path) {
            for s in scratch where s.hasPrefix(".build") {
                let base = root.appendingPathComponent(s)
                var candidates = [base.appendingPathComponent("debug/larder")]
                if let triples = try? fm.contentsOfDirectory(atPath: base.path) {
                    candidates += triples.map { base.appendingPathComponent("\($0)/debug/larder") }
                }
                for c in candidates {
                    tried.append(c.path)
                    if isExecutable(c) { found.append(c) }
                }
            }
        }
        if let newest = found.max(by: { modificationTime($0) < modificationTime($1) }) { return .success(newest) }
        return .failure(
            TestSupportError(
                "the larder executable was not found; build it first (swift build) or set LARDER_BIN. Looked at: "
                    + tried.joined(separator: ", ")))
    }
}
