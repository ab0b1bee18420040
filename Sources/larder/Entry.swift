import ArgumentParser
import Logging

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
        // The async `main` (the synchronous overload would refuse the async subcommands).
        let run: () async -> Void = LarderCommand.main
        await run()
    }
}
