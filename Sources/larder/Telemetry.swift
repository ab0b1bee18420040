import ArgumentParser
import Foundation
import Larder
import SystemPackage

/// `init --telemetry`'s values.
enum TelemetrySwitch: String, ExpressibleByArgument, CaseIterable {
    case on, off
}

extension LarderCommand {
    struct Telemetry: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "telemetry",
            abstract: "Show, send or turn off this sandbox's release telemetry (docs/privacy.md).",
            discussion: """
                Events are recorded only when the app turned telemetry on (`larder init --telemetry on`) \
                and the signed index names a collector that samples this install. They wait in a spool \
                under <root>/telemetry/ (at most 256 KiB, oldest dropped first and counted) and are sent \
                in gzip batches after each sync.
                """,
            subcommands: [TelemetryStatus.self, TelemetryFlush.self, TelemetryOff.self])
    }

    struct TelemetryStatus: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "status", abstract: "Whether telemetry is on, where it goes, and what waits to be sent.")
        @Option(help: ArgumentHelp("The sandbox directory.", valueName: "DIR")) var root: FilePath
        @OptionGroup var output: OutputOptions

        func run() throws {
            try Output.emit(TelemetrySpool(root: root).status(now: Date()), json: output.json)
        }
    }

    struct TelemetryFlush: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "flush",
            abstract: "Send what the spool holds now, ignoring the back-off.",
            discussion: "Exit codes: 0 sent, or nothing to send; 1 the collector could not be reached (retried later).")
        @Option(help: ArgumentHelp("The sandbox directory.", valueName: "DIR")) var root: FilePath
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let report = await Syncer(root: root, setup: SyncSetup(engine: .platform)).sendTelemetry(force: true)
            try Output.emit(report, json: output.json)
            if report.deferred != nil { throw ExitStatus.failure }
        }
    }

    struct TelemetryOff: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "off", abstract: "Turn telemetry off and delete the spool and the install id.")
        @Option(help: ArgumentHelp("The sandbox directory.", valueName: "DIR")) var root: FilePath
        @OptionGroup var output: OutputOptions

        func run() throws {
            do {
                _ = try SyncConfig.load(root: root).withTelemetry(false, root: root)
            } catch {
                throw Output.failure(
                    command: "telemetry off", code: error.code, message: error.description, json: output.json)
            }
            try Output.emit(TelemetrySpool(root: root).status(now: Date()), json: output.json)
        }
    }
}

extension TelemetryStatus: RenderedReport {
    var textLines: [String] {
        guard on else { return ["telemetry: off"] }
        var lines = ["telemetry: on"]
        if let e = endpoint {
            lines.append(
                "collector: \(e) (sample \(sample ?? 1))\(sampled == false ? ", this install is not in the sample" : "")"
            )
        } else {
            lines.append("collector: none (the accepted index names none: nothing is recorded)")
        }
        lines.append(
            "pending: \(pendingEvents) event(s), \(Output.bytes(Int64(spoolBytes))) spooled\(outbox ? ", a batch waiting to be sent again" : "")"
        )
        if dropped > 0 { lines.append("dropped: \(dropped) event(s) since the last batch sent") }
        if failures > 0 {
            lines.append(
                "failures: \(failures) in a row; next attempt after \(nextAttempt.map(ManifestCoding.formatRFC3339) ?? "now")"
            )
        }
        if let s = lastSent { lines.append("last sent: \(ManifestCoding.formatRFC3339(s))") }
        return lines
    }
}

extension TelemetrySendReport: RenderedReport {
    var textLines: [String] {
        if let s = skipped { return ["telemetry: nothing sent: \(s)"] }
        var lines = ["telemetry: \(sent) batch(es) sent, \(events) event(s)"]
        if refused > 0 { lines.append("refused by the collector: \(refused) batch(es) (dropped)") }
        if let d = deferred { lines.append("deferred: \(d)") }
        return lines
    }
}
