import ArgumentParser
import Larder
import LarderPublish
import SystemPackage

extension LarderCommand {
    struct Keygen: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "keygen",
            abstract: "Make an Ed25519 key pair for signing a repository, or a recipient pair for encryption.",
            discussion: """
                Writes NAME.key (the private key, mode 0600: keep it secret, e.g. in your CI's secret \
                store) and NAME.pub (give it to devices and to `larder verify --public-key`). Existing \
                files are never overwritten. Prints the key id and the public key.

                With --recipient, the pair is an X25519 recipient key for encrypted packages: \
                `larder pack --encrypt-to NAME.pub` encrypts to it, and a device that holds NAME.key \
                (`larder sync --recipient-key NAME.key`) decrypts. Anyone holding the app's copy of \
                NAME.key can read what is encrypted to it.
                """)

        @Flag(help: "Make an X25519 recipient key pair for encrypted packages instead of a signing pair.")
        var recipient = false

        @Option(name: .long, help: ArgumentHelp("Path prefix of the two files.", valueName: "NAME"))
        var out: FilePath

        @OptionGroup var output: OutputOptions

        func run() throws {
            let report: KeygenReport
            do {
                report = try recipient ? PublisherKeys.generateRecipient(out: out) : PublisherKeys.generate(out: out)
            } catch {
                throw Output.failure(command: "keygen", code: "keygen", message: error.description, json: output.json)
            }
            try Output.emit(report, json: output.json)
        }
    }
}
