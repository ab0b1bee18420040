import ArgumentParser
import Foundation
import Larder
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
        // `larder --version` alone (see `LarderCommand`'s configuration for why not the root flag).
        if CommandLine.arguments.dropFirst().elementsEqual(["--version"]) {
            LarderCommand.ShowVersion.print()
            return
        }
        if let unknown = UnknownCommand(CommandLine.arguments.dropFirst().first) {
            for line in unknown.message { Output.diagnostic(line) }
            exit(64)
        }
        // The async `main` (the synchronous overload would refuse the async subcommands).
        let run: () async -> Void = LarderCommand.main
        await run()
    }
}

/// A first argument that names no subcommand (ArgumentParser would report the option after it as
/// unknown instead): the message names the command and the nearest one.
struct UnknownCommand {
    /// The lines to print.
    let message: [String]

    init?(_ argument: String?) {
        guard let argument, !argument.hasPrefix("-") else { return nil }
        let names =
            LarderCommand.configuration.subcommands.compactMap { $0.configuration.commandName } + ["help"]
        guard !names.contains(argument) else { return nil }
        let nearest = names.map { ($0, Self.distance(argument, $0)) }.min { $0.1 < $1.1 }
        var message = "Error: unknown command \(quoted(argument))."
        if let (name, d) = nearest, d <= max(2, argument.count / 3) { message += " Did you mean '\(name)'?" }
        self.message = [message, "See 'larder --help' for the commands."]
    }

    /// Levenshtein distance (a transposition costs 2; the names are short).
    static func distance(_ a: String, _ b: String) -> Int {
        let a = Array(a)
        let b = Array(b)
        var row = Array(0...b.count)
        for i in 1...max(a.count, 1) where !a.isEmpty {
            var previous = row[0]
            row[0] = i
            for j in stride(from: 1, through: b.count, by: 1) {
                let kept = row[j]
                row[j] = min(row[j] + 1, row[j - 1] + 1, previous + (a[i - 1] == b[j - 1] ? 0 : 1))
                previous = kept
            }
        }
        return row[b.count]
    }
}

/// The fault scripts' seam (`scripts/integration/crash-test.py`, `scripts/integration/io-faults.py`); unset — as anywhere but
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
        if let n = Environment["LARDER_CRASH_AT"].flatMap(Int.init), n >= 1,
            let root = Environment["LARDER_CRASH_ROOT"],
            root.hasPrefix("/")
        {
            scopes.append(FaultInjector.install(.crash(nth: n), under: FilePath(root)))
        }
        if let spec = Environment["LARDER_FAULT"], let root = Environment["LARDER_FAULT_ROOT"], root.hasPrefix("/") {
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

/// The process's environment, one variable at a time.
enum Environment {
    /// The value of `name`, by `getenv`: `ProcessInfo`'s `environment` copies every variable into
    /// a dictionary first, about 0.5 ms of the 10 ms `larder version` takes.
    static subscript(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }
    }
}
