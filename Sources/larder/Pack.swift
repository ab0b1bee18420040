import ArgumentParser
import Foundation
import Larder
import LarderPublish
import SystemPackage

extension LarderCommand {
    struct Pack: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "pack",
            abstract: "Pack a directory as a new version into a repository and sign the index.",
            discussion: """
                Writes packages/ID/VERSION/bundle.zip (deterministic: the same tree gives the same \
                bytes), files.json (with each content's object size) and files.json.gz, the objects \
                the repository lacks, the deltas to the new version from the last --deltas versions \
                on its channel (deltas/FROM.json.gz, and one patch file in patches/ per delta for the \
                contents that version lacks, made with zstd's patch-from mode when smaller than the \
                object), and a new \
                index.json (serial + 1) with its signature. Refuses symlinks and special files, names that are \
                not UTF-8 NFC or that collide when case and normalisation are ignored, an empty tree, \
                trees over the limits (manifests/README.md), a version that exists or is not greater \
                than the newest on its channel. With --encrypt-to every blob is sealed (manifests/README.md \
                §16) and a version in the clear gets no delta from an encrypted one; --pad also pads \
                each sealed blob to a Padmé size.
                """)

        @Argument(help: ArgumentHelp("The directory to pack.", valueName: "DIR"))
        var directory: FilePath

        @Option(help: "The repository directory (created if missing).")
        var repo: FilePath

        @Option(help: "Package id: [a-z0-9][a-z0-9._-]{0,63}.")
        var id: String

        @Option(help: "Version (SemVer 2.0.0).")
        var version: String

        @Option(help: ArgumentHelp("Private key file from `larder keygen`.", valueName: "KEY"))
        var key: FilePath

        @Option(
            name: .customLong("route"),
            help: ArgumentHelp(
                "A URL prefix the package serves, e.g. https://app.example.com/ (repeatable).", valueName: "URL"))
        var routes: [String] = []

        @Option(help: "File served for directory URLs.")
        var entry = "index.html"

        @Flag(help: "Serve the entry file for extension-less paths (single-page apps).")
        var spaFallback = false

        @Option(help: "Release channel.")
        var channel = "stable"

        @Option(help: ArgumentHelp("Lowest app version that may install this release.", valueName: "VERSION"))
        var minClientVersion: String?

        @Option(help: ArgumentHelp("Share of devices that get this release, 0...100.", valueName: "PERCENT"))
        var rollout = 100

        @Option(help: ArgumentHelp("Salt of the rollout buckets (default ID@VERSION).", valueName: "SALT"))
        var rolloutSalt: String?

        @Option(
            help: ArgumentHelp(
                "A rollout schedule devices follow by the clock from now, e.g. 1,5,25,100 (the ceiling is its last step; replaces --rollout).",
                valueName: "STEPS"))
        var rolloutSchedule: String?

        @Option(help: ArgumentHelp("Time between the schedule's steps: 30m, 1h, 1d …", valueName: "DURATION"))
        var every = "1h"

        @Flag(help: "Mark the release mandatory.")
        var mandatory = false

        @Option(
            help: ArgumentHelp(
                "When devices install it: eager (every sync) or on-demand (at first use, or `larder fetch`).",
                valueName: "MODE"))
        var install = InstallPolicy.Mode.eager

        @Option(
            help: ArgumentHelp(
                "For an on-demand package: when it may be fetched ahead of use: never, unmetered or always.",
                valueName: "WHEN"))
        var preload = InstallPolicy.Preload.never

        @Option(help: ArgumentHelp("Install priority, -1000...1000: higher first.", valueName: "N"))
        var priority = 0

        @Option(
            help: ArgumentHelp(
                "Where the index keeps on-demand entries: inline, or sharded (devices read the shards of what they hold; devices older than shards refuse the index). Default: as the current index.",
                valueName: "LAYOUT"))
        var indexLayout: Publisher.IndexLayout?

        @Option(
            name: .customLong("depends"),
            help: ArgumentHelp("A dependency, ID@RANGE, e.g. shared-ui@^1.2.0 (repeatable).", valueName: "ID@RANGE"))
        var dependencies: [String] = []

        @Option(
            help: ArgumentHelp("When a file is missing locally: local-then-network or local-only.", valueName: "MODE"))
        var policy = PolicyMode.localThenNetwork

        @Option(
            name: .customLong("bypass"),
            help: ArgumentHelp(
                "A path prefix that always goes to the network, e.g. /api/ (repeatable).", valueName: "PREFIX"))
        var bypass: [String] = []

        @Option(
            name: .customLong("cors-origin"),
            help: ArgumentHelp(
                "An origin whose pages may read this package's files across origins, e.g. larder://shell, "
                    + "or * (repeatable; default none; not with --encrypt-to).", valueName: "ORIGIN"))
        var corsOrigins: [String] = []

        @Option(
            name: .customLong("network-host"),
            help: ArgumentHelp(
                "A host the package's pages may reach through passthrough and bypass routes besides its routes' "
                    + "own, e.g. api.example.com or *.example.com (repeatable; default: any host).", valueName: "HOST"))
        var networkHosts: [String] = []

        @Option(
            help: ArgumentHelp(
                "Where devices that turned telemetry on send their events (an http(s) URL such as "
                    + "https://collect.example.com/v1/events), signed into the index; later packs keep it; none removes it.",
                valueName: "URL"))
        var telemetryEndpoint: String?

        @Option(
            help: ArgumentHelp(
                "The share of installs that report, 0 < RATE <= 1 (with --telemetry-endpoint; default 1).",
                valueName: "RATE"))
        var telemetrySample: Double?

        @Option(help: ArgumentHelp("Days until the new index expires.", valueName: "DAYS"))
        var ttlDays = 30.0

        @Option(
            help: ArgumentHelp(
                "Make deltas from this many of the package's last versions on its channel (0: none).", valueName: "N"))
        var deltas = 3

        @Option(
            name: .customLong("co-sign"),
            help: ArgumentHelp(
                "Another private key that also signs the index (during a key rotation; repeatable).", valueName: "KEY"))
        var coSign: [FilePath] = []

        @Option(
            name: .customLong("index-key"),
            help: ArgumentHelp(
                "In a delegated repository, the online key that composes the index after the team's part is written (default: $LARDER_INDEX_KEY).",
                valueName: "KEY"))
        var indexKey: FilePath?

        @Option(
            help: ArgumentHelp(
                "Stricter file-count limit for this pack (at most the default, \(TreeLimits.standard.maxFiles)).",
                valueName: "N"))
        var maxFiles: Int?

        @Option(
            help: ArgumentHelp(
                "Stricter total-size limit in bytes (at most the default, \(TreeLimits.standard.maxTotalBytes)).",
                valueName: "BYTES"))
        var maxTotalSize: Int64?

        @Option(
            name: .customLong("encrypt-to"),
            help: ArgumentHelp(
                "Encrypt the version to this recipient public key (`keygen --recipient`; repeatable).",
                valueName: "PUB"))
        var encryptTo: [FilePath] = []

        @Option(
            name: .customLong("recipient-key"),
            help: ArgumentHelp(
                "A recipient private key you hold: deltas are made from earlier encrypted versions it opens "
                    + "(repeatable).", valueName: "FILE"))
        var recipientKeys: [FilePath] = []

        @Flag(
            help: ArgumentHelp(
                "Pad every sealed blob (bundle, objects, file list, deltas) to a Padmé size, so that exact "
                    + "sizes do not name files (at most about 12 % more bytes; needs --encrypt-to)."))
        var pad = false

        @OptionGroup var output: OutputOptions

        /// The standard limits, tightened by the options (devices accept the standard ones, so a
        /// pack may be stricter but never looser).
        var limits: TreeLimits {
            var l = TreeLimits.standard
            if let n = maxFiles { l.maxFiles = n }
            if let b = maxTotalSize { l.maxTotalBytes = b }
            return l
        }

        func validate() throws {
            if let n = maxFiles, !(1...TreeLimits.standard.maxFiles).contains(n) {
                throw ValidationError("--max-files must be within 1...\(TreeLimits.standard.maxFiles)")
            }
            if let b = maxTotalSize, !(1...TreeLimits.standard.maxTotalBytes).contains(b) {
                throw ValidationError("--max-total-size must be within 1...\(TreeLimits.standard.maxTotalBytes)")
            }
            guard ttlDays > 0 else { throw ValidationError("--ttl-days must be positive") }
            guard (0...16).contains(deltas) else { throw ValidationError("--deltas must be within 0...16") }
            guard (-1000...1000).contains(priority) else {
                throw ValidationError("--priority must be within -1000...1000")
            }
            guard install == .onDemand || preload == .never else {
                throw ValidationError("--preload is for on-demand packages (--install on-demand)")
            }
            for b in bypass where !b.hasPrefix("/") { throw ValidationError("--bypass \(quoted(b)) must start with /") }
            for o in corsOrigins {
                if let why = PackageAccess.originProblem(o) {
                    throw ValidationError("--cors-origin \(quoted(o)): \(why)")
                }
            }
            for h in networkHosts {
                if let why = PackageAccess.hostProblem(h) {
                    throw ValidationError("--network-host \(quoted(h)): \(why)")
                }
            }
            if !corsOrigins.isEmpty, !encryptTo.isEmpty {
                throw ValidationError(
                    "--cors-origin with --encrypt-to: an encrypted package is never readable across origins")
            }
            guard !pad || !encryptTo.isEmpty else {
                throw ValidationError(
                    "--pad pads the sizes of sealed blobs and needs --encrypt-to (a version in the clear is not padded)"
                )
            }
        }

        func run() throws {
            let privateKey: PrivateKey
            let coSigners: [PrivateKey]
            let indexKeys: [PrivateKey]
            var request = PackRequest(source: directory, repository: repo, id: id, version: version)
            do {
                privateKey = try PublisherKeys.loadPrivateKey(key)
                coSigners = try coSign.map { try PublisherKeys.loadPrivateKey($0) }
                indexKeys = try DelegationKeys.indexKeys(indexKey)
                request.encryptTo = try encryptTo.map { try PublisherKeys.loadRecipientPublicKey($0) }
                request.recipientKeys = try recipientKeys.map { try PublisherKeys.loadRecipientKey($0) }
            } catch {
                throw Output.failure(command: "pack", code: "key", message: "\(error)", json: output.json)
            }
            request.routes = routes
            request.entry = entry
            request.spaFallback = spaFallback
            request.channel = Channel(rawValue: channel)  // checked by pack (bad-channel)
            request.minClientVersion = minClientVersion
            request.rolloutPercent = rollout
            request.rolloutSalt = rolloutSalt
            if let rolloutSchedule {
                guard let steps = LarderCommand.RolloutCommand.steps(rolloutSchedule),
                    let every = Duration.parse(every)
                else {
                    throw Output.failure(
                        command: "pack", code: "usage",
                        message:
                            "--rollout-schedule \(rolloutSchedule) --every \(every): expected 1,5,25,100 and 30m, 1h …",
                        json: output.json)
                }
                request.rolloutSteps = steps
                request.rolloutEvery = Int(every)
            }
            request.mandatory = mandatory
            // Eager with the default priority writes nothing: the index stays as older tools wrote it.
            request.install =
                install == .eager && priority == 0
                ? nil : InstallPolicy(mode: install, preload: preload, priority: priority)
            request.dependencies = dependencies
            request.policy = Policy(mode: policy, bypass: bypass)
            request.corsOrigins = corsOrigins.isEmpty ? nil : corsOrigins
            request.networkHosts = networkHosts.isEmpty ? nil : networkHosts
            request.timeToLive = ttlDays * 24 * 3600
            request.telemetry = try telemetryChange(json: output.json)
            request.limits = limits
            request.deltaBases = deltas
            request.pad = pad
            let report: PackReport
            do {
                var publisher = Publisher(key: privateKey, coSigners: coSigners)
                publisher.indexLayout = indexLayout
                publisher.indexKeys = indexKeys
                report = try publisher.pack(request)
            } catch {
                throw Output.failure(command: "pack", code: error.code, message: error.description, json: output.json)
            }
            try Output.emit(report, json: output.json)
        }
    }
}

extension LarderCommand.Pack {
    /// `--telemetry-endpoint` / `--telemetry-sample` as a change to the index (nil: keep it).
    func telemetryChange(json: Bool) throws -> TelemetryChange? {
        guard let endpoint = telemetryEndpoint else {
            if telemetrySample != nil {
                throw Output.failure(
                    command: "pack", code: "usage", message: "--telemetry-sample needs --telemetry-endpoint", json: json
                )
            }
            return nil
        }
        if endpoint == "none" { return .remove }
        let settings = TelemetrySettings(endpoint: endpoint, sample: telemetrySample)
        if let why = settings.problem {
            throw Output.failure(command: "pack", code: "bad-telemetry", message: "telemetry: \(why)", json: json)
        }
        return .set(settings)
    }
}
