import ArgumentParser
import Foundation
import Larder
import LarderPublish
import SystemPackage

/// The keys every delegation verb signs with: `--key`, then `--co-sign`, then `--index-key` (or
/// `LARDER_INDEX_KEY`) for composing the index.
struct DelegationKeys: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "A private key that signs: a root key for root changes, a team key for claim.", valueName: "KEY"))
    var key: FilePath
    @Option(
        name: .customLong("co-sign"),
        help: ArgumentHelp(
            "Another private key that signs too (a threshold; a root rotation's new keys; repeatable).",
            valueName: "KEY"))
    var coSign: [FilePath] = []
    @Option(
        name: .customLong("index-key"),
        help: ArgumentHelp(
            "The online key that signs the composed index (default: $LARDER_INDEX_KEY; --key and --co-sign count too when they are index keys; without one, only the root or part is written and `larder compose` publishes it).",
            valueName: "KEY"))
    var indexKey: FilePath?
    @Option(help: ArgumentHelp("Days until the composed index expires.", valueName: "DAYS")) var ttlDays = 30.0

    /// A publisher over these keys.
    func publisher() throws -> Publisher {
        var p = Publisher(
            key: try PublisherKeys.loadPrivateKey(key),
            coSigners: try coSign.map { try PublisherKeys.loadPrivateKey($0) })
        p.indexKeys = try Self.indexKeys(indexKey)
        return p
    }

    /// `--index-key`, else `LARDER_INDEX_KEY`.
    static func indexKeys(_ option: FilePath?) throws -> [PrivateKey] {
        let env = ProcessInfo.processInfo.environment["LARDER_INDEX_KEY"].flatMap { $0.isEmpty ? nil : FilePath($0) }
        guard let path = option ?? env else { return [] }
        return [try PublisherKeys.loadPrivateKey(path)]
    }
}

/// Runs a delegation use case and prints its report, mapping errors as the other publisher verbs do.
func runDelegation(_ command: String, json: Bool, _ body: () throws -> DelegationReport) throws {
    let report: DelegationReport
    do { report = try body() } catch let e as PublishError {
        throw Output.failure(command: command, code: e.code, message: e.description, json: json)
    } catch {
        throw Output.failure(command: command, code: "key", message: "\(error)", json: json)
    }
    try Output.emit(report, json: json)
}

extension LarderCommand {
    struct Delegate: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "delegate",
            abstract: "Delegate packages to teams, each with its own keys (manifests §18).",
            discussion: """
                A delegated repository has a root (roots/<n>.json, kept offline) that names each team's \
                keys, threshold and package patterns, and an online index key that composes the index \
                from the teams' signed parts (parts/<team>/<serial>.json). The first `delegate add` on a \
                single-key repository makes root 1 with that repository's key as root and index key.
                """,
            subcommands: [Add.self, Remove.self, List.self, Claim.self, Role.self, RevokeKey.self])

        struct Add: ParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "add", abstract: "Add a team, or replace its keys, patterns, threshold or role.")
            @Argument(help: "The team's name ([a-z0-9][a-z0-9._-]{0,63}).") var name: String
            @Option(help: "The repository directory.") var repo: FilePath
            @OptionGroup var keys: DelegationKeys
            @Option(
                name: .customLong("public-key"),
                help: ArgumentHelp("A public key of the team (repeatable).", valueName: "PUB"))
            var publicKeys: [FilePath] = []
            @Option(
                name: .customLong("packages"), parsing: .upToNextOption,
                help: ArgumentHelp(
                    "Package id patterns the team may publish (* for any characters).", valueName: "PATTERN"))
            var packages: [String] = []
            @Option(help: "How many of the team's keys must sign a part.") var threshold = 1
            @Option(help: "release: publishes packages; rollout: may only hold releases back.") var role: TeamRole =
                .release
            @Option(
                name: .customLong("keys-expire"),
                help: ArgumentHelp("When the team's keys stop counting (RFC 3339).", valueName: "DATE"))
            var keysExpire: String?
            @OptionGroup var output: OutputOptions

            func validate() throws {
                guard !publicKeys.isEmpty else { throw ValidationError("at least one --public-key is needed") }
                guard !packages.isEmpty else { throw ValidationError("at least one --packages pattern is needed") }
                for p in packages where PackagePattern(p) == nil {
                    throw ValidationError(
                        "\(p) is not a package pattern: a package id in which * stands for any characters")
                }
                if let keysExpire, ManifestCoding.parseRFC3339(keysExpire) == nil {
                    throw ValidationError("--keys-expire \(keysExpire) is not an RFC 3339 date-time")
                }
            }

            func run() throws {
                try runDelegation("delegate add", json: output.json) {
                    let request = TeamRequest(
                        name: name, role: role, publicKeys: try publicKeys.map { try PublisherKeys.loadPublicKey($0) },
                        patterns: packages.compactMap(PackagePattern.init), threshold: threshold,
                        keysExpire: keysExpire.flatMap(ManifestCoding.parseRFC3339))
                    return try keys.publisher().delegateAdd(
                        request, repository: repo, timeToLive: keys.ttlDays * 86_400)
                }
            }
        }

        struct Remove: ParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "remove", abstract: "Remove a team; its keys that no other role uses are revoked.")
            @Argument(help: "The team's name.") var name: String
            @Option(help: "The repository directory.") var repo: FilePath
            @OptionGroup var keys: DelegationKeys
            @Flag(help: "Also remove the team's packages from the index (devices then remove them).")
            var dropPackages = false
            @OptionGroup var output: OutputOptions

            func run() throws {
                try runDelegation("delegate remove", json: output.json) {
                    try keys.publisher().delegateRemove(
                        name, dropPackages: dropPackages, repository: repo, timeToLive: keys.ttlDays * 86_400)
                }
            }
        }

        struct List: ParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "list", abstract: "Print the root's teams, keys, thresholds and patterns.")
            @Option(help: "The repository directory.") var repo: FilePath
            @OptionGroup var output: OutputOptions

            func run() throws {
                try runDelegation("delegate list", json: output.json) {
                    // Reading needs no private key: any key object will do for the reader.
                    try Publisher(key: PrivateKey()).listDelegations(repository: repo)
                }
            }
        }

        struct Claim: ParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "claim",
                abstract: "Sign, as the team of --key, the entries already published for its packages.",
                discussion: """
                    Writes the team's next part from what the index lists for the packages the team owns \
                    (packages published before the repository was delegated, or before the team was given \
                    them), then composes the index once every entry has a part.
                    """)
            @Option(help: "The repository directory.") var repo: FilePath
            @OptionGroup var keys: DelegationKeys
            @OptionGroup var output: OutputOptions

            func run() throws {
                try runDelegation("delegate claim", json: output.json) {
                    try keys.publisher().claim(repository: repo, timeToLive: keys.ttlDays * 86_400)
                }
            }
        }

        struct Role: ParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "role",
                abstract: "Set the root's own keys (a root rotation) or the index keys.",
                discussion: """
                    `delegate role index --public-key ONLINE.pub` moves the composing to an online key. \
                    `delegate role root --public-key NEW.pub… --key OLD.key --co-sign NEW.key` rotates the \
                    root: the new root is signed by the old root keys' threshold and the new ones'.
                    """)
            @Argument(help: "root or index.") var role: RootRoleArgument
            @Option(help: "The repository directory.") var repo: FilePath
            @OptionGroup var keys: DelegationKeys
            @Option(
                name: .customLong("public-key"),
                help: ArgumentHelp("A public key of the role (repeatable).", valueName: "PUB"))
            var publicKeys: [FilePath] = []
            @Option(help: "How many of the role's keys must sign.") var threshold = 1
            @OptionGroup var output: OutputOptions

            func validate() throws {
                guard !publicKeys.isEmpty else { throw ValidationError("at least one --public-key is needed") }
            }

            func run() throws {
                try runDelegation("delegate role", json: output.json) {
                    try keys.publisher().delegateRole(
                        role.value, keys: try publicKeys.map { try PublisherKeys.loadPublicKey($0) },
                        threshold: threshold,
                        repository: repo, timeToLive: keys.ttlDays * 86_400)
                }
            }
        }

        struct RevokeKey: ParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "revoke-key",
                abstract: "Revoke a key: no role may use it again, and its signatures stop counting.")
            @Argument(help: "The key id (16 hex digits).") var keyID: String
            @Option(help: "The repository directory.") var repo: FilePath
            @OptionGroup var keys: DelegationKeys
            @OptionGroup var output: OutputOptions

            func run() throws {
                try runDelegation("delegate revoke-key", json: output.json) {
                    try keys.publisher().delegateRevoke(
                        keyID: keyID, repository: repo, timeToLive: keys.ttlDays * 86_400)
                }
            }
        }
    }

    struct Compose: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "compose",
            abstract: "Compose and sign a delegated repository's index from every team's newest part.",
            discussion: """
                Run by whoever keeps the online index key, after teams publish (or on a timer). Each part is \
                checked against the root (signatures, thresholds, patterns) and the index rules across \
                teams before the index is signed.
                """)
        @Option(help: "The repository directory.") var repo: FilePath
        @Option(help: ArgumentHelp("The index key (default: $LARDER_INDEX_KEY).", valueName: "KEY")) var key: FilePath?
        @Option(help: ArgumentHelp("Days until the index expires.", valueName: "DAYS")) var ttlDays = 30.0
        @OptionGroup var output: OutputOptions

        func run() throws {
            try runDelegation("compose", json: output.json) {
                let keys = try DelegationKeys.indexKeys(key)
                guard let first = keys.first else {
                    throw PublishError.delegationSetup("no index key: give --key or set LARDER_INDEX_KEY")
                }
                return try Publisher(key: first).compose(repository: repo, timeToLive: ttlDays * 86_400)
            }
        }
    }
}

/// `root` or `index`, for `delegate role`.
struct RootRoleArgument: ExpressibleByArgument {
    let value: RootRole
    init?(argument: String) {
        guard let v = RootRole(rawValue: argument) else { return nil }
        value = v
    }
}

extension TeamRole: ExpressibleByArgument {}

extension DelegationReport: RenderedReport {
    var textLines: [String] {
        var lines = [
            "root \(rootVersion): root keys \(roles.root.threshold) of [\(roles.root.keyIds.joined(separator: ", "))], "
                + "index keys \(roles.index.threshold) of [\(roles.index.keyIds.joined(separator: ", "))]"
        ]
        for t in teams {
            lines.append(
                "  team \(t.name) (\(t.role.rawValue)): \(t.threshold) of [\(t.keyIds.joined(separator: ", "))], "
                    + "packages \(t.packages.joined(separator: " ")), part \(t.partSerial.map(String.init) ?? "none")")
        }
        if !revokedKeys.isEmpty { lines.append("  revoked keys: \(revokedKeys.joined(separator: ", "))") }
        if let part { lines.append("  part    team \(part.team) serial \(part.serial)") }
        if let serial { lines.append("  index   composed, serial \(serial)") }
        if let notComposed { lines.append("  index   \(notComposed)") }
        return lines
    }
}
