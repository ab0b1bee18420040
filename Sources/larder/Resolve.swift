import ArgumentParser
import Foundation
import Larder
import SystemPackage

extension LarderCommand {
    struct Resolve: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "resolve",
            abstract: "Show which local file serves a URL, or why it goes to the network (takes no lock).",
            discussion: """
                URL is larder://<id>/<path>, a URL under a route the index declares for a package, or \
                a URL of a scheme given with --scheme. Prints local (file, package@version, type, \
                length, ETag, whether it is on disk), passthrough or not-found, with the reason. Exit 0 \
                for any of these; 1 when the sandbox cannot be read.
                """)
        @Argument(help: "The URL to resolve.") var url: String
        @Option(help: ArgumentHelp("The sandbox directory.", valueName: "DIR")) var root: FilePath
        @Option(
            name: .customLong("scheme"),
            help: ArgumentHelp("Another custom scheme routed like larder: (repeatable).", valueName: "SCHEME"))
        var schemes: [String] = []
        @OptionGroup var output: OutputOptions

        struct Report: RenderedReport {
            var url: String
            var outcome: String
            var reason: String?
            var file: String?
            var package: String?
            var version: String?
            var path: String?
            var mime: String?
            var length: Int64?
            var etag: String?
            /// Whether the file is on disk (when it is not, the loader serves the fallback version's
            /// copy, or passes the request through, and reports the failure).
            var onDisk: Bool?
        }

        func run() throws {
            let resolver: Resolver
            // One URL: only the file list of the package it routes to is read.
            do { resolver = try Resolver(root: root, schemes: Set(schemes), onlyFor: url) } catch {
                throw Output.failure(
                    command: "resolve", code: error.code, message: error.description, json: output.json)
            }
            var r = Report(url: url, outcome: "")
            switch resolver.resolve(url) {
            case .local(let f):
                r.outcome = "local"
                r.file = resolver.filePath(f).string
                r.package = f.package.rawValue
                r.version = f.version.description
                r.path = f.path.string
                r.mime = f.mime
                r.length = f.length
                r.etag = f.etag
                r.onDisk = resolver.isOnDisk(f)
            case .passthrough(let reason):
                r.outcome = "passthrough"
                r.reason = reason
            case .notFound(let reason):
                r.outcome = "not-found"
                r.reason = reason
            }
            try Output.emit(r, json: output.json)
        }
    }
}

extension LarderCommand.Resolve.Report {
    var textLines: [String] {
        guard let file else { return ["\(outcome): \(reason ?? "")"] }
        var lines = [
            "local \(file)",
            "  \(package ?? "")@\(version ?? "") \(path ?? "")  \(mime ?? "")  \(length ?? 0) bytes  ETag \(etag ?? "")",
        ]
        if onDisk == false {
            lines.append("  missing on disk: the loader would serve the fallback version's copy or pass through")
        }
        return lines
    }
}
