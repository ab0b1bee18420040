import ArgumentParser
import Larder
import LarderPublish
import SystemPackage

extension LarderCommand {
    struct Revoke: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "revoke",
            abstract: "Revoke a published version (server-side rollback).",
            discussion: """
                Adds VERSION to the package's revoked list in a newly signed index (serial + 1). \
                Devices running it roll back off it, and no device installs it again. Nothing is \
                deleted: published files are immutable.
                """)

        @Argument(help: "Package id.") var id: String
        @Argument(help: "The version to revoke.") var version: String
        @Option(help: "The repository directory.") var repo: FilePath
        @Option(help: ArgumentHelp("Private key file from `larder keygen`.", valueName: "KEY")) var key: FilePath
        @Option(help: ArgumentHelp("Days until the new index expires.", valueName: "DAYS")) var ttlDays = 30.0
        @Option(
            name: .customLong("co-sign"),
            help: ArgumentHelp("Another private key that also signs the index (repeatable).", valueName: "KEY"))
        var coSign: [FilePath] = []
        @Option(
            name: .customLong("index-key"),
            help: ArgumentHelp(
                "In a delegated repository, the online key that composes the index (default: $LARDER_INDEX_KEY).",
                valueName: "KEY"))
        var indexKey: FilePath?
        @OptionGroup var output: OutputOptions

        func validate() throws {
            guard ttlDays > 0 else { throw ValidationError("--ttl-days must be positive") }
        }

        func run() throws {
            let report: RevokeReport
            do {
                let privateKey = try PublisherKeys.loadPrivateKey(key)
                let coSigners = try coSign.map { try PublisherKeys.loadPrivateKey($0) }
                var publisher = Publisher(key: privateKey, coSigners: coSigners)
                publisher.indexKeys = try DelegationKeys.indexKeys(indexKey)
                report = try publisher.revoke(
                    id: id, version: version, repository: repo, timeToLive: ttlDays * 24 * 3600)
            } catch let e as PublishError {
                throw Output.failure(command: "revoke", code: e.code, message: e.description, json: output.json)
            } catch {
                throw Output.failure(command: "revoke", code: "key", message: "\(error)", json: output.json)
            }
            try Output.emit(report, json: output.json)
        }
    }
}

extension LarderCommand {
    struct RotateKey: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rotate-key",
            abstract: "Announce a new trusted key set in a newly signed index (key rotation).",
            discussion: """
                Writes an index whose "keys" field names the public keys devices trust from then on, \
                signed by --key (the current key) and co-signed by --co-sign (normally the new key). A \
                device adopts the new set only from an index signed by a key it already trusts. Keep \
                co-signing with the old key (pack/revoke --co-sign) until every device has synced once \
                after the rotation: a device that never saw the rotation still trusts only the old key.
                """)

        @Option(help: "The repository directory.") var repo: FilePath
        @Option(help: ArgumentHelp("The current private key.", valueName: "KEY")) var key: FilePath
        @Option(
            name: .customLong("co-sign"),
            help: ArgumentHelp("A private key that also signs (repeatable).", valueName: "KEY"))
        var coSign: [FilePath] = []
        @Option(
            name: .customLong("new-public-key"),
            help: ArgumentHelp("A public key of the new trusted set (repeatable).", valueName: "FILE"))
        var newKeys: [FilePath]
        @Option(help: ArgumentHelp("Days until the new index expires.", valueName: "DAYS")) var ttlDays = 30.0
        @OptionGroup var output: OutputOptions

        func validate() throws {
            guard !newKeys.isEmpty else { throw ValidationError("at least one --new-public-key is needed") }
        }

        func run() throws {
            let report: Publisher.RotationReport
            do {
                let privateKey = try PublisherKeys.loadPrivateKey(key)
                let coSigners = try coSign.map { try PublisherKeys.loadPrivateKey($0) }
                let keys = try newKeys.map { try PublisherKeys.loadPublicKey($0) }
                report = try Publisher(key: privateKey, coSigners: coSigners).rotateKeys(
                    to: keys, repository: repo, timeToLive: ttlDays * 24 * 3600)
            } catch let e as PublishError {
                throw Output.failure(command: "rotate-key", code: e.code, message: e.description, json: output.json)
            } catch {
                throw Output.failure(command: "rotate-key", code: "key", message: "\(error)", json: output.json)
            }
            try Output.emit(report, json: output.json)
        }
    }
}

extension LarderCommand {
    struct Rewrap: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rewrap",
            abstract: "Wrap encrypted versions' content keys for a new set of recipients.",
            discussion: """
                For every encrypted version in the index (or those of --id), opens its content key \
                with a --recipient-key you hold and wraps it for each --encrypt-to key, in a newly \
                signed index (serial + 1). No content is uploaded again. A recipient left out cannot \
                get these keys from the index any more; what it already fetched or copied (keys, \
                contents) it keeps: revoking a recipient protects future versions only.
                """)

        @Option(help: "The repository directory.") var repo: FilePath
        @Option(help: ArgumentHelp("Private key file from `larder keygen`.", valueName: "KEY")) var key: FilePath
        @Option(
            name: .customLong("recipient-key"),
            help: ArgumentHelp("A recipient private key that opens the content keys (repeatable).", valueName: "FILE"))
        var recipientKeys: [FilePath]
        @Option(
            name: .customLong("encrypt-to"),
            help: ArgumentHelp("A recipient public key of the new set (repeatable).", valueName: "PUB"))
        var encryptTo: [FilePath]
        @Option(name: .customLong("id"), help: ArgumentHelp("Only this package (repeatable).", valueName: "ID"))
        var ids: [String] = []
        @Option(help: ArgumentHelp("Days until the new index expires.", valueName: "DAYS")) var ttlDays = 30.0
        @Option(
            name: .customLong("co-sign"),
            help: ArgumentHelp("Another private key that also signs the index (repeatable).", valueName: "KEY"))
        var coSign: [FilePath] = []
        @Option(
            name: .customLong("index-key"),
            help: ArgumentHelp(
                "In a delegated repository, the online key that composes the index (default: $LARDER_INDEX_KEY); a team rewraps its own packages only.",
                valueName: "KEY"))
        var indexKey: FilePath?
        @OptionGroup var output: OutputOptions

        func validate() throws {
            guard ttlDays > 0 else { throw ValidationError("--ttl-days must be positive") }
            guard !encryptTo.isEmpty else { throw ValidationError("at least one --encrypt-to is needed") }
            guard !recipientKeys.isEmpty else { throw ValidationError("at least one --recipient-key is needed") }
        }

        func run() throws {
            let report: RewrapReport
            do {
                let privateKey = try PublisherKeys.loadPrivateKey(key)
                let coSigners = try coSign.map { try PublisherKeys.loadPrivateKey($0) }
                let holding = try recipientKeys.map { try PublisherKeys.loadRecipientKey($0) }
                let recipients = try encryptTo.map { try PublisherKeys.loadRecipientPublicKey($0) }
                var publisher = Publisher(key: privateKey, coSigners: coSigners)
                publisher.indexKeys = try DelegationKeys.indexKeys(indexKey)
                report = try publisher.rewrap(
                    ids: ids, to: recipients, holding: holding, repository: repo, timeToLive: ttlDays * 24 * 3600)
            } catch let e as PublishError {
                throw Output.failure(command: "rewrap", code: e.code, message: e.description, json: output.json)
            } catch {
                throw Output.failure(command: "rewrap", code: "key", message: "\(error)", json: output.json)
            }
            try Output.emit(report, json: output.json)
        }
    }
}
