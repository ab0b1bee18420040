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
        TimeZoneSetting.pin()
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

/// The fault scripts' seam (`scripts/crash-test`, `scripts/io-faults`); unset — as anywhere but
/// in those scripts — it does nothing.
///
/// - `LARDER_CRASH_AT=N` with `LARDER_CRASH_ROOT=DIR`: the process kills itself (SIGKILL) just
///   before the Nth call that can change the disk under DIR (`Fault.crash`), after naming that
///   call on stderr.
/// - `LARDER_FAULT=KIND:N:ERRNO[:TIMES]` with `LARDER_FAULT_ROOT=DIR`: the Nth call of KIND (a
///   `SystemCall` name such as `fsync`, `rename`, `write`, `open`) under DIR, and the TIMES - 1
///   after it (default 1; `all`: every one from the Nth), fails with ERRNO (`EIO`, `ENOSPC`,
///   `EACCES`, `EROFS`, `EDQUOT`, `EPERM`, `EMFILE`), naming itself on stderr when it hits.
enum CrashPoint {
    nonisolated(unsafe) static var scopes: [FaultScope] = []

    static let errnos: [String: Errno] = [
        "EIO": .ioError, "ENOSPC": .noSpace, "EACCES": .permissionDenied, "EROFS": .readOnlyFileSystem,
        "EDQUOT": .diskQuotaExceeded, "EPERM": .notPermitted, "EMFILE": .tooManyOpenFiles,
    ]

    static func installFromEnvironment() {
        let env = ProcessInfo.processInfo.environment
        if let n = env["LARDER_CRASH_AT"].flatMap(Int.init), n >= 1, let root = env["LARDER_CRASH_ROOT"],
            root.hasPrefix("/")
        {
            scopes.append(FaultInjector.install(.crash(nth: n), under: FilePath(root)))
        }
        if let spec = env["LARDER_FAULT"], let root = env["LARDER_FAULT_ROOT"], root.hasPrefix("/") {
            let parts = spec.split(separator: ":").map(String.init)
            guard parts.count == 3 || parts.count == 4, let kind = SystemCall(rawValue: parts[0]),
                let n = Int(parts[1]), n >= 1, let errno = errnos[parts[2]]
            else {
                FileHandle.standardError.write(Data("larder: LARDER_FAULT=\(spec) is not KIND:N:ERRNO[:TIMES]\n".utf8))
                exit(2)
            }
            let times = parts.count == 4 ? (parts[3] == "all" ? Int.max : Int(parts[3]) ?? 1) : 1
            var fault = Fault.fail(kind: kind, nth: n, times: max(times, 1), errno: errno)
            fault.announced = true
            scopes.append(FaultInjector.install(fault, under: FilePath(root)))
        }
    }
}
