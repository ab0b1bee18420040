import ArgumentParser
import Foundation
import LarderFileSystem
import Logging
import SystemPackage

/// The process entry point: logging to stderr, then the async command tree.
@main
enum Entry {
    static func main() async {
        Allocator.tune()
        // Library log messages go to stderr; notices and above (e.g. an interrupted publication
        // completed) are shown, routine detail is not.
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = .notice
            return handler
        }
        CrashPoint.installFromEnvironment()
        // The async `main` (the synchronous overload would refuse the async subcommands).
        let run: () async -> Void = LarderCommand.main
        await run()
    }
}

/// The crash tests' seam (`scripts/crash-test`): with `LARDER_CRASH_AT=N` and
/// `LARDER_CRASH_ROOT=DIR` in the environment, the process kills itself (SIGKILL) just before
/// the Nth call that can change the disk under DIR (`Fault.crash`), after naming that call on
/// stderr. Unset — as anywhere but in those tests — it does nothing.
enum CrashPoint {
    nonisolated(unsafe) static var scope: FaultScope?

    static func installFromEnvironment() {
        let env = ProcessInfo.processInfo.environment
        guard let n = env["LARDER_CRASH_AT"].flatMap(Int.init), n >= 1, let root = env["LARDER_CRASH_ROOT"],
            root.hasPrefix("/")
        else { return }
        scope = FaultInjector.install(.crash(nth: n), under: FilePath(root))
    }
}
