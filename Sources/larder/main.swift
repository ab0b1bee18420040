import Foundation
import Logging

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// Bundles are byte-identical only when every machine writes zip timestamps in the same zone
// (libarchive uses local time for the DOS field); the CLI always packs in UTC.
setenv("TZ", "UTC0", 1)
tzset()
// Library log messages go to stderr; notices and above (e.g. an interrupted publication
// completed) are shown, routine detail is not.
LoggingSystem.bootstrap { label in
    var handler = StreamLogHandler.standardError(label: label)
    handler.logLevel = .notice
    return handler
}
LarderCommand.main()
