import Foundation
import Logging

/// The test process's logging: library messages (a sync's notices, a fallback's warning) are
/// expected in the scenarios the suites drive, and printed among the results they read as
/// failures. Only errors are printed, unless `LARDER_TEST_LOG` names a level (`info`, `debug`, …).
/// Tests that check what the library logs pass their own `Logger` and are not affected.
package enum TestLogging {
    /// Bootstraps the process's logging once (the first temporary directory does).
    package static let quiet: Void = {
        let level = ProcessInfo.processInfo.environment["LARDER_TEST_LOG"].flatMap(Logger.Level.init(rawValue:))
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level ?? .error
            return handler
        }
    }()
}
