import ArgumentParser
import Foundation
import Larder
import LarderFetch
import LarderGateway
import LarderPublish
import Logging
import SystemPackage

extension LarderCommand {
    struct Serve: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "serve",
            abstract:
                "Serve the sandbox's packages over HTTP on loopback (a gateway a browser or web view loads through).",
            discussion: """
                Requests are routed by their Host header and path: with Chromium started as \
                --host-resolver-rules="MAP app.example.com 127.0.0.1:PORT", http://app.example.com/ \
                loads from the package whose index routes name that host. Requests to the gateway's \
                own address take the larder:// form /<id>/<path> (one origin for every package); \
                http://<id>.localhost:PORT/<path> is that form on an origin of the package's own. \
                Local files are streamed with \
                Content-Type, ETag, Range (206/416), HEAD and If-None-Match (304); a file the list \
                names but the disk lacks is served from the fallback version and the failure is \
                recorded (the automatic-rollback policy applies). What no package serves is \
                forwarded to the network (--upstream-scheme), or answered 502 with --offline. The \
                sandbox is re-read when a sync or rollback changes it; no lock is held.

                A request routed to an on-demand package the device does not hold installs it first \
                (a sync of that package, as `larder fetch`; one per package however many requests \
                wait) and is answered from it; past --first-use-deadline seconds it is answered as \
                the package's policy says (forwarded, or 503 for local-only). Not with --offline. \
                Each install prints one "first use: ID installed in N ms" line.

                With --page-health, the gateway watches each page it serves from an active \
                version: the page-health script goes first in the main document's <head> and \
                defines larder.ready(), which the page calls once it has rendered. The page is \
                healthy when it calls it; it fails when it does not within --ready-deadline \
                seconds of its load event (or of being served, if it never loads), after \
                --max-script-errors uncaught errors, or when its document fails. Healthy confirms \
                a pending version; failed records the reason (the deadline, the last script \
                error's message and source) and rolls a pending version back to its fallback at \
                once; a confirmed version only has the failure recorded. Each verdict prints one \
                "health …" line.

                Prints "listening on http://HOST:PORT" once bound, then one line per request: \
                method, URL, status, outcome (package@version, fallback, passthrough), bytes, time; \
                lines are written in batches, at most 20 ms after their request. Stops on SIGINT or \
                SIGTERM. Exit 1 when the sandbox cannot be read or the address cannot be bound; 64 \
                for a bad --listen.
                """)
        @Option(help: ArgumentHelp("The sandbox directory.", valueName: "DIR")) var root: FilePath
        @Option(
            help: ArgumentHelp(
                "A loopback address (127.0.0.1, ::1 or localhost) and port to listen on (port 0: any free port).",
                valueName: "HOST:PORT"))
        var listen = ListenAddress(host: "127.0.0.1", port: 8080)
        @Flag(help: "Answer 502 instead of forwarding what no package serves.") var offline = false
        @Option(
            help: ArgumentHelp(
                "Scheme for forwarded requests: https (production origins) or http.", valueName: "SCHEME"))
        var upstreamScheme = UpstreamScheme.https
        @Option(
            name: .customLong("scheme"),
            help: ArgumentHelp("Another custom scheme routed like larder: (repeatable).", valueName: "SCHEME"))
        var schemes: [String] = []
        @Flag(help: "Watch the health of the pages served: ready confirms, failure rolls back.")
        var pageHealth = false
        @Option(
            help: ArgumentHelp(
                "With --page-health: seconds a page has to call larder.ready() after loading (0.1–600).",
                valueName: "SECONDS"))
        var readyDeadline: Double = 30
        @Option(
            help: ArgumentHelp(
                "With --page-health: uncaught script errors that fail a page before it is ready.", valueName: "N"))
        var maxScriptErrors = 3
        @Option(
            help: ArgumentHelp(
                "Seconds a request for an on-demand package not yet installed waits for its install (0.1–600).",
                valueName: "SECONDS"))
        var firstUseDeadline: Double = 10
        @Option(
            name: .customLong("recipient-key"),
            help: ArgumentHelp(
                "A recipient private key that opens encrypted on-demand packages installed at first use (repeatable).",
                valueName: "FILE"))
        var recipientKeys: [FilePath] = []
        @Flag(
            help: """
                Answer every request from a Swift task through Hummingbird, package hits included \
                (by default they are answered on the connection's event loop); for side-by-side measurement.
                """)
        var taskResponder = false

        func validate() throws {
            guard (0.1...600).contains(firstUseDeadline) else {
                throw ValidationError(
                    "--first-use-deadline must be between 0.1 and 600 seconds, got \(firstUseDeadline)")
            }
            guard (0.1...600).contains(readyDeadline) else {
                throw ValidationError("--ready-deadline must be between 0.1 and 600 seconds, got \(readyDeadline)")
            }
            guard maxScriptErrors >= 1 else {
                throw ValidationError("--max-script-errors must be at least 1, got \(maxScriptErrors)")
            }
        }

        /// Installs an on-demand package at the first request for it: a sync of that package
        /// (`larder fetch ID`), one per package however many requests wait.
        func firstUse(_ resolver: Resolver, lines: LineBatch) throws -> FirstUse {
            let root = self.root
            var options = SyncSetup(engine: .platform)
            for path in recipientKeys {
                do { options.recipientKeys.append(try PublisherKeys.loadRecipientKey(path)) } catch {
                    throw Output.failure(command: "serve", code: "key", message: "\(error)", json: false)
                }
            }
            if let ca = ProcessInfo.processInfo.environment["LARDER_CA_FILE"], !ca.isEmpty {
                options.http.caFiles = [ca]
            }
            return FirstUse(
                resolver: resolver, deadline: .milliseconds(Int(firstUseDeadline * 1000)),
                onInstall: { id, outcome in lines.add("first use: \(id) \(outcome)") },
                install: Syncer.installer(root: root, setup: options))
        }

        func run() async throws {
            let resolver: Resolver
            do { resolver = try Resolver(root: root, schemes: Set(schemes)) } catch {
                throw Output.failure(command: "serve", code: error.code, message: error.description, json: false)
            }
            let loader = ResourceLoader(resolver: resolver, reporter: StoreFailureReporter(root: root))
            // One line per request: written in batches (at most 20 ms late), in order with the rest.
            let lines = LineBatch(sink: Output.sink)
            var gateway = Gateway(
                loader: loader, host: listen.host, port: listen.port,
                forwarder: Forwarder(
                    network: offline ? .offline : .forward(scheme: upstreamScheme.rawValue),
                    exchange: HTTPStack.platform.makeExchange()),
                log: { lines.add($0) })
            if !offline { gateway.firstUse = try firstUse(resolver, lines: lines) }
            gateway.answersOnEventLoop = !taskResponder
            if pageHealth {
                let recorder = StoreHealthRecorder(root: root) { result in
                    switch result {
                    case .success(let outcome): lines.add("\(outcome)")
                    case .failure(let error): lines.add("health: could not be recorded: \(error)")
                    }
                }
                gateway.health = PageHealthTracker(
                    settings: PageHealthSettings(readyDeadline: readyDeadline, maxScriptErrors: maxScriptErrors),
                    recorder: recorder)
            }
            do {
                try await gateway.run { h, p in
                    lines.add("listening on http://\(h.contains(":") ? "[\(h)]" : h):\(p)  (sandbox \(root))")
                    lines.flush()
                }
                lines.flush()
            } catch {
                lines.flush()
                throw Output.failure(command: "serve", code: "serve-failed", message: "\(error)", json: false)
            }
        }
    }
}
