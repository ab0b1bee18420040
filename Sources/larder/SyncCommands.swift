import ArgumentParser
import Foundation
import Larder
import LarderFileSystem
import LarderPublish
import SystemPackage

extension LarderCommand {
    struct Init: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "init",
            abstract: "Point a sandbox at a repository: writes <root>/config.json.",
            discussion: """
                Records the repository URL (https://, http:// to loopback or with --allow-http, or \
                file://), the trusted public keys, the channel and the app version. A random device \
                id is made once and kept across re-inits (it decides rollout buckets). Later commands \
                read the config; their flags override it.
                """)
        @Option(help: ArgumentHelp("The sandbox directory.", valueName: "DIR")) var root: FilePath
        @Option(help: ArgumentHelp("The repository URL.", valueName: "URL")) var repo: String
        @Option(
            name: .customLong("public-key"),
            help: ArgumentHelp("A trusted public key file (repeatable).", valueName: "FILE")) var publicKeys: [FilePath]
        @Option(help: "Release channel to follow.") var channel = "stable"
        @Option(help: ArgumentHelp("This app's version, SemVer 2.0.0 (for minClientVersion).", valueName: "VERSION"))
        var appVersion = SemanticVersion(1, 0, 0)
        @Flag(help: "Allow plain http to hosts other than loopback.") var allowHttp = false
        @Option(
            help: ArgumentHelp(
                "The most the sandbox's packages may hold, e.g. 500M or 2G: after each sync, fetch and gc, "
                    + "on-demand packages are evicted, least recently used first, to stay within it.",
                valueName: "SIZE"))
        var diskBudget: ByteSize?
        @Option(
            help: ArgumentHelp(
                "Report what happens to each release (on or off; kept across re-inits, off at first): events go "
                    + "only to a collector the signed index names (docs/privacy.md).", valueName: "on|off"))
        var telemetry: TelemetrySwitch?
        @OptionGroup var output: OutputOptions

        func validate() throws {
            guard !publicKeys.isEmpty else { throw ValidationError("at least one --public-key is needed") }
        }

        func run() throws {
            var keys: [PublicKey] = []
            for k in publicKeys {
                do { keys.append(try PublisherKeys.loadPublicKey(k)) } catch {
                    throw Output.failure(command: "init", code: "key", message: "\(error)", json: output.json)
                }
            }
            let config: SyncConfig
            do {
                config = try SyncConfig.initialise(
                    root: root, repository: repo, keys: keys, channel: Channel(rawValue: channel),
                    appVersion: appVersion,
                    allowInsecureHTTP: allowHttp, diskBudget: diskBudget?.bytes, telemetry: telemetry.map { $0 == .on })
            } catch {
                throw Output.failure(command: "init", code: error.code, message: error.description, json: output.json)
            }
            if telemetry == .off { try? TelemetrySpool(root: root).turnOff() }
            try Output.emit(InitOutput(config: config, root: root.string), json: output.json)
            for warning in warnings() { Output.diagnostic("larder init: warning: \(warning)") }
        }

        /// What was accepted but is probably a mistake: a private key given as a trusted key, or a
        /// `file://` repository with no index (yet).
        func warnings() -> [String] {
            var found: [String] = []
            for k in publicKeys where (try? PublisherKeys.loadPrivateKey(k)) != nil {
                found.append(
                    "\(quoted(k.string)) is a private key: the sandbox keeps only its public half; give devices the .pub "
                        + "file and keep the private key with the publisher")
            }
            if let url = URL(string: repo), url.isFileURL,
                (try? SystemCalls.stat(FilePath(url.path).joined("index.json"))) == nil
            {
                found.append(
                    "\(quoted(repo)) has no index.json (yet): a sync fails until a repository is published there")
            }
            return found
        }
    }
}

/// Options shared by sync and plan.
struct SyncArguments: ParsableArguments {
    @Option(help: ArgumentHelp("The sandbox directory (initialised with `larder init`).", valueName: "DIR")) var root:
        FilePath
    @Option(
        name: .customLong("package"),
        help: ArgumentHelp("Only this package, by id: [a-z0-9][a-z0-9._-]{0,63} (repeatable).", valueName: "ID"))
    var packages: [PackageID] = []
    @Option(help: ArgumentHelp("Override the app version of the config (SemVer 2.0.0).", valueName: "VERSION"))
    var appVersion: SemanticVersion?
    @Option(help: "Override the channel of the config.") var channel: String?
    @Option(help: ArgumentHelp("HTTP attempts per request (retries on connection errors, 5xx, 429).", valueName: "N"))
    var attempts = 5
    @Option(help: ArgumentHelp("Seconds without a byte before a transfer is abandoned.", valueName: "SECONDS"))
    var stallTimeout = 20.0
    @Option(help: ArgumentHelp("Minimum average transfer rate in bytes/s …", valueName: "BYTES")) var minRate = 2048.0
    @Option(help: ArgumentHelp("… measured over this many seconds.", valueName: "SECONDS")) var rateWindow = 15.0
    @Option(help: ArgumentHelp("Deadline of one transfer, seconds.", valueName: "SECONDS")) var deadline = 600.0
    @Option(
        help: ArgumentHelp(
            "Seconds to wait for another writer's lock (another sync, an install) before failing.",
            valueName: "SECONDS"))
    var lockTimeout = 10.0
    @Option(
        name: .customLong("ca-file"),
        help: ArgumentHelp(
            "PEM certificates of a certificate authority trusted for https besides the system's "
                + "(repeatable; default: the file LARDER_CA_FILE names, if set).",
            valueName: "FILE"))
    var caFiles: [FilePath] = []
    @Option(
        name: .customLong("recipient-key"),
        help: ArgumentHelp(
            "A recipient private key (`keygen --recipient`) that opens encrypted versions (repeatable).",
            valueName: "FILE"))
    var recipientKeys: [FilePath] = []

    /// What every sync of the command uses (the platform's HTTP engine and the flags' policy).
    func setup() throws -> SyncSetup {
        var o = SyncSetup(engine: .platform)
        guard attempts >= 1, stallTimeout > 0, minRate >= 0, rateWindow > 0, deadline > 0, lockTimeout >= 0 else {
            throw ValidationError("--attempts must be at least 1 and the times positive")
        }
        o.lockTimeout = lockTimeout
        o.http.attempts = attempts
        o.http.stallTimeout = stallTimeout
        o.http.minimumRate = minRate
        o.http.floorWindow = rateWindow
        o.http.deadline = deadline
        o.http.caFiles = caFiles.map(\.string)
        if caFiles.isEmpty, let env = Environment["LARDER_CA_FILE"], !env.isEmpty {
            o.http.caFiles = [env]
        }
        for path in recipientKeys {
            do { o.recipientKeys.append(try PublisherKeys.loadRecipientKey(path)) } catch {
                throw ValidationError("--recipient-key \(path): \(error)")
            }
        }
        return o
    }

    /// What the command asks of one sync.
    var request: SyncRequest {
        SyncRequest(packages: packages, channel: channel.map(Channel.init(rawValue:)), appVersion: appVersion)
    }

    func validate() throws {
        if let channel, Channel(channel) == nil {
            throw ValidationError("--channel \(quoted(channel)) is not a channel name: [a-z0-9][a-z0-9._-]{0,31}")
        }
    }
}

extension LarderCommand {
    struct Plan: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "plan",
            abstract: "Show what a sync would do, and why; apply nothing.",
            discussion: """
                Fetches and verifies the index and the file lists it needs (built from a delta \
                manifest when the index has one from the active version, else the gzipped list) and \
                prints the plan: per package the action and why, and for an install or update the \
                cheapest way with the others weighed (delta, objects, bundle: bytes and requests). It \
                installs, activates and records nothing. Like every writer it takes the sandbox lock \
                and runs recovery (emptying staging/ and trash/ of interrupted operations).
                """)
        @OptionGroup var args: SyncArguments
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let setup = try args.setup()
            var request = args.request
            request.dryRun = true
            let report = try await withSync("plan", output.json) { [request] () async throws(SyncError) in
                try await Syncer(root: args.root, setup: setup).sync(request)
            }
            try Output.emit(report.plan ?? LarderCore.Plan(actions: []), json: output.json)
        }
    }
}

extension LarderCommand {
    struct Sync: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "sync",
            abstract: "Bring the sandbox in step with the repository's signed index.",
            discussion: """
                Locks the sandbox, recovers, fetches the signature file and the index it names (no \
                change since the last sync is that one request) and checks the signature, serial and \
                expiry, plans, downloads with bounded concurrency — by delta (binary patches against \
                the active version's contents, each result checked; a failed patch falls back to its \
                object, then to the bundle), by objects, or the bundle, whichever moves fewer bytes \
                (resuming partial downloads; a bundle is extracted into staging while it downloads, \
                and used only once the whole file is verified) — verifies every file, activates \
                (as pending; dependency groups together) and garbage-collects by retention. One \
                package's failure neither blocks nor damages another.
                Exit codes: 0 all done; 2 some packages failed; 1 nothing could be done (index \
                unreachable or refused, not initialised); 64 usage.
                """)
        @OptionGroup var args: SyncArguments
        @Option(
            help: ArgumentHelp(
                "Progress on stderr: auto (a bar on a terminal), json (JSON lines) or none.", valueName: "MODE"))
        var progress = ProgressMode.auto
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let report = try await runSync(
                "sync", root: args.root, setup: try args.setup(), request: args.request, progress: progress,
                json: output.json)
            if report.hasFailures { throw ExitStatus.partial }
        }
    }
}

extension LarderCommand {
    struct Fetch: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "fetch",
            abstract: "Install on-demand packages now, or preload those their hints allow.",
            discussion: """
                A sync installs and updates eager packages and updates the on-demand packages the \
                device holds; it never downloads an on-demand package the device does not hold. \
                `fetch ID…` installs the named packages now, with what they depend on, as a sync of \
                only those would (a package already held is updated). `--preload` also installs every \
                on-demand package whose preload hint allows the network `--network` names (`always`: \
                any; `unmetered`: an unmetered one only), higher priority first, in a sync of every \
                package. An app asks its own veto first, as for background syncs.
                Exit codes: 0 all done; 2 some packages failed, or a named one is not in the index \
                on this channel; 1 nothing could be done; 64 usage.
                """)
        @Argument(help: ArgumentHelp("On-demand packages to install now.", valueName: "ID")) var ids: [PackageID] = []
        @Flag(help: "Also install the on-demand packages whose preload hint allows the network.") var preload = false
        @Option(help: ArgumentHelp("The network a preload runs on: metered or unmetered.", valueName: "KIND"))
        var network = NetworkKind.unmetered
        @OptionGroup var args: SyncArguments
        @Option(
            help: ArgumentHelp(
                "Progress on stderr: auto (a bar on a terminal), json (JSON lines) or none.", valueName: "MODE"))
        var progress = ProgressMode.auto
        @OptionGroup var output: OutputOptions

        func validate() throws {
            if ids.isEmpty && !preload { throw ValidationError("name the packages to fetch, or give --preload") }
        }

        func run() async throws {
            var request = args.request
            if !ids.isEmpty && !preload { request.packages = ids }
            request.fetching = ids
            if preload { request.preload = network }
            let report = try await runSync(
                "fetch", root: args.root, setup: try args.setup(), request: request, progress: progress,
                json: output.json)
            let unknown = ids.filter { id in !report.packages.contains { $0.id == id.rawValue } }
            if !unknown.isEmpty {
                Output.diagnostic(
                    "larder fetch: error [not-in-index]: not in the index on this channel: "
                        + unknown.map { quoted($0.rawValue) }.joined(separator: ", "))
            }
            if report.hasFailures || !unknown.isEmpty { throw ExitStatus.partial }
        }
    }
}

/// Runs a sync with `progress` rendered on stderr and prints its report.
func runSync(
    _ command: String, root: FilePath, setup: SyncSetup, request: SyncRequest, progress: ProgressMode, json: Bool
) async throws -> SyncReport {
    var setup = setup
    let renderer = ProgressRenderer(mode: progress.resolved(isTerminal: isatty(2) != 0))
    if renderer.mode != .none { setup.progress = renderer.handle }
    let syncer = Syncer(root: root, setup: setup)
    let report = try await withSync(command, json) { () async throws(SyncError) in
        try await syncer.sync(request)
    }
    renderer.finish()
    try Output.emit(report, json: json)
    // After the report: telemetry never delays or fails a sync (at most one 10 s attempt when the
    // collector is unreachable, then a back-off).
    let sent = await syncer.sendTelemetry()
    if let why = sent.deferred { Output.diagnostic("larder \(command): telemetry not sent, will retry: \(why)") }
    return report
}

/// Maps a sync error to exit code 1 with its message.
func withSync<T>(_ command: String, _ json: Bool, _ body: () async throws(SyncError) -> T) async throws -> T {
    try await reporting(command, json: json, code: { (e: SyncError) in e.code }, body)
}
