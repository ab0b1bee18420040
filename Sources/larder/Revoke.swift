import ArgumentParser
import Larder
import SystemPackage

struct Revoke: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Revoke a published version (server-side rollback).",
        discussion: """
            Adds VERSION to the package's revoked list in a newly signed index (serial + 1). \
            Devices running it roll back off it, and no device installs it again. Nothing is \
            deleted: published files are immutable.
            """)

    @Argument(help: "Package id.") var id: String
    @Argument(help: "The version to revoke.") var version: String
    @Option(help: "The repository directory.") var repo: String
    @Option(help: ArgumentHelp("Private key file from `larder keygen`.", valueName: "KEY")) var key: String
    @Option(help: ArgumentHelp("Days until the new index expires.", valueName: "DAYS")) var ttlDays = 30.0
    @OptionGroup var output: OutputOptions

    func validate() throws {
        guard ttlDays > 0 else { throw ValidationError("--ttl-days must be positive") }
    }

    func run() throws {
        let report: RevokeReport
        do {
            let privateKey = try Larder.loadPrivateKey(FilePath(key))
            report = try Publisher(key: privateKey).revoke(
                id: id, version: version, repository: FilePath(repo), timeToLive: ttlDays * 24 * 3600)
        } catch let e as PublishError {
            throw Output.failure(command: "revoke", code: e.code, message: e.description, json: output.json)
        } catch {
            throw Output.failure(command: "revoke", code: "key", message: "\(error)", json: output.json)
        }
        if output.json {
            try Output.json(report)
        } else {
            Output.line("revoked \(report.id) \(report.version): index serial \(report.serial), signed by \(report.signedBy)")
        }
    }
}
