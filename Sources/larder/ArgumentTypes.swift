import ArgumentParser
import Larder
import SystemPackage

// The types the options parse into, with their `ExpressibleByArgument` conformances in one place
// (the CLI's: the library modules do not depend on ArgumentParser). A value that does not parse is
// a usage error (exit 64): "The value 'X' is invalid for '--option <NAME>'", then the option's help
// line, which says what is expected.
//
// Options stay `String` where the text is free (a reason, a salt, a scheme name), or where the
// library reads and refuses it with a coded error of its own (exit 1, also as a JSON document):
// `pack --id/--version/--channel/--route/--depends/--min-client-version`, `install --id/--version`,
// `revoke ID VERSION`, `rollback --to`, `init --repo`.

/// A file or directory option (`--root DIR`, `--key KEY`, …): any text names a path, taken as given.
// Retroactive (swift-system's type, ArgumentParser's protocol), and safe here: ArgumentParser does
// not depend on swift-system, so neither can add this conformance, and an executable has no clients
// that could declare a second one.
// swift-format-ignore: AvoidRetroactiveConformances
extension FilePath: @retroactive ExpressibleByArgument {
    /// The path `argument` spells.
    public init?(argument: String) { self.init(argument) }

    /// Completed as a file name.
    public static var defaultCompletionKind: CompletionKind { .file() }
}

/// `sync --package ID`: a package id, `[a-z0-9][a-z0-9._-]{0,63}`.
extension PackageID: ExpressibleByArgument {
    /// The id `argument` spells, or nil when it is not one.
    public init?(argument: String) { self.init(argument) }
}

/// `init --app-version`, `sync --app-version`: a SemVer 2.0.0 version.
extension SemanticVersion: ExpressibleByArgument {
    /// The version `argument` spells, or nil when it is not SemVer 2.0.0.
    public init?(argument: String) { self.init(argument) }
}

/// `pack --policy`: `local-then-network` or `local-only`.
extension PolicyMode: ExpressibleByArgument {}

/// `sync --progress`: `auto`, `json` or `none`.
extension ProgressMode: ExpressibleByArgument {}

/// `serve --upstream-scheme`: how requests no package serves are forwarded.
enum UpstreamScheme: String, CaseIterable, ExpressibleByArgument {
    /// Production origins.
    case https
    /// Plain http (test origins on loopback).
    case http
}

/// `serve --listen`: a loopback address (127.0.0.1, ::1 or localhost) and a port (0: any free one).
struct ListenAddress: ExpressibleByArgument, Equatable, CustomStringConvertible {
    /// `127.0.0.1`, `::1` or `localhost`.
    let host: String
    /// 0...65535.
    let port: Int

    /// `host` and `port` as given (`serve`'s default is 127.0.0.1:8080).
    init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// `HOST:PORT`, an IPv6 host with or without brackets (`[::1]:8080`, `::1:8080`); nil when the
    /// host is not loopback or the port is not a number in 0...65535.
    init?(argument text: String) {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]),
            (0...65535).contains(port)
        else {
            return nil
        }
        var host = String(text[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard ["127.0.0.1", "::1", "localhost"].contains(host) else { return nil }
        self.init(host: host, port: port)
    }

    /// `HOST:PORT` (an IPv6 host in brackets).
    var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}
