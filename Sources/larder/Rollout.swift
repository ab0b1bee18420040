import ArgumentParser
import Foundation
import Larder
import LarderCollect
import LarderPublish
import SystemPackage

/// The release a rollout verb acts on, and the keys it signs with.
struct RolloutTarget: ParsableArguments {
    @Option(help: "The repository directory.") var repo: FilePath
    @Option(help: ArgumentHelp("The package.", valueName: "ID")) var id: String
    @Option(help: ArgumentHelp("Its channel.", valueName: "CHANNEL")) var channel = "stable"
    @Option(help: ArgumentHelp("The version (default: the one the channel publishes).", valueName: "VERSION"))
    var version: String?
    @Option(
        help: ArgumentHelp(
            "The private key: the release key for start, a rollout key (or the repository's key) for the others.",
            valueName: "KEY"))
    var key: FilePath
    @Option(
        name: .customLong("index-key"),
        help: ArgumentHelp(
            "In a delegated repository, the online key that composes the index (default: $LARDER_INDEX_KEY).",
            valueName: "KEY"))
    var indexKey: FilePath?
    @Option(help: ArgumentHelp("Days until the new index expires.", valueName: "DAYS")) var ttlDays = 30.0

    func publisher() throws -> Publisher {
        var p = Publisher(key: try PublisherKeys.loadPrivateKey(key))
        p.indexKeys = try DelegationKeys.indexKeys(indexKey)
        return p
    }
}

/// Runs one rollout verb and prints what it did.
func runRollout(
    _ verb: String, _ target: RolloutTarget, _ action: RolloutAction, by: String, reason: String?, json: Bool
)
    throws
{
    let report: RolloutReport
    do {
        var change = RolloutChange(id: target.id, channel: target.channel, version: target.version, action: action)
        change.by = by
        change.reason = reason
        report = try target.publisher().rollout(change, repository: target.repo, timeToLive: target.ttlDays * 86_400)
    } catch let e as PublishError {
        throw Output.failure(command: "rollout \(verb)", code: e.code, message: e.description, json: json)
    } catch {
        throw Output.failure(command: "rollout \(verb)", code: "key", message: "\(error)", json: json)
    }
    try Output.emit(report, json: json)
}

extension LarderCommand {
    struct RolloutCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rollout",
            abstract: "Steer a release's rollout: start, pause, resume, advance, halt, status, guard (manifests §20).",
            discussion: """
                The release key signs how far a release may go (start: a percent or a schedule); a \
                rollout key signs only holds that keep it back (pause, a lower cap, halt), so the \
                guard can run in CI without a key that could publish. In a delegated repository the \
                rollout key is a team of role rollout (`larder delegate add NAME --role rollout`); in a \
                single-key repository the repository's key signs both.
                """,
            subcommands: [Start.self, Pause.self, Resume.self, Advance.self, Halt.self, Status.self, Guard.self])

        struct HoldOptions: ParsableArguments {
            @Option(help: ArgumentHelp("Who sets the hold, written in it.", valueName: "NAME")) var by = "manual"
            @Option(help: ArgumentHelp("Why, written in the hold (at most 256 bytes).", valueName: "TEXT"))
            var reason: String?
        }

        struct Start: ParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Sign the release's rollout anew with its release key: a percent, or a schedule from now.",
                discussion: """
                    --percent N signs a ceiling; --schedule 1,5,25,100 --every 1h a schedule devices \
                    follow by the clock with no further signature (the ceiling is its last step). The \
                    salt is kept, so devices already in stay in. In a single-key repository the \
                    release's holds are lifted.
                    """)
            @OptionGroup var target: RolloutTarget
            @Option(help: ArgumentHelp("The share of devices, 0 … 100.", valueName: "N")) var percent: Int?
            @Option(help: ArgumentHelp("Steps, strictly increasing: 1,5,25,100.", valueName: "STEPS")) var schedule:
                String?
            @Option(help: ArgumentHelp("Time between steps: 30m, 1h, 1d …", valueName: "DURATION")) var every = "1h"
            @OptionGroup var output: OutputOptions

            func validate() throws {
                if percent != nil && schedule != nil { throw ValidationError("give --percent or --schedule, not both") }
                if schedule != nil && Duration.parse(every) == nil {
                    throw ValidationError("--every \(every): expected 30m, 1h, 1d …")
                }
                if let schedule, RolloutCommand.steps(schedule) == nil {
                    throw ValidationError(
                        "--schedule \(schedule): expected integers joined by commas, such as 1,5,25,100")
                }
            }

            func run() throws {
                let steps = schedule.flatMap(RolloutCommand.steps)
                let seconds = steps == nil ? nil : Duration.parse(every).map { Int($0) }
                try runRollout(
                    "start", target, .start(percent: percent, steps: steps, every: seconds), by: "manual",
                    reason: nil, json: output.json)
            }
        }

        struct Pause: ParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Hold the release: devices not on it do not take it; those on it keep it.")
            @OptionGroup var target: RolloutTarget
            @OptionGroup var hold: HoldOptions
            @OptionGroup var output: OutputOptions
            func run() throws {
                try runRollout("pause", target, .pause, by: hold.by, reason: hold.reason, json: output.json)
            }
        }

        struct Resume: ParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Lift a pause or halt: the signed share (and any cap) applies again.")
            @OptionGroup var target: RolloutTarget
            @OptionGroup var hold: HoldOptions
            @OptionGroup var output: OutputOptions
            func run() throws {
                try runRollout("resume", target, .resume, by: hold.by, reason: hold.reason, json: output.json)
            }
        }

        struct Advance: ParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Cap the share at N percent, never above what the release key signed (at it, no cap).")
            @OptionGroup var target: RolloutTarget
            @Option(help: ArgumentHelp("The cap, 0 … the signed ceiling.", valueName: "N")) var percent: Int
            @OptionGroup var hold: HoldOptions
            @OptionGroup var output: OutputOptions
            func run() throws {
                try runRollout(
                    "advance", target, .advance(percent: percent), by: hold.by, reason: hold.reason, json: output.json)
            }
        }

        struct Halt: ParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Halt the release: devices on it go back to their previous version, none takes it.")
            @OptionGroup var target: RolloutTarget
            @OptionGroup var hold: HoldOptions
            @OptionGroup var output: OutputOptions
            func run() throws {
                try runRollout("halt", target, .halt, by: hold.by, reason: hold.reason, json: output.json)
            }
        }

        struct Status: ParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Each release of the published index: signed share or schedule, holds, share in effect now.",
                discussion: "Reads the index as published (no key); a sharded index's on-demand entries are not listed."
            )
            @Option(help: "The repository directory.") var repo: FilePath
            @Option(help: ArgumentHelp("Only this package.", valueName: "ID")) var id: String?
            @OptionGroup var output: OutputOptions

            func run() throws {
                let releases: [RolloutRelease]
                do { releases = try Publisher.rolloutStatus(repository: repo) } catch {
                    throw Output.failure(
                        command: "rollout status", code: error.code, message: error.description, json: output.json)
                }
                try Output.emit(
                    RolloutStatusOutput(releases: releases.filter { id == nil || $0.id == id }), json: output.json)
            }
        }

        /// `1,5,25,100` as integers; nil when it is not.
        static func steps(_ text: String) -> [Int]? {
            let parts = text.split(separator: ",", omittingEmptySubsequences: false).map { Int($0) }
            guard !parts.isEmpty, !parts.contains(nil) else { return nil }
            return parts.compactMap { $0 }
        }
    }
}

/// `rollout status`'s document.
struct RolloutStatusOutput: RenderedReport {
    var releases: [RolloutRelease]

    var textLines: [String] {
        releases.isEmpty ? ["no release"] : releases.map(RolloutStatusOutput.line)
    }

    static func line(_ r: RolloutRelease) -> String {
        let signed =
            r.schedule.map { s in
                "schedule \(s.steps.map(String.init).joined(separator: ",")) every \(s.every / 60) min from \(ManifestCoding.formatRFC3339(s.start)) (now \(r.signedNow)%)"
            } ?? "signed \(r.percent)%"
        let holds = r.holds.map { h in
            "\(h.state.rawValue)\(h.percent.map { " at \($0)%" } ?? "") by \(h.by) since \(ManifestCoding.formatRFC3339(h.since))"
        }
        return
            "\(r.id) \(r.version) (\(r.channel)): \(signed); \(holds.isEmpty ? "no hold" : holds.joined(separator: ", ")); "
            + (r.revoked ? "revoked" : "share now \(r.share)%")
    }
}

extension RolloutReport: RenderedReport {
    var textLines: [String] {
        let what =
            changed ? "\(verb): published" + (serial.map { " index serial \($0)" } ?? "") : "\(verb): nothing to change"
        return [what, "  " + RolloutStatusOutput.line(release)]
            + (part.map {
                [
                    "  part    team \($0.team) serial \($0.serial)\($0.composed ? "" : " (index not composed: run `larder compose`)")"
                ]
            } ?? [])
    }
}

extension LarderCommand.RolloutCommand {
    struct Guard: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Pause a release that is hurting devices, from a collector's figures; resume or advance a healthy one.",
            discussion: """
                Per release of the index (not halted or revoked), from the events of the last \
                --window: devices that reported it, devices that failed on it (download, install, no \
                space, health) or rolled back off it for health or a crash loop, and the 95 % Wilson \
                interval of their ratio. It pauses when the lower bound is above --max-failure-rate \
                (with at least --min-devices), resumes its own pause when the upper bound is at or \
                below it, and with --schedule steps a cap through the shares, one step per --every of \
                health. Holds are signed by --key, a rollout key: it can hold back, never publish \
                (manifests §20). Each decision is printed with its figures. One evaluation, or one per \
                --interval with --watch.
                Exit codes: 0; 3 a release was paused (one evaluation); 1 an error; 64 usage.
                """)
        @Option(help: ArgumentHelp("sqlite:PATH or postgres://USER@HOST:PORT/DB.", valueName: "URL")) var database:
            String
        @Option(help: "The repository directory.") var repo: FilePath
        @Option(help: ArgumentHelp("The rollout key (or a single-key repository's key).", valueName: "KEY")) var key:
            FilePath
        @Option(
            name: .customLong("index-key"),
            help: ArgumentHelp(
                "In a delegated repository, the online key that composes the index (default: $LARDER_INDEX_KEY).",
                valueName: "KEY"))
        var indexKey: FilePath?
        @Option(help: ArgumentHelp("Pause above this lower bound: 2% or 0.02.", valueName: "RATE")) var maxFailureRate:
            String
        @Option(help: ArgumentHelp("The window of events: 60m, 2h …", valueName: "DURATION")) var window = "60m"
        @Option(help: ArgumentHelp("Fewer devices than this: no pause or resume.", valueName: "N")) var minDevices = 20
        @Option(help: ArgumentHelp("Step a cap through these shares: 1,5,25,100.", valueName: "STEPS")) var schedule:
            String?
        @Option(help: ArgumentHelp("Health needed before each step: 30m, 1h …", valueName: "DURATION")) var every = "1h"
        @Flag(help: "Evaluate again every --interval until stopped.") var watch = false
        @Option(help: ArgumentHelp("Between evaluations with --watch.", valueName: "DURATION")) var interval = "5m"
        @Option(help: ArgumentHelp("Days until a new index expires.", valueName: "DAYS")) var ttlDays = 30.0
        @OptionGroup var output: OutputOptions

        func validate() throws {
            guard Self.rate(maxFailureRate) != nil else {
                throw ValidationError("--max-failure-rate \(maxFailureRate): expected a share such as 2% or 0.02")
            }
            for (name, text) in [("--window", window), ("--every", every), ("--interval", interval)]
            where Duration.parse(text) == nil {
                throw ValidationError("\(name) \(text): expected 30m, 1h, 1d …")
            }
            if let schedule {
                guard let steps = LarderCommand.RolloutCommand.steps(schedule), !steps.isEmpty,
                    steps.allSatisfy({ (0...100).contains($0) }), zip(steps, steps.dropFirst()).allSatisfy({ $0 < $1 })
                else {
                    throw ValidationError(
                        "--schedule \(schedule): expected increasing shares 0 … 100, such as 1,5,25,100")
                }
            }
            guard minDevices >= 1 else { throw ValidationError("--min-devices is 1 or more") }
        }

        /// `2%` as 0.02, `0.02` as 0.02; nil outside 0 … 1.
        static func rate(_ text: String) -> Double? {
            let percent = text.hasSuffix("%")
            guard let n = Double(percent ? String(text.dropLast()) : text), n.isFinite else { return nil }
            let r = percent ? n / 100 : n
            return (0...1).contains(r) ? r : nil
        }

        func run() async throws {
            var policy = RolloutGuard(
                maxFailureRate: Self.rate(maxFailureRate) ?? 0.02, minDevices: minDevices,
                steps: schedule.flatMap(LarderCommand.RolloutCommand.steps))
            policy.every = Duration.parse(every) ?? 3600
            policy.window = Duration.parse(window) ?? 3600
            let publisher: Publisher
            do {
                var p = Publisher(key: try PublisherKeys.loadPrivateKey(key))
                p.indexKeys = try DelegationKeys.indexKeys(indexKey)
                publisher = p
            } catch {
                throw Output.failure(command: "rollout guard", code: "key", message: "\(error)", json: output.json)
            }
            let store = try await openStore(database, command: "rollout guard", json: output.json)
            while true {
                let result: GuardOutput
                do { result = try await evaluate(policy, publisher, store) } catch {
                    await store.runner.close()
                    throw error
                }
                try Output.emit(result, json: output.json)
                if !watch {
                    await store.runner.close()
                    if result.decisions.contains(where: { $0.action == "pause" }) { throw ExitCode(3) }
                    return
                }
                try await Task.sleep(for: .seconds(Duration.parse(interval) ?? 300))
            }
        }

        /// One evaluation: the figures, the decisions, and their holds published as one change.
        func evaluate(_ policy: RolloutGuard, _ publisher: Publisher, _ store: TelemetryStore) async throws
            -> GuardOutput
        {
            let now = Date()
            let releases: [RolloutRelease]
            do { releases = try Publisher.rolloutStatus(repository: repo, at: now) } catch {
                throw Output.failure(
                    command: "rollout guard", code: error.code, message: error.description, json: output.json)
            }
            var figures: [PackageVersion: RolloutGuard.Figures] = [:]
            do {
                for (k, v) in try await store.guardFigures(since: now.addingTimeInterval(-policy.window)) {
                    figures[k] = RolloutGuard.Figures(devices: v.devices, failures: v.failures)
                }
            } catch {
                throw Output.failure(
                    command: "rollout guard", code: "database", message: String(reflecting: error), json: output.json)
            }
            let (decisions, changes) = policy.decide(releases, figures: figures, now: now)
            var out = GuardOutput(at: now, decisions: decisions, serial: nil, part: nil)
            guard !changes.isEmpty else { return out }
            do {
                let done = try publisher.hold(changes, repository: repo, timeToLive: ttlDays * 86_400)
                out.serial = done.serial
                out.part = done.part
            } catch {
                throw Output.failure(
                    command: "rollout guard", code: error.code, message: error.description, json: output.json)
            }
            return out
        }
    }
}

/// One evaluation of the guard.
struct GuardOutput: RenderedReport {
    var at: Date
    var decisions: [RolloutGuard.Decision]
    /// The index published with the changes (nil when none, or only a part was written).
    var serial: UInt64?
    var part: PartReport?

    var textLines: [String] {
        var lines = ["guard at \(ManifestCoding.formatRFC3339(at)): \(decisions.count) release(s)"]
        for d in decisions {
            lines.append("  \(d.action) \(d.id) \(d.version) (\(d.channel)): \(d.reason)")
        }
        if let serial { lines.append("  published index serial \(serial)") }
        if let part, !part.composed {
            lines.append("  part    team \(part.team) serial \(part.serial) (index not composed: run `larder compose`)")
        }
        return lines
    }
}
