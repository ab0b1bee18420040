import ArgumentParser
import Foundation
import Larder
import LarderCollect
import LarderFileSystem
import Logging
import SystemPackage

/// `collect --listen`: any host (devices reach the collector over the network), and a port.
struct CollectorAddress: ExpressibleByArgument {
    let host: String
    let port: Int

    init?(argument text: String) {
        guard let (host, port) = ListenAddress.split(text) else { return nil }
        self.host = host
        self.port = port
    }
}

/// Opens `--database`, or fails the command with the store's reason.
func openStore(_ text: String, command: String, json: Bool) async throws -> TelemetryStore {
    let url: StoreURL
    do { url = try StoreURL.parse(text) } catch {
        throw Output.failure(command: command, code: "usage", message: error.description, json: json)
    }
    do {
        return try await TelemetryStore.open(
            url, logger: Logger(label: "larder.collect", factory: { _ in SwiftLogNoOpLogHandler() }))
    } catch {
        throw Output.failure(
            command: command, code: "database", message: "\(url): \(String(reflecting: error))", json: json)
    }
}

extension LarderCommand {
    struct Collect: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "collect",
            abstract: "Run the telemetry collector: devices post their batches to /v1/events.",
            discussion: """
                Each batch is checked whole against the format (manifests/README.md §19) and refused with \
                400 and a reason otherwise; a replayed batch id is ignored (200); an install may post \
                --batches-per-hour batches (429 past it). No client address is read, stored or logged. \
                The database is sqlite:PATH (made if missing) or postgres://USER[:PASSWORD]@HOST[:PORT]/DB; \
                its tables are made and migrated on start. GET /report is the HTML report and \
                /report.json the JSON one (?since=24h&package=ID). Prints "collecting on http://HOST:PORT" \
                once bound. Exit 1 when the database cannot be opened or the address bound.
                """)
        @Option(help: ArgumentHelp("Address and port to listen on (port 0: any free port).", valueName: "HOST:PORT"))
        var listen: CollectorAddress
        @Option(help: ArgumentHelp("sqlite:PATH or postgres://USER@HOST:PORT/DB.", valueName: "URL")) var database:
            String
        @Option(help: ArgumentHelp("Batches one install may post in an hour.", valueName: "N")) var batchesPerHour = 120

        func run() async throws {
            let store = try await openStore(database, command: "collect", json: false)
            var collector = Collector(store: store)
            collector.batchesPerHour = batchesPerHour
            do {
                try await collector.run(host: listen.host, port: listen.port) { h, p in
                    Output.line(
                        "collecting on http://\(h.contains(":") ? "[\(h)]" : h):\(p)  (\(database.hasPrefix("sqlite:") ? database : "postgres"))"
                    )
                }
            } catch {
                await store.runner.close()
                throw Output.failure(command: "collect", code: "serve-failed", message: "\(error)", json: false)
            }
            await store.runner.close()
        }
    }

    struct Report: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "report",
            abstract: "What devices reported about each release: adoption, failures, rollbacks, page errors.",
            discussion: """
                Per package version seen in the window: devices reporting, attempts, the failure and \
                rollback rates with their 95 % Wilson intervals, failures and rollbacks by reason, page \
                errors, and adoption hour by hour (manifests/README.md §19, "Reports"). --fail-if \
                'failure-rate>2%' (metrics failure-rate, failure-rate-lower, rollback-rate, \
                rollback-rate-lower, adoption, devices, page-errors; ops > >= < <=; joined by commas) \
                exits 3 when a comparison holds for any version, naming each, so a pipeline can gate \
                on it. --html FILE also writes the report as one self-contained page.
                Exit codes: 0; 3 a --fail-if comparison held; 1 the database could not be read; 64 usage.
                """)
        @Option(help: ArgumentHelp("sqlite:PATH or postgres://USER@HOST:PORT/DB.", valueName: "URL")) var database:
            String
        @Option(help: ArgumentHelp("Only this package.", valueName: "ID")) var package: String?
        @Option(help: ArgumentHelp("The window: 90m, 24h, 7d …", valueName: "DURATION")) var since = "24h"
        @Option(
            help: ArgumentHelp(
                "Exit 3 when a comparison holds for a version, e.g. 'failure-rate>2%'.", valueName: "RULES"))
        var failIf: String?
        @Option(help: ArgumentHelp("Also write the report as an HTML page.", valueName: "FILE")) var html: String?
        @OptionGroup var output: OutputOptions

        func run() async throws {
            guard let window = Duration.parse(since) else {
                throw Output.failure(
                    command: "report", code: "usage", message: "--since \(quoted(since)): expected 90m, 24h, 7d …",
                    json: output.json)
            }
            let conditions: [FailCondition]
            do { conditions = try failIf.map(FailCondition.parseList) ?? [] } catch {
                throw Output.failure(command: "report", code: "usage", message: error.description, json: output.json)
            }
            let store = try await openStore(database, command: "report", json: output.json)
            let now = Date()
            let report: ReleaseReport
            do {
                report = try await store.report(since: now.addingTimeInterval(-window), until: now, package: package)
            } catch {
                await store.runner.close()
                throw Output.failure(
                    command: "report", code: "database", message: String(reflecting: error), json: output.json)
            }
            await store.runner.close()
            if let html {
                do { try AtomicFile.write(Data(ReportPage.render(report).utf8), to: FilePath(html)) } catch {
                    throw Output.failure(command: "report", code: "io", message: "\(html): \(error)", json: output.json)
                }
            }
            let held = report.versions.flatMap { v in
                conditions.filter { $0.holds(v) }.map { c in
                    GateFailure(package: v.package, version: v.version, condition: c.text, value: c.figure(v) ?? 0)
                }
            }
            try Output.emit(
                ReportOutput(report: report, failIf: conditions.map(\.text), failed: held), json: output.json)
            if !held.isEmpty {
                for h in held {
                    Output.diagnostic(
                        "larder report: \(h.package) \(h.version): \(h.condition) (it is \(Self.show(h)))")
                }
                throw ExitCode(3)
            }
        }

        static func show(_ g: GateFailure) -> String {
            g.condition.contains("rate") || g.condition.hasPrefix("adoption")
                ? String(format: "%.2f %%", g.value * 100) : String(format: "%.0f", g.value)
        }
    }
}

/// A `--fail-if` comparison that held.
struct GateFailure: Encodable {
    let package: String
    let version: String
    let condition: String
    let value: Double
}

/// `report`'s output: the report, and the gate's outcome.
struct ReportOutput: Encodable, RenderedReport {
    let report: ReleaseReport
    let failIf: [String]
    let failed: [GateFailure]

    func encode(to encoder: Encoder) throws {
        try report.encode(to: encoder)
        enum Keys: String, CodingKey { case failIf, failed }
        var c = encoder.container(keyedBy: Keys.self)
        if !failIf.isEmpty {
            try c.encode(failIf, forKey: .failIf)
            try c.encode(failed, forKey: .failed)
        }
    }

    var textLines: [String] {
        var lines = [
            "window: \(ManifestCoding.formatRFC3339(report.since)) to \(ManifestCoding.formatRFC3339(report.until)); "
                + "\(report.batches) batches, \(report.dropped) events dropped on devices"
        ]
        if report.versions.isEmpty { lines.append("no events in this window") }
        for v in report.versions {
            lines.append(
                "\(v.package) \(v.version): \(v.devices) devices, \(v.attempts) attempts, failures \(ReportPage.rate(v.failureRate)), "
                    + "rollbacks \(ReportPage.rate(v.rollbackRate)), page errors \(v.pageErrors), share now \(v.current.map(ReportPage.percent) ?? "–")"
            )
            for r in v.byReason { lines.append("  \(r.kind) \(r.reason): \(r.devices) devices") }
        }
        for f in failed { lines.append("fail-if: \(f.package) \(f.version): \(f.condition)") }
        return lines
    }
}
