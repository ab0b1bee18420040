import ArgumentParser
import Larder
import LarderPublish
import SystemPackage

// The types the options parse into, with their `ExpressibleByArgument` conformances in one place
// (the CLI's: the library modules do not depend on ArgumentParser). A value that does not parse is
// a usage error (exit 64): "The value 'X' is invalid for '--option <NAME>'", then the option's help
// line, which says what is expected.
//
// Options stay `String` where the text is free (a reason, a salt, a scheme name), or where the
// library reads and refuses it with a coded error of its own (exit 1, also as a JSON document):
// `pack --id/--version/--channel/--route/--depends/--min-client-version`, `revoke ID VERSION`,
// `init --repo`; `install --id/--version`, `confirm ID` and `rollback ID --to` are read into a
// `PackageID` and a `SemanticVersion` by the command (`readPackageID(_:)`), refused with the store's
// `bad-id` / `bad-version`.

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

/// `fetch --network`: `metered` or `unmetered`.
extension NetworkKind: ExpressibleByArgument {}

/// `pack --install`: `eager` or `on-demand`.
extension InstallPolicy.Mode: ExpressibleByArgument {}

/// `pack --preload`: `never`, `unmetered` or `always`.
extension InstallPolicy.Preload: ExpressibleByArgument {}

/// `pack --index-layout`: `inline` or `sharded`.
extension Publisher.IndexLayout: ExpressibleByArgument {}

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
        guard let (host, port) = Self.split(text), ["127.0.0.1", "::1", "localhost"].contains(host) else { return nil }
        self.init(host: host, port: port)
    }

    /// `HOST:PORT` as its parts (brackets taken off an IPv6 host); nil when the port is not a number
    /// in 0...65535 or the host is empty. `collect --listen` takes any host this way.
    static func split(_ text: String) -> (host: String, port: Int)? {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]),
            (0...65535).contains(port)
        else {
            return nil
        }
        var host = String(text[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return host.isEmpty ? nil : (host, port)
    }

    /// `HOST:PORT` (an IPv6 host in brackets).
    var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// `init --disk-budget`: bytes, or a number with a unit — `K`, `M`, `G`, `T` (powers of 1024,
/// also written `KiB`, `MiB`…, `KB`, `MB`…), e.g. `500M`, `2G`, `1.5GiB`.
struct ByteSize: ExpressibleByArgument, Equatable, CustomStringConvertible {
    let bytes: Int64

    init(bytes: Int64) { self.bytes = bytes }

    init?(argument: String) {
        let text = argument.trimmingCharacters(in: .whitespaces)
        let digits = text.prefix { $0.isNumber || $0 == "." }
        let unit = text.dropFirst(digits.count).trimmingCharacters(in: .whitespaces).uppercased()
        let shifts: [String: Int] = [
            "": 0, "B": 0, "K": 10, "KB": 10, "KIB": 10, "M": 20, "MB": 20, "MIB": 20, "G": 30, "GB": 30, "GIB": 30,
            "T": 40, "TB": 40, "TIB": 40,
        ]
        guard let number = Double(digits), number > 0, let shift = shifts[unit] else { return nil }
        let value = (number * Double(Int64(1) << shift)).rounded(.down)
        guard value >= 1, value < Double(Int64.max / 2) else { return nil }
        bytes = Int64(value)
    }

    var description: String { "\(bytes)" }
}
