import ArgumentParser
import Foundation
import Larder
import SystemPackage

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

struct Init: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Point a sandbox at a repository: writes <root>/config.json.",
        discussion: """
            Records the repository URL (https://, http:// to loopback or with --allow-http, or \
            file://), the trusted public keys, the channel and the app version. A random device \
            id is made once and kept across re-inits (it decides rollout buckets). Later commands \
            read the config; their flags override it.
            """)
    @Option(help: ArgumentHelp("The sandbox directory.", valueName: "DIR")) var root: String
    @Option(help: ArgumentHelp("The repository URL.", valueName: "URL")) var repo: String
    @Option(name: .customLong("public-key"), help: ArgumentHelp("A trusted public key file (repeatable).", valueName: "FILE")) var publicKeys: [String]
    @Option(help: "Release channel to follow.") var channel = "stable"
    @Option(help: ArgumentHelp("This app's version (for minClientVersion).", valueName: "VERSION")) var appVersion = "1.0.0"
    @Flag(help: "Allow plain http to hosts other than loopback.") var allowHttp = false
    @OptionGroup var output: OutputOptions

    func validate() throws {
        guard SemanticVersion(appVersion) != nil else { throw ValidationError("--app-version \"\(appVersion)\" is not a SemVer version") }
        guard !publicKeys.isEmpty else { throw ValidationError("at least one --public-key is needed") }
    }

    func run() throws {
        var keys: [PublicKey] = []
        for k in publicKeys {
            do { keys.append(try PublisherKeys.loadPublicKey(FilePath(k))) } catch {
                throw Output.failure(command: "init", code: "key", message: "\(error)", json: output.json)
            }
        }
        let config: SyncConfig
        do {
            config = try SyncConfig.initialise(
                root: FilePath(root), repository: repo, keys: keys, channel: channel,
                appVersion: SemanticVersion(appVersion) ?? SemanticVersion(1, 0, 0), allowInsecureHTTP: allowHttp)
        } catch {
            throw Output.failure(command: "init", code: error.code, message: error.description, json: output.json)
        }
        if output.json { return try Output.json(config) }
        Output.line("initialised \(root): repository \(config.repository), channel \(config.channel), app \(config.appVersion), device \(config.deviceId)")
    }
}

/// Options shared by sync and plan.
struct SyncArguments: ParsableArguments {
    @Option(help: ArgumentHelp("The sandbox directory (initialised with `larder init`).", valueName: "DIR")) var root: String
    @Option(name: .customLong("package"), help: ArgumentHelp("Only this package (repeatable).", valueName: "ID")) var packages: [String] = []
    @Option(help: ArgumentHelp("Override the app version of the config.", valueName: "VERSION")) var appVersion: String?
    @Option(help: "Override the channel of the config.") var channel: String?
    @Option(help: ArgumentHelp("HTTP attempts per request (retries on connection errors, 5xx, 429).", valueName: "N")) var attempts = 5
    @Option(help: ArgumentHelp("Seconds without a byte before a transfer is abandoned.", valueName: "SECONDS")) var stallTimeout = 20.0
    @Option(help: ArgumentHelp("Minimum average transfer rate in bytes/s …", valueName: "BYTES")) var minRate = 2048.0
    @Option(help: ArgumentHelp("… measured over this many seconds.", valueName: "SECONDS")) var rateWindow = 15.0
    @Option(help: ArgumentHelp("Deadline of one transfer, seconds.", valueName: "SECONDS")) var deadline = 600.0

    func options() throws -> SyncOptions {
        var o = SyncOptions()
        guard attempts >= 1, stallTimeout > 0, minRate >= 0, rateWindow > 0, deadline > 0 else {
            throw ValidationError("--attempts must be at least 1 and the times positive")
        }
        o.http.attempts = attempts
        o.http.stallTimeout = stallTimeout
        o.http.minimumRate = minRate
        o.http.floorWindow = rateWindow
        o.http.deadline = deadline
        o.packages = packages
        if let v = appVersion {
            guard let sv = SemanticVersion(v) else { throw ValidationError("--app-version \"\(v)\" is not a SemVer version") }
            o.appVersion = sv
        }
        o.channel = channel
        return o
    }
}

/// Runs an async library call from a synchronous command.
func blocking<T: Sendable>(_ body: @escaping @Sendable () async throws(SyncError) -> T) throws(SyncError) -> T {
    let box = ResultBox<T>()
    let done = DispatchSemaphore(value: 0)
    Task {
        do throws(SyncError) { box.result = .success(try await body()) } catch { box.result = .failure(error) }
        done.signal()
    }
    done.wait()
    switch box.result {
    case .success(let v)?: return v
    case .failure(let e)?: throw e
    case nil: throw .config(.invalid("internal: no result"))
    }
}

final class ResultBox<T>: @unchecked Sendable {
    // @unchecked: written once by the task before the semaphore is signalled, read after.
    var result: Result<T, SyncError>?
}

struct Plan: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "plan",
        abstract: "Show what a sync would do, and why; apply nothing.",
        discussion: """
            Fetches and verifies the index and the file lists it needs and prints the plan; it \
            installs, activates and records nothing. Like every writer it takes the sandbox lock \
            and runs recovery (emptying staging/ and trash/ of interrupted operations).
            """)
    @OptionGroup var args: SyncArguments
    @OptionGroup var output: OutputOptions

    func run() throws {
        let root = FilePath(args.root)
        let options = try args.options()
        let (plan, _) = try withSync("plan", output.json) { () throws(SyncError) in
            try blocking { () async throws(SyncError) in try await Syncer(root: root, options: options).plan() }
        }
        if output.json { return try Output.json(plan) }
        for a in plan.actions {
            var line = "\(a.kind.rawValue.padding(toLength: 8, withPad: " ", startingAt: 0)) \(a.id)"
            if let f = a.from { line += " \(f)" }
            if let t = a.to, t != a.from { line += a.from == nil ? " \(t)" : " → \(t)" }
            if let c = a.cost {
                line += "  [\(c.method.rawValue): \(Output.bytes(c.bytes)) in \(c.requests) request(s), \(c.reused) file(s) reused; bundle \(Output.bytes(c.bundleBytes))]"
            }
            line += "  — \(a.reason)"
            Output.line(line)
        }
        if plan.actions.isEmpty { Output.line("nothing to do") }
    }
}

struct Sync: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Bring the sandbox in step with the repository's signed index.",
        discussion: """
            Locks the sandbox, recovers, fetches the index (a conditional GET: no change is one \
            request answered 304) and checks its signature, serial and expiry, plans, downloads \
            with bounded concurrency (resuming partial downloads; a bundle is extracted into \
            staging while it downloads, and used only once the whole file is verified), verifies \
            every file, activates \
            (as pending; dependency groups together) and garbage-collects by retention. One \
            package's failure neither blocks nor damages another.
            Exit codes: 0 all done; 2 some packages failed; 1 nothing could be done (index \
            unreachable or refused, not initialised); 64 usage.
            """)
    @OptionGroup var args: SyncArguments
    @Option(help: ArgumentHelp("Progress on stderr: auto (a bar on a terminal), json (JSON lines) or none.", valueName: "MODE")) var progress = "auto"
    @OptionGroup var output: OutputOptions

    func validate() throws {
        guard ["auto", "json", "none"].contains(progress) else { throw ValidationError("--progress must be auto, json or none") }
    }

    func run() throws {
        let root = FilePath(args.root)
        var options = try args.options()
        let mode = progress == "auto" ? (isatty(2) != 0 ? "bar" : "none") : progress
        if mode != "none" { options.progress = ProgressRenderer(mode: mode).handle }
        let opts = options
        let report = try withSync("sync", output.json) { () throws(SyncError) in
            try blocking { () async throws(SyncError) in try await Syncer(root: root, options: opts).sync() }
        }
        if mode == "bar" { FileHandle.standardError.write(Data("\n".utf8)) }
        if output.json {
            try Output.json(report)
        } else {
            Output.line("index serial \(report.serial)\(report.indexChanged ? "" : " (unchanged)")")
            for p in report.packages {
                var line = "\(p.id): \(p.action.rawValue)"
                if let f = p.from { line += " \(f)" }
                if let t = p.to, t != p.from { line += p.from == nil ? " \(t)" : " → \(t)" }
                if p.action == .install || p.action == .update {
                    line += " via \(p.method?.rawValue ?? "?")\(p.streamed == true ? " (extracted while downloading)" : ""), fetched \(Output.bytes(p.bytesFetched))"
                    if let b = p.bundleBytes { line += " of a \(Output.bytes(b)) bundle" }
                    line += String(format: " in %.2f s", p.seconds)
                }
                line += ": \(p.outcome.rawValue)"
                if p.outcome != .done || p.action == .rollback || p.action == .remove { line += " — \(p.reason)" }
                Output.line(line)
            }
            if !report.removedByGC.isEmpty { Output.line("gc removed \(report.removedByGC.joined(separator: ", "))") }
        }
        if report.hasFailures { throw ExitCode(2) }
    }
}

/// Maps a sync error to exit code 1 with its message.
func withSync<T>(_ command: String, _ json: Bool, _ body: () throws(SyncError) -> T) throws -> T {
    do {
        return try body()
    } catch {
        throw Output.failure(command: command, code: error.code, message: error.description, json: json)
    }
}

/// Renders sync events on stderr: a one-line bar on a terminal, or JSON lines.
final class ProgressRenderer: @unchecked Sendable {
    // @unchecked: `lock` guards the counters; events arrive from several transfers.
    let mode: String
    private let lock = NSLock()
    private var done: [String: Int64] = [:]
    private var totals: [String: Int64] = [:]

    init(mode: String) { self.mode = mode }

    var handle: @Sendable (SyncEvent) -> Void { { [self] e in self.render(e) } }

    func render(_ e: SyncEvent) {
        lock.lock()
        defer { lock.unlock() }
        var line: String
        switch e {
        case .index(let serial, let changed):
            line = mode == "json" ? "{\"event\":\"index\",\"serial\":\(serial),\"changed\":\(changed)}" : "index \(serial)"
        case .bytes(let id, let d, let t):
            done[id] = d
            totals[id] = t
            let all = done.values.reduce(0, +)
            let total = totals.values.reduce(0, +)
            if mode == "json" {
                line = "{\"event\":\"bytes\",\"package\":\"\(id)\",\"done\":\(d),\"total\":\(t),\"overallDone\":\(all),\"overallTotal\":\(total)}"
            } else {
                let pct = total > 0 ? min(100, Int(all * 100 / total)) : 0
                let bar = String(repeating: "#", count: pct / 4).padding(toLength: 25, withPad: ".", startingAt: 0)
                line = "\r[\(bar)] \(pct)% \(Output.bytes(all)) of \(Output.bytes(total))"
            }
        case .package(let id, let outcome):
            line = mode == "json" ? "{\"event\":\"package\",\"package\":\"\(id)\",\"outcome\":\"\(outcome.rawValue)\"}" : ""
        }
        if line.isEmpty { return }
        FileHandle.standardError.write(Data((mode == "json" ? line + "\n" : line).utf8))
    }
}
