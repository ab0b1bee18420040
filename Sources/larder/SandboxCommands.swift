import ArgumentParser
import Foundation
import Larder
import SystemPackage

/// Options shared by the commands that work on a device sandbox.
struct SandboxOptions: ParsableArguments {
    @Option(help: ArgumentHelp("The sandbox directory.", valueName: "DIR"))
    var root: FilePath

    @Option(help: ArgumentHelp("Seconds to wait for another writer's lock.", valueName: "SECONDS"))
    var lockTimeout = 10.0

    func open(allowCorruptState: Bool = false) throws(StoreError) -> Sandbox {
        var o = Sandbox.Options()
        o.lockTimeout = lockTimeout
        o.allowCorruptState = allowCorruptState
        return try Sandbox.open(root, options: o)
    }
}

/// Runs a sandbox use case, mapping its typed error to the exit code and message.
func withSandbox<T>(_ command: String, _ json: Bool, _ body: () throws(StoreError) -> T) throws -> T {
    try reporting(command, json: json, code: { (e: StoreError) in e.code }, body)
}

/// The package id `text` spells, or the store's `bad-id` error (exit 1, a JSON document with
/// `--json`): the library takes a `PackageID`, the text is read here.
func readPackageID(_ text: String) throws(StoreError) -> PackageID {
    guard let id = PackageID(text) else { throw .badID(text) }
    return id
}

/// The version `text` spells, or the store's `bad-version` error.
func readVersion(_ text: String) throws(StoreError) -> SemanticVersion {
    guard let version = SemanticVersion(text) else { throw .badVersion(text) }
    return version
}

extension LarderCommand {
    struct Install: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "install",
            abstract: "Install a bundle into a sandbox and activate it (side-load).",
            discussion: """
                Extracts BUNDLE into a fresh staging directory with the strict archive reader, hashing \
                while writing; checks every file against FILES_JSON (size, sha256, nothing missing, \
                nothing extra); makes it durable; moves it into packages/ID/VERSION; and activates it \
                as pending, keeping the previous active version as fallback. Without --files the \
                bundle itself is trusted and the list computed from it is recorded — use --files for \
                anything that came over a network; FILES_JSON is decoded while the bundle is \
                extracted, and one that does not decode fails the install (file-list) with nothing \
                placed. A version already on disk is activated without extracting. A version rolled \
                back off before is refused unless --force.
                """)

        @Argument(help: ArgumentHelp("The bundle (.zip).", valueName: "BUNDLE")) var bundle: FilePath
        @OptionGroup var sandbox: SandboxOptions
        @Option(help: "Package id.") var id: String
        @Option(help: "Version (SemVer 2.0.0).") var version: String
        @Option(help: ArgumentHelp("The version's files.json to verify against.", valueName: "FILES_JSON")) var files:
            FilePath?
        @Flag(help: "Install even a version that was rolled back off before.") var force = false
        @OptionGroup var output: OutputOptions

        func run() throws {
            // The list is read here and decoded on a thread of its own while the bundle is
            // extracted (`Sandbox.install(bundle:id:version:pending:force:)`).
            var pending: PendingFileList?
            if let f = files {
                do { pending = try Larder.readPendingFileList(f) } catch {
                    throw Output.failure(command: "install", code: "file-list", message: "\(error)", json: output.json)
                }
            }
            let outcome = Result { () throws(StoreError) -> InstallReport in
                let s = try sandbox.open()
                defer { s.close() }
                let (id, version) = (try readPackageID(id), try readVersion(version))
                guard let pending else {
                    return try s.install(bundle: bundle, id: id, version: version, fileList: nil, force: force)
                }
                return try s.install(bundle: bundle, id: id, version: version, pending: pending, force: force)
            }
            // A list that does not decode is reported as such, as when it was decoded first.
            if case .failure(let e)? = pending?.result {
                throw Output.failure(command: "install", code: "file-list", message: "\(e)", json: output.json)
            }
            let report = try withSandbox("install", output.json) { () throws(StoreError) in try outcome.get() }
            try Output.emit(report, json: output.json)
        }
    }
}

extension LarderCommand {
    struct Confirm: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "confirm", abstract: "Mark the active version of a package healthy.")
        @Argument(help: "Package id.") var id: String
        @OptionGroup var sandbox: SandboxOptions
        @OptionGroup var output: OutputOptions

        func run() throws {
            let o = try withSandbox("confirm", output.json) { () throws(StoreError) in
                let s = try sandbox.open()
                defer { s.close() }
                return try s.confirm(id: try readPackageID(id))
            }
            try Output.emit(o, json: output.json)
        }
    }
}

extension LarderCommand {
    struct Rollback: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rollback",
            abstract: "Activate the fallback version of a package, or a named version on disk.",
            discussion: "The version left is recorded as failed and is never installed again automatically.")
        @Argument(help: "Package id.") var id: String
        @Option(help: ArgumentHelp("A version on disk to activate instead of the fallback.", valueName: "VERSION"))
        var to: String?
        @Option(help: "Why (recorded in the history).") var reason = "rolled back by the operator"
        @OptionGroup var sandbox: SandboxOptions
        @OptionGroup var output: OutputOptions

        func run() throws {
            let r = try withSandbox("rollback", output.json) { () throws(StoreError) in
                let s = try sandbox.open()
                defer { s.close() }
                return try s.rollback(id: try readPackageID(id), to: try to.map(readVersion), reason: reason)
            }
            try Output.emit(r, json: output.json)
        }
    }
}

extension LarderCommand {
    struct Status: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "status",
            abstract:
                "Show each package's versions, health, install policy, disk use, last use and history (takes no lock).")
        @OptionGroup var sandbox: SandboxOptions
        @OptionGroup var output: OutputOptions

        func run() throws {
            let report = try withSandbox("status", output.json) { () throws(StoreError) in
                try SandboxReader(root: sandbox.root).status().withUsage(root: sandbox.root)
            }
            try Output.emit(report, json: output.json)
        }
    }
}

extension LarderCommand {
    struct GC: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "gc",
            abstract: "Delete versions that are not active, fallback, pinned or retained.",
            discussion: """
                Pins held by live processes (an app's web views) are respected; pins of dead processes \
                expire. With a disk budget (`init --disk-budget`), on-demand packages are then evicted, \
                least recently used first, until the sandbox is within it.
                """
        )
        @Option(help: ArgumentHelp("Other versions to keep per package, newest first.", valueName: "N")) var keep = 1
        @OptionGroup var sandbox: SandboxOptions
        @OptionGroup var output: OutputOptions

        func validate() throws {
            guard keep >= 0 else { throw ValidationError("--keep must be 0 or more") }
        }

        func run() throws {
            let r = try withSandbox("gc", output.json) { () throws(StoreError) in
                let s = try sandbox.open()
                defer { s.close() }
                var report = try s.gc(keep: keep)
                // The disk budget, when the config sets one (an uninitialised sandbox has none).
                if let budget = (try? SyncConfig.load(root: s.layout.root))?.diskBudget {
                    report.budget = try s.enforceBudget(budget, onDemand: s.onDemandPackages())
                }
                return report
            }
            try Output.emit(r, json: output.json)
        }
    }
}

extension LarderCommand {
    struct Doctor: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "doctor",
            abstract: "Verify every installed version file by file; with --repair, rebuild the state.",
            discussion: """
                Checks each version on disk against its file list (size, sha256, nothing extra) and \
                state.json against the disk. --repair rebuilds state.json from the versions that \
                verify (also when state.json is corrupt or missing) and removes those that do not. \
                Exit 0 when nothing is wrong (or it was repaired), 1 otherwise.
                """)
        @Flag(help: "Rebuild state.json from the verified versions on disk.") var repair = false
        @OptionGroup var sandbox: SandboxOptions
        @OptionGroup var output: OutputOptions

        func run() throws {
            let r = try withSandbox("doctor", output.json) { () throws(StoreError) in
                let s = try sandbox.open(allowCorruptState: true)
                defer { s.close() }
                return try s.doctor(repair: repair)
            }
            try Output.emit(r, json: output.json)
            if !r.ok && !r.repaired { throw ExitStatus.failure }
        }
    }
}
