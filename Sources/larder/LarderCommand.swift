import ArgumentParser
import Larder
import LarderPublish

/// `larder`: the command tree. Each subcommand (nested in this type) parses, calls one library
/// use case and renders its report through `Output.emit`; exit codes are decided here, in the
/// CLI (`ExitStatus`), never by the library.
struct LarderCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "larder",
        abstract: "Keep offline web packages in step with a signed repository.",
        discussion: """
            Publisher commands: keygen, pack, revoke, rotate-key, delegate, compose, verify.
            Device commands: init, sync, plan, resolve, serve, install, status, confirm, rollback, \
            gc, doctor (each with --root DIR).

            Exit codes: 0 success; 1 failure or problems found; 64 usage error; sync also 2 when \
            some packages failed and the others were applied.
            Results go to stdout (text, or a JSON document with --json); diagnostics to stderr.
            """,
        // `larder --version` is answered by `Entry` (as `larder version`), not by ArgumentParser's
        // root flag: `pack --version` is the package version, and with the root flag ArgumentParser
        // would answer a pack missing a required option with the tool's version and exit 0.
        subcommands: [
            Keygen.self, Pack.self, Revoke.self, RotateKey.self, Rewrap.self, Delegate.self, Compose.self, Verify.self,
            Upload.self,
            Init.self, Sync.self, Fetch.self, Plan.self, Resolve.self, Serve.self,
            Install.self, Status.self, Confirm.self, Rollback.self, GC.self, Doctor.self, Telemetry.self,
            Collect.self, Report.self, RolloutCommand.self,
            ShowVersion.self,
        ]
    )
}

extension LarderCommand {
    /// `larder version` (and `larder --version`).
    struct ShowVersion: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "version", abstract: "Print larder's version and the format versions it reads.",
            discussion: """
                Also `larder --version`. The first line is the package version; the second names \
                the schemaVersion of each document this build reads and writes (index.json, \
                files.json, delta manifests, state.json).
                """)

        func run() throws { Self.print() }

        /// Prints the two lines.
        static func print() {
            let formats = ["index.json", "files.json", "delta", "state.json"]
                .map { "\($0) \(currentSchemaVersion)" }.joined(separator: ", ")
            Output.line("larder \(Larder.version)")
            Output.line("formats: \(formats)")
        }
    }
}

/// Options every command shares.
struct OutputOptions: ParsableArguments {
    @Flag(name: .long, help: "Print the result as a JSON document on stdout.")
    var json = false
}
