import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// Bundles are byte-identical only when every machine writes zip timestamps in the same zone
// (libarchive uses local time for the DOS field); the CLI always packs in UTC.
setenv("TZ", "UTC0", 1)
tzset()
LarderCommand.main()
